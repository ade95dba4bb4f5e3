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

void AsyncCheckpointer::save(CheckpointSnapshot snapshot) {
  wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::make_unique<CheckpointSnapshot>(std::move(snapshot));
    busy_ = true;
  }
  cv_.notify_all();
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
    cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
    if (job_ == nullptr) return;  // stopping, nothing left to write
    std::unique_ptr<CheckpointSnapshot> job = std::move(job_);
    lock.unlock();
    std::exception_ptr error;
    try {
      writer_(*job);
    } catch (...) {
      error = std::current_exception();
    }
    job.reset();  // the snapshot's memory is free before a next save may take one
    lock.lock();
    if (error && !error_) error_ = error;
    busy_ = false;
    cv_.notify_all();
  }
}

void save_to_run_directory(RunDirectory& dir, const CheckpointSnapshot& snapshot, int keep) {
  dir.save(snapshot.state.step, [&](const std::string& tmp_path) { write_checkpoint(tmp_path, snapshot); }, keep);
}

}  // namespace keel
