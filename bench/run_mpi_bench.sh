#!/usr/bin/env bash
# The cost of crossing processes (issue 12): one slice of 2 hosts x 1 core, trained by one process
# running both cores and by `mpirun -np 2` (one core each), which give the same bits. Per-step time is
# the difference between a long and a short run over their difference in steps (start-up, data
# loading and the final save cancel out), best of REPEATS interleaved pairs; then the bytes each
# process sent and received per step over MPI, against the all-reduce's minimum 2 (P-1)/P x the
# gradients' bytes (keel prints both at the end of an mpirun run).
#
#   bench/run_mpi_bench.sh                     # MLP (global batch 128) and ResNet18 (global batch 32)
#   MODELS=mlp SHORT=20 LONG=820 REPEATS=3 NP=2 bench/run_mpi_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
KEEL="${KEEL:-build/keel}"
MPIRUN_BIN="${MPIRUN_BIN:-mpirun}"
MODELS="${MODELS:-mlp resnet18}"
REPEATS="${REPEATS:-3}"
NP="${NP:-2}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# MPIRUN_OPTIONS replaces the defaults below (oversubscribed, as on 2 cores; shared memory without
# the single-copy mechanism containers forbid; loopback).
read -r -a mpirun_options <<< "${MPIRUN_OPTIONS:---oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none --mca oob_tcp_if_include lo}"
MPIRUN=("$MPIRUN_BIN" -np "$NP" "${mpirun_options[@]}")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

seconds() {  # seconds <steps> <launcher...> : wall time of one run of <steps> steps
  local steps=$1; shift
  local dir="$work/run-$RANDOM$RANDOM" start end
  start=$(date +%s.%N)
  "$@" "$KEEL" train $ARGS --stop-after-steps "$steps" --checkpoint-dir "$dir" --quiet > "$work/last.out"
  end=$(date +%s.%N)
  rm -rf "$dir"
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.6f", b - a }'
}
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }

printf '| model | global batch | 1 process x %d cores, ms/step | %d processes x 1 core, ms/step | ratio | MPI bytes per process and step (sent / received) | all-reduce minimum |\n' "$NP" "$NP"
printf '|---|---|---|---|---|---|---|\n'
for model in $MODELS; do
  case "$model" in
    mlp) short=${SHORT:-20}; long=${LONG:-820}; batch=$((128 / NP)) ;;
    resnet18) short=${SHORT:-4}; long=${LONG:-24}; batch=$((32 / NP)) ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  ARGS="--model $model --dataset fashion_mnist --hosts $NP --cores $NP --hbm-per-core 4GiB --batch-per-core $batch --epochs 3 --seed 1"
  best_one=1e9; best_mpi=1e9
  for _ in $(seq "$REPEATS"); do
    one=$(calc "($(seconds "$long" env) - $(seconds "$short" env)) / ($long - $short) * 1000")
    mpi=$(calc "($(seconds "$long" "${MPIRUN[@]}") - $(seconds "$short" "${MPIRUN[@]}")) / ($long - $short) * 1000")
    best_one=$(calc "($one < $best_one) ? $one : $best_one")
    best_mpi=$(calc "($mpi < $best_mpi) ? $mpi : $best_mpi")
  done
  traffic=$(grep -m1 "process 0:" "$work/last.out" | sed 's/^ *process 0: //')
  minimum=$(grep -m1 "all-reduce minimum" "$work/last.out" | sed 's/.*all-reduce minimum \(.*\)):/\1/')
  printf '| %s | %d | %.2f | %.2f | %.2f | %s | %s |\n' "$model" $((batch * NP)) "$best_one" "$best_mpi" \
    "$(calc "$best_mpi / $best_one")" "$traffic" "$minimum"
done
