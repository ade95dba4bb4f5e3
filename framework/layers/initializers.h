// Weight initializers with Keras's names and formulas, drawn from keel's seeded generator.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/core/tensor.h"

namespace keel {

// tf.keras.utils.set_random_seed: makes weight initialisation and dropout reproducible.
void set_random_seed(uint64_t seed);
uint64_t random_seed();
// A fresh key for the next initializer call: (seed, call count) — same build order, same weights.
uint64_t next_initializer_key();
void reset_initializer_keys();

// "glorot_uniform", "he_normal"... Fills `t` (a kernel: fan_in = product of all but the last dim
// times nothing for dense, receptive field for convolutions; fan_out = last dim × receptive field).
void initialize(Tensor& t, const std::string& initializer, uint64_t key);
// Keras's config for an initializer name: {"class_name": "GlorotUniform", "config": {"seed": null}}.
nlohmann::json initializer_config(const std::string& initializer);

}  // namespace keel
