#include "framework/core/untrusted_regex.h"

#include <stdexcept>

#include "framework/core/limits.h"

namespace keel {

std::regex compile_untrusted_regex(const std::string& pattern, std::string_view what) {
  if (pattern.size() > kMaxPatternBytes) {
    throw std::invalid_argument(std::string(what) + ": a pattern of at most " + std::to_string(kMaxPatternBytes) +
                                " bytes, got " + std::to_string(pattern.size()));
  }
  try {
    return std::regex(pattern, std::regex::ECMAScript | std::regex_constants::__polynomial);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument(std::string(what) + ": bad regular expression '" + quote_untrusted(pattern) + "' (" + e.what() +
                                "; ECMAScript, without back-references)");
  }
}

}  // namespace keel
