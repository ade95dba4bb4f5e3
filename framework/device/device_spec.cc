#include "framework/device/device_spec.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "framework/core/limits.h"

namespace keel {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

struct Preset {
  const char* name;
  int cores;
  int64_t hbm_bytes_per_core;
};

// One entry per TensorCore as TensorFlow sees it; megacore chips (v4, v5p) are one device per chip.
const Preset kPresets[] = {
    {"cpu", 1, 0},
    {"v2-8", 8, 8 * kGiB},
    {"v3-8", 8, 16 * kGiB},
    {"v4-8", 4, 32 * kGiB},
    {"v5e-8", 8, 16 * kGiB},
    {"v5p-8", 4, int64_t{95} * 1000 * 1000 * 1000},
    {"v6e-8", 8, 32 * kGiB},
};

}  // namespace

const std::vector<std::string>& DeviceSpec::preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Preset& p : kPresets) v.emplace_back(p.name);
    return v;
  }();
  return names;
}

DeviceSpec DeviceSpec::preset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return DeviceSpec{p.name, p.cores, p.hbm_bytes_per_core};
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown device preset '" + quote_untrusted(name) + "' (known: " + known +
                              "; or give --cores N --hbm-per-core SIZE)");
}

DeviceSpec DeviceSpec::custom(int cores, int64_t hbm_bytes_per_core) {
  check_in_range("--cores", cores, 1, kMaxCores);
  if (hbm_bytes_per_core != 0) check_in_range("--hbm-per-core (bytes)", hbm_bytes_per_core, 1, kMaxHbmBytesPerCore);
  return DeviceSpec{"custom", cores, hbm_bytes_per_core};
}

void DeviceSpec::validate() const {
  if (name.empty() || name.size() > kMaxNameBytes) {
    throw std::invalid_argument("a device name must have 1 to " + std::to_string(kMaxNameBytes) + " bytes, got " +
                                std::to_string(name.size()));
  }
  check_in_range("device cores", cores, 1, kMaxCores);
  check_in_range("device HBM per core (bytes; 0: no budget)", hbm_bytes_per_core, 0, kMaxHbmBytesPerCore);
}

int64_t parse_bytes(const std::string& text) {
  // A decimal number (digits, at most one '.'), then an optional unit.
  size_t i = 0, dots = 0, digits = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    dots += text[i] == '.';
    digits += text[i] != '.';
    ++i;
  }
  if (digits == 0 || dots > 1) {
    throw std::invalid_argument("not a size: '" + quote_untrusted(text) + "' (examples: 512MiB, 16GiB, 95GB)");
  }
  const double value = std::strtod(text.substr(0, i).c_str(), nullptr);
  const std::string unit = text.substr(i);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "TB") scale = 1e12;
  else throw std::invalid_argument("unknown size unit in '" + quote_untrusted(text) + "' (use B, KiB, MiB, GiB, KB, MB, GB)");
  const double bytes = value * scale;
  // 2^63 is exactly representable; anything at or above it does not fit.
  if (!(bytes < 9223372036854775808.0)) throw std::invalid_argument("size '" + quote_untrusted(text) + "' is too large");
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace keel
