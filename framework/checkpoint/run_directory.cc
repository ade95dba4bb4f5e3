#include "framework/checkpoint/run_directory.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace keel {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLatestName = "latest";
constexpr const char* kBestName = "best.h5";
// What a run writes beside its checkpoints, moved aside with them (train --overwrite).
constexpr const char* kRunOutputs[] = {kBestName, "history.csv", "logs"};

std::string checkpoint_name(int64_t step) { return "ckpt-" + std::to_string(step) + ".h5"; }

// The step of a canonical "ckpt-<step>.h5" name; nullopt for anything else (including leading
// zeros, so that every step has exactly one file name).
std::optional<int64_t> parse_checkpoint_name(const std::string& name) {
  constexpr std::string_view prefix = "ckpt-", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size()) return std::nullopt;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + name.size() - suffix.size();
  if (*begin < '0' || *begin > '9' || (*begin == '0' && end - begin > 1)) return std::nullopt;
  int64_t step = 0;
  auto [ptr, ec] = std::from_chars(begin, end, step);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return step;
}

// `latest` contents for a message: at most 60 characters, non-printables escaped.
std::string quoted_contents(const std::string& text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < 60; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') out += "\\n";
    else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > 60) out += "...";
  return out + "\"";
}

std::string errno_text() { return std::strerror(errno); }

// Durability of a file's contents: without it, a crash after the rename can leave a renamed but
// empty file on some file systems (ext4 with delalloc, xfs).
void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw CheckpointError("cannot open " + path + " to fsync it: " + errno_text());
  if (::fsync(fd) != 0) {
    std::string reason = errno_text();
    ::close(fd);
    throw CheckpointError("cannot fsync " + path + ": " + reason);
  }
  if (::close(fd) != 0) throw CheckpointError("cannot close " + path + ": " + errno_text());
}

void write_all(const std::string& path, const std::string& contents) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw CheckpointError("cannot create " + path + ": " + errno_text());
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string reason = errno_text();
      ::close(fd);
      throw CheckpointError("cannot write " + path + ": " + reason);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    std::string reason = errno_text();
    ::close(fd);
    throw CheckpointError("cannot fsync " + path + ": " + reason);
  }
  if (::close(fd) != 0) throw CheckpointError("cannot close " + path + ": " + errno_text());
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec)
    throw CheckpointError("cannot rename " + from.string() + " to " + to.string() + ": " +
                          ec.message());
}

bool is_temporary_name(const std::string& name) {
  auto starts_with = [&](std::string_view prefix) { return name.rfind(prefix, 0) == 0; };
  return (starts_with(".ckpt-") && name.find(".tmp-") != std::string::npos) ||
         starts_with(".latest.tmp-") || starts_with(std::string(".") + kBestName + ".tmp-");
}

// "ckpt-<step>.h5.corrupt", "ckpt-<step>.h5.corrupt-2", ...: a checkpoint newest_verified() set aside.
bool is_set_aside_name(const std::string& name) {
  const size_t mark = name.find(".h5.corrupt");
  return mark != std::string::npos && parse_checkpoint_name(name.substr(0, mark + 3)).has_value();
}

// Renames `path` to path + suffix (or + suffix + "-2", ...), never over an existing file; returns
// the new path.
std::string set_aside(const std::string& path, const std::string& suffix) {
  for (int n = 1; n < 1000; ++n) {
    std::string target = path;
    target += suffix;
    if (n > 1) target += "-" + std::to_string(n);
    if (::renameat2(AT_FDCWD, path.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) == 0) {
      const fs::path parent = fs::path(path).parent_path();
      fsync_path(parent.empty() ? "." : parent.string(), true);
      return target;
    }
    if (errno != EEXIST) throw CheckpointError("cannot rename " + path + " to " + target + ": " + errno_text());
  }
  throw CheckpointError("cannot set " + path + " aside: 999 files named " + path + suffix + "-N exist already");
}

}  // namespace

RunDirectory::RunDirectory(std::string dir) : dir_(std::move(dir)) {}

std::optional<std::string> RunDirectory::latest() const {
  const fs::path pointer = fs::path(dir_) / kLatestName;
  std::error_code ec;
  if (!fs::exists(pointer, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw CheckpointError("cannot read " + pointer.string() + ": " + ec.message());
    return std::nullopt;
  }
  std::ifstream in(pointer, std::ios::binary);
  if (!in) throw CheckpointError("cannot read " + pointer.string());
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw CheckpointError("cannot read " + pointer.string());
  std::string name = text;
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' '))
    name.pop_back();
  if (!parse_checkpoint_name(name))
    throw CheckpointError("run directory " + dir_ + ": " + pointer.string() +
                          " does not name a checkpoint (it contains " + quoted_contents(text) +
                          ", expected e.g. \"ckpt-700.h5\")");
  const fs::path target = fs::path(dir_) / name;
  if (!fs::is_regular_file(target, ec))
    throw CheckpointError("run directory " + dir_ + ": " + pointer.string() + " names " + name +
                          ", but " + target.string() + " does not exist");
  return target.string();
}

std::string RunDirectory::checkpoint_path(int64_t step) const {
  if (step < 0)
    throw CheckpointError("run directory " + dir_ + ": invalid checkpoint step " +
                          std::to_string(step));
  return (fs::path(dir_) / checkpoint_name(step)).string();
}

std::vector<std::pair<int64_t, std::string>> RunDirectory::checkpoints() const {
  std::vector<std::pair<int64_t, std::string>> result;
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return result;
  fs::directory_iterator it(dir_, ec);
  if (ec) throw CheckpointError("cannot list run directory " + dir_ + ": " + ec.message());
  for (const fs::directory_entry& entry : it) {
    std::optional<int64_t> step = parse_checkpoint_name(entry.path().filename().string());
    std::error_code type_ec;
    if (step && entry.is_regular_file(type_ec)) result.emplace_back(*step, entry.path().string());
  }
  std::sort(result.begin(), result.end());
  return result;
}

void RunDirectory::save(int64_t step,
                        const std::function<void(const std::string& tmp_path)>& write, int keep,
                        const Verifier& verify) {
  const std::string name = checkpoint_name(step);
  const fs::path final_path = checkpoint_path(step);  // validates step
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw CheckpointError("cannot create run directory " + dir_ + ": " + ec.message());

  const std::string pid = std::to_string(::getpid());
  const fs::path tmp = fs::path(dir_) / ("." + name + ".tmp-" + pid);
  fs::remove(tmp, ec);
  try {
    write(tmp.string());
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  try {
    if (!fs::is_regular_file(tmp, ec))
      throw CheckpointError("run directory " + dir_ + ": saving step " + std::to_string(step) +
                            " wrote nothing to " + tmp.string());
    fsync_path(tmp.string(), false);
    if (verify) verify(tmp.string());  // read back before it gets a checkpoint's name
    rename_or_throw(tmp, final_path);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  fsync_path(dir_, true);

  const fs::path latest_tmp = fs::path(dir_) / (std::string(".") + kLatestName + ".tmp-" + pid);
  try {
    write_all(latest_tmp.string(), name + "\n");
    rename_or_throw(latest_tmp, fs::path(dir_) / kLatestName);
  } catch (...) {
    fs::remove(latest_tmp, ec);
    throw;
  }
  fsync_path(dir_, true);

  if (keep <= 0) return;
  std::vector<std::pair<int64_t, std::string>> existing = checkpoints();
  size_t excess = existing.size() > static_cast<size_t>(keep) ? existing.size() - keep : 0;
  for (const auto& [old_step, old_path] : existing) {  // lowest steps first
    if (excess == 0 || old_step >= step) break;  // never the new one, nor one of a higher step
    fs::remove(old_path, ec);
    if (ec)
      throw CheckpointError("run directory " + dir_ + ": saved " + name +
                            " but cannot delete old checkpoint " + old_path + ": " + ec.message());
    --excess;
  }
}

std::optional<std::string> RunDirectory::newest_verified(const Verifier& verify, bool move_aside,
                                                         std::vector<Rejected>* rejected) const {
  std::vector<std::pair<int64_t, std::string>> all = checkpoints();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string& path = it->second;
    try {
      verify(path);
      return path;
    } catch (const CheckpointError& e) {
      std::error_code ec;
      if (!fs::exists(path, ec)) continue;  // pruned by a training process meanwhile
      Rejected r{path, e.what(), ""};
      if (move_aside) r.moved_to = set_aside(path, ".corrupt");
      if (rejected) rejected->push_back(std::move(r));
    }
  }
  return std::nullopt;
}

bool RunDirectory::holds_a_run() const {
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return false;
  if (fs::exists(fs::path(dir_) / kLatestName, ec) || !checkpoints().empty()) return true;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, ec)) {
    if (is_set_aside_name(entry.path().filename().string())) return true;
  }
  return false;
}

std::string RunDirectory::move_previous_run_aside() const {
  std::error_code ec;
  fs::path target;
  for (int n = 1;; ++n) {
    target = fs::path(dir_) / ("replaced-" + std::to_string(n));
    if (fs::create_directory(target, ec)) break;
    if (ec) throw CheckpointError("cannot create " + target.string() + ": " + ec.message());
  }
  std::vector<fs::path> previous;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const bool output = std::find(std::begin(kRunOutputs), std::end(kRunOutputs), name) != std::end(kRunOutputs);
    if (name == kLatestName || output || parse_checkpoint_name(name) || is_set_aside_name(name)) {
      previous.push_back(entry.path());
    }
  }
  if (ec) throw CheckpointError("cannot list run directory " + dir_ + ": " + ec.message());
  for (const fs::path& path : previous) rename_or_throw(path, target / path.filename());
  fsync_path(target.string(), true);
  fsync_path(dir_, true);
  return target.string();
}

std::string RunDirectory::best_path() const { return (fs::path(dir_) / kBestName).string(); }

void RunDirectory::remove_stale_temporaries() const {
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return;
  fs::directory_iterator it(dir_, ec);
  if (ec) throw CheckpointError("cannot list run directory " + dir_ + ": " + ec.message());
  // Collected first: removing entries while iterating a directory is unspecified behaviour.
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : it)
    if (is_temporary_name(entry.path().filename().string())) stale.push_back(entry.path());
  for (const fs::path& path : stale) {
    fs::remove(path, ec);
    if (ec)
      throw CheckpointError("run directory " + dir_ + ": cannot delete stale temporary " +
                            path.string() + ": " + ec.message());
  }
}

namespace {

// The directory `target` goes into; it must exist.
fs::path existing_parent(const fs::path& target) {
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw CheckpointError("cannot write " + target.string() + ": directory " + dir.string() + " does not exist");
  }
  return dir;
}

// dir/.NAME.tmp-PID, removed if a killed save of this process id left it.
fs::path fresh_temporary(const fs::path& target, const fs::path& dir) {
  std::string tmp_name = ".";  // built in steps: GCC 12 warns (-Wrestrict) on "." + std::string&&
  tmp_name += target.filename().string();
  tmp_name += ".tmp-" + std::to_string(::getpid());
  const fs::path tmp = dir / tmp_name;
  std::error_code ec;
  fs::remove(tmp, ec);
  return tmp;
}

}  // namespace

void write_new_file(const std::string& path, const std::function<void(const std::string& tmp_path)>& write) {
  const fs::path target(path);
  const fs::path dir = existing_parent(target);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target, ec))) {
    throw CheckpointError(path + " already exists; keel never writes over a file: choose a new name");
  }
  const fs::path tmp = fresh_temporary(target, dir);
  try {
    write(tmp.string());
    fsync_path(tmp.string(), false);
    // Atomic and never over a file that appeared meanwhile.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
      throw CheckpointError(errno == EEXIST ? path + " already exists; keel never writes over a file: choose a new name"
                                            : "cannot rename " + tmp.string() + " to " + path + ": " + errno_text());
    }
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  fsync_path(dir.string(), true);
}

void replace_file(const std::string& path, const std::function<void(const std::string& tmp_path)>& write,
                  const RunDirectory::Verifier& verify) {
  const fs::path target(path);
  const fs::path dir = existing_parent(target);
  std::error_code ec;
  const fs::path tmp = fresh_temporary(target, dir);
  try {
    write(tmp.string());
    if (!fs::is_regular_file(tmp, ec)) throw CheckpointError("saving " + path + " wrote nothing");
    fsync_path(tmp.string(), false);
    if (verify) verify(tmp.string());  // read back before it takes the name
    rename_or_throw(tmp, target);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  fsync_path(dir.string(), true);
}

}  // namespace keel
