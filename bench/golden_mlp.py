#!/usr/bin/python3
"""Golden reference values for keel's MLP, computed independently with PyTorch.

Run (from the repo root, with Debian's interpreter: python3-torch 1.13 + python3-numpy):

    /usr/bin/python3 bench/golden_mlp.py            # writes tests/golden/mlp_small.json
    /usr/bin/python3 bench/golden_mlp.py --out PATH # somewhere else

What it produces: a small JSON file (< 100 KB) describing one fixed problem,

    x (6, 20) ~ N(0, 1), labels ~ randint(0, 4) one-hot as y (6, 4)   from numpy RandomState(0)
    Dense(20 -> 8, relu) -> Dense(8 -> 4, softmax)                     weights: RandomState(1),
                                                                        uniform(-0.5, 0.5), kernels
                                                                        in Keras layout (in, out)
    loss = categorical cross-entropy, mean over the batch, computed from the logits
           (log_softmax), as Keras does when the softmax's logits are available

and, for it: the initial weights ("dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"),
logits, probabilities, loss, the gradient of the loss w.r.t. every weight, then three steps each of

    Keras Adam   (lr 1e-3, beta1 0.9, beta2 0.999, epsilon 1e-7, epsilon *outside* the bias
                 correction: alpha = lr*sqrt(1-b2^t)/(1-b1^t); w -= alpha*m/(sqrt(v)+eps)),
    Keras SGD    (lr 0.01, momentum 0.9):            v = 0.9 v - lr g;  w += v
    Keras SGD    (lr 0.01, momentum 0.9, nesterov):  v = 0.9 v - lr g;  w += 0.9 v - lr g

written by hand (not torch.optim: its Adam puts epsilon elsewhere), each with the losses seen
before every update, the loss after the last one, and the final weights.

Everything is computed twice from the same inputs: in float32 (what keel computes in; section
"f32") and in float64 (the exact reference; section "f64"). The inputs and initial weights are
rounded to float32 first, so both sections start from identical, float32-representable values.
Tensors are stored as {"shape": [...], "values": [...]} with the values flat in row-major order,
written with full float64 precision. The float64 forward/backward pass is cross-checked against
a hand-written numpy derivation before anything is written.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

BATCH, IN, HIDDEN, CLASSES = 6, 20, 8, 4
WEIGHT_NAMES = ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]
ADAM = dict(learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
SGD = dict(learning_rate=0.01, momentum=0.9)
STEPS = 3


def make_problem():
    rs0 = np.random.RandomState(0)
    x = rs0.standard_normal((BATCH, IN)).astype(np.float32)
    labels = rs0.randint(0, CLASSES, size=BATCH)
    y = np.eye(CLASSES, dtype=np.float32)[labels]
    rs1 = np.random.RandomState(1)
    shapes = [(IN, HIDDEN), (HIDDEN,), (HIDDEN, CLASSES), (CLASSES,)]
    weights = {n: rs1.uniform(-0.5, 0.5, size=s).astype(np.float32) for n, s in zip(WEIGHT_NAMES, shapes)}
    return x, y, labels, weights


def forward(x, y, w):
    """Returns (logits, probabilities, loss) for torch tensors; w maps names to tensors."""
    h = torch.relu(x @ w["dense/kernel"] + w["dense/bias"])
    logits = h @ w["dense_1/kernel"] + w["dense_1/bias"]
    log_p = torch.log_softmax(logits, dim=1)
    loss = -(y * log_p).sum(dim=1).mean()
    return logits, torch.softmax(logits, dim=1), loss


def loss_and_grads(x, y, w):
    w = {n: t.detach().clone().requires_grad_(True) for n, t in w.items()}
    logits, probs, loss = forward(x, y, w)
    grads = torch.autograd.grad(loss, [w[n] for n in WEIGHT_NAMES])
    return logits.detach(), probs.detach(), loss.detach(), dict(zip(WEIGHT_NAMES, grads))


def run_adam(x, y, w0, dtype):
    lr, b1, b2, eps = (torch.tensor(ADAM[k], dtype=dtype) for k in ("learning_rate", "beta_1", "beta_2", "epsilon"))
    w = {n: t.clone() for n, t in w0.items()}
    m = {n: torch.zeros_like(t) for n, t in w.items()}
    v = {n: torch.zeros_like(t) for n, t in w.items()}
    losses = []
    for t in range(1, STEPS + 1):
        _, _, loss, g = loss_and_grads(x, y, w)
        losses.append(loss.item())
        step = torch.tensor(float(t), dtype=dtype)
        alpha = lr * torch.sqrt(1 - torch.pow(b2, step)) / (1 - torch.pow(b1, step))
        for n in WEIGHT_NAMES:
            m[n] = m[n] + (g[n] - m[n]) * (1 - b1)
            v[n] = v[n] + (g[n] * g[n] - v[n]) * (1 - b2)
            w[n] = w[n] - (m[n] * alpha) / (torch.sqrt(v[n]) + eps)
    final_loss = loss_and_grads(x, y, w)[2].item()
    return losses, final_loss, w


def run_sgd(x, y, w0, dtype, nesterov):
    lr = torch.tensor(SGD["learning_rate"], dtype=dtype)
    mu = torch.tensor(SGD["momentum"], dtype=dtype)
    w = {n: t.clone() for n, t in w0.items()}
    vel = {n: torch.zeros_like(t) for n, t in w.items()}
    losses = []
    for _ in range(STEPS):
        _, _, loss, g = loss_and_grads(x, y, w)
        losses.append(loss.item())
        for n in WEIGHT_NAMES:
            vel[n] = mu * vel[n] - lr * g[n]
            if nesterov:
                w[n] = w[n] + (mu * vel[n] - lr * g[n])
            else:
                w[n] = w[n] + vel[n]
    final_loss = loss_and_grads(x, y, w)[2].item()
    return losses, final_loss, w


def numpy_check(x, y, w, logits, loss, grads):
    """Independent float64 derivation of the forward and backward pass."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    k0, b0, k1, b1 = (w[n].astype(np.float64) for n in WEIGHT_NAMES)
    pre = x @ k0 + b0
    assert np.min(np.abs(pre)) > 1e-6, "a pre-activation sits on relu's kink"
    h = np.maximum(pre, 0.0)
    z = h @ k1 + b1
    zs = z - z.max(axis=1, keepdims=True)
    log_p = zs - np.log(np.exp(zs).sum(axis=1, keepdims=True))
    l = -(y * log_p).sum(axis=1).mean()
    dz = (np.exp(log_p) - y) / BATCH
    dk1, db1 = h.T @ dz, dz.sum(axis=0)
    dpre = (dz @ k1.T) * (pre > 0)
    dk0, db0 = x.T @ dpre, dpre.sum(axis=0)
    np.testing.assert_allclose(z, logits, rtol=1e-12, atol=1e-12)
    assert abs(l - loss) < 1e-12
    for n, ref in zip(WEIGHT_NAMES, (dk0, db0, dk1, db1)):
        np.testing.assert_allclose(ref, grads[n], rtol=1e-10, atol=1e-12)


def tensor_json(t):
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return {"shape": list(a.shape), "values": [float(v) for v in a.reshape(-1)]}


def weights_json(w):
    return {n: tensor_json(w[n]) for n in WEIGHT_NAMES}


def section(x_np, y_np, w_np, dtype):
    x, y = torch.tensor(x_np, dtype=dtype), torch.tensor(y_np, dtype=dtype)
    w0 = {n: torch.tensor(a, dtype=dtype) for n, a in w_np.items()}
    logits, probs, loss, grads = loss_and_grads(x, y, w0)
    if dtype == torch.float64:
        numpy_check(x_np, y_np, w_np, logits.numpy(), loss.item(), {n: g.numpy() for n, g in grads.items()})
    out = {
        "logits": tensor_json(logits),
        "probabilities": tensor_json(probs),
        "loss": loss.item(),
        "gradients": weights_json(grads),
    }
    for key, fn in (("adam", lambda: run_adam(x, y, w0, dtype)),
                    ("sgd_momentum", lambda: run_sgd(x, y, w0, dtype, nesterov=False)),
                    ("sgd_nesterov", lambda: run_sgd(x, y, w0, dtype, nesterov=True))):
        losses, final_loss, wf = fn()
        out[key] = {"losses": losses, "final_loss": final_loss, "weights": weights_json(wf)}
    return out


def max_abs_diff(a, b):
    """Largest |a - b| over every number in two structurally identical JSON trees."""
    if isinstance(a, dict):
        return max(max_abs_diff(a[k], b[k]) for k in a if k != "shape")
    if isinstance(a, list):
        return max((max_abs_diff(p, q) for p, q in zip(a, b)), default=0.0)
    return abs(a - b)


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


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "golden", "mlp_small.json"))
    args = ap.parse_args()

    torch.set_num_threads(1)  # deterministic reductions
    x, y, labels, w = make_problem()
    f32 = section(x, y, w, torch.float32)
    f64 = section(x, y, w, torch.float64)
    diffs = {k: max_abs_diff(f32[k], f64[k]) for k in f64}

    doc = {
        "notes": (
            "Reference for keel's MLP, generated by bench/golden_mlp.py (PyTorch " + torch.__version__ +
            ", numpy " + np.__version__ + "); do not edit by hand. Model: Dense(20->8, relu) -> "
            "Dense(8->4, softmax); kernels in Keras layout (in, out). Loss: categorical cross-entropy, "
            "batch mean, from logits via log_softmax. Section 'f64' is the exact reference (float64 "
            "arithmetic); 'f32' is the same computation in float32 (torch defaults), so |f32 - f64| "
            "(see max_abs_diff_f32_vs_f64) shows how far an exact float32 implementation may "
            "legitimately drift: compare keel against 'f64' with a tolerance around 1e-5 relative / "
            "1e-6 absolute. Inputs and initial weights are float32-representable, shared by both "
            "sections. Tensors: {shape, values} with values flat in row-major order. Optimizers are "
            "Keras's update rules written by hand: Adam alpha = lr*sqrt(1-b2^t)/(1-b1^t), "
            "m += (g-m)(1-b1), v += (g*g-v)(1-b2), w -= alpha*m/(sqrt(v)+eps); SGD v = mu*v - lr*g, "
            "w += v (nesterov: w += mu*v - lr*g). 'losses' are the losses before each of the "
            f"{STEPS} updates, 'final_loss' the loss after the last one, 'weights' the final weights."
        ),
        "config": {
            "batch": BATCH, "input_dim": IN, "hidden_units": HIDDEN, "classes": CLASSES,
            "layers": [
                {"name": "dense", "class_name": "Dense", "units": HIDDEN, "activation": "relu"},
                {"name": "dense_1", "class_name": "Dense", "units": CLASSES, "activation": "softmax"},
            ],
            "loss": "categorical_crossentropy",
            "steps": STEPS,
            "adam": ADAM,
            "sgd_momentum": dict(SGD, nesterov=False),
            "sgd_nesterov": dict(SGD, nesterov=True),
            "data": "x = RandomState(0).standard_normal((6, 20)); labels = same RandomState.randint(0, 4, 6); "
                    "weights: RandomState(1).uniform(-0.5, 0.5) in the order of weight_names; all cast to float32",
        },
        "weight_names": WEIGHT_NAMES,
        "x": tensor_json(x),
        "y": tensor_json(y),
        "labels": [int(v) for v in labels],
        "initial_weights": weights_json(w),
        "max_abs_diff_f32_vs_f64": diffs,
        "f64": f64,
        "f32": f32,
    }
    text = dumps(doc) + "\n"
    json.loads(text)
    out = os.path.normpath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print(f"wrote {out} ({len(text)} bytes); loss f64 {f64['loss']:.10f}, "
          f"adam losses {[round(v, 8) for v in f64['adam']['losses']]}", file=sys.stderr)


if __name__ == "__main__":
    main()
