// Counter-based random numbers: a value is a pure function of (key, counter), so any stream can be
// resumed exactly from a small state and replicas draw independent streams without sharing state.
#pragma once

#include <cstdint>

namespace keel {

// SplitMix64's finaliser: a bijective 64-bit mixer with good avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t combine_keys(uint64_t a, uint64_t b) { return mix64(a ^ mix64(b + 0x632be59bd9b4e019ull)); }

// A sequential generator over the counter-based function; state = (key, counter).
class Rng {
 public:
  explicit Rng(uint64_t key = 0, uint64_t counter = 0) : key_(key), counter_(counter) {}
  uint64_t next_u64() { return mix64(key_ ^ mix64(counter_++)); }
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

}  // namespace keel
