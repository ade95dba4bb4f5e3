#include "framework/core/limits.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "framework/core/shape.h"

namespace keel {
namespace {

constexpr const char* kLimitsNote = " (keel's limit; see README \"Limits\")";

}  // namespace

std::string limit_string(int64_t limit) {
  if (limit > 1024 && (limit & (limit - 1)) == 0) {
    return "2^" + std::to_string(__builtin_ctzll(static_cast<unsigned long long>(limit))) + " (" +
           std::to_string(limit) + ")";
  }
  return std::to_string(limit);
}

int64_t check_in_range(std::string_view what, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    throw std::invalid_argument(std::string(what) + " must be between " + limit_string(lo) + " and " +
                                limit_string(hi) + ", got " + std::to_string(value) + kLimitsNote);
  }
  return value;
}

void check_input_shape(std::string_view what, const std::vector<int64_t>& shape) {
  if (shape.empty() || static_cast<int64_t>(shape.size()) > kMaxInputRank) {
    throw std::invalid_argument(std::string(what) + " must have 1 to " + std::to_string(kMaxInputRank) +
                                " dimensions, got " + std::to_string(shape.size()) + kLimitsNote);
  }
  for (int64_t d : shape) check_in_range(std::string(what) + " dimensions", d, 1, kMaxInputDim);
  const int64_t elements = num_elements(shape);
  if (elements > kMaxInputElements) {
    throw std::invalid_argument(std::string(what) + " " + shape_string(shape) + " has " + std::to_string(elements) +
                                " elements per example, more than " + limit_string(kMaxInputElements) + kLimitsNote);
  }
}

std::string quote_untrusted(std::string_view text, size_t max_bytes) {
  std::string out;
  const size_t shown = std::min(text.size(), max_bytes);
  out.reserve(shown + 32);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (shown < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace keel
