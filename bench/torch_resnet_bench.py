#!/usr/bin/python3
"""PyTorch side of keel's ResNet50 benchmark (bench/run_resnet_bench.sh runs it beside keel).

Run with Debian's interpreter (python3-torch 1.13):

    /usr/bin/python3 bench/torch_resnet_bench.py train  --image 32  --batch 32 [--steps 5] [--threads N]
    /usr/bin/python3 bench/torch_resnet_bench.py infer  --image 224 --batch 8  [--steps 3] [--threads N]
    /usr/bin/python3 bench/torch_resnet_bench.py memory --image 224 --batch 8 [--explicit-pad]

The model is keras.applications.ResNet50 (v1), written out here because torchvision's resnet50 is
not it: torchvision (v1.5) puts each stage's stride on the 3x3 convolution, Keras on the first 1x1
(of both the main path and the projection shortcut), which changes every first block's activation
sizes. As in Keras: conv biases, BatchNorm(eps=1.001e-5, Keras momentum 0.99 = torch 0.01), a
projection shortcut on every stage's first block, 10 classes. NCHW, float32. The stem's padding
is the convolution's and the pool's own (padding=3, padding=1: the same function as Keras's
ZeroPadding2D + VALID, since the pool's input is a ReLU output >= 0); --explicit-pad uses separate
ZeroPad2d layers as Keras does.

train: SGD(lr=0.01, momentum=0.9), or with --optimizer adam Adam(lr=1e-3, eps=1e-7), cross-entropy on the logits (Keras: softmax + sparse
cross-entropy; the same function), synthetic data; one warm-up step, then --steps timed steps.
infer: model.eval() under torch.no_grad(); one warm-up, then --steps timed forward passes.
memory: one training-mode forward + loss under torch.autograd.graph.saved_tensors_hooks; the pack
hook records the storage (data_ptr, nbytes) of every tensor saved for backward, each storage once.
Parameters and buffers (BatchNorm's running statistics) are excluded, as keel's `activations`
category excludes them; the input batch, which conv1 saves, is included and also reported alone.
Prints one JSON line.
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BN_EPS = 1.001e-5
BN_MOMENTUM = 0.01  # Keras momentum 0.99
CLASSES = 10


def bn(channels):
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


class Bottleneck(nn.Module):
    """Keras's block1: 1x1 (stride here), 3x3, 1x1 with 4x filters; projection when conv_shortcut."""

    def __init__(self, in_channels, filters, stride, conv_shortcut):
        super().__init__()
        self.shortcut = None
        if conv_shortcut:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, 4 * filters, 1, stride=stride), bn(4 * filters))
        self.conv1 = nn.Conv2d(in_channels, filters, 1, stride=stride)
        self.bn1 = bn(filters)
        self.conv2 = nn.Conv2d(filters, filters, 3, padding=1)
        self.bn2 = bn(filters)
        self.conv3 = nn.Conv2d(filters, 4 * filters, 1)
        self.bn3 = bn(4 * filters)

    def forward(self, x):
        shortcut = x if self.shortcut is None else self.shortcut(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(shortcut + y)


class ResNet50V1(nn.Module):
    def __init__(self, classes=CLASSES, explicit_pad=False):
        super().__init__()
        if explicit_pad:  # Keras's layers one for one: conv1_pad, VALID conv, pool1_pad, VALID pool
            self.stem = nn.Sequential(nn.ZeroPad2d(3), nn.Conv2d(3, 64, 7, stride=2), bn(64), nn.ReLU(),
                                      nn.ZeroPad2d(1), nn.MaxPool2d(3, stride=2))
        else:
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3), bn(64), nn.ReLU(),
                                      nn.MaxPool2d(3, stride=2, padding=1))
        blocks = []
        channels = 64
        for stage, (filters, count) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
            for b in range(count):
                stride = (1 if stage == 0 else 2) if b == 0 else 1
                blocks.append(Bottleneck(channels, filters, stride, conv_shortcut=(b == 0)))
                channels = 4 * filters
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def forward_flops_per_image(model, image):
    """2 x the multiply-adds of every Conv2d and Linear (as keel's resnet_bench counts them)."""
    macs = 0

    def conv_hook(module, inputs, output):
        nonlocal macs
        k = module.weight
        macs += output.shape[2] * output.shape[3] * k.shape[0] * k.shape[1] * k.shape[2] * k.shape[3]

    def linear_hook(module, inputs, output):
        nonlocal macs
        macs += module.weight.numel()

    handles = [m.register_forward_hook(conv_hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    handles += [m.register_forward_hook(linear_hook) for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        model.eval()
        model(torch.zeros(1, 3, image, image))
    for h in handles:
        h.remove()
    return 2.0 * macs


def storage_of(t):
    """(data_ptr, nbytes) of a tensor's storage: untyped_storage() from torch 2.0, storage() in 1.13."""
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return st.data_ptr(), st.nbytes()


def synthetic(batch, image):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(batch, 3, image, image, generator=g)
    y = torch.arange(batch) % CLASSES
    return x, y


def run_memory(args):
    model = ResNet50V1(explicit_pad=args.explicit_pad)
    model.train()
    x, y = synthetic(args.batch, args.image)
    parameter_ptrs = {storage_of(p)[0] for p in model.parameters()} | {storage_of(b)[0] for b in model.buffers()}
    input_ptr = storage_of(x)[0]
    saved = {}  # data_ptr -> (nbytes, dtype)
    kept = []   # the packed tensors, so no saved storage is freed (and its address reused) meanwhile

    def pack(t):
        ptr, nbytes = storage_of(t)
        saved[ptr] = (max(nbytes, saved.get(ptr, (0, None))[0]), str(t.dtype))
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(x), y)
    parameters = sum(n for p, (n, _) in saved.items() if p in parameter_ptrs)
    activations = {p: v for p, v in saved.items() if p not in parameter_ptrs}
    by_dtype = {}
    for n, dtype in activations.values():
        by_dtype[dtype] = by_dtype.get(dtype, 0) + n
    print(json.dumps({
        "framework": "pytorch", "mode": "memory", "image": args.image, "batch": args.batch,
        "explicit_pad": args.explicit_pad,
        "saved_bytes_excluding_parameters": sum(n for n, _ in activations.values()),
        "saved_storages_excluding_parameters": len(activations),
        "saved_input_bytes": activations.get(input_ptr, (0, None))[0],
        "saved_parameter_and_buffer_bytes_excluded": parameters,
        "saved_by_dtype": by_dtype,
        "loss": round(loss.item(), 4),
        "torch_version": torch.__version__,
    }))


def run_timed(args):
    model = ResNet50V1()
    x, y = synthetic(args.batch, args.image)
    flops = forward_flops_per_image(model, args.image) * (3 if args.mode == "train" else 1)
    if args.mode == "train":
        model.train()
        if args.optimizer == "adam":  # Keras's defaults; torch 1.13 picks its per-tensor loop on CPU
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
        else:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step():
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    else:
        model.eval()

        def step():
            with torch.no_grad():
                model(x)
    step()  # warm-up
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    total = sum(seconds)
    images_per_sec = args.batch * args.steps / total
    print(json.dumps({
        "framework": "pytorch", "mode": args.mode, "optimizer": args.optimizer, "threads": args.threads,
        "image": args.image,
        "batch": args.batch, "steps": args.steps, "images_per_sec": round(images_per_sec, 3),
        "mean_step_seconds": round(total / args.steps, 4), "best_step_seconds": round(min(seconds), 4),
        "gflop_per_image": round(flops * 1e-9, 4), "gflops": round(flops * images_per_sec * 1e-9, 2),
        "torch_version": torch.__version__,
    }))


def main():
    ap = argparse.ArgumentParser(description="PyTorch ResNet50 (Keras v1) benchmark")
    ap.add_argument("mode", choices=["train", "infer", "memory"])
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--explicit-pad", action="store_true")
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.mode == "memory":
        run_memory(args)
    else:
        run_timed(args)


if __name__ == "__main__":
    main()
