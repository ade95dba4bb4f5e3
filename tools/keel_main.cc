// The `keel` binary: train, resume, evaluate, predict, memory, summary, models, data.
// Exit status (contract): 0 ok, 2 bad usage or input, 3 HBM exhausted, 4 diverged, 70 internal error in keel
// (tools/cli/exit_status.h).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "framework/device/process_group.h"
#include "tools/cli/commands.h"
#include "tools/cli/exit_status.h"
#include "tools/cli/run_config.h"

namespace {

const char* kUsage =
    "Usage: keel <command> [options]   (keel <command> --help for its options)\n"
    "\n"
    "Commands:\n"
    "  train     train a zoo model on a replicated device and checkpoint it\n"
    "  resume    continue a run exactly from its latest checkpoint\n"
    "  evaluate  loss and accuracy of a checkpoint on a dataset split\n"
    "  predict   classify images (files, folders, TFRecords) with a trained run: top-k classes and scores\n"
    "  memory    what each core needs for a training step; the largest batch that fits\n"
    "  summary   Keras-style model summary\n"
    "  models    list the model zoo\n"
    "  data      export Fashion-MNIST as TFRecord, JPEG or PNG files (keel data export --help)\n";

// `mpirun -np P keel train|resume ...`: every process runs the command on its share of the slice;
// rank 0 prints and writes the run directory, the others' standard output is discarded. A process
// that fails ends the whole job with its exit status (MPI_Abort): mpirun names the rank and exits
// with that status, and the other processes are stopped wherever they wait.
int run_under_mpirun(const std::string& verb, const std::vector<std::string>& args) {
  using namespace keel::cli;
  int code = kExitInternal;
  try {
    keel::ProcessGroup& world = keel::ProcessGroup::world();
    if (!world.is_chief() && std::freopen("/dev/null", "w", stdout) == nullptr) return kExitInternal;
    code = verb == "train" ? train_command(args) : resume_command(args);
  } catch (...) {
    code = report_failure(verb, std::current_exception(), std::cerr);
  }
  std::fflush(stdout);
  keel::ProcessGroup* group = nullptr;
  try {
    group = &keel::ProcessGroup::world();
  } catch (...) {
    return code;  // MPI could not start; the failure was reported above
  }
  keel::ProcessGroup& world = *group;
  if (code != kExitOk && world.size() > 1) {
    std::cerr << "keel " << verb << ": process " << world.rank() << " of " << world.size() << " failed (exit " << code
              << "); ending every process of the job\n";
    world.abort(code);
  }
  world.finalize();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace keel::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? kExitUsage : kExitOk;
  }
  const std::string verb = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if ((verb == "train" || verb == "resume") && keel::ProcessGroup::launched_by_mpirun()) return run_under_mpirun(verb, args);
  try {
    if (verb == "train") return train_command(args);
    if (verb == "resume") return resume_command(args);
    if (verb == "evaluate") return evaluate_command(args);
    if (verb == "predict") return predict_command(args);
    if (verb == "memory") return memory_command(args);
    if (verb == "summary") return summary_command(args);
    if (verb == "models") return models_command(args);
    if (verb == "data") return data_command(args);
    std::cerr << "keel: unknown command '" << verb << "'\n\n" << kUsage;
    return kExitUsage;
  } catch (...) {
    return report_failure(verb, std::current_exception(), std::cerr);
  }
}
