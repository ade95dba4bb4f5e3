// Asynchronous checkpoint saves (Orbax's AsyncCheckpointer, PyTorch's async_save): at a step
// boundary the caller fills the checkpointer's snapshot buffer (host copies of every value,
// checkpoint_snapshot.h) and hands it over; one writer thread writes it while training goes on.
//
// One buffer, so at most one save is in flight: next() waits for the save before. The buffer is
// kept from save to save, so a refill of the same model allocates nothing (no page faults in the
// step): its memory is held while the checkpointer lives. A failed save's error is never lost: the
// next next()/save()/wait() rethrows it, and a destructor that finds it unreported prints it to
// stderr. The destructor lets the save in flight finish, so it completes on a normal exit, on an
// exception unwinding past its owner, and after SIGINT/SIGTERM ended training (the writer thread
// blocks both signals, so the process's handlers run on the training thread).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "framework/checkpoint/checkpoint_snapshot.h"
#include "framework/checkpoint/run_directory.h"

namespace keel {

class AsyncCheckpointer {
 public:
  // Writes one snapshot, on the writer thread; its exceptions are the save's error.
  using Writer = std::function<void(const CheckpointSnapshot&)>;

  explicit AsyncCheckpointer(Writer writer);
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // The snapshot the next save() writes, to fill in place (snapshot_checkpoint(..., into)). Waits
  // for the save in flight first, and rethrows its error (then the buffer is not handed out).
  CheckpointSnapshot& next();
  // Starts writing next()'s buffer in the background.
  void save();
  // next() = std::move(snapshot), then save().
  void save(CheckpointSnapshot snapshot);
  // Returns once no save is in flight; rethrows the error of a save that failed since the last
  // call that reported one (once).
  void wait();
  bool in_flight() const;

 private:
  void run();

  Writer writer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  CheckpointSnapshot buffer_;  // the training thread's while !busy_, the writer thread's while busy_
  bool busy_ = false;          // a save is handed over or being written
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the members it uses exist
};

// Saves `snapshot` as checkpoint snapshot.state.step of `dir` with RunDirectory::save's atomic
// protocol, keeping `keep`: what a synchronous save does in the step and the writer thread does in
// the background.
void save_to_run_directory(RunDirectory& dir, const CheckpointSnapshot& snapshot, int keep);

}  // namespace keel
