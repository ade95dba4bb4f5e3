// Which checkpoint of a run `keel resume` and `keel evaluate` use: the newest that verifies
// (framework/checkpoint/run_directory.h), reporting on stderr each newer one that does not.
#pragma once

#include <string>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/run_directory.h"

namespace keel::cli {

struct SelectedCheckpoint {
  std::string path;
  CheckpointCheck check;  // what verification found (format, checksummed, train state)
};

// The newest checkpoint of `dir` that verifies. With move_aside (only under the run's lock), each
// newer damaged one is renamed to <name>.corrupt. UsageError when the run holds no checkpoint;
// CheckpointError listing the failures when none verifies.
SelectedCheckpoint select_checkpoint(const RunDirectory& dir, bool move_aside, const std::string& verb);

// A single checkpoint file, verified whole (CheckpointError when damaged).
SelectedCheckpoint verify_file(const std::string& path, const std::string& verb);

// What `keel evaluate`, `keel memory` and `keel predict` read from a RUN|FILE.h5 argument: a run
// directory's newest checkpoint that verifies (damaged newer ones reported and left as they are), or
// a checkpoint file verified whole. UsageError when `target` does not exist.
SelectedCheckpoint select_target(const std::string& target, const std::string& verb);

}  // namespace keel::cli
