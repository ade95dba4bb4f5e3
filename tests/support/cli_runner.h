// Runs the keel binary (or any shell command) for end-to-end tests.
#pragma once

#include <string>
#include <vector>

namespace keel::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `command` through /bin/sh; stdout and stderr captured separately.
CommandResult run_command(const std::string& command);
// Runs `<keel binary> <args>`.
CommandResult run_keel(const std::string& args);
// A fresh empty directory under the system temp dir, removed by the test fixture that owns it.
std::string make_temp_dir(const std::string& prefix);
std::string read_file(const std::string& path);

// A keel process started in the background (for signal tests): stdout and stderr go to files.
struct BackgroundKeel {
  int pid = -1;
  std::string out_path, err_path;
};
BackgroundKeel start_keel(const std::vector<std::string>& args, const std::string& out_path, const std::string& err_path);
// True once process `pid` has a handler installed for `signal` (/proc/<pid>/status, SigCgt), false
// if it exits or `timeout_ms` passes first.
bool wait_until_catching(int pid, int signal, int timeout_ms);
// Waits for the process; its raw wait status (WIFEXITED / WIFSIGNALED tell an exit from a kill).
int wait_for(const BackgroundKeel& process);
std::string md5_of_dir(const std::string& dir);  // stable digest of every file's name and bytes

}  // namespace keel::testing
