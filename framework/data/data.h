// tf.data's spelling: keel::data::from_tensor_slices(...), keel::data::list_files(...),
// keel::data::from_generator(...), keel::data::AUTOTUNE.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/data/dataset.h"

namespace keel::data {

using keel::Dataset;
using keel::Element;
using keel::ElementKey;
using keel::Generator;
using keel::Iterator;
inline constexpr int64_t AUTOTUNE = keel::AUTOTUNE;

inline Dataset from_tensor_slices(std::vector<Tensor> components) {
  return Dataset::from_tensor_slices(std::move(components));
}

inline Dataset from_generator(std::function<Generator(uint64_t iteration)> make) {
  return Dataset::from_generator(std::move(make));
}

inline Dataset list_files(const std::string& pattern, bool shuffle = true, std::optional<uint64_t> seed = {}) {
  return Dataset::list_files(pattern, shuffle, seed);
}
inline Dataset list_files(const std::vector<std::string>& patterns, bool shuffle = true,
                          std::optional<uint64_t> seed = {}) {
  return Dataset::list_files(patterns, shuffle, seed);
}

}  // namespace keel::data
