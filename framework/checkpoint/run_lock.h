// One writer per run directory: `keel train` and `keel resume` hold an exclusive flock(2) on
// "<dir>/.lock" for as long as they run, so that two of them never interleave their saves. The kernel
// releases the lock when the process ends, however it ends (a SIGKILLed run does not block the next).
// Readers (`keel evaluate`, `keel memory`) take no lock. The lock file holds the holder's pid, for
// the message a second writer gets.
#pragma once

#include <string>

#include "framework/checkpoint/checkpoint_error.h"

namespace keel {

// Thrown when another process holds the run's lock (a CheckpointError: bad usage, exit status 2).
struct RunLockedError : CheckpointError {
  using CheckpointError::CheckpointError;
};

class RunLock {
 public:
  // Creates the directory if needed and takes its lock without waiting; RunLockedError naming the
  // holder's pid when another process has it. Then deletes the temporaries of crashed saves (which
  // only the lock holder may do).
  static RunLock acquire(const std::string& dir);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&&) = delete;
  RunLock(const RunLock&) = delete;
  ~RunLock();  // releases the lock (the file stays: removing it would race with the next taker)

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace keel
