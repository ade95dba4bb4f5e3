#include "framework/core/dtype.h"

namespace keel {

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "float32") return DType::float32;
  if (name == "bfloat16") return DType::bfloat16;
  return std::nullopt;
}

// Plain loops over the inline scalar forms: gcc vectorises them (integer shifts, adds and a compare
// per lane), so the conversions run at memory speed whatever the CPU has, with the same bits.
void to_bfloat16(const float* __restrict__ in, uint16_t* __restrict__ out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16_bits(in[i]);
}

void from_bfloat16(const uint16_t* __restrict__ in, float* __restrict__ out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16_to_float(in[i]);
}

void round_bfloat16(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = round_to_bfloat16(in[i]);
}

}  // namespace keel
