#include "framework/model/remat.h"

#include <stdexcept>

#include "framework/core/limits.h"

namespace keel {

const char* remat_name(Remat remat) { return remat == Remat::segments ? "segments" : "none"; }

Remat parse_remat(const std::string& text) {
  if (text == "none") return Remat::none;
  if (text == "segments") return Remat::segments;
  if (text == "full" || text.rfind("larger_than", 0) == 0 || text.rfind("layers", 0) == 0) {
    throw std::invalid_argument("remat mode '" + quote_untrusted(text) + "' is not implemented yet; use none or segments");
  }
  throw std::invalid_argument("unknown remat mode '" + quote_untrusted(text) + "' (known: none, segments)");
}

}  // namespace keel
