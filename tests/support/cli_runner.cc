#include "tests/support/cli_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#ifndef KEEL_BINARY
#define KEEL_BINARY "keel"
#endif

namespace keel::testing {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string make_temp_dir(const std::string& prefix) {
  std::string templ = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
  return templ;
}

CommandResult run_command(const std::string& command) {
  const std::string dir = make_temp_dir("keel-cmd");
  const std::string out = dir + "/out", err = dir + "/err";
  const std::string full = "(" + command + ") >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  std::filesystem::remove_all(dir);
  return r;
}

CommandResult run_keel(const std::string& args) { return run_command(std::string(KEEL_BINARY) + " " + args); }

BackgroundKeel start_keel(const std::vector<std::string>& args, const std::string& out_path, const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_strings = {KEEL_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, KEEL_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn " KEEL_BINARY " failed");
  return BackgroundKeel{pid, out_path, err_path};
}

bool wait_until_catching(int pid, int signal, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    if (!status.is_open()) return false;
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("State:", 0) == 0 && line.find('Z') != std::string::npos) return false;  // exited
      if (line.rfind("SigCgt:", 0) != 0) continue;
      const unsigned long long caught = std::stoull(line.substr(7), nullptr, 16);
      if (caught & (1ULL << (signal - 1))) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

int wait_for(const BackgroundKeel& process) {
  int status = 0;
  ::waitpid(process.pid, &status, 0);
  return status;
}

std::string md5_of_dir(const std::string& dir) {
  // A run's .lock holds the pid of its last writer: it is the lock's, not data.
  CommandResult r = run_command("cd '" + dir + "' && find . -type f ! -name .lock | LC_ALL=C sort | xargs md5sum");
  return r.out;
}

}  // namespace keel::testing
