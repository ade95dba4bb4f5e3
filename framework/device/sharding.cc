#include "framework/device/sharding.h"

#include <stdexcept>

#include "framework/core/limits.h"

namespace keel {

const char* sharding_mode_name(ShardingMode mode) {
  switch (mode) {
    case ShardingMode::none: return "none";
    case ShardingMode::optimizer: return "optimizer";
    case ShardingMode::gradients: return "gradients";
    case ShardingMode::full: return "full";
  }
  return "none";
}

ShardingMode parse_sharding_mode(const std::string& text) {
  if (text == "none") return ShardingMode::none;
  if (text == "optimizer") return ShardingMode::optimizer;
  if (text == "gradients") return ShardingMode::gradients;
  if (text == "full") return ShardingMode::full;
  throw std::invalid_argument("unknown sharding '" + quote_untrusted(text) + "' (known: none, optimizer, gradients, full)");
}

}  // namespace keel
