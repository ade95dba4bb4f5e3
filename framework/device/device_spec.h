// What a replicated device is: N logical cores, each with its own HBM budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

struct DeviceSpec {
  std::string name;               // "v3-8", "cpu", or "custom"
  int cores = 1;
  int64_t hbm_bytes_per_core = 0; // 0: no budget (host RAM)

  bool has_budget() const { return hbm_bytes_per_core > 0; }

  // The presets of DESIGN.md (contract). Throws std::invalid_argument naming the known presets.
  static DeviceSpec preset(const std::string& name);
  // 1..kMaxCores cores; hbm_bytes_per_core 0 (no budget) or 1..kMaxHbmBytesPerCore (core/limits.h).
  static DeviceSpec custom(int cores, int64_t hbm_bytes_per_core);
  // A spec read back (a checkpoint's): name 1..kMaxNameBytes, cores and HBM within the limits above.
  // Throws std::invalid_argument.
  void validate() const;
  static const std::vector<std::string>& preset_names();
};

// "512MiB", "16GiB", "95GB", "1048576" → bytes. Throws std::invalid_argument on anything else.
int64_t parse_bytes(const std::string& text);
// 16 GiB → "16.00 GiB"; small values in B/KiB/MiB.
std::string format_bytes(int64_t bytes);

}  // namespace keel
