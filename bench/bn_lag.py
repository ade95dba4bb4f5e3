#!/usr/bin/python3
"""Why do BatchNormalization's moving statistics lag? (issue 17) An independent PyTorch experiment.

The network is bench/golden_resnet.py's hand-written Keras ResNet18 (keras.applications' structure,
a bias on every conv, BN epsilon 1.001e-5), run in float32 torch on Fashion-MNIST resized to 32x32x1
(bilinear, half-pixel centres: keel's --input-shape 32x32x1). Two verbs:

    /usr/bin/python3 bench/bn_lag.py evaluate RUN_DIR_OR_CKPT.h5
        Loads a keel checkpoint's weights and moving statistics and reports test accuracy twice:
        inference mode (BN with the moving statistics, what `keel evaluate` does) and with each test
        batch's own statistics (--batch, default 32). Independent of keel's code.

    /usr/bin/python3 bench/bn_lag.py train [--steps 300] [--batch 32] [--seed 5] [--conv-bias keep|none]
                                           [--init glorot|kaiming] [--optimizer adam|sgd] [--lr 1e-3]
        Trains the same network here with Keras's rules (Adam: lr 1e-3, beta 0.9/0.999, epsilon 1e-7;
        moving -= (moving - batch_stat) * (1 - momentum), biased batch variance, momentum 0.99) and
        reports both accuracies after the run, plus how far each conv's bias moved. --conv-bias none
        removes the biases of the convs that a BatchNormalization follows (every conv in a ResNet);
        --init kaiming draws conv kernels as torchvision does (normal, std sqrt(2 / fan_out)).

Runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (see README: PyTorch at its best).
"""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_resnet as gr  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"
CFG = dict(gr.RESNET18, input_shape=[32, 32, 1], classes=10)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(DATA_DIR, f"{prefix}-images-idx3-ubyte.gz")).astype(np.float32) / np.float32(255)
    y = read_idx(os.path.join(DATA_DIR, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def adapt(images):
    """(N, 28, 28) in [0, 1] -> (N, 32, 32, 1) NHWC: bilinear, half-pixel centres (tf.image.resize)."""
    x = F.interpolate(images[:, None], size=(32, 32), mode="bilinear", align_corners=False)
    return x.permute(0, 2, 3, 1).contiguous()


def checkpoint_path(path):
    if os.path.isdir(path):
        with open(os.path.join(path, "latest")) as f:
            return os.path.join(path, f.read().strip())
    return path


def load_keel_weights(net, path):
    import h5py
    with h5py.File(checkpoint_path(path), "r") as f:
        g = f["model_weights"]
        for layer in g.attrs["layer_names"]:
            layer = layer.decode() if isinstance(layer, bytes) else layer
            for wname in g[layer].attrs["weight_names"]:
                wname = wname.decode() if isinstance(wname, bytes) else wname
                key = wname[:-2] if wname.endswith(":0") else wname
                if key not in net.params:
                    raise SystemExit(f"{path}: {key} is not a variable of the Keras ResNet18 built here")
                value = torch.tensor(np.asarray(g[layer][wname]), dtype=torch.float32)
                if tuple(value.shape) != tuple(net.params[key].shape):
                    raise SystemExit(f"{path}: {key} has shape {tuple(value.shape)}, expected {tuple(net.params[key].shape)}")
                net.params[key] = value


def accuracy(net, x, y, batch, batch_stats):
    """Test accuracy in inference mode (moving statistics) or with each batch's own statistics."""
    net.training = batch_stats
    correct = 0
    with torch.no_grad():
        for at in range(0, len(y), batch):
            logits = net.logits(adapt(x[at:at + batch]))
            correct += int((logits.argmax(dim=1) == y[at:at + batch]).sum())
    net.training = False
    return correct / len(y)


def new_net(args):
    torch.manual_seed(args.seed)
    net = gr.Net(CFG).build(torch.float32)
    for name in net.trainable:
        shape = list(net.params[name].shape)
        kind = name.rsplit("/", 1)[1]
        if kind == "kernel":
            if len(shape) == 4 and args.init == "kaiming":
                std = math.sqrt(2.0 / (shape[0] * shape[1] * shape[3]))
                net.params[name] = torch.randn(shape) * std
            else:
                fan_in = shape[0] * shape[1] * shape[2] if len(shape) == 4 else shape[0]
                fan_out = shape[0] * shape[1] * shape[3] if len(shape) == 4 else shape[1]
                limit = math.sqrt(6.0 / (fan_in + fan_out))
                net.params[name] = (torch.rand(shape) * 2 - 1) * limit
        else:
            net.params[name] = torch.ones(shape) if kind == "gamma" else torch.zeros(shape)
    for name in net.moving:
        net.params[name] = torch.ones_like(net.params[name]) if name.endswith("variance") else torch.zeros_like(
            net.params[name])
    return net


def train(args):
    net = new_net(args)
    if args.init_checkpoint:
        load_keel_weights(net, args.init_checkpoint)
    frozen = {n for n in net.trainable if args.conv_bias == "none" and n.endswith("_conv/bias")}
    for n in frozen:
        net.params[n] = torch.zeros_like(net.params[n])
    trainable = [n for n in net.trainable if n not in frozen]
    initial = {n: net.params[n].clone() for n in trainable}
    x, y = load_split("train")
    xt, yt = load_split("test")
    gen = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(y), generator=gen)
    m = {n: torch.zeros_like(net.params[n]) for n in trainable}
    v = {n: torch.zeros_like(net.params[n]) for n in trainable}
    b1, b2, eps, decay = 0.9, 0.999, 1e-7, 1.0 - args.momentum
    net.training = True
    start = time.time()
    for t in range(1, args.steps + 1):
        idx = order[((t - 1) * args.batch) % len(y):][:args.batch]
        net.batch_stats = {}
        _, loss, g = gr.loss_and_grads(net, adapt(x[idx]), F.one_hot(y[idx], 10).float())
        with torch.no_grad():
            if args.optimizer == "adam":
                alpha = args.lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                for n in trainable:
                    m[n] += (g[n] - m[n]) * (1 - b1)
                    v[n] += (g[n] * g[n] - v[n]) * (1 - b2)
                    net.params[n] = net.params[n] - alpha * m[n] / (torch.sqrt(v[n]) + eps)
            else:
                for n in trainable:
                    m[n] = 0.9 * m[n] - args.lr * g[n]
                    net.params[n] = net.params[n] + m[n]
            for bn, (mean, var) in net.batch_stats.items():
                for stat, value in (("moving_mean", mean), ("moving_variance", var)):
                    key = bn + "/" + stat
                    net.params[key] = net.params[key] - (net.params[key] - value) * decay
        if t % 50 == 0:
            print(f"step {t}: loss {loss.item():.4f} ({time.time() - start:.0f} s)", file=sys.stderr)
    net.training = False
    report(net, xt, yt, args.eval_batch)
    biases = [n for n in trainable if n.endswith("_conv/bias")]
    if biases:
        moved = [float((net.params[n] - initial[n]).abs().max()) for n in biases]
        print(f"conv biases: largest move {max(moved):.4f}, median {float(np.median(moved)):.4f} over {len(biases)} convs")
    kernels = [n for n in trainable if n.endswith("_conv/kernel")]
    rel = [float((net.params[n] - initial[n]).norm() / initial[n].norm()) for n in kernels]
    print(f"conv kernels: median relative change {float(np.median(rel)):.3f}")


def report(net, xt, yt, batch):
    moving = accuracy(net, xt, yt, batch, batch_stats=False)
    own = accuracy(net, xt, yt, batch, batch_stats=True)
    print(f"test accuracy: moving statistics {moving:.4f}, each batch's own statistics (batch {batch}) {own:.4f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    e = sub.add_parser("evaluate")
    e.add_argument("checkpoint")
    e.add_argument("--batch", type=int, default=32)
    t = sub.add_parser("train")
    t.add_argument("--steps", type=int, default=300)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--eval-batch", type=int, default=32)
    t.add_argument("--seed", type=int, default=5)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--momentum", type=float, default=0.99, help="BatchNormalization momentum (Keras's meaning)")
    t.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    t.add_argument("--conv-bias", choices=["keep", "none"], default="keep")
    t.add_argument("--init", choices=["glorot", "kaiming"], default="glorot")
    t.add_argument("--init-checkpoint", help="start from a keel checkpoint's weights")
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    if args.verb == "evaluate":
        net = gr.Net(CFG).build(torch.float32)
        load_keel_weights(net, args.checkpoint)
        xt, yt = load_split("test")
        report(net, xt, yt, args.batch)
    else:
        train(args)


if __name__ == "__main__":
    main()
