#!/usr/bin/python3
"""PyTorch side of keel's MLP benchmark (Fashion-MNIST, Dense(128, relu) -> Dense(10)).

Run with Debian's interpreter (python3-torch, python3-numpy, dataset-fashion-mnist):

    /usr/bin/python3 bench/torch_mlp_bench.py [--batch 128] [--epochs 1] [--threads N] [--seed 0] [--flush-denormal]

Loads the real 60k/10k Fashion-MNIST from /usr/share/datasets/fashion-mnist (gzip'd IDX, read with
gzip + numpy; pixels / 255 as float32, flattened to 784), trains Linear(784,128) + ReLU +
Linear(128,10) with cross-entropy on the logits and torch.optim.Adam(lr=1e-3, eps=1e-7) (Keras's
defaults; torch's epsilon placement differs slightly from Keras's, which does not matter for
throughput), shuffling every epoch and dropping the last partial batch. Only the training epochs
are timed (not loading, not evaluation). Prints one JSON line:

    {"framework": "pytorch", "samples_per_sec": ..., "steady_samples_per_sec": ..., "epoch_seconds": ..., "final_loss": ...,
     "test_accuracy": ..., "threads": N, "torch_version": ...}

samples_per_sec = trained samples / timed seconds over all epochs; steady_samples_per_sec = the same
over the epochs after the first (the one epoch if there is one); epoch_seconds = the mean time of
one epoch; final_loss = the mean training loss over the last epoch (what Keras's progress bar shows
at the end of an epoch); test_accuracy = accuracy on the 10k test images after training.

--flush-denormal: torch.set_flush_denormal(True) first, so that subnormal floats are zero, as keel
and TensorFlow compute (framework/core/float_environment.h); PyTorch keeps them by default, and an
x86 core takes a slow assist for each (Adam's moments of weights whose input pixel is rarely lit).

Caveat when comparing: Debian's python3-torch is built with BLAS_INFO=generic, so its matrix
products go through whatever libblas.so.3 the alternatives system selects — the slow reference
BLAS unless an optimised one (e.g. libopenblas0) is installed. Check with
`python3 -c "import torch; print(torch.__config__.show())"` and
`update-alternatives --display libblas.so.3-x86_64-linux-gnu`.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic >> 8 != 0x08:  # unsigned byte payload
        raise ValueError(f"{path}: unexpected IDX magic {magic:#x}")
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(split, data_dir):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def main():
    ap = argparse.ArgumentParser(description="PyTorch Fashion-MNIST MLP training benchmark")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--flush-denormal", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    if args.flush_denormal and not torch.set_flush_denormal(True):
        raise SystemExit("torch_mlp_bench: this CPU cannot flush subnormals (torch.set_flush_denormal)")
    torch.manual_seed(args.seed)
    x_train, y_train = load("train", args.data_dir)
    x_test, y_test = load("test", args.data_dir)

    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(args.seed)

    steps = len(x_train) // args.batch
    timed = 0.0
    epoch_times = []
    final_loss = float("nan")
    model.train()
    for _ in range(args.epochs):
        start = time.perf_counter()
        perm = torch.randperm(len(x_train), generator=generator)
        total = torch.zeros(())
        for s in range(steps):
            idx = perm[s * args.batch:(s + 1) * args.batch]
            xb, yb = x_train[idx], y_train[idx]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        epoch_times.append(time.perf_counter() - start)
        timed += epoch_times[-1]
        final_loss = total.item() / steps

    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).double().mean().item()

    print(json.dumps({
        "framework": "pytorch",
        "samples_per_sec": round(steps * args.batch * args.epochs / timed, 1),
        # The epochs after the first (start-up left out), or the one epoch.
        "steady_samples_per_sec": round(steps * args.batch * max(len(epoch_times) - 1, 1) /
                                        sum(epoch_times[1:] if len(epoch_times) > 1 else epoch_times), 1),
        "epoch_seconds": round(timed / args.epochs, 4),
        "final_loss": round(final_loss, 6),
        "test_accuracy": round(accuracy, 4),
        "threads": args.threads,
        "flush_denormal": args.flush_denormal,
        "torch_version": torch.__version__,
    }))


if __name__ == "__main__":
    main()
