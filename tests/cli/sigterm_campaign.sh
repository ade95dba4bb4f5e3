#!/usr/bin/env bash
# SIGTERM campaign: starts `keel train` RUNS times, sends it SIGTERM at a random moment 0-2 s after its
# banner (mid-step, most of the time) and counts the runs that did not end as a preempted run should
# (exit 0, "Interrupted by signal" printed). A signal handled on a thread inside oneDNN's JIT sgemm
# corrupted the heap (tools/cli/signal_watch.h); this measures how often that shows.
#
# Usage: tests/cli/sigterm_campaign.sh KEEL_BINARY RUNS [SEED]
#   e.g. KEEL_NUM_THREADS=1 tests/cli/sigterm_campaign.sh build/keel 60
# Prints one line per failed run and a summary; exit status 0 when every run ended cleanly, else 1.
set -uo pipefail

KEEL=${1:?usage: sigterm_campaign.sh KEEL_BINARY RUNS [SEED]}
RUNS=${2:?usage: sigterm_campaign.sh KEEL_BINARY RUNS [SEED]}
RANDOM=${3:-1}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keel-sigterm-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

failed=0
for ((i = 1; i <= RUNS; ++i)); do
  rm -rf "$WORK/run"
  "$KEEL" train --model mlp --dataset fashion_mnist --device cpu --batch-per-core 128 --epochs 50 --seed 1 --quiet \
    --checkpoint-dir "$WORK/run" > "$WORK/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do grep -q 'global batch' "$WORK/log" && break; sleep 0.05; done
  sleep "$((RANDOM % 2)).$(printf '%02d' $((RANDOM % 100)))"
  kill -TERM "$pid"
  wait "$pid"
  status=$?
  if [[ $status -ne 0 ]] || ! grep -q 'Interrupted by signal' "$WORK/log"; then
    failed=$((failed + 1))
    echo "sigterm_campaign: run $i: exit $status: $(tail -c 200 "$WORK/log" | tr '\n' ' ')"
  fi
done
echo "sigterm_campaign: $failed of $RUNS runs did not end cleanly"
[[ $failed -eq 0 ]]
