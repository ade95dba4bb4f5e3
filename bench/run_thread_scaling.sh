#!/usr/bin/env bash
# Thread scaling of one replica (the `cpu` preset): its kernels on 1, 2, 4, ... threads of the process's
# pool (KEEL_NUM_THREADS), keel alone. Prints a Markdown table of images/s and the speed-up over one
# thread, for a ResNet50 training step at 32x32 batch 32 and at 224x224 batch 8 and for the seed's MLP
# (fit() epochs, batch 128), with the machine's FMA peak for scale.
#   bench/run_thread_scaling.sh                  (THREADS="1 2 4 ... nproc" STEPS_32=10 STEPS_224=3 REPEATS=2)
# On a machine without Debian's packages (the lent device), after bench/pack_for_device.sh here and
# `source bench/device_env.sh` there: BIN=/tmp/keel-carry bench/run_thread_scaling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-build/bench}"
CORES="$(nproc)"
if [[ -z "${THREADS:-}" ]]; then
  THREADS=1
  for ((t = 2; t < CORES; t *= 2)); do THREADS="$THREADS $t"; done
  [[ $CORES -gt 1 ]] && THREADS="$THREADS $CORES"
fi
STEPS_32="${STEPS_32:-10}"
STEPS_224="${STEPS_224:-3}"
REPEATS="${REPEATS:-2}"
field() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"; }
best() {  # best images/s (field $1) of REPEATS runs of the command
  local key="$1" b=0 v
  shift
  for ((r = 0; r < REPEATS; r++)); do
    v="$("$@" | field "$key")"
    b="$(awk -v a="$b" -v c="$v" 'BEGIN { print (c > a ? c : a) }')"
  done
  echo "$b"
}
peak="$("$BIN/fma_peak" --seconds 0.5 --threads 1 | field peak_gflops_per_core || true)"
echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $CORES hardware threads; FMA peak ${peak:-?} GFLOP/s per core"
echo
echo "| threads | ResNet50 train 32x32 b32 (img/s) | x | ResNet50 train 224x224 b8 (img/s) | x | MLP fit b128 (samples/s) | x |"
echo "|---|---|---|---|---|---|---|"
for t in $THREADS; do
  export KEEL_NUM_THREADS="$t"
  r32="$(best images_per_sec "$BIN/resnet_bench" train --device cpu --image 32 --batch 32 --steps "$STEPS_32")"
  r224="$(best images_per_sec "$BIN/resnet_bench" train --device cpu --image 224 --batch 8 --steps "$STEPS_224")"
  mlp="$(best samples_per_sec "$BIN/mlp_throughput" --device cpu --batch-per-core 128 --epochs 1)"
  [[ $t == 1 ]] && { b32="$r32"; b224="$r224"; bmlp="$mlp"; }
  awk -v t="$t" -v a="$r32" -v b="$r224" -v c="$mlp" -v a1="$b32" -v b1="$b224" -v c1="$bmlp" \
    'BEGIN { printf "| %d | %.1f | %.2f | %.2f | %.2f | %.0f | %.2f |\n", t, a, a / a1, b, b / b1, c, c / c1 }'
done
