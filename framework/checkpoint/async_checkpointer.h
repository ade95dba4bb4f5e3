// Asynchronous checkpoint saves (Orbax's AsyncCheckpointer, PyTorch's async_save): the caller takes
// a CheckpointSnapshot at a step boundary (host copies of every value, checkpoint_snapshot.h) and
// hands it over; one writer thread writes it while training goes on.
//
// At most one save is in flight: save() first waits for the one before. A failed save's error is
// never lost: the next save() or wait() rethrows it, and a destructor that finds it unreported
// prints it to stderr. The destructor lets the save in flight finish, so it completes on a normal
// exit, on an exception unwinding past its owner, and after SIGINT/SIGTERM ended training (the
// writer thread blocks both signals, so the process's handlers run on the training thread).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
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

  // Waits for the save in flight (rethrowing its error, and then saving nothing), then starts
  // writing `snapshot` in the background. Its memory is released as soon as it is written.
  void save(CheckpointSnapshot snapshot);
  // Returns once no save is in flight; rethrows the error of a save that failed since the last
  // save() or wait() (once).
  void wait();
  bool in_flight() const;

 private:
  void run();

  Writer writer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<CheckpointSnapshot> job_;  // handed over, not yet taken by the writer thread
  bool busy_ = false;                        // a save is handed over or being written
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the members it uses exist
};

// Saves `snapshot` as checkpoint snapshot.state.step of `dir` with RunDirectory::save's atomic
// protocol, keeping `keep`: what a synchronous save does in the step and the writer thread does in
// the background.
void save_to_run_directory(RunDirectory& dir, const CheckpointSnapshot& snapshot, int keep);

}  // namespace keel
