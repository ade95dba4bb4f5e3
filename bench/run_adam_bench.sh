#!/usr/bin/env bash
# One Adam update of ResNet50's 23,534,592 trainable parameters: keel (build/bench/adam_bench, one
# thread) beside PyTorch's torch.optim.Adam (all hardware threads), interleaved, REPEATS rounds each.
# Usage: bench/run_adam_bench.sh [ROUNDS]   (needs a Release build with -DKEEL_BUILD_BENCH=ON)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS="${1:-3}"
cmake --build build -j"$(nproc)" --target adam_bench > /dev/null
for ((r = 1; r <= ROUNDS; r++)); do
  ./build/bench/adam_bench
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/torch_adam_bench.py
done
