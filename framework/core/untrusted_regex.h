// Regular expressions from untrusted input (--freeze, --remat layers:REGEX, --layout, a stored run's
// configuration).
#pragma once

#include <cstddef>
#include <regex>
#include <string>
#include <string_view>

namespace keel {

// A regular expression from untrusted input (a flag, a stored run's configuration): ECMAScript
// syntax, at most kMaxPatternBytes, matched in polynomial time (libstdc++'s __polynomial mode, which
// refuses back-references), so that no pattern can stall a search the way backtracking lets
// "(.*)*(.*)*!" do. std::invalid_argument "<what> ..." for one that is too long or does not compile.
inline constexpr size_t kMaxPatternBytes = 1024;
std::regex compile_untrusted_regex(const std::string& pattern, std::string_view what);

}  // namespace keel
