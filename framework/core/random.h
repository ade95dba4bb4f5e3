// Counter-based random numbers: a value is a pure function of (key, counter), so any stream can be
// resumed exactly from a small state and replicas draw independent streams without sharing state.
#pragma once

#include <cmath>
#include <cstdint>

namespace keel {

// The one 64-bit mixer of keel: SplitMix64's output function (Steele, Lea & Flood 2014), a bijection
// with good avalanche. Every random stream (initializers, dropout, shuffles, image ops) is built on
// it; tests/core/random_test.cc pins the first values of each, in an optimised and an -O0 build.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// SplitMix64's Weyl increment (the golden gamma).
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;

// SplitMix64's output for the Weyl state x + gamma: a keyed hash of one 64-bit value.
constexpr uint64_t splitmix64(uint64_t x) { return mix64(x + kGoldenGamma); }

constexpr uint64_t combine_keys(uint64_t a, uint64_t b) {
  return splitmix64(a ^ splitmix64(b + 0x632be59bd9b4e019ull));
}

// SplitMix64 as a sequential generator: a Weyl sequence passed through mix64. Every step is spelled
// out (no <random> distributions, whose algorithms are implementation-defined), so a seed gives the
// same stream, and the same shuffle order, on every platform and standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += kGoldenGamma); }
  // Uniform in [0, n), n > 0, without modulo bias: Lemire's multiply-and-reject ("Fast Random
  // Integer Generation in an Interval", 2019).
  uint64_t uniform(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t state_;
};

// A sequential generator over the counter-based function; state = (key, counter).
class Rng {
 public:
  explicit Rng(uint64_t key = 0, uint64_t counter = 0) : key_(key), counter_(counter) {}
  uint64_t next_u64() { return splitmix64(key_ ^ splitmix64(counter_++)); }
  // Uniform in [0, 1) with 24 random bits (exactly representable in float).
  float next_float() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, bound) without modulo bias (Lemire's multiply-shift with rejection).
  uint64_t next_below(uint64_t bound);
  uint64_t key() const { return key_; }
  uint64_t counter() const { return counter_; }

 private:
  uint64_t key_;
  uint64_t counter_;
};

inline uint64_t Rng::next_below(uint64_t bound) {
  if (bound <= 1) return 0;
  for (;;) {
    const unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * bound;
    const uint64_t low = static_cast<uint64_t>(m);
    if (low >= bound || low >= (-bound) % bound) return static_cast<uint64_t>(m >> 64);
  }
}

// Standard normal by Box-Muller on `rng`'s stream (two uniforms per draw, a zero first one redrawn).
inline float standard_normal(Rng& rng) {
  float u1 = rng.next_float();
  while (u1 <= 0.0f) u1 = rng.next_float();
  const float u2 = rng.next_float();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

}  // namespace keel
