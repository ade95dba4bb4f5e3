#!/usr/bin/env bash
# The ResNet50 benchmark, keel beside PyTorch on this machine, in one run:
#   bench/run_resnet_bench.sh   (STEPS_32=10 STEPS_224=4 REPEATS=2 BUILD_DIR=build by default; ~7 minutes on 2 cores)
# keras.applications.ResNet50 (v1, 10 classes), SGD with momentum, synthetic data:
#   - training step at 32x32x3 batch 32 and at 224x224x3 batch 8, inference at 224x224x3 batch 8;
#     keel on `cpu` (1 replica) with 1 thread (KEEL_NUM_THREADS=1) and with N (its kernels on the thread
#     pool), and on `custom:N` (N replicas, one per core),
#     PyTorch (Debian's python3-torch 1.13, NCHW) with torch.set_num_threads(1) and (N). The ratio
#     column is against the faster PyTorch configuration of the same workload.
#   - activation bytes saved for backward at 224x224 batch 8: keel's tape (the ledger's `activations`
#     just before tape.gradient()) beside PyTorch's saved_tensors_hooks count (each storage once,
#     parameters and buffers excluded).
#   - achieved GFLOP/s (analytic: 2 x conv/dense multiply-adds, x3 for a training step) and the
#     fraction of this machine's measured fp32 FMA peak (bench/fma_peak.cc): per core for the
#     one-core rows, all cores for the others.
# Each timing is one process: one warm-up step, then STEPS_* timed steps; images/s over the timed ones;
# the best of REPEATS such processes is reported.
# PyTorch's matrix products outside oneDNN go through libblas.so.3, so this script makes sure an
# optimised BLAS (OpenBLAS) is installed, as run_mlp_bench.sh does.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STEPS_32="${STEPS_32:-10}"
STEPS_224="${STEPS_224:-4}"
REPEATS="${REPEATS:-2}"
BUILD="${BUILD_DIR:-build}"  # a Release build directory
CORES="$(nproc)"

# shellcheck source=bench/torch_deps.sh
source bench/torch_deps.sh
if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD" -j"${BUILD_JOBS:-$CORES}" --target resnet_bench fma_peak >/dev/null

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"

"$BUILD"/bench/fma_peak >"$OUT/peak.json"
"$BUILD"/bench/resnet_bench memory --image 224 --batch 8 >"$OUT/keel_memory.json"
torch_at_its_best bench/torch_resnet_bench.py memory --image 224 --batch 8 --threads "$CORES" >"$OUT/torch_memory.json"
torch_at_its_best bench/torch_resnet_bench.py memory --image 224 --batch 8 --threads "$CORES" --explicit-pad \
  >"$OUT/torch_memory_pad.json"

# workload name, mode, image, batch, steps. Best of REPEATS runs for each, interleaved, so a passing
# disturbance (this machine is shared) does not decide the ratios.
WORKLOADS=("train32 train 32 32 $STEPS_32" "train224 train 224 8 $STEPS_224" "infer224 infer 224 8 $STEPS_224")
for rep in $(seq "$REPEATS"); do
  for w in "${WORKLOADS[@]}"; do
    read -r name mode image batch steps <<<"$w"
    echo "run_resnet_bench: $name (run $rep of $REPEATS)" >&2
    KEEL_NUM_THREADS=1 "$BUILD"/bench/resnet_bench "$mode" --device cpu --image "$image" --batch "$batch" \
      --steps "$steps" >>"$OUT/keel_cpu1_$name.jsonl"
    "$BUILD"/bench/resnet_bench "$mode" --device cpu --image "$image" --batch "$batch" --steps "$steps" \
      >>"$OUT/keel_cpu_$name.jsonl"
    "$BUILD"/bench/resnet_bench "$mode" --device "custom:$CORES" --image "$image" --batch "$batch" --steps "$steps" \
      >>"$OUT/keel_all_$name.jsonl"
    torch_at_its_best bench/torch_resnet_bench.py "$mode" --threads 1 --image "$image" --batch "$batch" \
      --steps "$steps" >>"$OUT/torch_1_$name.jsonl"
    torch_at_its_best bench/torch_resnet_bench.py "$mode" --threads "$CORES" --image "$image" --batch "$batch" \
      --steps "$steps" >>"$OUT/torch_all_$name.jsonl"
  done
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" "$CORES" "$LOAD_BEFORE" "$LOAD_AFTER" "$REPEATS" <<'PY'
import json, os, sys
out, cores, load_before, load_after, repeats = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
load = lambda name: json.load(open(os.path.join(out, name + ".json")))
peak = load("peak")
workloads = [("train32", "train 32×32 b32"), ("train224", "train 224×224 b8"), ("infer224", "inference 224×224 b8")]
rows = [("keel_cpu1", "keel `cpu`, 1 thread (1 replica)", 1),
        ("keel_cpu", f"keel `cpu`, {cores} threads (1 replica, its kernels on the thread pool)", cores),
        ("keel_all", f"keel `custom:{cores}` ({cores} replicas)", cores),
        ("torch_1", "PyTorch, 1 thread", 1), ("torch_all", f"PyTorch, {cores} threads", cores)]
def best(name):  # the run with the most images/s
    runs = [json.loads(l) for l in open(os.path.join(out, name + ".jsonl")) if l.strip()]
    return max(runs, key=lambda run: run["images_per_sec"])
r = {(row, w): best(f"{row}_{w}") for row, _, _ in rows for w, _ in workloads}
ref = {w: max(r[("torch_1", w)]["images_per_sec"], r[("torch_all", w)]["images_per_sec"]) for w, _ in workloads}

print(f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}\n")
print(f"### ResNet50 (Keras v1, 10 classes), images/s (best of {repeats}); ratio vs the faster PyTorch of the same "
      "column\n")
print("| run | " + " | ".join(f"{title} | ratio" for _, title in workloads) + " |")
print("| --- |" + " ---: | ---: |" * len(workloads))
for row, label, _ in rows:
    cells = []
    for w, _ in workloads:
        ips = r[(row, w)]["images_per_sec"]
        cells.append(f"{ips:,.2f} | {ips / ref[w]:.2f}")
    print(f"| {label} | " + " | ".join(cells) + " |")

km, tm, tp = load("keel_memory"), load("torch_memory"), load("torch_memory_pad")
mib = lambda b: f"{b / 2**20:,.1f} MiB"
kb, tb, tpb = km["saved_activation_bytes"], tm["saved_bytes_excluding_parameters"], tp["saved_bytes_excluding_parameters"]
print("\n### Activation bytes saved for backward, ResNet50 training step, 224×224×3, batch 8, float32\n")
print("| | bytes | vs PyTorch |")
print("| --- | ---: | ---: |")
print(f"| keel: tape's `activations` before tape.gradient() | {mib(kb)} | {kb / tb:.2f} |")
print(f"| keel: planner's activation peak over the whole step | {mib(km['planner_activation_peak_bytes'])} | "
      f"{km['planner_activation_peak_bytes'] / tb:.2f} |")
print(f"| PyTorch: saved_tensors_hooks, each storage once, parameters and buffers excluded "
      f"(includes the {mib(tm['saved_input_bytes'])} input batch conv1 saves; int64 max-pool indices "
      f"{mib(tm['saved_by_dtype'].get('torch.int64', 0))}) | {mib(tb)} | 1.00 |")
print(f"| PyTorch with Keras's separate ZeroPadding2D layers (--explicit-pad) | {mib(tpb)} | {tpb / tb:.2f} |")
print(f"\nkeel saved bytes by the class of the layer that produced them: " +
      ", ".join(f"{k} {mib(v)}" for k, v in sorted(km["saved_by_layer_class"].items(), key=lambda kv: -kv[1])))
print(f"PyTorch excluded {mib(tm['saved_parameter_and_buffer_bytes_excluded'])} of saved parameters and buffers; "
      f"keel's planner peak for the whole step (all categories) is {mib(km['planner_peak_bytes'])}.")

print(f"\n### Achieved GFLOP/s (analytic) and fraction of the measured fp32 FMA peak\n")
print(f"Peak (bench/fma_peak, 12 independent FMA accumulators): {peak['peak_gflops_per_core']:.1f} GFLOP/s per core, "
      f"{peak['peak_gflops_all_cores']:.1f} GFLOP/s on {peak['threads']} cores "
      f"(AVX-512 {peak['avx512_gflops_per_core']:.1f}, AVX2 {peak['avx2_gflops_per_core']:.1f} per core). "
      f"GFLOP per image: train 32×32 {r[('keel_cpu', 'train32')]['gflop_per_image']:.3f}, "
      f"train 224×224 {r[('keel_cpu', 'train224')]['gflop_per_image']:.2f}, "
      f"inference 224×224 {r[('keel_cpu', 'infer224')]['gflop_per_image']:.2f}.\n")
print("| run | " + " | ".join(f"{title} GFLOP/s | of peak" for _, title in workloads) + " |")
print("| --- |" + " ---: | ---: |" * len(workloads))
for row, label, n in rows:
    p = peak["peak_gflops_per_core"] if n == 1 else peak["peak_gflops_all_cores"]
    cells = [f"{r[(row, w)]['gflops']:.1f} | {r[(row, w)]['gflops'] / p:.0%}" for w, _ in workloads]
    print(f"| {label} | " + " | ".join(cells) + " |")
PY
