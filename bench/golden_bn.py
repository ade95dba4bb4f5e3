#!/usr/bin/python3
"""Golden reference values for keel's batch normalization, computed independently with PyTorch.

Run (from the repo root, with Debian's interpreter: python3-torch 1.13 + python3-numpy):

    /usr/bin/python3 bench/golden_bn.py            # writes tests/golden/bn_small.json
    /usr/bin/python3 bench/golden_bn.py --out PATH # somewhere else

The problem, all inputs drawn from numpy RandomState(0) and rounded to float32:

    x (4, 3, 3, 5) NHWC, channel c ~ N(offset_c, scale_c) with offsets in [-3, 3), scales in [0.5, 2)
    gamma (5,) ~ U(0.5, 1.5), beta (5,) ~ U(-0.5, 0.5), epsilon 1e-3
    w (4, 3, 3, 5) ~ N(0, 1): the loss is sum(w * y)
    initial moving statistics: mean ~ U(-1, 1), variance ~ U(0.5, 2); Keras momentum 0.99
    x_step2: a second batch like x, for a second training step

Computed in float64 with torch.nn.functional.batch_norm(training=True) on NCHW copies, converted
back to NHWC: y, the batch mean and variances, and the gradients of the loss w.r.t. x, gamma, beta.

Moving statistics. Keras updates moving = moving - (moving - batch_stat) * (1 - momentum) with the
*biased* batch variance (it removes the Bessel correction of TF's fused batch norm); torch updates
running_var with the *unbiased* one, momentum_torch = 1 - momentum_keras. keel follows Keras. The
file holds torch's running statistics as torch computes them and the Keras-convention values derived
from them (running_var converted with the sample count n: the unbiased variance recovered from
torch's update, times (n-1)/n), each checked here against the Keras formula applied directly.

  one_replica:  one step on all of x.
  two_replicas: two steps (x, then x_step2), each batch split by rows into replica 0 = [0, 2) and
                replica 1 = [2, 4). Each replica keeps its own running statistics (a torch module
                per replica, as TF's ON_READ variables keep a copy per replica); after the steps the
                value read is the mean of the copies (aggregation MEAN).

Tensors are {"shape": [...], "values": [...]} with values flat in row-major (NHWC) order, written
with full float64 precision.
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

N, H, W, C = 4, 3, 3, 5
EPSILON = 1e-3
MOMENTUM = 0.99  # Keras
TORCH_MOMENTUM = 1.0 - MOMENTUM
SHARDS = [(0, 2), (2, 4)]


def make_batch(rs, offsets, scales):
    return (rs.standard_normal((N, H, W, C)) * scales + offsets).astype(np.float32)


def make_problem():
    rs = np.random.RandomState(0)
    offsets = rs.uniform(-3, 3, size=C)
    scales = rs.uniform(0.5, 2, size=C)
    x = make_batch(rs, offsets, scales)
    gamma = rs.uniform(0.5, 1.5, size=C).astype(np.float32)
    beta = rs.uniform(-0.5, 0.5, size=C).astype(np.float32)
    w = rs.standard_normal((N, H, W, C)).astype(np.float32)
    moving_mean = rs.uniform(-1, 1, size=C).astype(np.float32)
    moving_variance = rs.uniform(0.5, 2, size=C).astype(np.float32)
    x2 = make_batch(rs, offsets, scales)
    return x, gamma, beta, w, moving_mean, moving_variance, x2


def nchw(a):
    return torch.tensor(a, dtype=torch.float64).permute(0, 3, 1, 2).contiguous()


def nhwc(t):
    return t.detach().permute(0, 2, 3, 1).contiguous().numpy()


def torch_step(x, gamma, beta, w, running_mean, running_var):
    """One training-mode batch norm in float64; updates running_mean/var in place (torch's rule)."""
    xt = nchw(x).requires_grad_(True)
    g = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    y = F.batch_norm(xt, running_mean, running_var, g, b, training=True, momentum=TORCH_MOMENTUM, eps=EPSILON)
    loss = (y * nchw(w)).sum() if w is not None else y.sum()
    loss.backward()
    return nhwc(y), nhwc(xt.grad), g.grad.numpy(), b.grad.numpy()


def keras_variance_from_torch(torch_running_var, previous, count):
    """Keras's moving variance, derived from torch's update of the same previous value."""
    unbiased = (torch_running_var - (1 - TORCH_MOMENTUM) * previous) / TORCH_MOMENTUM
    return previous - (previous - unbiased * (count - 1) / count) * (1 - MOMENTUM)


def numpy_check(x, gamma, beta, w, y, gx, gg, gb):
    """The closed forms keel implements, in numpy float64, against torch's autograd."""
    x = x.astype(np.float64).reshape(-1, C)
    w = w.astype(np.float64).reshape(-1, C)
    n = x.shape[0]
    mean = x.mean(axis=0)
    var = ((x - mean) ** 2).mean(axis=0)
    inv = 1 / np.sqrt(var + EPSILON)
    xhat = (x - mean) * inv
    y_ref = gamma * xhat + beta
    dbeta = w.sum(axis=0)
    dgamma = (w * xhat).sum(axis=0)
    dx = gamma * inv * (w - dbeta / n - xhat * dgamma / n)
    for name, got, want in [("y", y.reshape(-1, C), y_ref), ("dx", gx.reshape(-1, C), dx),
                            ("dgamma", gg, dgamma), ("dbeta", gb, dbeta)]:
        err = np.max(np.abs(got - want))
        if err > 1e-10:
            raise SystemExit(f"numpy check failed for {name}: max |diff| {err}")


def tensor_json(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "values": [float(v) for v in a.reshape(-1)]}


def dumps(obj, indent=0):
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        return "[" + ", ".join(json.dumps(v) for v in obj) + "]"
    return json.dumps(obj)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "tests", "golden", "bn_small.json")))
    args = ap.parse_args()

    x, gamma, beta, w, mm0, mv0, x2 = make_problem()
    x64 = x.astype(np.float64).reshape(-1, C)
    count = x64.shape[0]

    # One replica, one step.
    rm = torch.tensor(mm0, dtype=torch.float64)
    rv = torch.tensor(mv0, dtype=torch.float64)
    y, gx, gg, gb = torch_step(x, gamma, beta, w, rm, rv)
    numpy_check(x, gamma, beta, w, y, gx, gg, gb)
    batch_mean = x64.mean(axis=0)
    var_biased = x64.var(axis=0)
    var_unbiased = x64.var(axis=0, ddof=1)
    keras_mm = rm.numpy()  # torch's mean update is Keras's
    keras_mv = keras_variance_from_torch(rv.numpy(), mv0.astype(np.float64), count)
    direct_mm = mm0 - (mm0 - batch_mean) * (1 - MOMENTUM)
    direct_mv = mv0 - (mv0 - var_biased) * (1 - MOMENTUM)
    assert np.allclose(keras_mm, direct_mm, rtol=0, atol=1e-12), "torch mean update != Keras formula"
    assert np.allclose(keras_mv, direct_mv, rtol=0, atol=1e-12), "converted torch variance != Keras formula"

    # Two replicas, two steps. Each replica has its own torch running buffers; torch updates the
    # variance copy with the unbiased variance, so after each update the copy is converted to
    # Keras's convention (which the next step then starts from), and checked against the Keras
    # formula applied directly in numpy.
    copies = [(torch.tensor(mm0, dtype=torch.float64), torch.tensor(mv0, dtype=torch.float64)) for _ in SHARDS]
    for batch in (x, x2):
        for r, (lo, hi) in enumerate(SHARDS):
            shard = batch[lo:hi]
            s64 = shard.astype(np.float64).reshape(-1, C)
            prev_mean, prev_var = copies[r][0].numpy().copy(), copies[r][1].numpy().copy()
            torch_step(shard, gamma, beta, None, copies[r][0], copies[r][1])
            keras_var = keras_variance_from_torch(copies[r][1].numpy(), prev_var, s64.shape[0])
            copies[r][1].copy_(torch.tensor(keras_var))
            direct_mean = prev_mean - (prev_mean - s64.mean(axis=0)) * (1 - MOMENTUM)
            direct_var = prev_var - (prev_var - s64.var(axis=0)) * (1 - MOMENTUM)
            assert np.allclose(copies[r][0].numpy(), direct_mean, rtol=0, atol=1e-12)
            assert np.allclose(keras_var, direct_var, rtol=0, atol=1e-12)
    # Aggregation MEAN: the value read outside the replicas.
    two_mm = np.mean([c[0].numpy() for c in copies], axis=0)
    two_mv = np.mean([c[1].numpy() for c in copies], axis=0)

    doc = {
        "description": "BatchNormalization golden values from PyTorch 1.13 (float64); see bench/golden_bn.py",
        "layout": "NHWC, values flat in row-major order",
        "moving_variance_convention": (
            "keel follows Keras: moving_variance is updated with the biased batch variance (divided by "
            "the count n). torch's running_var uses the unbiased one (divided by n - 1); "
            "one_replica.torch_running_var is torch's value, moving_variance the Keras-convention value "
            "derived from it."),
        "epsilon": EPSILON,
        "momentum": MOMENTUM,
        "torch_momentum": TORCH_MOMENTUM,
        "x": tensor_json(x),
        "gamma": tensor_json(gamma),
        "beta": tensor_json(beta),
        "loss_weights": tensor_json(w),
        "y": tensor_json(y),
        "batch_mean": tensor_json(batch_mean),
        "batch_variance_biased": tensor_json(var_biased),
        "batch_variance_unbiased": tensor_json(var_unbiased),
        "grad_x": tensor_json(gx),
        "grad_gamma": tensor_json(gg),
        "grad_beta": tensor_json(gb),
        "initial_moving_mean": tensor_json(mm0),
        "initial_moving_variance": tensor_json(mv0),
        "one_replica": {
            "count": count,
            "torch_running_mean": tensor_json(rm.numpy()),
            "torch_running_var": tensor_json(rv.numpy()),
            "moving_mean": tensor_json(keras_mm),
            "moving_variance": tensor_json(keras_mv),
        },
        "two_replicas": {
            "shards": [list(s) for s in SHARDS],
            "x_step2": tensor_json(x2),
            "moving_mean": tensor_json(two_mm),
            "moving_variance": tensor_json(two_mv),
        },
    }
    text = dumps(doc) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
