// bfloat16 conversions (round to nearest even, NaN and infinity) and bfloat16 tensors: 2 bytes per
// element in storage and in the ledger.
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/dtype.h"
#include "framework/core/tensor.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"

namespace keel {
namespace {

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

TEST(BFloat16Test, RoundsToNearestTiesToEven) {
  EXPECT_EQ(bfloat16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the tie goes to the even mantissa, 1.
  EXPECT_EQ(bfloat16_bits(from_bits(0x3f808000u)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(bfloat16_bits(from_bits(0x3f818000u)), 0x3f82);
  // Just above and below a tie round to the nearer one.
  EXPECT_EQ(bfloat16_bits(from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(bfloat16_bits(from_bits(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(bfloat16_bits(-2.5f), 0xc020);
  EXPECT_EQ(round_to_bfloat16(3.14159265f), 3.140625f);
}

TEST(BFloat16Test, InfinityOverflowAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bfloat16_bits(inf), 0x7f80);
  EXPECT_EQ(bfloat16_bits(-inf), 0xff80);
  // float32's largest finite value is above bfloat16's largest plus half an ulp: it rounds to inf.
  EXPECT_EQ(bfloat16_bits(std::numeric_limits<float>::max()), 0x7f80);
  const uint16_t nan = bfloat16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bfloat16_to_float(nan)));
  // A NaN whose payload is only in the low bits must not become infinity.
  EXPECT_TRUE(std::isnan(round_to_bfloat16(from_bits(0x7f800001u))));
  EXPECT_TRUE(std::isnan(round_to_bfloat16(from_bits(0xff800001u))));
  EXPECT_TRUE(std::signbit(round_to_bfloat16(from_bits(0xff800001u))));
}

TEST(BFloat16Test, WideningIsExactAndBulkFormsMatchTheScalarOnes) {
  std::vector<float> values;
  for (uint32_t u = 0; u < 0xffffffffu - 0x10000u; u += 0x12345u) values.push_back(from_bits(u));
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<uint16_t> bits(values.size());
  std::vector<float> wide(values.size()), rounded(values.size());
  to_bfloat16(values.data(), bits.data(), n);
  from_bfloat16(bits.data(), wide.data(), n);
  round_bfloat16(values.data(), rounded.data(), n);
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(bits[i], bfloat16_bits(values[i])) << i;
    uint32_t w, r;
    std::memcpy(&w, &wide[i], sizeof w);
    std::memcpy(&r, &rounded[i], sizeof r);
    ASSERT_EQ(w, static_cast<uint32_t>(bits[i]) << 16) << i;
    ASSERT_EQ(r, w) << i;
    if (!std::isnan(values[i])) ASSERT_EQ(bfloat16_bits(wide[i]), bits[i]) << "round trip " << i;
  }
}

TEST(BFloat16Test, ParsesDTypeNames) {
  EXPECT_EQ(parse_dtype("float32"), DType::float32);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bfloat16);
  EXPECT_FALSE(parse_dtype("float16").has_value());
  EXPECT_EQ(dtype_size(DType::bfloat16), 2);
  EXPECT_STREQ(dtype_name(DType::bfloat16), "bfloat16");
}

TEST(BFloat16TensorTest, HoldsTwoBytesPerElementAndConverts) {
  Tensor x = Tensor::from_vector({2, 3}, std::vector<float>{1.0f, -2.5f, 3.14159265f, 0.0f, 1e30f, -7.0f});
  Tensor b = x.to(DType::bfloat16);
  EXPECT_EQ(b.dtype(), DType::bfloat16);
  EXPECT_EQ(b.bytes(), 12);
  EXPECT_EQ(b.to_vector(), (std::vector<float>{1.0f, -2.5f, 3.140625f, 0.0f, round_to_bfloat16(1e30f), -7.0f}));
  EXPECT_THROW(b.data(), std::logic_error) << "float32 access to a bfloat16 tensor";
  EXPECT_THROW(x.bfloat16_data(), std::logic_error);
  EXPECT_EQ(b.to(DType::bfloat16).id(), b.id()) << "already bfloat16: the same tensor";
  Tensor back = b.to(DType::float32);
  EXPECT_EQ(back.dtype(), DType::float32);
  EXPECT_EQ(back.to_vector(), b.to_vector());
  // Views keep the dtype and offset by whole 2-byte elements.
  Tensor row = b.slice_rows(1, 2).reshape({3});
  EXPECT_EQ(row.dtype(), DType::bfloat16);
  EXPECT_EQ(row.to_vector(), (std::vector<float>{0.0f, round_to_bfloat16(1e30f), -7.0f}));
  EXPECT_FLOAT_EQ(row.reshape({3}).slice_rows(2, 3).item(), -7.0f);
  Tensor copy = b.clone();
  EXPECT_EQ(copy.to_vector(), b.to_vector());
  copy.fill(0.5f);
  EXPECT_EQ(copy.to_vector(), std::vector<float>(6, 0.5f));
  EXPECT_EQ(b.to_vector()[0], 1.0f) << "clone shares nothing";
  b.copy_from(copy);
  EXPECT_EQ(b.to_vector(), std::vector<float>(6, 0.5f));
  EXPECT_THROW(b.copy_from(x), std::invalid_argument) << "copy_from needs the same dtype";
}

TEST(BFloat16TensorTest, IsChargedAtTwoBytesAndPlannedAlike) {
  Ledger ledger(DeviceSpec::custom(1, 0));
  for (bool abstract : {false, true}) {
    DeviceContext ctx;
    ctx.ledger = &ledger;
    ctx.core = 0;
    ctx.category = Category::activations;
    ctx.abstract = abstract;
    ContextScope scope(ctx);
    {
      Tensor t = Tensor::empty({10, 7}, DType::bfloat16);
      EXPECT_EQ(t.is_abstract(), abstract);
      EXPECT_EQ(ledger.core(0).stat(Category::activations).current, 140);
      Tensor f = t.to(DType::float32);
      EXPECT_EQ(ledger.core(0).stat(Category::activations).current, 140 + 280);
    }
    EXPECT_EQ(ledger.core(0).stat(Category::activations).current, 0);
  }
}

}  // namespace
}  // namespace keel
