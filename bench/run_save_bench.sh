#!/usr/bin/env bash
# The training loop's stall per checkpoint save, asynchronous (the default) against --sync-save, for
# ResNet50 (23.6 M parameters; a save holds the weights and Adam's m and v: 283 MB):
#   bench/run_save_bench.sh   (STEPS=60 EVERY=20 BATCH=16 REPEATS=2 BUILD_DIR=build by default; ~2 minutes on 2 cores)
# Each run is `keel train --model resnet50 --input-shape 32x32x3 --device cpu` for STEPS steps, saving
# every EVERY steps (and at the stop), into a fresh run directory on this machine's disk. `keel train`
# reports the training thread's time inside the saves ("training stalled X ms per save"): for
# --sync-save the snapshot and the whole write (HDF5, fsync, rename, `latest`); asynchronously the
# snapshot (a copy to host memory) and any wait for the save before it (none while a write takes
# less time than EVERY steps). The wall time of each whole
# run is printed beside it: the writer thread shares the cores with training, which the stall alone
# does not show. Runs alternate between the two modes; the best of REPEATS is reported.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STEPS="${STEPS:-60}"
EVERY="${EVERY:-20}"
BATCH="${BATCH:-16}"
REPEATS="${REPEATS:-2}"
BUILD="${BUILD_DIR:-build}"  # a Release build directory

if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD" -j"${BUILD_JOBS:-$(nproc)}" --target keel_cli >/dev/null

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# Prints "<stall ms per save> <of it waiting, ms> <saves> <snapshot> <wall s>" for one run.
one_run() {
  local mode="$1" run="$OUT/run-$1"
  rm -rf "$run"
  local flag=""
  [[ "$mode" == sync ]] && flag="--sync-save"
  local start end
  start="$(date +%s.%N)"
  "$BUILD"/keel train --model resnet50 --input-shape 32x32x3 --device cpu --batch-per-core "$BATCH" --epochs 1 \
    --seed 1 --stop-after-steps "$STEPS" --save-every-steps "$EVERY" --checkpoint-dir "$run" $flag >"$OUT/log-$mode"
  end="$(date +%s.%N)"
  local line
  line="$(grep '^Checkpoint saves:' "$OUT/log-$mode")"
  # "Checkpoint saves: 3, training stalled 2104.3 ms per save (synchronous, --sync-save; snapshot 269.77 MiB)"
  local saves stall snapshot
  saves="$(sed -E 's/^Checkpoint saves: ([0-9]+),.*/\1/' <<<"$line")"
  stall="$(sed -E 's/.*stalled ([0-9.]+) ms per save.*/\1/' <<<"$line")"
  snapshot="$(sed -E 's/.*snapshot ([0-9.]+ [KMG]?i?B).*/\1/' <<<"$line")"
  local waiting="-"
  grep -q 'ms of it waiting' <<<"$line" && waiting="$(sed -E 's/.*; ([0-9.]+) ms of it waiting.*/\1/' <<<"$line")"
  echo "$stall $waiting $saves $snapshot $(echo "$end - $start" | bc)"
  rm -rf "$run"
}

declare -A best_stall best_wait best_wall saves snapshot
for rep in $(seq "$REPEATS"); do
  for mode in async sync; do
    echo "run_save_bench: $mode (run $rep of $REPEATS)" >&2
    read -r stall waiting n snap_num snap_unit wall <<<"$(one_run "$mode")"
    echo "  $mode: stalled $stall ms per save (waiting for the save before: $waiting ms) over $n saves, run wall time ${wall}s" >&2
    saves[$mode]="$n"
    snapshot[$mode]="$snap_num $snap_unit"
    if [[ -z "${best_stall[$mode]:-}" ]] || (($(echo "$stall < ${best_stall[$mode]}" | bc))); then
      best_stall[$mode]="$stall"
      best_wait[$mode]="$waiting"
    fi
    if [[ -z "${best_wall[$mode]:-}" ]] || (($(echo "$wall < ${best_wall[$mode]}" | bc))); then best_wall[$mode]="$wall"; fi
  done
done

echo
echo "ResNet50 32x32x3, cpu, batch $BATCH, $STEPS steps, a save every $EVERY steps (${saves[sync]} saves of ${snapshot[sync]}), best of $REPEATS:"
printf '| saves | training stall per save | of it waiting for the save before | run wall time |\n| --- | ---: | ---: | ---: |\n'
printf '| asynchronous (default) | %s ms | %s ms | %.1f s |\n' "${best_stall[async]}" "${best_wait[async]}" "${best_wall[async]}"
printf '| synchronous (--sync-save) | %s ms | - | %.1f s |\n' "${best_stall[sync]}" "${best_wall[sync]}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
