#include "tools/cli/checkpoint_selection.h"

#include <cstdio>
#include <filesystem>

#include "framework/core/limits.h"
#include "tools/cli/run_config.h"

namespace keel::cli {
namespace {

void note_unverified(const SelectedCheckpoint& s, const std::string& verb) {
  if (s.check.checksummed) return;
  std::fprintf(stderr,
               "keel %s: note: %s is of checkpoint format %lld, which predates checksums: it is used unverified "
               "(checkpoints keel writes now carry them)\n",
               verb.c_str(), s.path.c_str(), static_cast<long long>(s.check.format_version));
}

}  // namespace

SelectedCheckpoint select_checkpoint(const RunDirectory& dir, bool move_aside, const std::string& verb) {
  if (dir.checkpoints().empty()) {
    throw UsageError(dir.dir() + " holds no checkpoint (no ckpt-<step>.h5); start a run there with `keel train`");
  }
  SelectedCheckpoint selected;
  std::vector<RunDirectory::Rejected> rejected;
  std::optional<std::string> path = dir.newest_verified(
      [&](const std::string& p) { selected.check = verify_checkpoint(p); }, move_aside, &rejected);
  for (const RunDirectory::Rejected& r : rejected) {
    std::fprintf(stderr, "keel %s: skipping a damaged checkpoint: %s%s\n", verb.c_str(), r.reason.c_str(),
                 r.moved_to.empty() ? "" : (" (kept aside, untouched, as " + r.moved_to + ")").c_str());
  }
  if (!path) {
    throw CheckpointError("no checkpoint in " + dir.dir() + " verifies (" + std::to_string(rejected.size()) +
                          " damaged; see above): nothing to continue from");
  }
  selected.path = *path;
  if (!rejected.empty()) {
    std::fprintf(stderr, "keel %s: using %s, the newest checkpoint that verifies\n", verb.c_str(), path->c_str());
  }
  note_unverified(selected, verb);
  return selected;
}

SelectedCheckpoint verify_file(const std::string& path, const std::string& verb) {
  SelectedCheckpoint selected{path, verify_checkpoint(path)};
  note_unverified(selected, verb);
  return selected;
}

SelectedCheckpoint select_target(const std::string& target, const std::string& verb) {
  if (std::filesystem::is_directory(target)) return select_checkpoint(RunDirectory(target), /*move_aside=*/false, verb);
  if (!std::filesystem::exists(target)) throw UsageError("no such run directory or checkpoint: " + quote_untrusted(target));
  return verify_file(target, verb);
}

}  // namespace keel::cli
