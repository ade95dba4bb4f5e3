#include "framework/checkpoint/async_checkpointer.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace keel {

AsyncCheckpointer::AsyncCheckpointer(Writer writer) : writer_(std::move(writer)) {
  if (!writer_) throw std::invalid_argument("AsyncCheckpointer: a writer is required");
  thread_ = std::thread([this] { run(); });
}

AsyncCheckpointer::~AsyncCheckpointer() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (!error_) return;
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "keel: an asynchronous checkpoint save failed: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "keel: an asynchronous checkpoint save failed (an exception of unknown type)\n");
  }
}

CheckpointSnapshot& AsyncCheckpointer::next() {
  wait();
  return buffer_;
}

void AsyncCheckpointer::save() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_) throw std::logic_error("AsyncCheckpointer::save: a save is in flight (call next() first)");
    busy_ = true;
  }
  cv_.notify_all();
}

void AsyncCheckpointer::save(CheckpointSnapshot snapshot) {
  next() = std::move(snapshot);
  save();
}

void AsyncCheckpointer::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

bool AsyncCheckpointer::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

void AsyncCheckpointer::run() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || busy_; });
    if (!busy_) return;  // stopping, nothing left to write
    lock.unlock();
    std::exception_ptr error;
    try {
      writer_(buffer_);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    busy_ = false;
    cv_.notify_all();
  }
}

void save_to_run_directory(RunDirectory& dir, const CheckpointSnapshot& snapshot, int keep) {
  // Read back and verified before it is renamed into place, and so before anything is pruned.
  dir.save(
      snapshot.state.step, [&](const std::string& tmp_path) { write_checkpoint(tmp_path, snapshot); }, keep,
      [](const std::string& written) { verify_checkpoint(written); });
}

}  // namespace keel
