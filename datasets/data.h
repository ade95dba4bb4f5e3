// tf.data's spelling: keel::data::from_tensor_slices(...), keel::data::AUTOTUNE.
#pragma once

#include <utility>
#include <vector>

#include "datasets/dataset.h"

namespace keel::data {

using keel::Dataset;
using keel::Element;
using keel::Iterator;
inline constexpr int64_t AUTOTUNE = keel::AUTOTUNE;

inline Dataset from_tensor_slices(std::vector<Tensor> components) {
  return Dataset::from_tensor_slices(std::move(components));
}

}  // namespace keel::data
