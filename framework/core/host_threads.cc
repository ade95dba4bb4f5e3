#include "framework/core/host_threads.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace keel {

int host_threads() {
  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int processes = local != nullptr ? std::atoi(local) : 1;
  return processes > 1 ? std::max(1, hardware / processes) : hardware;
}

}  // namespace keel
