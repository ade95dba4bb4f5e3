#!/usr/bin/env bash
# Build keel (Release, Ninja, tests on) into build/ and run the whole CTest suite, then the libFuzzer
# targets for a short deterministic budget (tests/fuzz/run_fuzzers.sh, clang, in build-fuzz/), then
# the suite again under AddressSanitizer + UndefinedBehaviorSanitizer, less a few long training runs,
# in the fuzzers' instrumented tree (tests/sanitizer/run_sanitized.sh, build-fuzz/).
# Runnable from any directory; idempotent (configures only when needed, builds incrementally).
# Exit status is ctest's if it failed, else the fuzzers', else the sanitized suite's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

./tools/install_deps.sh --test

BUILD_DIR=build
JOBS="$(nproc)"

needs_configure=0
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" || ! -f "$BUILD_DIR/build.ninja" ]]; then
  needs_configure=1
elif ! grep -qx 'KEEL_BUILD_TESTS:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" \
  || ! grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' "$BUILD_DIR/CMakeCache.txt"; then
  needs_configure=1
fi
if ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null \
  && [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  # A build tree from another generator cannot be reconfigured with Ninja: start afresh.
  echo "test.sh: $BUILD_DIR was configured with another generator; recreating it" >&2
  rm -rf "$BUILD_DIR"
  needs_configure=1
fi
if [[ $needs_configure -eq 1 ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_BUILD_TESTS=ON
fi

build_start=$SECONDS
cmake --build "$BUILD_DIR" -j"$JOBS"
echo "test.sh: built $BUILD_DIR in $((SECONDS - build_start)) s"

status=0
ctest_start=$SECONDS
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" || status=$?
echo "test.sh: ctest took $((SECONDS - ctest_start)) s"

# After ctest, not beside it: both want every core. --require: install_deps.sh has just installed clang
# and libFuzzer, so their absence is an error here, not a reason to skip.
fuzz_status=0
./tests/fuzz/run_fuzzers.sh --require || fuzz_status=$?
if [[ $status -eq 0 ]]; then status=$fuzz_status; fi

# Last, for the same reason: the tests built in the fuzzers' tree (clang, ASan + UBSan; its library is
# already built) and the suite run there; any sanitizer report, from a test or a `keel` it ran, fails it.
sanitize_status=0
./tests/sanitizer/run_sanitized.sh || sanitize_status=$?
if [[ $status -eq 0 ]]; then status=$sanitize_status; fi
echo "test.sh: $SECONDS s in all"
exit "$status"
