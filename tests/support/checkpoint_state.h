// Reads every weight and optimizer value of a checkpoint, to compare runs bit for bit.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel::testing {

// Every dataset under model_weights/ and optimizer_weights/ by path; iterations as one float.
std::map<std::string, std::vector<float>> read_checkpoint_values(const std::string& path);

// GoogleTest expectations that two checkpoints hold the same values under the same names, bit for
// bit, and at least `min_values` of them (so that an empty or unreadable pair cannot pass).
void expect_bit_identical(const std::string& a, const std::string& b, size_t min_values = 13);

// A checkpoint's /keel/train_state JSON, and the same replaced (with its checksum, as keel writes it):
// to make a checkpoint look as an older keel wrote it.
nlohmann::json train_state_json(const std::string& checkpoint);
void rewrite_train_state(const std::string& checkpoint, const nlohmann::json& state);

}  // namespace keel::testing
