// A run directory: numbered checkpoint files, a `latest` pointer, and crash-safe saving.
//
//   <dir>/ckpt-<step>.h5          one file per saved step (canonical decimal, no leading zeros)
//   <dir>/latest                  the file name of the newest checkpoint plus "\n", e.g. "ckpt-700.h5\n"
//   <dir>/ckpt-<step>.h5.corrupt  a checkpoint that failed verification, set aside by `resume`, untouched
//   <dir>/best.h5                 the best epoch's checkpoint (ModelCheckpoint's save_best_only); never
//                                 resumed from, never pruned
//   <dir>/.lock                   held (flock) by the one process that trains in the run (run_lock.h)
//
// A save never leaves only a broken file behind: the checkpoint is written under a temporary name
// in the same directory, fsynced, read back and verified, and renamed into place, and only then is
// `latest` replaced the same way. A crash at any point leaves the previous `latest` and the file it
// names intact (plus, at worst, a stale temporary that remove_stale_temporaries() deletes).
//
// `latest` is a hint for other tools (TensorFlow's `checkpoint` file plays that part): keel resumes
// from the newest checkpoint that verifies, whatever `latest` says (newest_verified()).
//
// Two processes must not save into one run directory at the same time: `keel train` and `keel
// resume` hold its RunLock.
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
  // Checks a checkpoint file whole; throws CheckpointError when it is damaged (verify_checkpoint).
  using Verifier = std::function<void(const std::string& path)>;

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
  // all; the new checkpoint, which `latest` names, is never deleted, nor any of a higher step).
  // If `write` throws, its temporary file is removed, nothing else is touched, and the exception
  // propagates unchanged. Other failures throw CheckpointError.
  // With `verify`, the written file is read back and verified before it is renamed into place
  // (and so before anything is pruned); a file that fails is removed and the error propagates.
  void save(int64_t step, const std::function<void(const std::string& tmp_path)>& write, int keep,
            const Verifier& verify = {});

  // The newest checkpoint (highest step) for which verify(path) does not throw CheckpointError.
  // Those newer than it that fail are reported in `rejected` (path and reason); with move_aside,
  // each is renamed to "<name>.corrupt" (or ".corrupt-2", ...: nothing is ever replaced), its bytes
  // untouched — only while holding the run's lock. A file that vanishes meanwhile (pruned by a
  // training process) is skipped silently. nullopt when no checkpoint verifies.
  struct Rejected {
    std::string path;
    std::string reason;
    std::string moved_to;  // empty when left in place
  };
  std::optional<std::string> newest_verified(const Verifier& verify, bool move_aside,
                                             std::vector<Rejected>* rejected) const;

  // "<dir>/best.h5": ModelCheckpoint(save_best_only)'s file, written with replace_file(). Not a
  // ckpt-<step>.h5, so checkpoints(), latest() and newest_verified() never see it, and pruning never
  // removes it.
  std::string best_path() const;

  // Moves everything of a previous run (checkpoints, `latest`, set-aside files, best.h5, history.csv
  // and the TensorBoard logs/) into a new subdirectory "replaced-<n>" and returns its path; nothing
  // is deleted. For `keel train --overwrite`.
  std::string move_previous_run_aside() const;

  // True when the directory holds a checkpoint, a `latest` or a set-aside checkpoint.
  bool holds_a_run() const;

  // Deletes temporaries a crashed save left behind (".ckpt-*.tmp-*", ".latest.tmp-*", ".best.h5.tmp-*").
  // Call at startup, before saving; never while another process saves into this directory.
  void remove_stale_temporaries() const;

 private:
  std::string dir_;
};

// Writes a new file at `path` as RunDirectory::save writes a checkpoint (write(tmp_path) under a
// temporary name in the same directory, fsync, rename), but never over an existing file:
// CheckpointError, with nothing written, when `path` exists or its directory does not.
void write_new_file(const std::string& path, const std::function<void(const std::string& tmp_path)>& write);

// Writes `path` as RunDirectory::save writes a checkpoint — write(tmp_path) under a temporary name
// ".<name>.tmp-<pid>" in the same directory, fsync, verify, rename over the old file, fsync the
// directory — so a crash leaves the previous file whole. CheckpointError when the directory does
// not exist; an exception from `write` or `verify` propagates after the temporary is removed.
void replace_file(const std::string& path, const std::function<void(const std::string& tmp_path)>& write,
                  const RunDirectory::Verifier& verify = {});

}  // namespace keel
