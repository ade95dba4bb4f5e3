#!/usr/bin/env bash
# The MLP benchmark, keel beside PyTorch on this machine, in one run:
#   bench/run_mlp_bench.sh            (EPOCHS=1 by default)
# One epoch of the seed's MLP (784 -> Dense(128, relu) -> Dense(10, softmax)) on Fashion-MNIST at a
# global batch of 128 with Adam: keel on `cpu` (1 core x 128; 1 thread, and every thread for its
# kernels) and on `v3-8` (8 cores x 16), PyTorch
# (Debian's python3-torch) with the same batch and optimizer. Prints a Markdown table of samples/s
# and the ratios. PyTorch's matrix products go through libblas.so.3, so this script makes sure an
# optimised BLAS (OpenBLAS) is installed: timing PyTorch on the reference BLAS would flatter keel.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
EPOCHS="${EPOCHS:-1}"
REPEATS="${REPEATS:-3}"

# shellcheck source=bench/torch_deps.sh
source bench/torch_deps.sh
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j"$(nproc)" --target mlp_throughput >/dev/null

# Best of REPEATS runs for each, interleaved, so a passing disturbance does not decide the ratios.
best() { python3 -c 'import json,sys; print(max(json.loads(l)["samples_per_sec"] for l in sys.stdin if l.strip()))'; }
keel_cpu=""; keel_cpu1=""; keel_v3=""; torch=""; torch1=""
for _ in $(seq "$REPEATS"); do
  keel_cpu+="$(./build/bench/mlp_throughput --device cpu --batch-per-core 128 --epochs "$EPOCHS")"$'\n'
  keel_cpu1+="$(KEEL_NUM_THREADS=1 ./build/bench/mlp_throughput --device cpu --batch-per-core 128 --epochs "$EPOCHS")"$'\n'
  keel_v3+="$(./build/bench/mlp_throughput --device v3-8 --batch-per-core 16 --epochs "$EPOCHS")"$'\n'
  torch+="$(torch_at_its_best bench/torch_mlp_bench.py --batch 128 --epochs "$EPOCHS")"$'\n'
  torch1+="$(torch_at_its_best bench/torch_mlp_bench.py --batch 128 --epochs "$EPOCHS" --threads 1)"$'\n'
done
kc=$(printf '%s' "$keel_cpu" | best); kc1=$(printf '%s' "$keel_cpu1" | best); kv=$(printf '%s' "$keel_v3" | best); tp=$(printf '%s' "$torch" | best); t1=$(printf '%s' "$torch1" | best)
threads=$(nproc)
python3 - "$kc" "$kv" "$tp" "$threads" "$t1" "$kc1" <<'PY'
import sys
kc, kv, tp, threads, t1 = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
kc1 = float(sys.argv[6])
ref = max(tp, t1)  # the faster PyTorch configuration is the one to beat
print("| run (MLP, Fashion-MNIST, global batch 128, Adam, 1 epoch) | samples/s | vs faster PyTorch |")
print("| --- | ---: | ---: |")
print(f"| PyTorch, {threads} threads (python3-torch + OpenBLAS) | {tp:,.0f} | {tp / ref:.2f} |")
print(f"| PyTorch, 1 thread | {t1:,.0f} | {t1 / ref:.2f} |")
print(f"| keel `cpu` (1 core x 128), 1 thread | {kc1:,.0f} | {kc1 / ref:.2f} |")
print(f"| keel `cpu` (1 core x 128), {threads} threads | {kc:,.0f} | {kc / ref:.2f} |")
print(f"| keel `v3-8` (8 cores x 16) | {kv:,.0f} | {kv / ref:.2f} |")
print(f"\nkeel v3-8 / keel cpu = {kv / kc:.2f}")
PY
