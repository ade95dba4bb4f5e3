#include "tests/support/golden.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "tests/support/grad_check.h"

#ifndef KEEL_TESTS_DIR
#error "KEEL_TESTS_DIR must name the tests/ directory"
#endif

namespace keel::testing {

uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t splitmix64(uint64_t key, uint64_t i) {
  uint64_t s = key + (i + 1) * 0x9e3779b97f4a7c15ull;
  s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ull;
  s = (s ^ (s >> 27)) * 0x94d049bb133111ebull;
  return s ^ (s >> 31);
}

Tensor generate(const std::string& key, const Shape& shape, Range r) {
  const uint64_t seed = fnv1a64(key);
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t bits = static_cast<int64_t>(splitmix64(seed, i) >> 40);
    const double t = static_cast<double>(bits * 2 - (int64_t{1} << 24)) / static_cast<double>(int64_t{1} << 24);
    v[i] = static_cast<float>(r.center + r.half * t);
  }
  return Tensor::from_vector(shape, v);
}

const nlohmann::json& load_golden(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, nlohmann::json> docs;
  std::lock_guard<std::mutex> lock(mu);
  auto it = docs.find(file);
  if (it == docs.end()) {
    const std::string path = std::string(KEEL_TESTS_DIR) + "/golden/" + file;
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    it = docs.emplace(file, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

Tensor tensor_of(const nlohmann::json& t) {
  std::vector<float> v;
  for (double d : t.at("values")) v.push_back(static_cast<float>(d));
  return Tensor::from_vector(t.at("shape").get<Shape>(), v);
}

void expect_matches_golden(const Tensor& got, const nlohmann::json& want, const std::string& what, double rel) {
  ASSERT_EQ(got.shape(), want.at("shape").get<Shape>()) << what;
  const std::vector<float> g = got.to_vector();
  const std::vector<double> w = want.at("values").get<std::vector<double>>();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::fabs(v));
  int64_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double ratio = std::fabs(g[i] - w[i]) / (rel * (std::fabs(w[i]) + scale));
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = static_cast<int64_t>(i);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << w.size() << " elements differ from PyTorch; worst at "
                    << index_string(got.shape(), worst) << ": keel " << g[static_cast<size_t>(worst)] << ", torch "
                    << w[static_cast<size_t>(worst)];
}

}  // namespace keel::testing
