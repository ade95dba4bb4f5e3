#!/usr/bin/python3
"""Golden reference values for keel's ResNet18 (training) and ResNet50 (inference), from PyTorch.

Run (from the repo root, with Debian's interpreter: python3-torch 1.13 + python3-numpy):

    /usr/bin/python3 bench/golden_resnet.py                 # writes tests/golden/resnet18_train.json
                                                            #    and tests/golden/resnet50_infer.json
    /usr/bin/python3 bench/golden_resnet.py --out-dir DIR   # somewhere else

The networks are written by hand in torch, mirroring models/resnet.cc (keras.applications' ResNet v1
naming and structure): ZeroPadding2D(3) + 7x7/2 'valid' conv1, BN, ReLU, ZeroPadding2D(1) + 3x3/2
'valid' max pool; then the stages. ResNet18: basic blocks (3x3 with the stage's stride, 3x3), a 1x1
projection shortcut only where the stride is not 1 or the channel count changes (so conv2_block1 keeps
the identity); ResNet50: bottleneck blocks (1x1 carrying the stride, 3x3, 1x1 with 4x filters) with a
projection on every stage's first block. Every conv has a bias and is followed by
BatchNormalization(epsilon 1.001e-5, momentum 0.99). Head: global average pool, Dense(classes) with
softmax. keel is NHWC/HWIO; torch runs NCHW/OIHW (kernel HWIO -> OIHW is permute(3, 2, 0, 1)), with
TensorFlow's SAME padding emulated by F.pad (total = max((out-1)*stride + k - in, 0), total//2 before,
the rest after: a 3x3 stride-2 conv on an even input pads 0 at the top/left and 1 at the bottom/right).

Weights are not stored. Every variable's initial value is a formula of its keel name, reproduced by
tests/models/resnet_golden_test.cc:

    key   = FNV-1a 64 of the name's bytes (offset 0xcbf29ce484222325, prime 0x100000001b3)
    z_i   = the i-th output (i = 0, 1, ...) of SplitMix64 seeded with key:
            s = key + (i + 1) * 0x9e3779b97f4a7c15 (mod 2^64);
            s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9; s = (s ^ (s >> 27)) * 0x94d049bb133111eb; z = s ^ (s >> 31)
    t_i   = ((z_i >> 40) * 2 - 2^24) / 2^24                    (exact, in [-1, 1))
    value = float32(center + half * t_i), computed in float64, with center and half float32 numbers
            (then half * t_i is exact and the result is independent of FMA contraction)

by the variable's last name component (flat index i in keel's row-major layout):

    kernel           center 0, half float32(sqrt(6 / (fan_in + fan_out)))   (glorot_uniform's range;
                     conv HWIO: fan_in = KH*KW*Cin, fan_out = KH*KW*Cout; Dense (in, out))
    bias             center 0, half 0.05
    gamma            center 1, half 0.2          beta         center 0, half 0.1
    moving_mean      center 0, half 0.1          moving_variance center 1, half 0.5

The input batch uses the same formula, keyed "golden/<model>/x", center 0, half 1, in NHWC order.

Outputs are computed in float64 (the reference) and again in float32 (to measure how far an exact
float32 implementation legitimately drifts; only the differences are stored). Large tensors are
stored as fingerprints: {size, sum, sum_sq, sum_abs, max_abs, index: 8 flat indices (row-major,
keel layout), values: the values there}.

resnet18_train.json (32x32x1, 10 classes, batch 16, one-hot labels; 16 rather than 4 because at batch 4
the last stage's BatchNormalization normalises 4 values per channel, and float32 torch then drifts
2e-4 of the largest value from float64 on the gradients, 8e-6 at batch 16):
  logits (pre-softmax), probabilities, loss (categorical cross-entropy, batch mean, from the logits),
  in training mode (BN with batch statistics); the gradient of the loss w.r.t. every trainable
  variable; then 3 training steps of Keras's Adam (lr 1e-3, beta 0.9/0.999, epsilon 1e-7:
  alpha = lr*sqrt(1-b2^t)/(1-b1^t), m += (g-m)(1-b1), v += (g*g-v)(1-b2), w -= alpha*m/(sqrt(v)+eps)),
  each on the same batch in training mode: the losses seen before each update, the change of every
  trainable variable (final - initial), and the change of every moving statistic, updated after each
  step with Keras's rule moving -= (moving - batch_stat) * (1 - momentum) using the *biased* batch
  variance (computed here from the batch; torch's running_var would be the unbiased one).
resnet50_infer.json (32x32x3, 10 classes, batch 2): logits and probabilities in inference mode
  (BN with the generated moving statistics).

Before writing, the float64 gradients are checked against central differences of the float64 loss
along a random direction, and the SAME-padding emulation against a direct loop.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

MASK = (1 << 64) - 1
BN_EPSILON = 1.001e-5
BN_MOMENTUM = 0.99
ADAM = dict(learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
STEPS = 3
SAMPLES = 8

RESNET18 = dict(name="resnet18", input_shape=[32, 32, 1], classes=10, batch=16,
                labels=[3, 8, 0, 6, 1, 9, 2, 5, 7, 4, 3, 8, 0, 6, 1, 9],
                stages=[(64, 2), (128, 2), (256, 2), (512, 2)], bottleneck=False)
RESNET50 = dict(name="resnet50", input_shape=[32, 32, 3], classes=10, batch=2,
                stages=[(64, 3), (128, 4), (256, 6), (512, 3)], bottleneck=True)


# --- the generator ------------------------------------------------------------------------------

def fnv1a64(text):
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & MASK
    return h


def splitmix64(key, n):
    """The first n outputs of SplitMix64 seeded with key, as numpy uint64 (wrapping arithmetic)."""
    s = np.uint64(key) + (np.arange(n, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9e3779b97f4a7c15)
    s = (s ^ (s >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    s = (s ^ (s >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return s ^ (s >> np.uint64(31))


def generate(name, shape, center, half):
    n = int(np.prod(shape))
    z = splitmix64(fnv1a64(name), n)
    t = ((z >> np.uint64(40)).astype(np.int64) * 2 - (1 << 24)).astype(np.float64) / float(1 << 24)
    return (np.float64(center) + np.float64(half) * t).astype(np.float32).reshape(shape)


def variable_range(name, shape):
    """(center, half), both float32 numbers, for a keel variable."""
    kind = name.rsplit("/", 1)[1]
    if kind == "kernel":
        if len(shape) == 4:
            kh, kw, cin, cout = shape
            fan_in, fan_out = kh * kw * cin, kh * kw * cout
        else:
            fan_in, fan_out = shape
        return 0.0, float(np.float32(math.sqrt(6.0 / (fan_in + fan_out))))
    return {"bias": (0.0, float(np.float32(0.05))), "gamma": (1.0, float(np.float32(0.2))),
            "beta": (0.0, float(np.float32(0.1))), "moving_mean": (0.0, float(np.float32(0.1))),
            "moving_variance": (1.0, float(np.float32(0.5)))}[kind]


def sample_indices(name, n):
    return [int(v) for v in splitmix64(fnv1a64(name + "#sample"), SAMPLES) % np.uint64(n)]


# --- the networks ---------------------------------------------------------------------------------

def same_pads(size, k, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


class Net:
    """A ResNet over named parameters in keel's layouts. The first forward creates the parameters
    (from the generator, in creation order); `params` maps names to float64/float32 torch tensors."""

    def __init__(self, cfg, dtype=torch.float64):
        self.cfg = cfg
        self.dtype = dtype
        self.params = {}       # name -> tensor (keel layout)
        self.trainable = []    # names, creation order
        self.moving = []       # moving_mean / moving_variance names
        self.training = False
        self.batch_stats = {}  # BN name -> (mean, biased variance), recorded in training mode

    def param(self, name, shape, trainable=True):
        if name not in self.params:
            center, half = variable_range(name, shape)
            self.params[name] = torch.tensor(generate(name, shape, center, half), dtype=self.dtype)
            (self.trainable if trainable else self.moving).append(name)
        t = self.params[name]
        assert list(t.shape) == list(shape), (name, t.shape, shape)
        return t

    def conv(self, x, name, filters, k, stride, padding):
        cin = x.shape[1]
        kernel = self.param(name + "/kernel", [k, k, cin, filters])
        bias = self.param(name + "/bias", [filters])
        if padding == "same":
            top, bottom = same_pads(x.shape[2], k, stride)
            left, right = same_pads(x.shape[3], k, stride)
            x = F.pad(x, (left, right, top, bottom))
        return F.conv2d(x, kernel.permute(3, 2, 0, 1), bias, stride=stride)

    def bn(self, x, name):
        c = x.shape[1]
        gamma, beta = self.param(name + "/gamma", [c]), self.param(name + "/beta", [c])
        mm = self.param(name + "/moving_mean", [c], trainable=False)
        mv = self.param(name + "/moving_variance", [c], trainable=False)
        if self.training:
            xd = x.detach()
            mean = xd.mean(dim=(0, 2, 3))
            self.batch_stats[name] = (mean, ((xd - mean[None, :, None, None]) ** 2).mean(dim=(0, 2, 3)))
            return F.batch_norm(x, None, None, gamma, beta, training=True, eps=BN_EPSILON)
        return F.batch_norm(x, mm, mv, gamma, beta, training=False, eps=BN_EPSILON)

    def basic(self, x, filters, stride, projection, name):
        shortcut = x
        if projection:
            shortcut = self.bn(self.conv(x, name + "_0_conv", filters, 1, stride, "valid"), name + "_0_bn")
        y = torch.relu(self.bn(self.conv(x, name + "_1_conv", filters, 3, stride, "same"), name + "_1_bn"))
        y = self.bn(self.conv(y, name + "_2_conv", filters, 3, 1, "same"), name + "_2_bn")
        return torch.relu(shortcut + y)

    def bottleneck(self, x, filters, stride, name):
        shortcut = self.bn(self.conv(x, name + "_0_conv", 4 * filters, 1, stride, "valid"), name + "_0_bn") \
            if name.endswith("_block1") else x
        y = torch.relu(self.bn(self.conv(x, name + "_1_conv", filters, 1, stride, "valid"), name + "_1_bn"))
        y = torch.relu(self.bn(self.conv(y, name + "_2_conv", filters, 3, 1, "same"), name + "_2_bn"))
        y = self.bn(self.conv(y, name + "_3_conv", 4 * filters, 1, 1, "valid"), name + "_3_bn")
        return torch.relu(shortcut + y)

    def logits(self, x_nhwc):
        x = x_nhwc.permute(0, 3, 1, 2)
        x = self.conv(F.pad(x, (3, 3, 3, 3)), "conv1_conv", 64, 7, 2, "valid")
        x = torch.relu(self.bn(x, "conv1_bn"))
        x = F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 3, stride=2)
        channels = 64
        for s, (filters, blocks) in enumerate(self.cfg["stages"]):
            for b in range(1, blocks + 1):
                name = f"conv{s + 2}_block{b}"
                stride = (1 if s == 0 else 2) if b == 1 else 1
                if self.cfg["bottleneck"]:
                    x = self.bottleneck(x, filters, stride, name)
                    channels = 4 * filters
                else:
                    x = self.basic(x, filters, stride, b == 1 and (stride != 1 or channels != filters), name)
                    channels = filters
        features = x.mean(dim=(2, 3))
        kernel = self.param("predictions/kernel", [channels, self.cfg["classes"]])
        return features @ kernel + self.param("predictions/bias", [self.cfg["classes"]])

    def build(self, dtype):
        self.dtype = dtype
        shape = [1] + self.cfg["input_shape"]
        with torch.no_grad():
            self.logits(torch.zeros(shape, dtype=dtype))
        return self


def cross_entropy(logits, y):
    return -(y * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()


# --- computations -------------------------------------------------------------------------------

def loss_and_grads(net, x, y):
    names = net.trainable
    for n in names:
        net.params[n] = net.params[n].detach().requires_grad_(True)
    logits = net.logits(x)
    loss = cross_entropy(logits, y)
    grads = torch.autograd.grad(loss, [net.params[n] for n in names])
    for n in names:
        net.params[n] = net.params[n].detach()
    return logits.detach(), loss.detach(), dict(zip(names, grads))


def train(cfg, x_np, y_np, dtype):
    net = Net(cfg).build(dtype)
    net.training = True
    x, y = torch.tensor(x_np, dtype=dtype), torch.tensor(y_np, dtype=dtype)
    initial = {n: t.clone() for n, t in net.params.items()}
    logits, loss, grads = loss_and_grads(net, x, y)
    out = {"logits": logits, "probabilities": torch.softmax(logits, dim=1), "loss": loss.item(), "gradients": grads}

    lr, b1, b2, eps = (torch.tensor(ADAM[k], dtype=dtype) for k in ("learning_rate", "beta_1", "beta_2", "epsilon"))
    decay = torch.tensor(1.0 - BN_MOMENTUM, dtype=dtype)
    m = {n: torch.zeros_like(net.params[n]) for n in net.trainable}
    v = {n: torch.zeros_like(net.params[n]) for n in net.trainable}
    losses = []
    for t in range(1, STEPS + 1):
        net.batch_stats = {}
        _, loss, g = loss_and_grads(net, x, y)
        losses.append(loss.item())
        step = torch.tensor(float(t), dtype=dtype)
        alpha = lr * torch.sqrt(1 - torch.pow(b2, step)) / (1 - torch.pow(b1, step))
        for n in net.trainable:
            m[n] = m[n] + (g[n] - m[n]) * (1 - b1)
            v[n] = v[n] + (g[n] * g[n] - v[n]) * (1 - b2)
            net.params[n] = net.params[n] - (m[n] * alpha) / (torch.sqrt(v[n]) + eps)
        for bn, (mean, var) in net.batch_stats.items():
            for stat, value in (("moving_mean", mean), ("moving_variance", var)):
                key = bn + "/" + stat
                net.params[key] = net.params[key] - (net.params[key] - value) * decay
    out["adam_losses"] = losses
    out["weight_deltas"] = {n: net.params[n] - initial[n] for n in net.trainable}
    out["moving_deltas"] = {n: net.params[n] - initial[n] for n in net.moving}
    return net, out


def infer(cfg, x_np, dtype):
    net = Net(cfg).build(dtype)
    with torch.no_grad():
        logits = net.logits(torch.tensor(x_np, dtype=dtype))
    return net, {"logits": logits, "probabilities": torch.softmax(logits, dim=1)}


# --- self-checks --------------------------------------------------------------------------------

def check_same_padding():
    """The F.pad emulation of TF SAME (stride 2, even input: the extra row/column after) against a
    direct loop over TensorFlow's formula."""
    rs = np.random.RandomState(0)
    x, k = rs.standard_normal((1, 8, 8, 3)), rs.standard_normal((3, 3, 3, 2))
    net = Net(RESNET18)
    net.params = {"c/kernel": torch.tensor(k), "c/bias": torch.zeros(2, dtype=torch.float64)}
    got = net.conv(torch.tensor(x).permute(0, 3, 1, 2), "c", 2, 3, 2, "same").permute(0, 2, 3, 1).numpy()
    want = np.zeros((1, 4, 4, 2))
    for i in range(4):
        for j in range(4):
            for a in range(3):
                for b in range(3):
                    r, c = 2 * i + a, 2 * j + b  # pad_top = pad_left = 0 here
                    if r < 8 and c < 8:
                        want[0, i, j] += x[0, r, c] @ k[a, b]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def check_gradients(cfg, x_np, y_np):
    """Central differences of the float64 loss along a random direction vs the autograd gradient."""
    net = Net(cfg).build(torch.float64)
    net.training = True
    x, y = torch.tensor(x_np, dtype=torch.float64), torch.tensor(y_np, dtype=torch.float64)
    _, _, grads = loss_and_grads(net, x, y)
    rs = np.random.RandomState(1)
    direction = {n: torch.tensor(rs.standard_normal(tuple(net.params[n].shape))) for n in net.trainable}
    predicted = sum((grads[n] * direction[n]).sum().item() for n in net.trainable)
    base = {n: net.params[n].clone() for n in net.trainable}
    h = 1e-8  # small enough that no ReLU or max-pool switches between the two points
    values = []
    for sign in (1, -1):
        for n in net.trainable:
            net.params[n] = base[n] + sign * h * direction[n]
        with torch.no_grad():
            values.append(cross_entropy(net.logits(x), y).item())
    numeric = (values[0] - values[1]) / (2 * h)
    assert abs(numeric - predicted) <= 1e-6 * abs(predicted), (numeric, predicted)
    return numeric, predicted


# --- output -------------------------------------------------------------------------------------

def as_numpy(t):
    return t.detach().cpu().numpy().astype(np.float64) if isinstance(t, torch.Tensor) else np.asarray(t, np.float64)


def tensor_json(t):
    a = as_numpy(t)
    return {"shape": list(a.shape), "values": [float(v) for v in a.reshape(-1)]}


def fingerprint(name, t):
    a = as_numpy(t).reshape(-1)
    idx = sample_indices(name, a.size)
    return {"size": int(a.size), "sum": float(a.sum()), "sum_sq": float((a * a).sum()),
            "sum_abs": float(np.abs(a).sum()), "max_abs": float(np.abs(a).max()),
            "index": idx, "values": [float(a[i]) for i in idx]}


def fingerprints(d):
    return {n: fingerprint(n, t) for n, t in d.items()}


def rel_diff(a, b, scale):
    """max |a - b| / scale."""
    return float(np.max(np.abs(as_numpy(a) - as_numpy(b)))) / scale


def zero_in_exact_arithmetic(name):
    """Conv biases: each conv feeds a training-mode BatchNormalization, which subtracts the batch mean,
    so the loss does not depend on them; their computed gradients are round-off."""
    return name.endswith("_conv/bias")


def drift(f32, f64):
    """How far float32 torch lands from float64, in the units the C++ test uses: logits and
    probabilities max |diff| / max |ref|; loss relative; Adam losses absolute; fingerprints per
    variable |sum diff| / sum_abs, relative L2 norm, and max |diff| / max_abs over the sampled values,
    worst over the variables; conv biases apart: their max |f32 value| (gradients: over the max |ref
    gradient| of the conv's kernel)."""
    out = {}
    for key in ("logits", "probabilities"):
        out[key] = rel_diff(f32[key], f64[key], float(np.abs(as_numpy(f64[key])).max()))
    if "loss" not in f64:
        return out
    out["loss"] = abs(f32["loss"] - f64["loss"]) / abs(f64["loss"])
    out["adam_losses_abs"] = max(abs(p - q) for p, q in zip(f32["adam_losses"], f64["adam_losses"]))
    for key in ("gradients", "weight_deltas", "moving_deltas"):
        worst = {"sum_over_sum_abs": 0.0, "l2": 0.0, "values_over_max_abs": 0.0}
        if key != "moving_deltas":
            worst["conv_bias_max_abs"] = 0.0
        for n, ref in f64[key].items():
            p, q = fingerprint(n, f32[key][n]), fingerprint(n, ref)
            if zero_in_exact_arithmetic(n):
                # gradients: as a fraction of the max |gradient| of the conv's kernel; changes: absolute
                kernel = f64[key][n.rsplit("/", 1)[0] + "/kernel"]
                scale = float(np.abs(as_numpy(kernel)).max()) if key == "gradients" else 1.0
                worst["conv_bias_max_abs"] = max(worst["conv_bias_max_abs"], p["max_abs"] / scale)
                continue
            worst["sum_over_sum_abs"] = max(worst["sum_over_sum_abs"], abs(p["sum"] - q["sum"]) / q["sum_abs"])
            worst["l2"] = max(worst["l2"], abs(math.sqrt(p["sum_sq"]) / math.sqrt(q["sum_sq"]) - 1))
            worst["values_over_max_abs"] = max(worst["values_over_max_abs"], max(
                abs(a - b) for a, b in zip(p["values"], q["values"])) / q["max_abs"])
        out[key] = worst
    return out


def dumps(obj, indent=0):
    """JSON with nesting indented but lists of numbers kept on one line (small, diffable)."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and all(not isinstance(v, (dict, list)) for v in obj):
        return "[" + ", ".join(json.dumps(v) for v in obj) + "]"
    if isinstance(obj, list):
        return "[\n" + ",\n".join(inner + dumps(v, indent + 1) for v in obj) + "\n" + pad + "]"
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError("non-finite value")
    return json.dumps(obj)


def write(path, doc):
    text = dumps(doc) + "\n"
    json.loads(text)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path} ({len(text)} bytes)", file=sys.stderr)


def generator_notes():
    return ("Initial values are not stored: each variable is generated from its keel name. key = FNV-1a 64 of the "
            "name (offset 0xcbf29ce484222325, prime 0x100000001b3); z_i = i-th output (i = 0, 1, ...) of SplitMix64 "
            "seeded with key (s = key + (i+1)*0x9e3779b97f4a7c15 mod 2^64; s = (s^(s>>30))*0xbf58476d1ce4e5b9; "
            "s = (s^(s>>27))*0x94d049bb133111eb; z = s^(s>>31)); t_i = ((z_i>>40)*2 - 2^24)/2^24; value_i = "
            "float32(center + half*t_i) computed in float64, i the flat row-major index in keel's layout (HWIO "
            "kernels, Dense (in, out)). By the name's last component: kernel center 0, half float32(sqrt(6/(fan_in+"
            "fan_out))) with conv fan_in = KH*KW*Cin, fan_out = KH*KW*Cout, Dense fan_in = in, fan_out = out; bias "
            "0 +- 0.05; gamma 1 +- 0.2; beta 0 +- 0.1; moving_mean 0 +- 0.1; moving_variance 1 +- 0.5 (halves "
            "rounded to float32 first). The input x uses the same formula keyed 'golden/<model>/x', 0 +- 1, NHWC. "
            "Fingerprints: size, sum, sum_sq, sum_abs, max_abs, and 'values' at the flat indices 'index' (the i-th "
            "SplitMix64 output keyed by FNV-1a of '<name>#sample', mod size).")


def initial_fingerprints(cfg, prefixes):
    """Fingerprints of some generated initial values (every kind of variable), for checking the C++
    generator against this one."""
    params = Net(cfg).build(torch.float32).params
    return fingerprints({n: t for n, t in params.items() if n.startswith(prefixes)})


def model_config(cfg):
    c = {k: cfg[k] for k in ("name", "input_shape", "classes", "batch")}
    c["bn_epsilon"] = BN_EPSILON
    c["bn_momentum"] = BN_MOMENTUM
    return c


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=os.path.join(here, "..", "tests", "golden"))
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reductions
    check_same_padding()

    # ResNet18, training.
    cfg = RESNET18
    x = generate("golden/resnet18/x", [cfg["batch"]] + cfg["input_shape"], 0.0, 1.0)
    y = np.eye(cfg["classes"], dtype=np.float32)[cfg["labels"]]
    numeric, predicted = check_gradients(cfg, x, y)
    net, f64 = train(cfg, x, y, torch.float64)
    _, f32 = train(cfg, x, y, torch.float32)
    d18 = drift(f32, f64)
    doc = {
        "notes": (
            "Reference for keel's resnet18 (zoo::build('resnet18', {{32, 32, 1}, 10})), generated by "
            "bench/golden_resnet.py (PyTorch " + torch.__version__ + ", numpy " + np.__version__ + ", float64, "
            "hand-written graph mirroring models/resnet.cc); do not edit by hand. " + generator_notes() +
            " Training mode throughout (BN with biased batch statistics, epsilon 1.001e-5). 'logits' are the "
            "predictions Dense's pre-softmax outputs; 'loss' the categorical cross-entropy (batch mean, from "
            "the logits); 'gradients' fingerprints of d loss / d every trainable variable. 'adam': 3 steps of "
            "Keras's Adam on the same batch (alpha = lr*sqrt(1-b2^t)/(1-b1^t); m += (g-m)(1-b1); "
            "v += (g*g-v)(1-b2); w -= alpha*m/(sqrt(v)+eps)): 'losses' before each update, 'weight_deltas' "
            "fingerprints of final - initial of every trainable variable, 'moving_deltas' of every moving "
            "statistic after Keras's update moving -= (moving - batch_stat)*(1 - momentum) after each step, "
            "with the biased batch variance. 'f32_drift': the same run in float32 torch against this float64 "
            "reference (logits/probabilities: max |diff| / max |ref|; loss: relative; fingerprints per "
            "variable: |sum diff| / sum_abs, relative L2 norm, max |diff| / max_abs, worst over variables "
            "whose reference is not all zero), which sizes the tolerances of tests/models/resnet_golden_test.cc. "
            "Conv biases have zero gradient in exact arithmetic (each conv feeds a training-mode BN): their "
            "reference gradients are float64 round-off (float32: about 1e-6 of the kernel's largest gradient), and "
            "Adam's steps on them are round-off-driven in float32 (up to ~lr each) and zero here."),
        "config": dict(model_config(cfg), labels=cfg["labels"], loss="categorical_crossentropy", steps=STEPS,
                       adam=ADAM),
        "trainable_variables": net.trainable,
        "moving_variables": net.moving,
        "x": fingerprint("golden/resnet18/x", x),
        "y": tensor_json(y),
        "initial_values": initial_fingerprints(cfg, ("conv2_block1_1", "conv3_block1_0", "predictions")),
        "gradient_check": {"central_difference": numeric, "autograd": predicted},
        "f32_drift": d18,
        "logits": tensor_json(f64["logits"]),
        "probabilities": tensor_json(f64["probabilities"]),
        "loss": f64["loss"],
        "gradients": fingerprints(f64["gradients"]),
        "adam": {"losses": f64["adam_losses"], "weight_deltas": fingerprints(f64["weight_deltas"]),
                 "moving_deltas": fingerprints(f64["moving_deltas"])},
    }
    write(os.path.normpath(os.path.join(args.out_dir, "resnet18_train.json")), doc)
    print("resnet18: loss", f64["loss"], "adam", f64["adam_losses"], "drift", json.dumps(d18), file=sys.stderr)

    # ResNet50, inference.
    cfg = RESNET50
    x = generate("golden/resnet50/x", [cfg["batch"]] + cfg["input_shape"], 0.0, 1.0)
    net, f64 = infer(cfg, x, torch.float64)
    _, f32 = infer(cfg, x, torch.float32)
    d50 = drift(f32, f64)
    doc = {
        "notes": (
            "Reference for keel's resnet50 (zoo::build('resnet50', {{32, 32, 3}, 10})) in inference mode (BN "
            "with the moving statistics), generated by bench/golden_resnet.py (PyTorch " + torch.__version__ +
            ", numpy " + np.__version__ + ", float64, hand-written graph mirroring models/resnet.cc); do not edit "
            "by hand. " + generator_notes() + " 'logits' are the predictions Dense's pre-softmax outputs. "
            "'f32_drift': the same forward pass in float32 torch (max |diff| / max |ref|)."),
        "config": model_config(cfg),
        "trainable_variables": net.trainable,
        "moving_variables": net.moving,
        "x": fingerprint("golden/resnet50/x", x),
        "initial_values": initial_fingerprints(cfg, ("conv1", "conv5_block3_3", "predictions")),
        "f32_drift": d50,
        "logits": tensor_json(f64["logits"]),
        "probabilities": tensor_json(f64["probabilities"]),
    }
    write(os.path.normpath(os.path.join(args.out_dir, "resnet50_infer.json")), doc)
    print("resnet50: logits", as_numpy(f64["logits"]).round(4).tolist(), "drift", json.dumps(d50), file=sys.stderr)


if __name__ == "__main__":
    main()
