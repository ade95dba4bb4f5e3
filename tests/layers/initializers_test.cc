// Initializers: Keras's names, fans and ranges, Keras's configs, and keel's seeded keys.
#include "framework/layers/initializers.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/context.h"

namespace keel {
namespace {

std::vector<float> init(const Shape& shape, const std::string& name, uint64_t key = 1234) {
  HostScope host;
  Tensor t = Tensor::full(shape, -99.0f);
  initialize(t, name, key);
  return t.to_vector();
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

double mean(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

double stddev(const std::vector<float>& v) {
  const double m = mean(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

// Every value within [-limit, limit], and the range actually used (the largest |value| is near the
// limit), so a limit that is too small fails as well as one that is too large.
void expect_uniform_limit(const std::vector<float>& v, double limit, const std::string& what) {
  const double m = max_abs(v);
  EXPECT_LE(m, limit * (1 + 1e-6)) << what;
  EXPECT_GT(m, 0.97 * limit) << what;
  EXPECT_NEAR(mean(v), 0.0, 0.05 * limit) << what;
  // Uniform on [-limit, limit): standard deviation limit / sqrt(3).
  EXPECT_NEAR(stddev(v), limit / std::sqrt(3.0), 0.05 * limit) << what;
}

TEST(InitializersTest, GlorotUniformLimitIsSqrtSixOverFanInPlusFanOut) {
  // Dense kernel (in, out) = (60, 40): fans 60 and 40.
  expect_uniform_limit(init({60, 40}, "glorot_uniform"), std::sqrt(6.0 / 100.0), "dense (60, 40)");
  // Conv2D kernel HWIO (3, 3, 8, 16): fan_in 3*3*8 = 72, fan_out 3*3*16 = 144.
  expect_uniform_limit(init({3, 3, 8, 16}, "glorot_uniform"), std::sqrt(6.0 / 216.0), "conv (3, 3, 8, 16)");
  // A vector: fan_in = fan_out = its length, as Keras's compute_fans.
  expect_uniform_limit(init({3000}, "glorot_uniform"), std::sqrt(6.0 / 6000.0), "vector (3000,)");
}

TEST(InitializersTest, HeAndLecunUniformUseFanInOnly) {
  // (100, 30): fan_in 100.
  expect_uniform_limit(init({100, 30}, "he_uniform"), std::sqrt(6.0 / 100.0), "he_uniform");
  expect_uniform_limit(init({100, 30}, "lecun_uniform"), std::sqrt(3.0 / 100.0), "lecun_uniform");
  // Conv: fan_in = receptive field * in = 5*5*4 = 100.
  expect_uniform_limit(init({5, 5, 4, 30}, "he_uniform"), std::sqrt(6.0 / 100.0), "he_uniform conv");
}

TEST(InitializersTest, NormalInitializersAreTruncatedAtTwoStddevWithKerasVariance) {
  // Keras's truncated normal: stddev = sqrt(scale) / .87962566, cut at 2 stddev, so that the
  // values' own standard deviation is sqrt(scale).
  struct Case {
    const char* name;
    double scale;
  };
  const Shape shape = {200, 100};  // fan_in 200, fan_out 100
  for (const Case& c : {Case{"glorot_normal", 2.0 / 300.0}, Case{"he_normal", 2.0 / 200.0}}) {
    const std::vector<float> v = init(shape, c.name);
    const double target = std::sqrt(c.scale);
    const double cut = 2.0 * target / 0.87962566103423978;
    EXPECT_LT(max_abs(v), cut * (1 + 1e-6)) << c.name;
    EXPECT_GT(max_abs(v), 0.95 * cut) << c.name << ": the tails up to the cut are used";
    EXPECT_NEAR(stddev(v), target, 0.03 * target) << c.name;
    EXPECT_NEAR(mean(v), 0.0, 0.03 * target) << c.name;
  }
}

TEST(InitializersTest, ZerosAndOnesAreExact) {
  for (float x : init({3, 4}, "zeros")) EXPECT_EQ(x, 0.0f);
  for (float x : init({7}, "ones")) EXPECT_EQ(x, 1.0f);
  for (float x : init({}, "ones")) EXPECT_EQ(x, 1.0f);
}

TEST(InitializersTest, TheSameKeyGivesTheSameValuesAndAnotherKeyOthers) {
  for (const char* name : {"glorot_uniform", "glorot_normal", "he_uniform", "he_normal", "lecun_uniform"}) {
    const std::vector<float> a = init({16, 8}, name, 7), b = init({16, 8}, name, 7), c = init({16, 8}, name, 8);
    EXPECT_EQ(a, b) << name;
    EXPECT_NE(a, c) << name;
    // Not a constant fill.
    EXPECT_NE(*std::min_element(a.begin(), a.end()), *std::max_element(a.begin(), a.end())) << name;
  }
}

TEST(InitializersTest, UnknownNamesAreRefused) {
  HostScope host;
  Tensor t = Tensor::zeros({2, 2});
  for (const char* name : {"glorot", "GlorotUniform", "uniform", "", "random_normal"}) {
    EXPECT_THROW(initialize(t, name, 1), std::invalid_argument) << name;
    EXPECT_THROW(initializer_config(name), std::invalid_argument) << name;
  }
  for (float x : t.to_vector()) EXPECT_EQ(x, 0.0f) << "a refused initializer writes nothing";
}

TEST(InitializersTest, ConfigsUseKerasClassNames) {
  const std::pair<const char*, const char*> names[] = {
      {"glorot_uniform", "GlorotUniform"}, {"glorot_normal", "GlorotNormal"}, {"he_uniform", "HeUniform"},
      {"he_normal", "HeNormal"}, {"lecun_uniform", "LecunUniform"}};
  for (const auto& [name, cls] : names) {
    const nlohmann::json c = initializer_config(name);
    EXPECT_EQ(c, nlohmann::json::parse(std::string(R"({"class_name": ")") + cls + R"(", "config": {"seed": null}})"))
        << name;
  }
  EXPECT_EQ(initializer_config("zeros"), nlohmann::json::parse(R"({"class_name": "Zeros", "config": {}})"));
  EXPECT_EQ(initializer_config("ones"), nlohmann::json::parse(R"({"class_name": "Ones", "config": {}})"));
}

TEST(InitializersTest, SeededKeysRepeatAfterSetRandomSeed) {
  set_random_seed(42);
  EXPECT_EQ(random_seed(), 42u);
  const uint64_t a1 = next_initializer_key(), a2 = next_initializer_key(), a3 = next_initializer_key();
  EXPECT_NE(a1, a2);
  EXPECT_NE(a2, a3);
  EXPECT_NE(a1, a3);
  set_random_seed(42);
  EXPECT_EQ(next_initializer_key(), a1) << "same seed, same build order: same weights";
  EXPECT_EQ(next_initializer_key(), a2);
  reset_initializer_keys();
  EXPECT_EQ(next_initializer_key(), a1) << "reset restarts the call count, keeping the seed";
  set_random_seed(43);
  EXPECT_EQ(random_seed(), 43u);
  const uint64_t b1 = next_initializer_key();
  EXPECT_NE(b1, a1);
  EXPECT_NE(b1, a2);
  set_random_seed(0);
}

TEST(InitializersTest, AnAbstractTensorIsLeftWithoutValues) {
  DeviceContext ctx;
  ctx.abstract = true;
  ContextScope scope(ctx);
  Tensor t = Tensor::empty({4, 4});
  ASSERT_TRUE(t.is_abstract());
  EXPECT_NO_THROW(initialize(t, "glorot_uniform", 1));
  EXPECT_EQ(t.data(), nullptr);
}

}  // namespace
}  // namespace keel
