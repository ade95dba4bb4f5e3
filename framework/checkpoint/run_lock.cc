#include "framework/checkpoint/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "framework/checkpoint/run_directory.h"

namespace keel {
namespace {

constexpr const char* kLockName = ".lock";

// The pid the holder wrote, for the message: digits only, at most 20 of them.
std::string holder_pid(int fd) {
  char buffer[32] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  std::string pid;
  for (ssize_t i = 0; i < n && buffer[i] >= '0' && buffer[i] <= '9' && pid.size() < 20; ++i) pid += buffer[i];
  return pid.empty() ? "unknown" : pid;
}

void write_pid(int fd) {
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    // The pid is only for messages; the lock itself holds.
  }
}

}  // namespace

RunLock RunLock::acquire(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw CheckpointError("cannot create run directory " + dir + ": " + ec.message());
  const std::string path = (std::filesystem::path(dir) / kLockName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw CheckpointError("cannot open the run's lock file " + path + ": " + std::strerror(errno));
  RunLock lock(fd);
  int rc;
  do rc = ::flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == EWOULDBLOCK) {
      throw RunLockedError("run directory " + dir + " is in use by another keel process (pid " + holder_pid(fd) +
                           "), which trains in it; wait for it to end or stop it. `keel evaluate` can read the "
                           "run meanwhile.");
    }
    throw CheckpointError("cannot lock run directory " + dir + " (" + path + "): " + std::strerror(errno));
  }
  write_pid(fd);
  RunDirectory(dir).remove_stale_temporaries();
  return lock;
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace keel
