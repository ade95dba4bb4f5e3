// How the `keel` binary ends when a command throws (exit status contract, README): one message on
// stderr and a status by kind of error.
//
//   2  bad usage or input: UsageError, DataError, CheckpointError, a flag Boost.Program_options
//      rejects, std::invalid_argument (a value the library refuses)
//   3  HBM exhausted: ResourceExhausted (its XLA-style report)
//   4  training diverged: TrainingDiverged (`keel train`/`keel resume` stopped at a step whose loss
//      or gradients were NaN or infinite; the message names the step and the first non-finite
//      variable, and every checkpoint left in the run directory holds finite weights)
//   128 + signal (130, 143): `train`/`resume` interrupted by SIGINT/SIGTERM before the first step,
//      nothing saved (tools/cli/train_command.cc; during training a signal saves and ends in 0)
//   70 internal error in keel (EX_SOFTWARE): a broken invariant (std::logic_error) or anything else;
//      the message says so and asks for a report, so that nobody hunts for a mistake that is not theirs
#pragma once

#include <exception>
#include <ostream>
#include <string>

namespace keel::cli {

inline constexpr int kExitInternal = 70;

// Prints the message for `error` (thrown by `keel <verb>`) to `err` and returns the exit status.
int report_failure(const std::string& verb, std::exception_ptr error, std::ostream& err);

}  // namespace keel::cli
