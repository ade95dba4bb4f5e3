// The one exception type of checkpoint I/O.
#pragma once

#include <stdexcept>

namespace keel {

// Thrown for every checkpoint failure. Contract: the message is one line that names the file (and,
// where it applies, the object path inside it) and says what is wrong, so it can be shown to a user
// as is.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace keel
