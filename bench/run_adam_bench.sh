#!/usr/bin/env bash
# One Adam update of ResNet50's 23,534,592 trainable parameters: keel (build/bench/adam_bench, on one
# thread and on all of them, as a one-core device's step runs it) beside PyTorch's torch.optim.Adam
# (all hardware threads), interleaved, ROUNDS rounds each.
# Usage: bench/run_adam_bench.sh [ROUNDS]   (needs a Release build with -DKEEL_BUILD_BENCH=ON)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS="${1:-3}"
cmake --build build -j"$(nproc)" --target adam_bench > /dev/null
for ((r = 1; r <= ROUNDS; r++)); do
  ./build/bench/adam_bench 23534592 20 1
  ./build/bench/adam_bench 23534592 20 "$(nproc)"
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_adam_bench.py
done
