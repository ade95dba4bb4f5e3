#!/usr/bin/env bash
# Runs the CTest suite, less the tests listed in EXCLUDE below, under AddressSanitizer (with
# LeakSanitizer) and UndefinedBehaviorSanitizer, in the instrumented clang tree the fuzzers use
# (build-fuzz/, tests/fuzz/instrumented_tree.sh: CI compiles the library with the sanitizers once).
# The tests under tests/cli run this tree's instrumented `keel` binary, so its findings count too.
# Exit status is 0 only if every test passed and no process (test or `keel` subprocess) wrote a
# sanitizer report: reports go to files (log_path), so that one in a process whose exit status nobody
# checks still fails the run, and a finding ends its process with status 86, which no test expects.
# UB aborts (-fno-sanitize-recover), leaks are reported, third-party leaks are suppressed only as
# tests/sanitizer/lsan.supp lists them.
#
# Usage: tests/sanitizer/run_sanitized.sh [CTEST ARGS...]   e.g. -R 'TrainCli|Checkpoint' to narrow
# Environment: KEEL_FUZZ_BUILD_DIR (default build-fuzz, shared with tests/fuzz/run_fuzzers.sh),
#   KEEL_BUILD_LOCK (a file to flock around the build, for a machine shared with other builds).
# Runnable from any directory; idempotent (configures only when needed, builds incrementally).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

BUILD_DIR="${KEEL_FUZZ_BUILD_DIR:-build-fuzz}"
JOBS="$(nproc)"
# Not run here, with why. Each runs in tools/test.sh's Release suite. The instrumented library (ASan,
# UBSan, no AVX-512; libFuzzer's coverage hooks outside the compute layers) trains several times
# slower than the Release build, so the groups in HEAVY, which train models end to end through
# `keel` for seconds to minutes in Release, would take most of CI's time here; of them only the
# short tests in LIGHT run. Training,
# checkpoints and resume still run sanitized through the library's own tests (tests/model,
# tests/checkpoint, tests/train, tests/api) and the short `keel` runs of BadInputCli (hostile flags
# and checkpoints, resume), MemoryCli, SlicesCli, the LIGHT ones and the rest.
EXCLUDE=(
  # Installs the tree and builds a consumer against it without -fsanitize: a packaging test, and an
  # instrumented libkeel.a does not link into an uninstrumented program.
  'Install\.FindPackageConsumerBuildsAndRuns'
  # Timings, printed and not checked.
  '.*Speed\.PrintsThroughput'
  # 20 ResNet18 steps and 100 MLP steps on 8 replicas in five combinations of memory savers (19 s and
  # 2 s in Release, 35 s for the MLP's alone here): the same savers run sanitized on 30 MLP steps
  # over 3 replicas (Savers.MlpOnThreeCoresIsBitIdentical) and in the rest of tests/model/savers_test.
  'Savers\.Resnet18TwentyStepsOnV38AreBitIdentical'
  'Savers\.MlpHundredStepsOnV38AreBitIdentical'
  # 30 MLP and 8 ResNet18 steps in five runs under mixed_bfloat16 (15 s in Release): mixed precision
  # runs sanitized in Savers.PlanEqualsARealStepInEveryCombination, tests/ops/precision_test and the
  # planner's ResNet50 steps.
  'Savers\.MixedPrecisionMlpAndResnet18AreBitIdenticalUnderTheOtherSavers'
  # ResNet18 and the MLP trained through `keel` three times each on 1, 2 and 3 threads (24 s in
  # Release): the thread pool runs sanitized in tests/core/thread_pool_test and every kernel's
  # TheSameBitsOnOneToFourThreads test (tests/ops).
  'ThreadsCli\.ResNet18OnOneCoreIsBitIdenticalOnOneTwoAndThreeThreads'
  'ThreadsCli\.MlpIsBitIdenticalOnOneTwoAndThreeThreads'
  # Under mpirun: Open MPI keeps its start-up allocations to the end, which LSan would report. The
  # same tests run sanitized in one process (ProcessCollectives.*, the reference they must equal).
  'ProcessCollectives\.UnderMpirun.*'
)
# Whole training runs through `keel` (MpiCli: under mpirun, whose Open MPI keeps its start-up
# allocations to the end, which LSan would report): accuracy bars, bit-identical resumes and pipelines, callbacks,
# Keras weight files, predict/evaluate on exported data, crash campaigns, memory measured by training.
HEAVY='^(AccuracyCli|AugmentCli|CallbacksCli|CheckpointTrustCli|DataCli|JsonOutput|KerasWeightsCli|MemoryReport|MemoryTrace|PrecisionCli|PrecisionAccuracyCli|PredictCli|ResnetCheckpoint|ResnetCli|SaversCli|SaversMemoryCli|SlicesTrainCli|TrainCli|CrashCampaign|MpiCli)\.'
# ... and those of them that take about a second or less in Release (refusals, exports, plans)
LIGHT=(
  PrecisionCli.BadValuesExitTwo
  AugmentCli.BadSpecsExit2WithOneLineNamingTheStep
  CallbacksCli.CallbacksThatWatchValidationNeedIt
  DataCli.AnImageFolderWithSplitFoldersMustHaveTheRequestedSplit
  DataCli.ExportRefusesToOverwriteAndLeavesTheDirectoryAsItWas
  DataCli.ExportWritesShardsOfExamplesAndAnInfoFile
  DataCli.ARunStoppedByACorruptRecordResumesWithSkipCorrupt
  DataCli.ARelativeDataDirectoryIsSavedAbsolute
  JsonOutput.SummaryOfASequentialModel
  JsonOutput.SummaryOfAFunctionalModelHasItsConnections
  JsonOutput.Models
  KerasWeightsCli.AKerasMlpFileEvaluatesAtPyTorchsAccuracy
  KerasWeightsCli.FilesThatDoNotFitExitTwoWithOneMessage
  MemoryTrace.MlpOnCpu
  MemoryTrace.MlpOnV3_8
  MemoryTrace.TextModeSaysWhereTheFilesAre
  MemoryTrace.UnwritablePathsExitTwoNamingTheFlagBeforePlanning
  ResnetCli.SummaryCounts
  ResnetCli.BadShapesAndClasses
  ResnetCli.Resnet50MemoryAt224AnswersAndFits
  ResnetCheckpoint.ACheckpointOfAnotherArchitectureIsRefused
  SaversMemoryCli.BadValuesExitTwo
  SaversMemoryCli.PlansEachModeAndFindsALargerBatch
  TrainCli.DataSmallerThanOneGlobalBatchIsRefusedBeforeStepZero
  TrainCli.SigintBeforeTheFirstStepEndsWithAMessage
  TrainCli.TrainRefusesADirectoryHoldingARun
  # and, at 20 to 40 s each here, one each of the asynchronous checkpointer, an interrupted resume,
  # pruning and --overwrite: the threads and the run directory's file moves.
  TrainCli.AFailedBackgroundSaveIsReportedAsASynchronousOneIs
  TrainCli.SigtermWhileResumingLeavesTheRunAsItWas
  TrainCli.KeepPrunesOldCheckpoints
  CheckpointTrustCli.OverwriteMovesThePreviousRunAsideAndDeletesNothing
)

start=$SECONDS
# shellcheck source=tests/fuzz/instrumented_tree.sh
source "$ROOT/tests/fuzz/instrumented_tree.sh"
configure_instrumented_tree "$BUILD_DIR"
build=(cmake --build "$BUILD_DIR" -j"$JOBS")
if [[ -n "${KEEL_BUILD_LOCK:-}" ]]; then build=(flock "$KEEL_BUILD_LOCK" "${build[@]}"); fi
"${build[@]}"
echo "run_sanitized: built $BUILD_DIR in $((SECONDS - start)) s"

REPORTS="$(cd "$BUILD_DIR" && pwd)/sanitizer-reports"
rm -rf "$REPORTS"
mkdir -p "$REPORTS"
# A finding ends the process with status 86, which no test expects; ASan's and LSan's reports are
# written to $REPORTS/report.<pid>.
common="log_path=$REPORTS/report:print_stacktrace=1:exitcode=86"
# detect_odr_violation=0 as in run_fuzzers.sh.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}$common:detect_leaks=1:strict_init_order=1:detect_odr_violation=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}$common:halt_on_error=1"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$ROOT/tests/sanitizer/lsan.supp:print_suppressions=0"
symbolizer="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
if [[ -n "$symbolizer" && -z "${ASAN_SYMBOLIZER_PATH:-}" ]]; then export ASAN_SYMBOLIZER_PATH="$symbolizer"; fi

# The HEAVY tests not LIGHT join EXCLUDE by their exact names (ctest's regular expressions have no
# negation).
light=" ${LIGHT[*]} "
while read -r name; do
  if [[ $name =~ $HEAVY && $light != *" $name "* ]]; then EXCLUDE+=("${name//./\\.}"); fi
done < <(ctest --test-dir "$BUILD_DIR" -N | sed -nE 's/^ *Test +#[0-9]+: (.*)$/\1/p')
exclude_re="$(IFS='|'; echo "^(${EXCLUDE[*]})\$")"
run_start=$SECONDS
status=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" -E "$exclude_re" "$@" || status=$?
echo "run_sanitized: tests took $((SECONDS - run_start)) s, $((SECONDS - start)) s with the build"

shopt -s nullglob
reports=("$REPORTS"/report.*)
if [[ ${#reports[@]} -gt 0 ]]; then
  for r in "${reports[@]}"; do
    echo "================ run_sanitized: FINDING ($r) ================"
    head -120 "$r"
  done
  echo "run_sanitized: FAILED: ${#reports[@]} sanitizer report(s) in $REPORTS" >&2
  exit 1
fi
if [[ $status -ne 0 ]]; then
  echo "run_sanitized: FAILED: ctest exit $status" >&2
  exit "$status"
fi
echo "run_sanitized: OK: no sanitizer findings"
