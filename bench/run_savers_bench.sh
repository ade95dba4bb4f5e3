#!/usr/bin/env bash
# The memory savers (issue 11) on ResNet50, 224x224x3, 10 classes, in one run:
#   bench/run_savers_bench.sh        (DEVICES="v3-8 v4-8" BATCH_PER_CORE=8 STEPS=2 REPEATS=2 BUILD_DIR=build)
# 1. Planned, per combination of --precision, --shard and --remat on each device (`keel memory --suggest --json`,
#    and `keel memory --json` for the activations): peak per core at BATCH_PER_CORE, activations,
#    optimizer and gradient bytes per core, the largest per-core batch, the recomputed share of the
#    step and the bytes sent between cores per step.
# 2. Measured step time of each combination on this machine: build/bench/resnet_bench train on
#    custom:2 (2 replicas, one per core) at 224x224 with IMAGES_PER_STEP images per step (global),
#    STEPS timed steps after a warm-up, best of REPEATS processes, the combinations interleaved so
#    that a load change hits them alike; ratio to the plain step.
# Prints two Markdown tables.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEVICES="${DEVICES:-v3-8 v4-8}"
BATCH_PER_CORE="${BATCH_PER_CORE:-8}"
IMAGES_PER_STEP="${IMAGES_PER_STEP:-8}"
STEPS="${STEPS:-2}"
REPEATS="${REPEATS:-2}"
BUILD="${BUILD_DIR:-build}"
if [[ ! -f "$BUILD/build.ninja" ]]; then cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release; fi
cmake --build "$BUILD" -j"$(nproc)" --target keel_cli resnet_bench >/dev/null
KEEL="$BUILD/keel"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

COMBOS=()
for p in float32 mixed_bfloat16; do
  for c in "none none" "optimizer none" "gradients none" "full none" "none segments" "optimizer segments" \
           "gradients segments" "full segments"; do
    COMBOS+=("$c $p")
  done
done
MODEL=(--model resnet50 --input-shape 224x224x3 --classes 10 --batch-per-core "$BATCH_PER_CORE")
for d in $DEVICES; do
  "$KEEL" memory "${MODEL[@]}" --device "$d" --suggest --json >"$OUT/suggest-$d.json"
  for c in "${COMBOS[@]}"; do
    set -- $c
    "$KEEL" memory "${MODEL[@]}" --device "$d" --shard "$1" --remat "$2" --precision "$3" --json >"$OUT/plan-$d-$1-$2-$3.json"
  done
done
for ((r = 0; r < REPEATS; ++r)); do
  for c in "${COMBOS[@]}"; do
    set -- $c
    "$BUILD/bench/resnet_bench" train --device custom:2 --image 224 --batch "$IMAGES_PER_STEP" --steps "$STEPS" \
      --shard "$1" --remat "$2" --precision "$3" >>"$OUT/time-$1-$2-$3.jsonl"
  done
done

python3 - "$OUT" "$DEVICES" "$BATCH_PER_CORE" "$IMAGES_PER_STEP" <<'PY'
import json, sys
out, devices, per_core, images = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
combos = [(s, r, p) for p in ("float32", "mixed_bfloat16") for s, r in
          [("none", "none"), ("optimizer", "none"), ("gradients", "none"), ("full", "none"), ("none", "segments"),
           ("optimizer", "segments"), ("gradients", "segments"), ("full", "segments")]]
mib = lambda b: f"{b / 2**20:,.1f} MiB"
def flags(s, r, p):
    f = ([f"--shard {s}"] if s != "none" else []) + ([f"--remat {r}"] if r != "none" else []) + \
        ([f"--precision {p}"] if p != "float32" else [])
    return " ".join(f) or "(none)"
print(f"ResNet50 224x224x3, 10 classes, {per_core} per core, planned (keel memory; core 0):\n")
print("| device | savers | activations | gradients | optimizer | peak per core | largest batch per core | recomputed | between cores per step |")
print("|---|---|---|---|---|---|---|---|---|")
for d in devices:
    sug = {(s["shard"], s["remat"], s["precision"]): s for s in json.load(open(f"{out}/suggest-{d}.json"))["suggestions"]}
    for c in combos:
        p = json.load(open(f"{out}/plan-{d}-{'-'.join(c)}.json"))["per_core"][0]
        g = sug[c]
        print(f"| {d} | `{flags(*c)}` | {mib(p['activations'])} | {mib(p['gradients'])} | {mib(p['optimizer'])} | "
              f"{mib(g['peak'])} | {g['max_batch_per_core']} | {100 * g['recompute_fraction']:.0f}% | {mib(g['collective_bytes'])} |")
times = {}
for c in combos:
    rows = [json.loads(l) for l in open(f"{out}/time-{'-'.join(c)}.jsonl")]
    times[c] = min(x["best_step_seconds"] for x in rows)
print(f"\nTraining step on this machine (resnet_bench train, custom:2, {images} images of 224x224 per step, best step):\n")
print("| savers | step | ratio to plain |")
print("|---|---|---|")
base = times[("none", "none", "float32")]
for c in combos:
    print(f"| `{flags(*c)}` | {times[c]:.2f} s | {times[c] / base:.2f}x |")
PY
