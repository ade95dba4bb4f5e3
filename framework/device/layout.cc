#include "framework/device/layout.h"

#include <regex>
#include <stdexcept>

#include "framework/core/limits.h"
#include "framework/core/untrusted_regex.h"

namespace keel::distribution {

namespace {

constexpr size_t kMaxLayoutPatternBytes = 256;

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

int TensorLayout::sharded_axis() const {
  int axis = -1;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] == "None") continue;
    if (axes[i] != "model") {
      throw std::invalid_argument("layout axis '" + quote_untrusted(axes[i]) +
                                  "' is not an axis of keel's mesh (known: model, None)");
    }
    if (axis >= 0) throw std::invalid_argument("layout " + to_string() + " splits two axes across the one mesh axis 'model'");
    axis = static_cast<int>(i);
  }
  return axis;
}

std::string TensorLayout::to_string() const {
  std::string out = "(";
  for (size_t i = 0; i < axes.size(); ++i) out += (i ? ", " : "") + quote_untrusted(axes[i]);
  return out + (axes.size() == 1 ? ",)" : ")");
}

struct LayoutMap::Compiled {
  std::regex regex;
};

TensorLayout& LayoutMap::operator[](const std::string& pattern) {
  for (Entry& entry : entries_) {
    if (entry.pattern == pattern) return entry.layout;
  }
  if (pattern.empty() || pattern.size() > kMaxLayoutPatternBytes) {
    throw std::invalid_argument("a layout's variable pattern must be 1 to " + std::to_string(kMaxLayoutPatternBytes) +
                                " bytes, got " + std::to_string(pattern.size()));
  }
  auto compiled = std::make_shared<const Compiled>(Compiled{compile_untrusted_regex(pattern, "layout pattern")});
  entries_.push_back(Entry{pattern, TensorLayout{}, std::move(compiled)});
  return entries_.back().layout;
}

std::optional<TensorLayout> LayoutMap::find(const std::string& path) const {
  for (const Entry& entry : entries_) {
    if (entry.pattern == path) return entry.layout;
  }
  const Entry* match = nullptr;
  for (const Entry& entry : entries_) {
    if (!std::regex_search(path, entry.regex->regex)) continue;
    if (match != nullptr) {
      throw std::invalid_argument("variable '" + quote_untrusted(path) + "' matches two layout patterns, '" +
                                  quote_untrusted(match->pattern) + "' and '" + quote_untrusted(entry.pattern) +
                                  "': make them exclusive");
    }
    match = &entry;
  }
  if (match == nullptr) return std::nullopt;
  return match->layout;
}

std::vector<std::string> LayoutMap::unmatched(const std::vector<std::string>& paths) const {
  std::vector<std::string> out;
  for (const Entry& entry : entries_) {
    bool used = false;
    for (const std::string& path : paths) {
      used = used || path == entry.pattern || std::regex_search(path, entry.regex->regex);
    }
    if (!used) out.push_back(entry.pattern);
  }
  return out;
}

void LayoutMap::add_spec(const std::string& spec) {
  const size_t eq = spec.rfind('=');
  if (eq == std::string::npos) {
    throw std::invalid_argument("layout '" + quote_untrusted(spec) + "' is not PATTERN=AXES (e.g. dense.*kernel=None,model)");
  }
  std::string axes = trim(spec.substr(eq + 1));
  if (axes.size() >= 2 && axes.front() == '(' && axes.back() == ')') axes = axes.substr(1, axes.size() - 2);
  TensorLayout layout;
  size_t at = 0;
  while (at <= axes.size() && layout.axes.size() <= 8) {
    const size_t comma = axes.find(',', at);
    const std::string name = trim(axes.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (!name.empty() || comma != std::string::npos) layout.axes.push_back(name);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (layout.axes.empty() || layout.axes.size() > 8) {
    throw std::invalid_argument("layout '" + quote_untrusted(spec) + "' needs 1 to 8 axes after '=' (None or model)");
  }
  layout.sharded_axis();  // checks the names
  (*this)[spec.substr(0, eq)] = std::move(layout);
}

LayoutMap LayoutMap::from_specs(const std::vector<std::string>& specs) {
  LayoutMap map;
  for (const std::string& spec : specs) map.add_spec(spec);
  return map;
}

std::vector<std::string> LayoutMap::specs() const {
  std::vector<std::string> out;
  for (const Entry& entry : entries_) {
    std::string axes;
    for (size_t i = 0; i < entry.layout.axes.size(); ++i) axes += (i ? "," : "") + entry.layout.axes[i];
    out.push_back(entry.pattern + "=" + axes);
  }
  return out;
}

}  // namespace keel::distribution
