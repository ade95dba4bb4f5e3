// Keras's dtype policies (framework/layers/dtype_policy.h): a layer takes the global policy in force
// when it is constructed (or its own), computes in its compute dtype, says so in its config, and a
// model's outputs are float32 whatever its layers compute in.
#include "framework/layers/dtype_policy.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/layers/core_layers.h"
#include "framework/model/model.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using mixed_precision::GlobalPolicyScope;
using mixed_precision::Policy;

TEST(DTypePolicyTest, PoliciesByKerasName) {
  EXPECT_EQ(Policy("float32").compute_dtype(), DType::float32);
  EXPECT_EQ(Policy("mixed_bfloat16").compute_dtype(), DType::bfloat16);
  EXPECT_EQ(Policy("mixed_bfloat16").variable_dtype(), DType::float32);
  EXPECT_THROW(Policy("mixed_float16"), std::invalid_argument);
  EXPECT_THROW(Policy("bfloat16"), std::invalid_argument);
  EXPECT_EQ(mixed_precision::global_policy().name(), "float32");
}

TEST(DTypePolicyTest, ALayerTakesThePolicyInForceWhenConstructed) {
  std::shared_ptr<layers::Dense> mixed, plain;
  {
    GlobalPolicyScope scope(Policy("mixed_bfloat16"));
    EXPECT_EQ(mixed_precision::global_policy().name(), "mixed_bfloat16");
    mixed = Dense(4, "relu");
  }
  EXPECT_EQ(mixed_precision::global_policy().name(), "float32") << "the scope restores the previous policy";
  plain = Dense(4, "relu");
  EXPECT_EQ(mixed->dtype_policy().name(), "mixed_bfloat16");
  EXPECT_EQ(plain->dtype_policy().name(), "float32");
  EXPECT_EQ(mixed->get_config()["dtype"], "mixed_bfloat16");
  EXPECT_EQ(plain->get_config()["dtype"], "float32");

  const Tensor x = testing::random_host({3, 5}, -1, 1, 1);
  const Tensor y = (*mixed)(x);
  EXPECT_EQ(y.dtype(), DType::bfloat16) << "a mixed layer's output is bfloat16";
  for (Variable* v : mixed->weights()) EXPECT_EQ(v->value().dtype(), DType::float32) << "its variables float32";
  EXPECT_EQ((*plain)(x).dtype(), DType::float32);
  // A layer's own policy overrides the global one.
  plain->set_dtype_policy(Policy("mixed_bfloat16"));
  EXPECT_EQ((*plain)(x).dtype(), DType::bfloat16);
}

TEST(DTypePolicyTest, AModelsOutputsAreFloat32) {
  std::unique_ptr<Sequential> model;
  {
    GlobalPolicyScope scope(Policy("mixed_bfloat16"));
    model = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(8, "relu", Shape{5}), Dense(3)});
  }
  const Tensor y = (*model)(testing::random_host({2, 5}, -1, 1, 2));
  EXPECT_EQ(y.dtype(), DType::float32);
  // Its values are bfloat16 numbers: the last layer computed in bfloat16.
  for (float v : y.to_vector()) EXPECT_EQ(v, round_to_bfloat16(v));
}

}  // namespace
}  // namespace keel
