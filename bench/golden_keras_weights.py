#!/usr/bin/python3
"""Keras weight files for keel's loader tests, written by an independent writer: h5py, in the layouts
Keras 2 writes (model.save_weights: layers at the root; model.save: under /model_weights), with
weights trained by PyTorch on Fashion-MNIST and PyTorch's own test loss and accuracy beside them.

  golden_keras_weights.py mlp OUT_DIR
      The seed's MLP (784 -> Dense(128, relu) -> Dense(10, softmax)) trained one epoch (Adam, batch
      128, seed 1): OUT_DIR/keras_mlp_weights.h5 (save_weights layout, with a weightless "dropout"
      layer between the two, whose weight_names is numpy's empty float64 array as Keras writes it)
      and OUT_DIR/keras_mlp_weights.json. Committed under tests/golden/.
  golden_keras_weights.py resnet18 OUT_DIR [--steps N] [--test-samples M]
      keel's ResNet18 at 32x32x1 (Keras naming; bench/golden_resnet.py), N Adam steps of batch 32,
      its test accuracy over the first M test images (default all; `keel evaluate --steps` matches it):
      OUT_DIR/resnet18.h5 (model.save layout), OUT_DIR/resnet18_notop.h5 (save_weights layout,
      without avg_pool and predictions, as keras.applications' _notop files), OUT_DIR/resnet18.json.
      Made at test time (tests/cli/keras_weights_cli_test.cc): the file is 45 MB.

Run with Debian's python3 (python3-torch, python3-h5py, python3-numpy).
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bn_lag  # noqa: E402  (Fashion-MNIST reading, 28 -> 32 resizing, the Keras ResNet18 in PyTorch)
import golden_resnet as gr  # noqa: E402


def write_layers(group, layers):
    """layers: [(layer name, [(weight name, array)])] -> Keras's attributes and datasets under `group`."""
    group.attrs["layer_names"] = np.array([name.encode() for name, _ in layers])
    group.attrs["backend"] = "tensorflow"
    group.attrs["keras_version"] = "2.13.1"
    for name, weights in layers:
        g = group.create_group(name)
        # Keras: np.asarray([]) (float64) for a layer without weights, else an 'S' array.
        g.attrs["weight_names"] = (np.array([w.encode() for w, _ in weights]) if weights else np.asarray([]))
        for wname, value in weights:
            g.create_dataset(wname, data=np.asarray(value, dtype=np.float32))


def mlp(out_dir):
    torch.manual_seed(1)
    x, y = bn_lag.load_split("train")
    xt, yt = bn_lag.load_split("test")
    x, xt = x.reshape(-1, 784), xt.reshape(-1, 784)
    w1 = torch.nn.Linear(784, 128)
    w2 = torch.nn.Linear(128, 10)
    params = list(w1.parameters()) + list(w2.parameters())
    opt = torch.optim.Adam(params, lr=1e-3, eps=1e-7)
    order = torch.randperm(len(y))
    for at in range(0, len(y) - 127, 128):
        idx = order[at:at + 128]
        loss = F.cross_entropy(w2(F.relu(w1(x[idx]))), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits = w2(F.relu(w1(xt)))
        test_loss = float(F.cross_entropy(logits.double(), yt))
        accuracy = float((logits.argmax(1) == yt).double().mean())
    layers = [("dense", [("dense/kernel:0", w1.weight.detach().T.numpy()), ("dense/bias:0", w1.bias.detach().numpy())]),
              ("dropout", []),
              ("dense_1", [("dense_1/kernel:0", w2.weight.detach().T.numpy()), ("dense_1/bias:0", w2.bias.detach().numpy())])]
    with h5py.File(os.path.join(out_dir, "keras_mlp_weights.h5"), "w") as f:
        write_layers(f, layers)
    with open(os.path.join(out_dir, "keras_mlp_weights.json"), "w") as f:
        json.dump({"source": "bench/golden_keras_weights.py mlp", "test_loss": test_loss, "test_accuracy": accuracy,
                   "test_samples": len(yt)}, f, indent=1)
        f.write("\n")
    print(f"mlp: test loss {test_loss:.4f}, accuracy {accuracy:.4f}")


def keras_order(layers):
    """Keras's functional model orders layers by depth, ties by traversal (keras.applications' files
    show it: ResNet50's conv2_block1 holds 1_conv, 1_bn, 2_conv, 2_bn, 0_conv, 3_conv, 0_bn, 3_bn). In a
    basic block with a projection shortcut that is 1_conv, 1_bn, 0_conv, 2_conv, 0_bn, 2_bn; PyTorch's
    parameters come in creation order (0_conv, 0_bn, 1_conv, ...)."""
    rank = {"1_conv": 0, "1_bn": 1, "0_conv": 2, "2_conv": 3, "0_bn": 4, "2_bn": 5}
    out, block = [], []
    for layer in layers + [("end", [])]:
        name = layer[0]
        prefix = name.rsplit("_", 2)[0] if name.startswith("conv") and "_block" in name else None
        if block and (prefix is None or prefix != block[0][0].rsplit("_", 2)[0]):
            out += sorted(block, key=lambda l: rank["_".join(l[0].rsplit("_", 2)[1:])])
            block = []
        if prefix is not None:
            block.append(layer)
        elif name != "end":
            out.append(layer)
    return out


def resnet18_layers(net):
    """The Keras layers of the PyTorch ResNet18 in Keras's layer order, weights in Keras order."""
    layers = []
    for key, value in net.params.items():
        layer = key.rsplit("/", 1)[0]
        if not layers or layers[-1][0] != layer:
            layers.append((layer, []))
        layers[-1][1].append((key + ":0", value.detach().numpy()))
    return keras_order(layers)


def resnet18(out_dir, steps, test_samples):
    args = argparse.Namespace(seed=5, init="glorot")
    net = bn_lag.new_net(args)
    x, y = bn_lag.load_split("train")
    xt, yt = bn_lag.load_split("test")
    trainable = list(net.trainable)
    m = {n: torch.zeros_like(net.params[n]) for n in trainable}
    v = {n: torch.zeros_like(net.params[n]) for n in trainable}
    net.training = True
    for t in range(1, steps + 1):
        idx = torch.arange((t - 1) * 32, t * 32)
        net.batch_stats = {}
        _, _, g = gr.loss_and_grads(net, bn_lag.adapt(x[idx]), F.one_hot(y[idx], 10).float())
        with torch.no_grad():
            alpha = 1e-3 * (1 - 0.999 ** t) ** 0.5 / (1 - 0.9 ** t)
            for n in trainable:
                m[n] += (g[n] - m[n]) * 0.1
                v[n] += (g[n] * g[n] - v[n]) * 0.001
                net.params[n] = net.params[n] - alpha * m[n] / (torch.sqrt(v[n]) + 1e-7)
            for bn, (mean, var) in net.batch_stats.items():
                for stat, value in (("moving_mean", mean), ("moving_variance", var)):
                    key = bn + "/" + stat
                    net.params[key] = net.params[key] - (net.params[key] - value) * 0.5  # fast statistics
    net.training = False
    if test_samples:
        xt, yt = xt[:test_samples], yt[:test_samples]
    accuracy = bn_lag.accuracy(net, xt, yt, 500, batch_stats=False)
    layers = resnet18_layers(net)
    with h5py.File(os.path.join(out_dir, "resnet18.h5"), "w") as f:
        f.attrs["backend"] = "tensorflow"
        f.attrs["keras_version"] = "2.13.1"
        write_layers(f.create_group("model_weights"), layers)
    with h5py.File(os.path.join(out_dir, "resnet18_notop.h5"), "w") as f:
        write_layers(f, [layer for layer in layers if layer[0] != "predictions"])
    with open(os.path.join(out_dir, "resnet18.json"), "w") as f:
        json.dump({"steps": steps, "test_accuracy": accuracy, "test_samples": len(yt)}, f)
        f.write("\n")
    print(f"resnet18 ({steps} steps): test accuracy {accuracy:.4f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=["mlp", "resnet18"])
    p.add_argument("out_dir")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--test-samples", type=int, default=0, help="resnet18: evaluate the first N test images (0: all)")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    if a.model == "mlp":
        mlp(a.out_dir)
    else:
        resnet18(a.out_dir, a.steps, a.test_samples)


if __name__ == "__main__":
    main()
