#!/usr/bin/python3
"""Golden reference values for keel's mixed_bfloat16 ops, computed independently with PyTorch's
torch.bfloat16 kernels.

Run (from the repo root, with Debian's interpreter: python3-torch 1.13 + python3-numpy):

    /usr/bin/python3 bench/golden_bfloat16.py            # writes tests/golden/bfloat16_small.json
    /usr/bin/python3 bench/golden_bfloat16.py --out PATH # somewhere else

Keras's mixed_bfloat16 semantics, as keel implements them (framework/ops/precision.h), expressed
with torch's own bfloat16 tensors:

    matmul, conv2d   inputs and weights cast to bfloat16 (.bfloat16(): round to nearest even), the
                     product in torch's bfloat16 kernel (float32 accumulation, one rounding)
    batch norm       Keras computes it in float32 on the bfloat16 input: x.float() -> F.batch_norm
                     (training, biased variance) -> .bfloat16()
    relu, add        torch's bfloat16 kernels
    a ResNet block   conv3x3 -> BN -> relu -> conv3x3 -> BN -> + x -> relu, each op as above

Every case stores its float32 inputs (from numpy RandomState(seed), not bfloat16 values, so the
rounding of inputs is exercised), an upstream gradient dy whose values are bfloat16 numbers, the
output y (bfloat16 values) and the gradients of sum(y * dy) with respect to every input as torch's
autograd computes them in bfloat16. keel keeps gradients in float32, so its gradients agree to
bfloat16's precision, and its outputs to within one bfloat16 step (accumulation order). Layouts are
TensorFlow's (NHWC images, HWIO kernels); torch runs NCHW/OIHW.
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

EPS = 1e-3  # keel's BatchNormalization epsilon (Keras's default)


def f32(rs, shape, lo=-1.0, hi=1.0):
    return rs.uniform(lo, hi, size=shape).astype(np.float32)


def bf16_values(rs, shape):
    """float32 numbers that are exactly bfloat16 (for dy, so that torch's cast of it is exact)."""
    return torch.tensor(f32(rs, shape)).bfloat16().float().numpy()


def tensor_json(t):
    a = t.detach().float().numpy().astype(np.float64)
    return {"shape": list(a.shape), "values": [float(f"{v:.9g}") for v in a.reshape(-1)]}


def nchw(t):
    return t.permute(0, 3, 1, 2)


def nhwc(t):
    return t.permute(0, 2, 3, 1)


def conv_same(x, k, stride):
    """TensorFlow's SAME (extra row/column at the bottom/right) or VALID padding, NHWC x, HWIO k."""
    kh, kw = k.shape[0], k.shape[1]
    h, w = x.shape[1], x.shape[2]
    oh, ow = -(-h // stride), -(-w // stride)
    ph, pw = max((oh - 1) * stride + kh - h, 0), max((ow - 1) * stride + kw - w, 0)
    xt = F.pad(nchw(x), (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))
    return nhwc(F.conv2d(xt, k.permute(3, 2, 0, 1), stride=stride))


def conv_valid(x, k, stride):
    return nhwc(F.conv2d(nchw(x), k.permute(3, 2, 0, 1), stride=stride))


def batch_norm(x, gamma, beta):
    """Keras's mixed-precision batch norm: float32 arithmetic on the bfloat16 input, bfloat16 out."""
    c = x.shape[-1]
    y = F.batch_norm(x.float().reshape(-1, c), None, None, gamma, beta, training=True, eps=EPS)
    return y.reshape(x.shape).bfloat16()


def leaves(arrays):
    return [torch.tensor(a, requires_grad=True) for a in arrays]


def finish(name, inputs, input_names, y, rs):
    dy = torch.tensor(bf16_values(rs, tuple(y.shape))).bfloat16()
    (y * dy).float().sum().backward()
    case = {"name": name, "y": tensor_json(y), "dy": tensor_json(dy)}
    for t, n in zip(inputs, input_names):
        case[n] = tensor_json(t)
        case["d" + n] = tensor_json(t.grad)
    return case


def matmul_case(seed):
    rs = np.random.RandomState(seed)
    a, b = leaves([f32(rs, (6, 9)), f32(rs, (9, 5))])
    y = a.bfloat16() @ b.bfloat16()
    return finish("matmul", [a, b], ["a", "b"], y, rs)


def conv_case(name, seed, x_shape, k_shape, stride, padding):
    rs = np.random.RandomState(seed)
    x, k = leaves([f32(rs, x_shape), f32(rs, k_shape)])
    conv = conv_same if padding == "same" else conv_valid
    y = conv(x.bfloat16(), k.bfloat16(), stride)
    case = finish(name, [x, k], ["x", "kernel"], y, rs)
    case.update({"stride": stride, "padding": padding})
    return case


def batch_norm_case(seed):
    rs = np.random.RandomState(seed)
    x, gamma, beta = leaves([f32(rs, (2, 3, 3, 4), -2.0, 3.0), f32(rs, (4,), 0.5, 1.5), f32(rs, (4,))])
    y = batch_norm(x.bfloat16(), gamma, beta)
    return finish("batch_norm", [x, gamma, beta], ["x", "gamma", "beta"], y, rs)


def block_case(seed):
    """A ResNet basic block with an identity shortcut on a bfloat16 input (the previous block's)."""
    rs = np.random.RandomState(seed)
    x, k1, g1, b1, k2, g2, b2 = leaves([f32(rs, (2, 4, 4, 3)), f32(rs, (3, 3, 3, 3), -0.5, 0.5), f32(rs, (3,), 0.5, 1.5),
                                        f32(rs, (3,)), f32(rs, (3, 3, 3, 3), -0.5, 0.5), f32(rs, (3,), 0.5, 1.5),
                                        f32(rs, (3,))])
    xb = x.bfloat16()
    h = torch.relu(batch_norm(conv_same(xb, k1.bfloat16(), 1), g1, b1))
    h = batch_norm(conv_same(h, k2.bfloat16(), 1), g2, b2)
    y = torch.relu(h + xb)
    names = ["x", "kernel1", "gamma1", "beta1", "kernel2", "gamma2", "beta2"]
    return finish("resnet_block", [x, k1, g1, b1, k2, g2, b2], names, y, rs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden",
                                                      "bfloat16_small.json"))
    args = parser.parse_args()
    torch.manual_seed(0)
    cases = [matmul_case(1),
             conv_case("conv_same", 2, (2, 5, 5, 3), (3, 3, 3, 4), 1, "same"),
             conv_case("conv_valid_stride2", 3, (2, 7, 6, 2), (3, 3, 2, 5), 2, "valid"),
             batch_norm_case(4),
             block_case(5)]
    golden = {"generator": "bench/golden_bfloat16.py", "torch": torch.__version__, "epsilon": EPS,
              "cases": {c["name"]: c for c in cases}}
    with open(args.out, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}: {', '.join(c['name'] for c in cases)}")


if __name__ == "__main__":
    main()
