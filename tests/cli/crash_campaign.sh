#!/usr/bin/env bash
# Crash campaign: SIGKILLs `keel train` / `keel resume` at random moments (inside saves too: the run
# saves every few steps, in the background) and checks that the run, resumed after every kill, ends
# with a final checkpoint holding bit for bit the weights, optimizer state and training state of a run
# never killed (read with h5py); that every checkpoint left verifies; and that no temporary file is
# left behind.
#
# Usage: tests/cli/crash_campaign.sh KEEL_BINARY KILLS [SEED]
#   CI runs a few kills (tests/CMakeLists.txt); README states a long run's result (>= 100 kills):
#   tests/cli/crash_campaign.sh build/keel 100
# Exit status 0 when every check passed; 1 otherwise, with the reason.
set -euo pipefail

KEEL=${1:?usage: crash_campaign.sh KEEL_BINARY KILLS [SEED]}
KILLS=${2:?usage: crash_campaign.sh KEEL_BINARY KILLS [SEED]}
RANDOM=${3:-1}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keel-crash-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# An epoch of 117 steps (batch 512 on one core), a save every 5 steps, 2 epochs.
RUN_FLAGS=(--model mlp --device cpu --batch-per-core 512 --epochs 2 --seed 7 --save-every-steps 5 --keep 2 --quiet)
FINAL=ckpt-234.h5

fail() { echo "crash_campaign: FAILED: $*" >&2; exit 1; }

"$KEEL" train "${RUN_FLAGS[@]}" --checkpoint-dir "$WORK/reference" > "$WORK/reference.log" 2>&1 \
  || fail "the reference run failed: $(tail -c 400 "$WORK/reference.log")"
[[ -f "$WORK/reference/$FINAL" ]] || fail "the reference run did not write $FINAL"

run="$WORK/run"
kills=0
started=0
while [[ $kills -lt $KILLS ]]; do
  if [[ $started -eq 0 ]]; then
    "$KEEL" train "${RUN_FLAGS[@]}" --checkpoint-dir "$run" > "$WORK/last.log" 2>&1 &
  else
    "$KEEL" resume "$run" --quiet > "$WORK/last.log" 2>&1 &
  fi
  pid=$!
  # 20 to 1200 ms: before the first checkpoint, inside training, inside saves.
  sleep "$(printf '0.%03d' $(( 20 + RANDOM % 980 )))"
  if kill -KILL "$pid" 2>/dev/null; then
    kills=$((kills + 1))
    wait "$pid" 2>/dev/null || true
  else
    wait "$pid" || fail "a run ended with status $? before its kill: $(tail -c 400 "$WORK/last.log")"
  fi
  # Until the first checkpoint exists, the next attempt is a fresh `train` (with --overwrite: a
  # killed attempt may have left its directory with a lock file but no checkpoint).
  if ls "$run"/ckpt-*.h5 > /dev/null 2>&1; then started=1; fi
  if [[ -f "$run/$FINAL" ]]; then break; fi
done

if [[ $started -eq 0 ]]; then
  "$KEEL" train "${RUN_FLAGS[@]}" --overwrite --checkpoint-dir "$run" > "$WORK/last.log" 2>&1 \
    || fail "the final train failed: $(tail -c 400 "$WORK/last.log")"
else
  "$KEEL" resume "$run" --quiet > "$WORK/last.log" 2>&1 || fail "the final resume failed: $(tail -c 400 "$WORK/last.log")"
fi
[[ -f "$run/$FINAL" ]] || fail "the killed run never reached $FINAL"
# Every weight, optimizer slot and the iterations bit for bit, and the training state; only the memory
# record differs, by design: it counts what each invocation moved (a killed one's prefetch included).
/usr/bin/python3 - "$WORK/reference/$FINAL" "$run/$FINAL" <<'PY' || fail "after $kills kills, $FINAL differs from the reference run's"
import json, sys
import h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
def datasets(f):
    out = {}
    def visit(name, obj):  # returning anything but None would stop the visit
        if isinstance(obj, h5py.Dataset):
            out[name] = obj[()]
    f.visititems(visit)
    return out
da, db = datasets(a), datasets(b)
assert sorted(da) == sorted(db), (sorted(da), sorted(db))
for name in da:
    if name == "keel/train_state":
        sa, sb = json.loads(da[name]), json.loads(db[name])
        sa.pop("memory", None); sb.pop("memory", None)
        assert sa == sb, name
    else:
        assert np.asarray(da[name]).tobytes() == np.asarray(db[name]).tobytes(), name
assert len(da) >= 6
PY

shopt -s nullglob
leftovers=("$run"/.*.tmp-*)
[[ ${#leftovers[@]} -eq 0 ]] || fail "temporaries left behind: ${leftovers[*]}"
for ckpt in "$run"/ckpt-*.h5; do
  "$KEEL" evaluate "$ckpt" --json > /dev/null 2> "$WORK/eval.err" || fail "$ckpt does not verify: $(head -c 400 "$WORK/eval.err")"
done
corrupt=("$run"/*.corrupt*)
[[ ${#corrupt[@]} -eq 0 ]] || fail "checkpoints were found damaged: ${corrupt[*]}"
echo "crash_campaign: OK: $kills SIGKILLs, the final checkpoint holds bit for bit the state of a run never killed"
