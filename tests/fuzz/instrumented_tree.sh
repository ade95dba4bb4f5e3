# Sourced by tests/fuzz/run_fuzzers.sh and tests/sanitizer/run_sanitized.sh: the one instrumented build
# tree they share (clang, AddressSanitizer + UndefinedBehaviorSanitizer, libFuzzer's coverage
# instrumentation, KEEL_FUZZ=ON), holding the fuzz targets and the test suite, so that CI compiles the
# library with the sanitizers once. Defines configure_instrumented_tree DIR: (re)configures DIR from
# scratch unless it already is such a tree of this very source tree; prints the configure log on failure.
#
# -O2 for the library (the fuzzers' speed); -gline-tables-only: stack traces with file and line,
# without full debug info's link time for ~80 test programs. The tests' own code is at -O0
# (tests/CMakeLists.txt). KEEL_NATIVE off: libFuzzer's reproducers replay on any x86-64.
KEEL_INSTRUMENTED_FLAGS="-O2 -gline-tables-only -DNDEBUG"

configure_instrumented_tree() {
  local dir=$1 root
  root="$(pwd)"
  if [[ -f "$dir/CMakeCache.txt" && -f "$dir/build.ninja" ]] \
    && grep -qx 'KEEL_FUZZ:BOOL=ON' "$dir/CMakeCache.txt" \
    && grep -qx 'KEEL_BUILD_TESTS:BOOL=ON' "$dir/CMakeCache.txt" \
    && grep -q '^CMAKE_CXX_COMPILER:.*clang' "$dir/CMakeCache.txt" \
    && grep -qx "CMAKE_CXX_FLAGS_RELWITHDEBINFO:STRING=$KEEL_INSTRUMENTED_FLAGS" "$dir/CMakeCache.txt" \
    && grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$dir/CMakeCache.txt"; then
    return 0
  fi
  rm -rf "$dir"
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DKEEL_FUZZ=ON -DKEEL_BUILD_TESTS=ON \
    -DKEEL_BUILD_BENCH=OFF -DKEEL_NATIVE=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$KEEL_INSTRUMENTED_FLAGS" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$KEEL_INSTRUMENTED_FLAGS" > "$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log" >&2; return 1; }
}
