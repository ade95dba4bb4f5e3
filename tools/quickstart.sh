#!/usr/bin/env bash
# Quickstart: build keel (Release) into build/, train the MLP on Fashion-MNIST replicated over a
# simulated v3-8 (8 cores x 16 = global batch 128), evaluate it on the test split (accuracy and the
# memory footprint per core), and print the run's per-core HBM plan beside what its training measured.
# Idempotent: if checkpoints/mlp already holds a run, it is resumed to EPOCHS (a no-op when done).
# Environment: EPOCHS (default 10).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

EPOCHS="${EPOCHS:-10}"
BUILD_DIR=build
RUN_DIR=checkpoints/mlp

./tools/install_deps.sh

if [[ -f "$BUILD_DIR/CMakeCache.txt" ]] \
  && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$BUILD_DIR/CMakeCache.txt"; then
  echo "quickstart: $BUILD_DIR was configured with another generator; recreating it" >&2
  rm -rf "$BUILD_DIR"
fi
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" || ! -f "$BUILD_DIR/build.ninja" ]] \
  || ! grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' "$BUILD_DIR/CMakeCache.txt"; then
  # Tests are on when GoogleTest is there (tools/test.sh installs it and reconfigures with them on).
  tests=OFF
  dpkg-query -W -f='${Status}' libgtest-dev 2>/dev/null | grep -q "install ok installed" && tests=ON
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_BUILD_TESTS="$tests"
fi
cmake --build "$BUILD_DIR" -j"$(nproc)" --target keel_cli

KEEL="./$BUILD_DIR/keel"

if [[ -e "$RUN_DIR/latest" ]]; then
  echo "==> resuming $RUN_DIR to $EPOCHS epochs"
  "$KEEL" resume "$RUN_DIR" --epochs "$EPOCHS"
else
  echo "==> training mlp on fashion_mnist (v3-8, 16 per core, $EPOCHS epochs)"
  "$KEEL" train --model mlp --dataset fashion_mnist --device v3-8 --batch-per-core 16 \
    --epochs "$EPOCHS" --seed 1 --checkpoint-dir "$RUN_DIR"
fi

echo "==> evaluating $RUN_DIR on the test split"
"$KEEL" evaluate "$RUN_DIR" --split test

echo "==> per-core HBM plan of the run, beside what its training measured"
"$KEEL" memory "$RUN_DIR"
