// Element types of a tensor, and bfloat16 — the TPU's 16-bit float: float32's sign and 8-bit exponent
// with the top 7 bits of its mantissa. Converting float32 to bfloat16 rounds to nearest, ties to even
// (as TensorFlow's and PyTorch's conversions do), keeps infinities and makes every NaN a quiet NaN;
// converting back is exact (the low 16 bits become zero).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace keel {

enum class DType : uint8_t { float32 = 0, bfloat16 };

inline int64_t dtype_size(DType t) { return t == DType::bfloat16 ? 2 : 4; }
inline const char* dtype_name(DType t) { return t == DType::bfloat16 ? "bfloat16" : "float32"; }
std::optional<DType> parse_dtype(std::string_view name);

// The bits of the bfloat16 nearest to `x` (ties to even); a NaN stays a (quiet) NaN of its sign.
inline uint16_t bfloat16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bfloat16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to the nearest bfloat16, as a float32.
inline float round_to_bfloat16(float x) { return bfloat16_to_float(bfloat16_bits(x)); }

// Bulk forms (vectorised): n elements each; `in` and `out` may be the same array for round_bfloat16.
void to_bfloat16(const float* in, uint16_t* out, int64_t n);
void from_bfloat16(const uint16_t* in, float* out, int64_t n);
void round_bfloat16(const float* in, float* out, int64_t n);

}  // namespace keel
