#!/usr/bin/env bash
# What fusion buys (BatchNormalization with the ReLU, and the Add, after it; the convolutions' bias
# in oneDNN's forward kernel): ResNet50 on `cpu` (all hardware threads), training at 32x32 batch 32
# and at 224x224 batch 8 (Adam), and inference at 224x224 batch 8, each with `resnet_bench --fuse
# off` (every layer's ops on their own) and `--fuse on` (the default), interleaved, REPEATS times;
# prints per configuration the best and the median of the steps' best times, and the speed-up of
# the best. Both give the same bits (tests/model/functional_test.cc, tests/ops/conv_onednn_test.cc).
# Usage: bench/run_fusion_bench.sh   (REPEATS, default 5; BUILD_DIR, default build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPEATS="${REPEATS:-5}"
BUILD="${BUILD_DIR:-build}"
cmake --build "$BUILD" -j"$(nproc)" --target resnet_bench > /dev/null
declare -A best
workloads=("train32|train --image 32 --batch 32 --steps 10 --optimizer adam"
           "train224|train --image 224 --batch 8 --steps 5 --optimizer adam"
           "infer224|infer --image 224 --batch 8 --steps 5")
for w in "${workloads[@]}"; do
  name="${w%%|*}"
  for ((r = 1; r <= REPEATS; r++)); do
    for fuse in off on; do
      s="$("$BUILD/bench/resnet_bench" ${w#*|} --device cpu --fuse "$fuse" | tail -n 1 |
           sed -n 's/.*"best_step_seconds": \([0-9.]*\).*/\1/p')"
      best["$name $fuse"]+="$s "
    done
  done
  for fuse in off on; do
    read -r -a times <<<"$(tr ' ' '\n' <<<"${best["$name $fuse"]}" | sed '/^$/d' | sort -g | tr '\n' ' ')"
    printf '%-9s fuse %-3s  best %.4f s  median %.4f s  (%s)\n' "$name" "$fuse" "${times[0]}" "${times[$(( ${#times[@]} / 2 ))]}" "${times[*]}"
  done
  read -r off <<<"$(tr ' ' '\n' <<<"${best["$name off"]}" | sed '/^$/d' | sort -g | head -n 1)"
  read -r on <<<"$(tr ' ' '\n' <<<"${best["$name on"]}" | sed '/^$/d' | sort -g | head -n 1)"
  awk -v a="$off" -v b="$on" -v n="$name" 'BEGIN { printf "%-9s fused / unfused: %.3fx as fast (best steps)\n", n, a / b }'
done
