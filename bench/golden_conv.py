#!/usr/bin/python3
"""Golden reference values for keel's conv2d and pooling ops, computed independently with PyTorch.

Run (from the repo root, with Debian's interpreter: python3-torch 1.13 + python3-numpy):

    /usr/bin/python3 bench/golden_conv.py            # writes tests/golden/conv_small.json
    /usr/bin/python3 bench/golden_conv.py --out PATH # somewhere else

keel follows TensorFlow: NHWC images, HWIO kernels, and SAME padding that puts the odd extra
row/column at the bottom/right. PyTorch is NCHW/OIHW with symmetric padding only, so every case is
computed as

    conv2d:     F.pad(x, (left, right, top, bottom)) then F.conv2d(padding=0, stride, dilation)
                with x NHWC -> NCHW (permute 0,3,1,2) and kernel HWIO -> OIHW (permute 3,2,0,1)
    max_pool2d: F.pad(x, ..., value=-inf) then F.max_pool2d (padded positions never win)
    avg_pool2d: sum_pool(F.pad(x)) / sum_pool(F.pad(ones)), sum_pool = avg_pool2d(divisor_override=1):
                TensorFlow divides by the number of *valid* positions in each window
    global_avg_pool2d: mean over H and W

and the results converted back to NHWC. Each case stores its inputs, a fixed upstream gradient dy
(same shape as the output), the output y, and the gradients of sum(y * dy) w.r.t. every input
(dx, and dkernel in HWIO for conv2d). Inputs are drawn from numpy RandomState(seed per case) and
rounded to float32; everything else is computed in float64 (exact reference for keel's float32).
Tensors are {"shape": [...], "values": [...]} (row-major), values to 10 significant digits (float32
inputs round-trip exactly). Before writing, every forward result is cross-checked against a direct
loop implementation of TensorFlow's formulas in numpy, so an error in the torch emulation (pad order,
layout permutations) cannot slip into the golden file.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def window(size, k, s, d, padding):
    """TensorFlow's rule: (output, pad_before, pad_after) along one axis."""
    eff = (k - 1) * d + 1
    if padding == "valid":
        return (size - eff) // s + 1, 0, 0
    out = -(-size // s)
    total = max((out - 1) * s + eff - size, 0)
    return out, total // 2, total - total // 2


def pads_for(shape_hw, k, strides, dilation, padding):
    (h, w), (kh, kw) = shape_hw, k
    oh, pt, pb = window(h, kh, strides[0], dilation[0], padding)
    ow, pl, pr = window(w, kw, strides[1], dilation[1], padding)
    return (oh, ow), (pt, pb, pl, pr)


def nhwc_to_nchw(t):
    return t.permute(0, 3, 1, 2)


def nchw_to_nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous()


def f32(rs, shape, lo=-1.0, hi=1.0):
    return rs.uniform(lo, hi, size=shape).astype(np.float32).astype(np.float64)


# --- independent numpy references (direct loops over TensorFlow's formulas) -------------------

def np_conv2d(x, k, strides, padding, dilation):
    n, h, w, cin = x.shape
    kh, kw, _, cout = k.shape
    (oh, ow), (pt, _, pl, _) = pads_for((h, w), (kh, kw), strides, dilation, padding)
    y = np.zeros((n, oh, ow, cout))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    r = i * strides[0] - pt + a * dilation[0]
                    c = j * strides[1] - pl + b * dilation[1]
                    if 0 <= r < h and 0 <= c < w:
                        y[:, i, j, :] += x[:, r, c, :] @ k[a, b]
    return y


def np_pool(x, pool, strides, padding, kind):
    n, h, w, ch = x.shape
    (oh, ow), (pt, _, pl, _) = pads_for((h, w), pool, strides, (1, 1), padding)
    y = np.zeros((n, oh, ow, ch))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * strides[0] - pt, j * strides[1] - pl
            win = x[:, max(r0, 0):min(r0 + pool[0], h), max(c0, 0):min(c0 + pool[1], w), :]
            y[:, i, j, :] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return y


# --- torch computations ------------------------------------------------------------------------

def torch_conv2d(x, k, strides, padding, dilation):
    _, (pt, pb, pl, pr) = pads_for(x.shape[1:3], k.shape[:2], strides, dilation, padding)
    xt = F.pad(nhwc_to_nchw(x), (pl, pr, pt, pb))
    return nchw_to_nhwc(F.conv2d(xt, k.permute(3, 2, 0, 1), stride=tuple(strides), dilation=tuple(dilation)))


def torch_pool(x, pool, strides, padding, kind):
    _, (pt, pb, pl, pr) = pads_for(x.shape[1:3], pool, strides, (1, 1), padding)
    xt = nhwc_to_nchw(x)
    if kind == "max":
        y = F.max_pool2d(F.pad(xt, (pl, pr, pt, pb), value=-math.inf), tuple(pool), tuple(strides))
    else:
        def sum_pool(t):
            return F.avg_pool2d(F.pad(t, (pl, pr, pt, pb)), tuple(pool), tuple(strides), divisor_override=1)
        y = sum_pool(xt) / sum_pool(torch.ones_like(xt))
    return nchw_to_nhwc(y)


def tensor_json(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "values": [float(f"{v:.10g}") for v in a.reshape(-1)]}


def check_close(got, want, what):
    err = np.max(np.abs(got - want)) if got.size else 0.0
    if got.shape != want.shape or err > 1e-10 * max(1.0, np.max(np.abs(want))):
        sys.exit(f"golden_conv: torch and the numpy reference disagree on {what}: shapes {got.shape} "
                 f"{want.shape}, max |diff| {err}")


def conv_case(name, seed, x_shape, k_shape, strides, padding, dilation):
    rs = np.random.RandomState(seed)
    x_np, k_np = f32(rs, x_shape), f32(rs, k_shape)
    x = torch.tensor(x_np, requires_grad=True)
    k = torch.tensor(k_np, requires_grad=True)
    y = torch_conv2d(x, k, strides, padding, dilation)
    check_close(y.detach().numpy(), np_conv2d(x_np, k_np, strides, padding, dilation), f"conv2d {name}")
    dy = torch.tensor(f32(rs, tuple(y.shape)))
    (y * dy).sum().backward()
    return {"name": name, "strides": list(strides), "padding": padding, "dilation": list(dilation),
            "x": tensor_json(x_np), "kernel": tensor_json(k_np), "dy": tensor_json(dy.numpy()),
            "y": tensor_json(y.detach().numpy()), "dx": tensor_json(x.grad.numpy()),
            "dkernel": tensor_json(k.grad.numpy())}


def pool_case(kind, name, seed, x_shape, pool, strides, padding):
    rs = np.random.RandomState(seed)
    # Uniform draws are distinct with probability 1: max-pool has no ties.
    x_np = f32(rs, x_shape, -2.0, 2.0)
    if kind == "max":
        assert len(np.unique(x_np)) == x_np.size
    x = torch.tensor(x_np, requires_grad=True)
    y = torch_pool(x, pool, strides, padding, kind)
    check_close(y.detach().numpy(), np_pool(x_np, pool, strides, padding, kind), f"{kind}_pool2d {name}")
    dy = torch.tensor(f32(rs, tuple(y.shape)))
    (y * dy).sum().backward()
    return {"name": name, "pool": list(pool), "strides": list(strides), "padding": padding,
            "x": tensor_json(x_np), "dy": tensor_json(dy.numpy()), "y": tensor_json(y.detach().numpy()),
            "dx": tensor_json(x.grad.numpy())}


def global_avg_case(name, seed, x_shape):
    rs = np.random.RandomState(seed)
    x_np = f32(rs, x_shape)
    x = torch.tensor(x_np, requires_grad=True)
    y = x.mean(dim=(1, 2))
    check_close(y.detach().numpy(), x_np.mean(axis=(1, 2)), f"global_avg_pool2d {name}")
    dy = torch.tensor(f32(rs, tuple(y.shape)))
    (y * dy).sum().backward()
    return {"name": name, "x": tensor_json(x_np), "dy": tensor_json(dy.numpy()), "y": tensor_json(y.detach().numpy()),
            "dx": tensor_json(x.grad.numpy())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "golden", "conv_small.json"))
    args = parser.parse_args()

    doc = {
        "generator": "bench/golden_conv.py (PyTorch %s, float64)" % torch.__version__,
        "conv2d": [
            conv_case("valid_stride1", 10, (2, 5, 5, 3), (3, 3, 3, 4), (1, 1), "valid", (1, 1)),
            # SAME, stride 2, 6 -> 3: total pad 1, all of it at the bottom/right.
            conv_case("same_stride2_even", 11, (2, 6, 6, 3), (3, 3, 3, 2), (2, 2), "same", (1, 1)),
            # H 7 -> 4 (pad 0 top, 1 bottom), W 5 -> 5 with a 3-wide kernel (pad 1, 1).
            conv_case("same_stride21_odd_nonsquare", 12, (1, 7, 5, 2), (2, 3, 2, 3), (2, 1), "same", (1, 1)),
            # Even 4x4 kernel, stride 2: H 5 -> 3 pads 1 top, 2 bottom.
            conv_case("same_stride2_kernel4", 13, (1, 5, 6, 2), (4, 4, 2, 2), (2, 2), "same", (1, 1)),
            conv_case("same_dilation2", 14, (1, 6, 7, 2), (3, 3, 2, 2), (1, 1), "same", (2, 2)),
            conv_case("valid_dilation21_stride2", 15, (2, 9, 8, 2), (2, 3, 2, 3), (2, 2), "valid", (2, 1)),
            conv_case("pointwise", 16, (2, 4, 3, 5), (1, 1, 5, 3), (1, 1), "same", (1, 1)),
            conv_case("pointwise_stride2", 17, (1, 5, 4, 3), (1, 1, 3, 2), (2, 2), "valid", (1, 1)),
        ],
        "max_pool2d": [
            pool_case("max", "valid_2x2_stride2", 20, (2, 4, 4, 3), (2, 2), (2, 2), "valid"),
            pool_case("max", "same_2x2_stride2_odd", 21, (1, 5, 5, 2), (2, 2), (2, 2), "same"),
            pool_case("max", "same_3x3_stride2", 22, (1, 5, 6, 2), (3, 3), (2, 2), "same"),
            pool_case("max", "valid_3x2_stride12_overlapping", 23, (2, 5, 6, 2), (3, 2), (1, 2), "valid"),
        ],
        "avg_pool2d": [
            pool_case("avg", "valid_2x3_stride12", 30, (1, 5, 5, 2), (2, 3), (1, 2), "valid"),
            pool_case("avg", "same_3x3_stride2", 31, (1, 5, 6, 2), (3, 3), (2, 2), "same"),
            pool_case("avg", "same_2x2_stride1", 32, (2, 4, 4, 3), (2, 2), (1, 1), "same"),
        ],
        "global_avg_pool2d": [global_avg_case("basic", 40, (2, 3, 4, 5))],
    }
    text = json.dumps(doc, separators=(",", ":"))
    args.out = os.path.normpath(args.out)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(f"wrote {args.out} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
