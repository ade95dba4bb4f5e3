#include "framework/core/host_threads.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace keel {
namespace {
std::atomic<int> override_threads{0};
}  // namespace

int parse_thread_count(const std::string& text, const std::string& what) {
  const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
  const bool digits = !text.empty() && text.size() <= 5 && text.find_first_not_of("0123456789") == std::string::npos;
  const int value = digits ? std::atoi(text.c_str()) : 0;
  if (value < 1 || value > kMaxHostThreads) {
    throw std::invalid_argument(what + " '" + shown + "' is not a thread count: give a whole number from 1 to " +
                                std::to_string(kMaxHostThreads));
  }
  return value;
}

int host_threads() {
  if (const int set = override_threads.load(std::memory_order_relaxed); set > 0) return set;
  if (const char* env = std::getenv("KEEL_NUM_THREADS"); env != nullptr && *env != '\0') {
    return parse_thread_count(env, "KEEL_NUM_THREADS");
  }
  return machine_threads();
}

int machine_threads() {
  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int processes = local != nullptr ? std::atoi(local) : 1;
  return processes > 1 ? std::max(1, hardware / processes) : hardware;
}

void set_host_threads(int threads) {
  if (threads < 0 || threads > kMaxHostThreads) {
    throw std::invalid_argument("a thread count must be from 1 to " + std::to_string(kMaxHostThreads) + " (got " +
                                std::to_string(threads) + ")");
  }
  override_threads.store(threads, std::memory_order_relaxed);
}

}  // namespace keel
