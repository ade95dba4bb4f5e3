// A run directory: numbered checkpoint files, a `latest` pointer, and crash-safe saving.
//
//   <dir>/ckpt-<step>.h5   one file per saved step (canonical decimal, no leading zeros)
//   <dir>/latest           the file name of the newest checkpoint plus "\n", e.g. "ckpt-700.h5\n"
//
// A save never leaves only a broken file behind: the checkpoint is written under a temporary name
// in the same directory, fsynced and renamed into place, and only then is `latest` replaced the
// same way. A crash at any point leaves the previous `latest` and the file it names intact (plus,
// at worst, a stale temporary that remove_stale_temporaries() deletes).
//
// Not supported: two processes saving into one run directory at the same time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/checkpoint/checkpoint_error.h"

namespace keel {

class RunDirectory {
 public:
  // The directory need not exist yet; save() creates it.
  explicit RunDirectory(std::string dir);

  const std::string& dir() const { return dir_; }

  // Full path of the checkpoint `latest` names, or nullopt if there is no `latest` (a fresh run).
  // Throws CheckpointError if `latest` is unreadable, does not name a ckpt-<step>.h5 file, or names
  // a file that does not exist.
  std::optional<std::string> latest() const;

  // "<dir>/ckpt-<step>.h5"; step must be >= 0.
  std::string checkpoint_path(int64_t step) const;

  // Every ckpt-<step>.h5 in the directory as (step, full path), sorted by step; empty if the
  // directory does not exist. Temporaries and other files are ignored.
  std::vector<std::pair<int64_t, std::string>> checkpoints() const;

  // Saves checkpoint `step`: creates the directory if needed, calls write(tmp_path) to write the
  // whole file at a temporary path in the directory, fsyncs and renames it to ckpt-<step>.h5
  // (replacing an existing one of that step), fsyncs the directory, points `latest` at it the same
  // way, then deletes the lowest-step checkpoints so that at most `keep` remain (keep <= 0 keeps
  // all; the checkpoint `latest` names is never deleted).
  // If `write` throws, its temporary file is removed, nothing else is touched, and the exception
  // propagates unchanged. Other failures throw CheckpointError.
  void save(int64_t step, const std::function<void(const std::string& tmp_path)>& write, int keep);

  // Deletes temporaries a crashed save left behind (".ckpt-*.tmp-*" and ".latest.tmp-*").
  // Call at startup, before saving; never while another process saves into this directory.
  void remove_stale_temporaries() const;

 private:
  std::string dir_;
};

// Writes a new file at `path` as RunDirectory::save writes a checkpoint (write(tmp_path) under a
// temporary name in the same directory, fsync, rename), but never over an existing file:
// CheckpointError, with nothing written, when `path` exists or its directory does not.
void write_new_file(const std::string& path, const std::function<void(const std::string& tmp_path)>& write);

}  // namespace keel
