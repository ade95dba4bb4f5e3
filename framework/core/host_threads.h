// How many hardware threads this process may use: all of the machine's, or under mpirun its share,
// hardware_concurrency() divided by the processes mpirun started on this machine
// (OMPI_COMM_WORLD_LOCAL_SIZE), so that P processes on one machine do not each start one thread per
// core; and never more than the CPUs the process may run on (its affinity mask: `taskset`, a
// container's cpuset, mpirun's binding), so that keel never starts more compute threads than it has
// CPUs. KEEL_NUM_THREADS, or set_host_threads() (the CLI's --threads), overrides all of these. What
// AUTOTUNE, the strategy's compute slots, the kernels' thread pool (framework/core/thread_pool.h) and
// the CLI's parallel loops are sized by.
#pragma once

#include <string>

namespace keel {

// The largest thread count keel accepts from a user.
inline constexpr int kMaxHostThreads = 4096;

// At least 1. Throws std::invalid_argument when KEEL_NUM_THREADS is set to anything but a whole number
// from 1 to kMaxHostThreads.
int host_threads();

// This process's share of the machine's hardware threads, whatever KEEL_NUM_THREADS or
// set_host_threads() say: hardware_concurrency(), divided under mpirun as above, at most
// allowed_cpus(). At least 1. Where it exceeds host_threads(), threads keel starts besides its compute
// threads (an input pipeline's) have cores of their own.
int machine_threads();

// The CPUs the calling thread may run on (sched_getaffinity), at least 1; hardware_concurrency()
// where the mask cannot be read.
int allowed_cpus();

// Under mpirun, when the launcher bound this process to fewer CPUs than its share of the machine
// (Open MPI binds each process to one core when it starts two or fewer, to a socket when more,
// unless told otherwise): what that costs and the option that gives the process its share. Empty
// otherwise, and outside mpirun (a `taskset` is the user's own choice).
std::string cpu_binding_note();

// Overrides host_threads() for this process from now on (0: back to KEEL_NUM_THREADS or the machine's).
// Call it before making a strategy; strategies already made keep their threads. Throws
// std::invalid_argument outside [0, kMaxHostThreads].
void set_host_threads(int threads);

// `text` as a thread count (1 .. kMaxHostThreads), or std::invalid_argument naming `what`.
int parse_thread_count(const std::string& text, const std::string& what);

}  // namespace keel
