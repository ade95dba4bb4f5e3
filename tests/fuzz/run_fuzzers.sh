#!/usr/bin/env bash
# Builds keel's libFuzzer targets (tests/fuzz/*_fuzz.cc) with clang into build-fuzz/ and runs each for a
# short, deterministic budget (-seed=1 -runs=N) on its seed corpus, two at a time. Exit status is 0 only
# if no target reported a crash, leak, timeout, out-of-memory, sanitizer error or uncaught exception;
# for each one that did, the tail of its log and the path of its reproducer are printed.
#
# Usage: tests/fuzz/run_fuzzers.sh [--require] [TARGET...]
#   TARGET    checkpoint checkpoint_bytes run_config idx tfrecord example image (default: all of these
#             whose source exists). checkpoint_bytes feeds raw bytes to libhdf5, whose own leaks on
#             hostile files are suppressed (lsan_libhdf5.supp; see checkpoint_bytes_fuzz.cc).
#   --require fail, rather than skip with exit 0, when clang or libFuzzer is missing (tools/test.sh
#             passes it: it has just installed them).
# Environment: KEEL_FUZZ_BUILD_DIR (default build-fuzz), KEEL_FUZZ_JOBS (parallel fuzzers, default 2),
#   KEEL_FUZZ_RUNS_SCALE (multiplies every target's run count, e.g. 10 for a longer local run),
#   KEEL_BUILD_LOCK (a file to flock around the build, for a machine shared with other builds).
# Reproduce a finding: build-fuzz/tests/fuzz/<target>_fuzz <reproducer>.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

require=0
requested=()
for arg in "$@"; do
  case "$arg" in
    --require) require=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "run_fuzzers: unknown option $arg" >&2; exit 2 ;;
    *) requested+=("$arg") ;;
  esac
done

BUILD_DIR="${KEEL_FUZZ_BUILD_DIR:-build-fuzz}"
JOBS="${KEEL_FUZZ_JOBS:-2}"
SCALE="${KEEL_FUZZ_RUNS_SCALE:-1}"

# Per target: runs (chosen so each takes 5-20 s on 2 cores with two running at once: 2026-11-29, all
# seven in 99 s at the runs before, 3000 checkpoint, 20000 idx, 30000 tfrecord and 600000 example
# inputs, which took 47, 35, 57 and 22 s; KEEL_FUZZ_RUNS_SCALE for longer runs) and max_len (a
# little above the largest seed, so mutations can grow an input but time goes to structure).
declare -A RUNS=([checkpoint]=1000 [idx]=8000 [tfrecord]=8000 [example]=400000 [image]=100000
                 [checkpoint_bytes]=1000 [run_config]=6000)
declare -A MAX_LEN=([checkpoint]=2048 [idx]=4096 [tfrecord]=4096 [example]=2048 [image]=16384
                    [checkpoint_bytes]=16384 [run_config]=32768)
# Per target: more libFuzzer flags. run_config's contract includes "no allocation over 1 GiB".
declare -A EXTRA_FLAGS=([run_config]="-malloc_limit_mb=1024")
DEFAULT_TARGETS=(checkpoint tfrecord idx example checkpoint_bytes run_config image)  # longest first, so the pairs finish together

skip_or_fail() {
  if [[ $require -eq 1 ]]; then
    echo "run_fuzzers: $1" >&2
    exit 1
  fi
  echo "run_fuzzers: SKIPPED — $1 (install clang and libclang-rt-14-dev, or run tools/install_deps.sh --test)" >&2
  exit 0
}

# --- clang with libFuzzer and the sanitizers ---------------------------------------------------------
command -v clang >/dev/null 2>&1 && command -v clang++ >/dev/null 2>&1 || skip_or_fail "clang/clang++ not found"
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  > "$probe_dir/probe.cc"
clang++ -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cc" -o "$probe_dir/probe" 2> "$probe_dir/err" \
  || skip_or_fail "clang++ cannot link a libFuzzer target ($(head -c 300 "$probe_dir/err"))"

# --- targets -------------------------------------------------------------------------------------------
targets=()
if [[ ${#requested[@]} -gt 0 ]]; then
  for t in "${requested[@]}"; do
    t="${t%_fuzz}"
    [[ -f "tests/fuzz/${t}_fuzz.cc" && -n "${RUNS[$t]:-}" ]] || { echo "run_fuzzers: no target '$t'" >&2; exit 2; }
    targets+=("$t")
  done
else
  for t in "${DEFAULT_TARGETS[@]}"; do
    [[ -f "tests/fuzz/${t}_fuzz.cc" ]] && targets+=("$t")
  done
fi

# --- configure + build ---------------------------------------------------------------------------------
start=$SECONDS
# The instrumented tree the sanitized test suite shares (instrumented_tree.sh).
# shellcheck source=tests/fuzz/instrumented_tree.sh
source "$ROOT/tests/fuzz/instrumented_tree.sh"
configure_instrumented_tree "$BUILD_DIR"
build=(cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${targets[@]/%/_fuzz}")
if [[ -n "${KEEL_BUILD_LOCK:-}" ]]; then build=(flock "$KEEL_BUILD_LOCK" "${build[@]}"); fi
"${build[@]}"
echo "run_fuzzers: built ${targets[*]} in $((SECONDS - start)) s"

# --- run, JOBS at a time -------------------------------------------------------------------------------
WORK="$BUILD_DIR/fuzz"
rm -rf "$WORK"
mkdir -p "$WORK/artifacts" "$WORK/logs"
run_one() {
  local t=$1
  local corpus="$WORK/corpus/$t"  # new inputs go here; the committed seeds stay untouched
  mkdir -p "$corpus"
  local runs=$(( ${RUNS[$t]} * SCALE ))
  local t0=$SECONDS
  local rc=0
  # detect_leaks stays on (the default); UBSan aborts (-fno-sanitize-recover), so it is a crash too.
  local lsan="${LSAN_OPTIONS:-}"
  if [[ $t == checkpoint_bytes ]]; then lsan="$lsan:suppressions=$ROOT/tests/fuzz/lsan_libhdf5.supp"; fi
  # shellcheck disable=SC2086  # EXTRA_FLAGS holds zero or more separate flags
  LSAN_OPTIONS="$lsan" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_odr_violation=0" \
  "$BUILD_DIR/tests/fuzz/${t}_fuzz" -seed=1 -runs="$runs" -max_len="${MAX_LEN[$t]}" -timeout=10 \
    -rss_limit_mb=2048 ${EXTRA_FLAGS[$t]:-} -print_final_stats=1 -artifact_prefix="$WORK/artifacts/${t}-" \
    "$corpus" "tests/fuzz/corpus/$t" > "$WORK/logs/$t.log" 2>&1 || rc=$?
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$WORK/logs/$t.log" | grep -o '[0-9]*$' || echo "?")
  echo "run_fuzzers: $t: exit $rc, $execs inputs in $((SECONDS - t0)) s"
  return "$rc"
}

run_start=$SECONDS
declare -A pid_of=()
declare -a failed=()
for t in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
  run_one "$t" &
  pid_of[$t]=$!
done
for t in "${targets[@]}"; do
  wait "${pid_of[$t]}" || failed+=("$t")
done
echo "run_fuzzers: fuzzing took $((SECONDS - run_start)) s, $((SECONDS - start)) s with the build"

if [[ ${#failed[@]} -eq 0 ]]; then
  echo "run_fuzzers: OK: no findings in ${targets[*]}"
  exit 0
fi
for t in "${failed[@]}"; do
  echo "================ run_fuzzers: FINDING in ${t}_fuzz (log: $WORK/logs/$t.log) ================"
  # The report: from the sanitizer's or libFuzzer's first error line (or the last 60 lines).
  if grep -qnE '^==[0-9]+==|ERROR: libFuzzer|terminate called|_fuzz: ' "$WORK/logs/$t.log"; then
    first=$(grep -nE '^==[0-9]+==|ERROR: libFuzzer|terminate called|_fuzz: ' "$WORK/logs/$t.log" | head -1 | cut -d: -f1)
    tail -n +"$first" "$WORK/logs/$t.log" | head -80
  else
    tail -60 "$WORK/logs/$t.log"
  fi
  for a in "$WORK/artifacts/${t}-"*; do
    [[ -e "$a" ]] && echo "run_fuzzers: reproducer: $a  (run: $BUILD_DIR/tests/fuzz/${t}_fuzz $a)"
  done
done
echo "run_fuzzers: FAILED: ${failed[*]}" >&2
exit 1
