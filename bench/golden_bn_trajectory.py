#!/usr/bin/python3
"""Golden moving statistics over a training trajectory (issue 17), computed independently with PyTorch.

Run (from the repo root, with Debian's interpreter: python3-torch 1.13 + python3-numpy):

    /usr/bin/python3 bench/golden_bn_trajectory.py            # writes tests/golden/bn_trajectory.json
    /usr/bin/python3 bench/golden_bn_trajectory.py --out PATH

bench/golden_bn.py checks one or two steps of one BatchNormalization; this follows a small conv+BN
network and a ResNet basic block through STEPS steps of Adam, so that a lag in the moving statistics
(a wrong momentum, an update at the wrong point of the step, statistics of the wrong replica or of
stale weights) would show as a drift that grows along the trajectory. The network, NHWC, as keel's
functional API builds it in tests/layers/normalization_trajectory_test.cc:

    x (6, 6, 2) -> Conv2D(4, 3, same, no bias) "conv1" -> BN "bn1" -> ReLU
      -> Conv2D(4, 3, same, no bias) "block_1_conv" -> BN "block_1_bn" -> ReLU
      -> Conv2D(4, 3, same, no bias) "block_2_conv" -> BN "block_2_bn"
      -> Add with the block's input -> ReLU -> GlobalAveragePooling2D -> Dense(3) "predictions", softmax
    loss: sparse categorical cross-entropy, batch mean. Adam (Keras): lr 1e-3, beta 0.9/0.999, eps 1e-7.
    BN: momentum 0.99, epsilon 1e-3; moving -= (moving - batch_stat) * (1 - momentum), with the batch's
    *biased* variance (Keras's convention; torch's running_var would be the unbiased one).

The convs have no bias: a bias in front of a BatchNormalization has an exactly zero gradient, which
float32 leaves as rounding noise that Adam's normalisation turns into steps of up to lr; the float64
reference would not follow that noise, and the comparison would measure it instead of the statistics.

Every value is a formula, so nothing but the statistics is stored. For a string key and index i:
z_i = SplitMix64 output i of the key's FNV-1a 64 hash (bench/golden_resnet.py's generator), and
t_i = ((z_i >> 40) * 2 - 2^24) / 2^24 in [-1, 1); a value is float32(center + half * t_i) in float64.
    kernels: key = the variable's name ("conv1/kernel"), center 0, half sqrt(6 / (fan_in + fan_out))
             in float32 (glorot_uniform's range), HWIO; Dense (in, out). Dense bias: zeros.
    gamma: center 1, half 0.2; beta: center 0, half 0.1; moving mean 0 and variance 1 (Keras's init).
    step s's images: key "bn_trajectory/x/<s>", center 0.5, half 1.5, (BATCH, 6, 6, 2) row-major NHWC;
    labels: key "bn_trajectory/y/<s>", z_i mod 3.

Replicas: `replicas` R splits every batch by rows into R equal shards; each replica normalises its
shard with the shard's own statistics (Keras's BatchNormalization under a strategy is not synced);
the loss is each replica's shard mean, and gradients are averaged over replicas (all-reduce mean);
each moving statistic moves towards the mean over replicas of the replicas' batch statistics (Keras's
ON_READ variables with aggregation MEAN, read after every step).

Stored for R = 1 and R = 8: the loss of every step (the mean over replicas) and, after every step,
each BN's moving mean and variance, computed in float64.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_resnet import fnv1a64, splitmix64  # noqa: E402

STEPS = 60
BATCH = 16
H, W, CIN, C, CLASSES = 6, 6, 2, 4, 3
MOMENTUM, EPSILON = 0.99, 1e-3
LR, B1, B2, ADAM_EPS = 1e-3, 0.9, 0.999, 1e-7
BNS = ["bn1", "block_1_bn", "block_2_bn"]


def uniform(key, n):
    z = splitmix64(fnv1a64(key), n)
    return ((z >> np.uint64(40)).astype(np.int64) * 2 - (1 << 24)).astype(np.float64) / float(1 << 24)


def generate(key, shape, center, half):
    n = int(np.prod(shape))
    return (np.float64(center) + np.float64(half) * uniform(key, n)).astype(np.float32).reshape(shape)


def glorot_half(fan_in, fan_out):
    return float(np.float32(math.sqrt(6.0 / (fan_in + fan_out))))


def initial_weights():
    w = {}
    for name, cin in (("conv1", CIN), ("block_1_conv", C), ("block_2_conv", C)):
        w[name + "/kernel"] = generate(name + "/kernel", [3, 3, cin, C], 0.0, glorot_half(9 * cin, 9 * C))
    for bn in BNS:
        w[bn + "/gamma"] = generate(bn + "/gamma", [C], 1.0, 0.2)
        w[bn + "/beta"] = generate(bn + "/beta", [C], 0.0, 0.1)
    w["predictions/kernel"] = generate("predictions/kernel", [C, CLASSES], 0.0, glorot_half(C, CLASSES))
    w["predictions/bias"] = np.zeros([CLASSES], dtype=np.float32)
    return w


def batch_of_step(step):
    x = generate(f"bn_trajectory/x/{step}", [BATCH, H, W, CIN], 0.5, 1.5)
    z = splitmix64(fnv1a64(f"bn_trajectory/y/{step}"), BATCH)
    return x, (z % np.uint64(CLASSES)).astype(np.int64)


def conv(x, kernel):
    return F.conv2d(x, kernel.permute(3, 2, 0, 1), padding=1)  # 3x3 stride 1 'same' pads 1 all round


def bn(x, p, name, stats):
    mean = x.mean(dim=(0, 2, 3))
    var = ((x - mean[None, :, None, None]) ** 2).mean(dim=(0, 2, 3))
    stats[name] = (mean.detach(), var.detach())
    xhat = (x - mean[None, :, None, None]) / torch.sqrt(var[None, :, None, None] + EPSILON)
    return xhat * p[name + "/gamma"][None, :, None, None] + p[name + "/beta"][None, :, None, None]


def replica_loss(x_nhwc, y, p, stats):
    x = x_nhwc.permute(0, 3, 1, 2)
    x = torch.relu(bn(conv(x, p["conv1/kernel"]), p, "bn1", stats))
    y1 = torch.relu(bn(conv(x, p["block_1_conv/kernel"]), p, "block_1_bn", stats))
    y2 = bn(conv(y1, p["block_2_conv/kernel"]), p, "block_2_bn", stats)
    features = torch.relu(x + y2).mean(dim=(2, 3))
    logits = features @ p["predictions/kernel"] + p["predictions/bias"]
    return F.cross_entropy(logits, torch.tensor(y))


def trajectory(replicas):
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in initial_weights().items()}
    moving = {bn: [torch.zeros(C, dtype=torch.float64), torch.ones(C, dtype=torch.float64)] for bn in BNS}
    m = {k: torch.zeros_like(v) for k, v in p.items()}
    v = {k: torch.zeros_like(t) for k, t in p.items()}
    shard = BATCH // replicas
    losses, history = [], {bn: {"moving_mean": [], "moving_variance": []} for bn in BNS}
    for step in range(STEPS):
        x, y = batch_of_step(step)
        for t in p.values():
            t.requires_grad_(True)
        grads = {k: torch.zeros_like(t) for k, t in p.items()}
        replica_stats, loss_sum = [], 0.0
        for r in range(replicas):
            stats = {}
            loss = replica_loss(torch.tensor(x[r * shard:(r + 1) * shard], dtype=torch.float64),
                                y[r * shard:(r + 1) * shard], p, stats)
            for k, g in zip(p, torch.autograd.grad(loss, list(p.values()))):
                grads[k] += g / replicas
            replica_stats.append(stats)
            loss_sum += loss.item()
        losses.append(loss_sum / replicas)
        with torch.no_grad():
            t = step + 1
            alpha = LR * math.sqrt(1 - B2 ** t) / (1 - B1 ** t)
            for k in p:
                g = grads[k]
                m[k] += (g - m[k]) * (1 - B1)
                v[k] += (g * g - v[k]) * (1 - B2)
                p[k] = p[k].detach() - alpha * m[k] / (torch.sqrt(v[k]) + ADAM_EPS)
            for bn in BNS:
                for i, stat in enumerate(("moving_mean", "moving_variance")):
                    batch_stat = sum(s[bn][i] for s in replica_stats) / replicas
                    moving[bn][i] = moving[bn][i] - (moving[bn][i] - batch_stat) * (1 - MOMENTUM)
                    history[bn][stat].append([float(a) for a in moving[bn][i]])
    return {"replicas": replicas, "losses": losses, "moving": history}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "tests", "golden", "bn_trajectory.json")))
    args = ap.parse_args()
    doc = {
        "notes": ("Moving statistics of a conv+BN network and a ResNet basic block over " + str(STEPS) +
                  " Adam steps, from PyTorch " + torch.__version__ + " in float64; generated by "
                  "bench/golden_bn_trajectory.py (its docstring defines the network, weights and batches); "
                  "do not edit by hand. moving[bn][stat][step] is the value after that step."),
        "steps": STEPS, "batch": BATCH, "input_shape": [H, W, CIN], "filters": C, "classes": CLASSES,
        "momentum": MOMENTUM, "epsilon": EPSILON,
        "runs": [trajectory(1), trajectory(8)],
    }
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    first = doc["runs"][0]
    print(f"wrote {args.out} ({len(text)} bytes); 1 replica losses {first['losses'][0]:.4f} -> "
          f"{first['losses'][-1]:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
