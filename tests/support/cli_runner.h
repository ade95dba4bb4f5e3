// Runs the keel binary (or any shell command) for end-to-end tests.
#pragma once

#include <string>

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
std::string md5_of_dir(const std::string& dir);  // stable digest of every file's name and bytes

}  // namespace keel::testing
