#include "tests/support/cli_runner.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

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

std::string md5_of_dir(const std::string& dir) {
  // A run's .lock holds the pid of its last writer: it is the lock's, not data.
  CommandResult r = run_command("cd '" + dir + "' && find . -type f ! -name .lock | LC_ALL=C sort | xargs md5sum");
  return r.out;
}

}  // namespace keel::testing
