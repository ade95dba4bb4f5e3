"""One torch.optim.Adam step on N floats (default: ResNet50's 23,534,592 trainable parameters as one
tensor): milliseconds per step, best of R after a warm-up. The PyTorch side of bench/run_adam_bench.sh."""
import os
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 23534592
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 20
torch.set_num_threads(os.cpu_count())  # its best here: 2 threads beat its default of 1
i = torch.arange(n)
w = torch.nn.Parameter(0.01 * ((i % 1000) - 500).float())
g = 0.001 * ((i % 777) - 388).float()
opt = torch.optim.Adam([w], lr=0.001, betas=(0.9, 0.999), eps=1e-7)
w.grad = g
opt.step()
best = 1e30
for _ in range(repeats):
    t0 = time.perf_counter()
    opt.step()
    best = min(best, (time.perf_counter() - t0) * 1000)
print(f"PyTorch {torch.__version__} Adam ({torch.get_num_threads()} threads): {n} floats, best of {repeats}: "
      f"{best:.2f} ms per update")
