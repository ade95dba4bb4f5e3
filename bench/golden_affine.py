#!/usr/bin/python3
"""Golden values for keel's affine_transform (datasets/image_ops.h), computed independently with PyTorch.

Run (from the repo root, with Debian's interpreter: python3-torch + python3-numpy):

    /usr/bin/python3 bench/golden_affine.py            # writes tests/golden/affine_transform.json
    /usr/bin/python3 bench/golden_affine.py --out PATH

keel follows keras.ops.image.affine_transform: the output pixel (x, y) reads the input point
((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k), k = c0 x + c1 y + 1, pixel centres at integers,
sampled bilinearly, with taps outside the image filled by the fill mode. torch.nn.functional.grid_sample
with align_corners=False samples the same way once the point is normalised to the grid's [-1, 1]
(g = (2 p + 1) / size - 1): padding_mode "reflection" reflects about the image's edges (Keras's
"reflect", d c b a | a b c d), "border" is Keras's "nearest" and "zeros" its "constant" with
fill_value 0. Everything is float64 here; inputs are float32 values from numpy RandomState, so keel's
float32 result is compared with an exact reference. Before writing, every case is cross-checked
against a direct per-pixel loop in numpy (four taps, each index reflected/clamped/dropped), so an
error in the grid normalisation cannot slip into the golden file.
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

MODES = {"reflect": "reflection", "nearest": "border", "constant": "zeros"}


def translation(dx, dy):
    return [1.0, 0.0, -dx, 0.0, 1.0, -dy, 0.0, 0.0]


def zoom(zx, zy, h, w):
    return [zx, 0.0, (w - 1.0) / 2.0 * (1.0 - zx), 0.0, zy, (h - 1.0) / 2.0 * (1.0 - zy), 0.0, 0.0]


def points(t, h, w):
    """The input point each output pixel reads, (h, w) arrays of x and y."""
    y, x = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    t = [np.float64(np.float32(v)) for v in t]  # keel holds the transform in float32
    k = t[6] * x + t[7] * y + 1.0
    return (t[0] * x + t[1] * y + t[2]) / k, (t[3] * x + t[4] * y + t[5]) / k


def torch_transform(image, t, mode):
    h, w, _ = image.shape
    px, py = points(t, h, w)
    grid = np.stack([(2.0 * px + 1.0) / w - 1.0, (2.0 * py + 1.0) / h - 1.0], axis=-1)[None]
    x = torch.from_numpy(image.astype(np.float64)).permute(2, 0, 1)[None]
    out = F.grid_sample(x, torch.from_numpy(grid), mode="bilinear", padding_mode=MODES[mode], align_corners=False)
    return out[0].permute(1, 2, 0).numpy()


def fix(i, size, mode):
    if 0 <= i < size:
        return i
    if mode == "constant":
        return None
    if mode == "nearest":
        return min(max(i, 0), size - 1)
    m = i % (2 * size)
    return m if m < size else 2 * size - 1 - m


def loop_transform(image, t, mode):
    h, w, c = image.shape
    px, py = points(t, h, w)
    out = np.zeros((h, w, c))
    for y in range(h):
        for x in range(w):
            fx, fy = np.floor(px[y, x]), np.floor(py[y, x])
            for iy, wy in ((int(fy), 1.0 - (py[y, x] - fy)), (int(fy) + 1, py[y, x] - fy)):
                for ix, wx in ((int(fx), 1.0 - (px[y, x] - fx)), (int(fx) + 1, px[y, x] - fx)):
                    jy, jx = fix(iy, h, mode), fix(ix, w, mode)
                    if jy is not None and jx is not None:
                        out[y, x] += wy * wx * image[jy, jx]
    return out


def cases():
    rng = np.random.RandomState(14)
    for h, w, c in ((5, 7, 2), (8, 8, 1), (32, 32, 1)):
        transforms = {
            "translate_fraction": translation(1.3, -2.6),
            "translate_far": translation(-0.9 * w, 0.7 * h),
            "zoom_out": zoom(1.4, 1.25, h, w),
            "zoom_in": zoom(0.6, 0.75, h, w),
            "rotate_shear": [0.9, -0.3, 1.1, 0.35, 1.05, -0.8, 0.0, 0.0],
            "projective": [1.0, 0.1, -0.5, -0.05, 0.95, 0.7, 0.01, -0.02],
        }
        if h == 32:  # the CLI's size, for the layers' own transforms only (keeps the file small)
            transforms = {k: transforms[k] for k in ("translate_fraction", "zoom_out", "zoom_in")}
        image = rng.uniform(-1.0, 1.0, size=(h, w, c)).astype(np.float32)
        for name, t in transforms.items():
            for mode in MODES:
                yield f"{h}x{w}x{c}", image, f"{h}x{w}x{c}_{name}_{mode}", t, mode


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "affine_transform.json"))
    args = parser.parse_args()
    out = {"generator": "bench/golden_affine.py (torch grid_sample, align_corners=False, float64)", "images": {},
           "cases": []}
    for image_name, image, name, t, mode in cases():
        out["images"][image_name] = {"shape": list(image.shape), "values": [float(v) for v in image.ravel()]}
        want = torch_transform(image, t, mode)
        check = loop_transform(image, t, mode)
        assert np.allclose(want, check, atol=1e-6), f"{name}: torch and the loop disagree by {np.abs(want - check).max()}"
        out["cases"].append({
            "name": name, "image": image_name, "fill_mode": mode, "transform": [float(np.float32(v)) for v in t],
            "output": {"shape": list(want.shape), "values": [float(f"{v:.10g}") for v in want.ravel()]},
        })
    with open(args.out, "w") as f:
        json.dump(out, f)
    print(f"wrote {len(out['cases'])} cases to {args.out}")


if __name__ == "__main__":
    main()
