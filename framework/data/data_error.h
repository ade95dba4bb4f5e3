// The one exception type for bad input data in the input pipeline (framework/data/, datasets/):
// missing or corrupt files, labels out of range, and iterator states that do not fit a pipeline. The
// message names the file (or pipeline) and says what to do about it; callers can show it as is.
#pragma once

#include <stdexcept>

namespace keel {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace keel
