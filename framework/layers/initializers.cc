#include "framework/layers/initializers.h"

#include <atomic>
#include <cmath>
#include <stdexcept>

#include "framework/core/random.h"

namespace keel {
namespace {

std::atomic<uint64_t> g_seed{0};
std::atomic<uint64_t> g_calls{0};

// fan_in/fan_out as Keras computes them: kernels are (..receptive field.., in, out).
void fans(const Shape& s, double& fan_in, double& fan_out) {
  if (s.empty()) {
    fan_in = fan_out = 1;
  } else if (s.size() == 1) {
    fan_in = fan_out = static_cast<double>(s[0]);
  } else {
    double receptive = 1;
    for (size_t i = 0; i + 2 < s.size(); ++i) receptive *= static_cast<double>(s[i]);
    fan_in = static_cast<double>(s[s.size() - 2]) * receptive;
    fan_out = static_cast<double>(s[s.size() - 1]) * receptive;
  }
}

}  // namespace

void set_random_seed(uint64_t seed) {
  g_seed = seed;
  g_calls = 0;
}
uint64_t random_seed() { return g_seed; }
uint64_t next_initializer_key() { return combine_keys(g_seed.load(), g_calls.fetch_add(1)); }
void reset_initializer_keys() { g_calls = 0; }

void initialize(Tensor& t, const std::string& initializer, uint64_t key) {
  if (t.is_abstract()) return;
  double fan_in = 0, fan_out = 0;
  fans(t.shape(), fan_in, fan_out);
  Rng rng(key);
  float* d = t.data();
  const int64_t n = t.size();
  if (initializer == "zeros") {
    t.fill(0.0f);
  } else if (initializer == "ones") {
    t.fill(1.0f);
  } else if (initializer == "glorot_uniform" || initializer == "he_uniform" || initializer == "lecun_uniform") {
    const double scale = initializer == "glorot_uniform" ? 6.0 / (fan_in + fan_out)
                         : initializer == "he_uniform"   ? 6.0 / fan_in
                                                         : 3.0 / fan_in;
    const float limit = static_cast<float>(std::sqrt(scale));
    for (int64_t i = 0; i < n; ++i) d[i] = (2.0f * rng.next_float() - 1.0f) * limit;
  } else if (initializer == "glorot_normal" || initializer == "he_normal") {
    // Keras draws from a truncated normal (|x| < 2 stddev) with stddev = sqrt(scale) / .87962566.
    const double scale = initializer == "glorot_normal" ? 2.0 / (fan_in + fan_out) : 2.0 / fan_in;
    const float stddev = static_cast<float>(std::sqrt(scale) / 0.87962566103423978);
    for (int64_t i = 0; i < n; ++i) {
      float z = standard_normal(rng);
      while (std::fabs(z) >= 2.0f) z = standard_normal(rng);
      d[i] = z * stddev;
    }
  } else {
    throw std::invalid_argument("unknown initializer '" + initializer +
                                "' (known: glorot_uniform, glorot_normal, he_uniform, he_normal, lecun_uniform, zeros, ones)");
  }
}

nlohmann::json initializer_config(const std::string& initializer) {
  static const std::pair<const char*, const char*> names[] = {
      {"glorot_uniform", "GlorotUniform"}, {"glorot_normal", "GlorotNormal"}, {"he_uniform", "HeUniform"},
      {"he_normal", "HeNormal"},           {"lecun_uniform", "LecunUniform"}, {"zeros", "Zeros"},
      {"ones", "Ones"}};
  for (const auto& [name, cls] : names) {
    if (initializer == name) {
      nlohmann::json config = nlohmann::json::object();
      if (initializer != "zeros" && initializer != "ones") config["seed"] = nullptr;
      return {{"class_name", cls}, {"config", config}};
    }
  }
  throw std::invalid_argument("unknown initializer '" + initializer + "'");
}

}  // namespace keel
