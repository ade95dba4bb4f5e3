#include "framework/model/remat.h"

#include <regex>
#include <stdexcept>

#include "framework/core/limits.h"
#include "framework/core/untrusted_regex.h"
#include "framework/device/device_spec.h"

namespace keel {
namespace {

std::regex compile(const std::string& pattern) { return compile_untrusted_regex(pattern, "remat layers"); }

}  // namespace

Remat Remat::larger_than(int64_t bytes) {
  if (bytes < 0) throw std::invalid_argument("remat larger_than: the threshold must be >= 0 bytes");
  Remat r(Mode::larger_than);
  r.bytes_ = bytes;
  return r;
}

Remat Remat::layers(std::string pattern) {
  compile(pattern);  // refused here, not at the first step
  Remat r(Mode::layers);
  r.pattern_ = std::make_shared<const std::string>(std::move(pattern));
  return r;
}

const std::string& Remat::pattern() const {
  static const std::string none;
  return pattern_ ? *pattern_ : none;
}

bool Remat::remats_layer(const std::string& layer, int64_t output_bytes) const {
  switch (mode_) {
    case Mode::full:
      return true;
    case Mode::larger_than:
      return output_bytes > bytes_;
    case Mode::layers: {
      // Compiled once per thread and pattern: a model asks once per layer and step.
      thread_local std::string cached_pattern;
      thread_local std::regex cached;
      if (cached_pattern != pattern() || pattern().empty()) {
        cached = compile(pattern());
        cached_pattern = pattern();
      }
      return std::regex_match(layer, cached);
    }
    default:
      return false;
  }
}

std::string remat_name(const Remat& remat) {
  switch (remat.mode()) {
    case Remat::Mode::segments:
      return "segments";
    case Remat::Mode::full:
      return "full";
    case Remat::Mode::larger_than:
      return "larger_than:" + std::to_string(remat.threshold_bytes());
    case Remat::Mode::layers:
      return "layers:" + remat.pattern();
    default:
      return "none";
  }
}

Remat parse_remat(const std::string& text) {
  if (text == "none") return Remat::none;
  if (text == "segments") return Remat::segments;
  if (text == "full") return Remat::full;
  if (text.rfind("larger_than:", 0) == 0) {
    try {
      return Remat::larger_than(parse_bytes(text.substr(12)));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("remat mode '" + quote_untrusted(text) + "': " + e.what() +
                                  " (larger_than:BYTES, e.g. larger_than:4MiB)");
    }
  }
  if (text.rfind("layers:", 0) == 0 && text.size() > 7) return Remat::layers(text.substr(7));
  throw std::invalid_argument("unknown remat mode '" + quote_untrusted(text) +
                              "' (known: none, segments, full, larger_than:BYTES, layers:REGEX)");
}

}  // namespace keel
