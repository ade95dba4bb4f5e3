// Reads every weight and optimizer value of a checkpoint, to compare runs bit for bit.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace keel::testing {

// Every dataset under model_weights/ and optimizer_weights/ by path; iterations as one float.
std::map<std::string, std::vector<float>> read_checkpoint_values(const std::string& path);

}  // namespace keel::testing
