#!/usr/bin/env bash
# keel beside PyTorch on this machine, in one run, each side in its best configuration (issue 13):
#   bench/run_all.sh                     every workload on 1 thread and on all of them
#   bench/run_all.sh --threads 1,2,4,8   thread scaling: every workload on each of these thread counts
# Workloads: the seed's MLP on Fashion-MNIST (global batch 128, Adam; samples/s over the epochs after
# the first), keel on `cpu` (1 core x 128) and on `v3-8` (8 cores x 16); ResNet50 (keras.applications
# v1, 10 classes, synthetic data, Adam on both sides) training at 32x32 batch 32 and 224x224 batch 8
# and inference at 224x224 batch 8, keel on `cpu` (one replica, its kernels on the thread pool) and on
# `custom:T` (T replicas, one per thread). PyTorch is Debian's python3-torch with OpenBLAS
# (installed here if missing), OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset for its commands, on
# torch.set_num_threads(T), for the MLP also with torch.set_flush_denormal(True) (config `flush`: subnormals
# zero, as keel computes them). Repeats are interleaved (every configuration once, then again), the best
# of them counts, and each side's best thread count is what its ratio uses. keel's `custom:T` against
# `cpu` is one process running both in turns (each turn an untimed step, then one timed step, at
# 32x32 three), and its ratio the median over every round of every repeat of the two sides' step
# times' ratio: as separate runs, training at 224x224 gave 0.94 and 0.85 in two runs of this script
# on one build (2026-11-30).
# Writes a Markdown report to stdout and the numbers to $JSON: per run the throughput, the achieved
# GFLOP/s (analytic FLOPs: 2 x multiply-adds, x3 for a training step) and the fraction of this
# machine's fp32 FMA peak (bench/fma_peak, best of 3, per core x the threads the run used).
# Environment: REPEATS (3; a 2-core virtual machine moves 10-30% between minutes), EPOCHS (MLP, 3),
#   STEPS_32 (10), STEPS_224 (4), BUILD_DIR (build), JSON (bench_results.json in the current
#   directory), RUNS_DIR (keep each run's JSON lines there rather than in a temporary folder). About
#   10 minutes on 2 cores.
# On a machine without Debian's packages (the lent device machine): BIN names a folder holding
#   mlp_throughput, resnet_bench and fma_peak (bench/pack_for_device.sh here, `source
#   bench/device_env.sh` there: BIN=/tmp/keel-carry) and TORCH_PYTHON the interpreter that has
#   PyTorch; nothing is installed or built then.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JSON="$(realpath -m "${JSON:-bench_results.json}")"
cd "$ROOT"
REPEATS="${REPEATS:-3}"
EPOCHS="${EPOCHS:-3}"
STEPS_32="${STEPS_32:-10}"
STEPS_224="${STEPS_224:-4}"
BUILD="${BUILD_DIR:-build}"
CORES="$(nproc)"
THREADS="1,$CORES"
[[ $CORES -eq 1 ]] && THREADS="1"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) THREADS="${2:?--threads needs a list such as 1,2,4}"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run_all: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $THREADS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "run_all: --threads takes counts such as 1,2,4" >&2; exit 2; }
IFS=',' read -r -a THREAD_COUNTS <<<"$THREADS"

if [[ -n "${BIN:-}" ]]; then
  BENCH="$BIN"
  torch_at_its_best() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "${TORCH_PYTHON:-python3}" "$@"; }
else
  # shellcheck source=bench/torch_deps.sh
  source bench/torch_deps.sh
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
  fi
  cmake --build "$BUILD" -j"$CORES" --target mlp_throughput resnet_bench fma_peak >/dev/null
  BENCH="$BUILD/bench"
fi

if [[ -n "${RUNS_DIR:-}" ]]; then
  OUT="$RUNS_DIR"
  mkdir -p "$OUT" && rm -f "$OUT"/*.jsonl
else
  OUT="$(mktemp -d)"
  trap 'rm -rf "$OUT"' EXIT
fi
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
for _ in 1 2 3; do "$BENCH"/fma_peak >>"$OUT/peak.jsonl"; done

# One line per run: workload side config threads, then the command; its JSON line goes to a file
# named after the first four fields.
runs=()
for t in "${THREAD_COUNTS[@]}"; do
  runs+=("mlp keel cpu $t|KEEL_NUM_THREADS=$t $BENCH/mlp_throughput --device cpu --batch-per-core 128 --epochs $EPOCHS")
  runs+=("mlp keel v3-8 $t|KEEL_NUM_THREADS=$t $BENCH/mlp_throughput --device v3-8 --batch-per-core 16 --epochs $EPOCHS")
  runs+=("mlp pytorch - $t|torch_at_its_best bench/torch_mlp_bench.py --batch 128 --epochs $EPOCHS --threads $t")
  runs+=("mlp pytorch flush $t|torch_at_its_best bench/torch_mlp_bench.py --batch 128 --epochs $EPOCHS --threads $t --flush-denormal")
  for w in "train32 train 32 32 $STEPS_32 3" "train224 train 224 8 $STEPS_224 1" "infer224 infer 224 8 $STEPS_224 1"; do
    read -r name mode image batch steps round_steps <<<"$w"
    common="--image $image --batch $batch --steps $steps"
    [[ $mode == train ]] && common+=" --optimizer adam"
    runs+=("$name keel cpu $t|$BENCH/resnet_bench $mode --device cpu --threads $t $common")
    # T replicas where each gets at least one image of the global batch, against `cpu` in the same
    # process, their steps in turns (rounds of round_steps steps each): the ratio of the two.
    [[ $t -gt 1 && $t -le $batch ]] && runs+=("$name keel custom:$t $t|$BENCH/resnet_bench $mode --device custom:$t --threads $t $common --against cpu --round-steps $round_steps")
    runs+=("$name pytorch - $t|torch_at_its_best bench/torch_resnet_bench.py $mode --threads $t $common")
  done
done
for rep in $(seq "$REPEATS"); do
  for run in "${runs[@]}"; do
    key="${run%%|*}"
    echo "run_all: $key (repeat $rep of $REPEATS)" >&2
    # A run that fails is reported and left out; the others go on.
    (eval "${run#*|}") >>"$OUT/${key// /_}.jsonl" || echo "run_all: $key failed (exit $?)" >&2
  done
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 bench/run_all_report.py "$OUT" "$JSON" "$CORES" "$REPEATS" "$EPOCHS" "$LOAD_BEFORE" "$LOAD_AFTER"
echo "run_all: numbers in $JSON" >&2
