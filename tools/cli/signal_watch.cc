#include "tools/cli/signal_watch.h"

#include <pthread.h>

#include <ctime>

namespace keel::cli {
namespace {

// The watch's `received`, for the handler that threads started before it run.
std::atomic<std::atomic<int>*> g_received{nullptr};

// A second signal ends the process as SIG_DFL would; called with `sig` blocked in this thread (in the
// handler, or in the watcher), so it is delivered once unblocked, by the handler's return or here.
void end_the_default_way(int sig) {
  ::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  ::raise(sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
}

extern "C" void on_signal(int sig) {
  std::atomic<int>* received = g_received.load();
  int none = 0;
  if (received != nullptr && received->compare_exchange_strong(none, sig)) return;
  end_the_default_way(sig);
}

}  // namespace

SignalWatch::SignalWatch(std::atomic<int>* received) : received_(received) {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  g_received.store(received_);
  struct sigaction action {};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &old_int_);
  sigaction(SIGTERM, &action, &old_term_);
  pthread_sigmask(SIG_BLOCK, &signals_, &old_mask_);
  watcher_ = std::thread([this] { watch(); });
}

SignalWatch::~SignalWatch() {
  stop_.store(true);
  watcher_.join();
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_received.store(nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

void SignalWatch::watch() {
  const timespec tick{0, 50'000'000};  // how soon the watch notices it is to stop
  while (!stop_.load()) {
    const int sig = sigtimedwait(&signals_, nullptr, &tick);
    if (sig <= 0) continue;  // the tick passed, or another signal interrupted the wait
    int none = 0;
    if (!received_->compare_exchange_strong(none, sig)) end_the_default_way(sig);
  }
}

}  // namespace keel::cli
