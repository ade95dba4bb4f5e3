#include "framework/core/host_threads.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <sched.h>

namespace keel {
namespace {
std::atomic<int> override_threads{0};

int hardware_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// Processes mpirun started on this machine (1 outside mpirun).
int local_processes() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local != nullptr ? std::max(1, std::atoi(local)) : 1;
}

// This process's share of the machine's hardware threads, whatever its affinity mask.
int share_of_machine() { return std::max(1, hardware_threads() / local_processes()); }
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
  return std::min(share_of_machine(), allowed_cpus());
}

int allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  // A machine with more CPUs than a cpu_set_t holds (1024) fails here: every hardware thread then.
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return hardware_threads();
  return std::max(1, CPU_COUNT(&mask));
}

std::string cpu_binding_note() {
  if (std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE") == nullptr) return "";
  const int hardware = hardware_threads(), processes = local_processes();
  const int share = share_of_machine(), allowed = allowed_cpus();
  if (allowed >= share) return "";
  return "mpirun bound this process to " + std::to_string(allowed) + " of this machine's " + std::to_string(hardware) +
         " CPUs, where its share is " + std::to_string(share) + " (" + std::to_string(processes) +
         (processes == 1 ? " process" : " processes") + " here): it computes on " + std::to_string(allowed) +
         (allowed == 1 ? " thread" : " threads") +
         ", and its input pipeline's threads share those CPUs. `mpirun --bind-to none` gives each process its share "
         "(Open MPI binds a process to one core when it starts two or fewer, to a socket when more).";
}

void set_host_threads(int threads) {
  if (threads < 0 || threads > kMaxHostThreads) {
    throw std::invalid_argument("a thread count must be from 1 to " + std::to_string(kMaxHostThreads) + " (got " +
                                std::to_string(threads) + ")");
  }
  override_threads.store(threads, std::memory_order_relaxed);
}

}  // namespace keel
