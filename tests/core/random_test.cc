// Pins the first values of every random stream keel draws, so that no build type, compiler or
// refactoring can change them unnoticed. Test programs are compiled at -O0 (tests/CMakeLists.txt):
// with two inline definitions of the mixer (an ODR violation keel once had), unoptimised code calls
// whichever body the linker kept, and these values change.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "framework/data/dataset.h"
#include "framework/core/random.h"
#include "framework/core/tensor.h"
#include "framework/layers/initializers.h"
#include "framework/ops/ops.h"
#include "tests/support/dataset_elements.h"

namespace keel {
namespace {

// The reference values below come from an independent Python transcription of SplitMix64
// (Steele, Lea & Flood 2014; seed 0's first output 0xe220a8397b1dcdaf is the published one).
TEST(RandomTest, MixerAndSplitMix64MatchTheReference) {
  EXPECT_EQ(mix64(1), 0x5692161d100b05e5ull);
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);
  SplitMix64 g(0);
  EXPECT_EQ(g.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(g.next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(g.next(), 0x06c45d188009454full);
}

TEST(RandomTest, CounterStreamIsPinned) {
  Rng rng(7);
  EXPECT_EQ(rng.next_u64(), 0x64bf61b512ffabe7ull);
  EXPECT_EQ(rng.next_u64(), 0x7716da39cba275b2ull);
  EXPECT_EQ(rng.next_u64(), 0x1b9730bf3fc5de36ull);
  // A stream resumes exactly from (key, counter).
  Rng resumed(7, 2);
  EXPECT_EQ(resumed.next_u64(), 0x1b9730bf3fc5de36ull);
}

TEST(RandomTest, InitializerStreamIsPinned) {
  set_random_seed(1);
  Tensor kernel = Tensor::empty({4, 3});
  initialize(kernel, "glorot_uniform", next_initializer_key());
  const std::vector<float> got = kernel.to_vector();
  // glorot_uniform's limit for (4, 3) is sqrt(6 / 7) = 0.9258.
  const std::vector<float> want = {-0.400321841f, 0.763344944f, -0.572642148f, 0.27949509f,  -0.294435382f, 0.146160603f,
                                   0.359173834f,  -0.753230095f, 0.88321507f,  -0.0988790989f, 0.44863835f,  -0.921211123f};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
}

TEST(RandomTest, DropoutMaskIsPinned) {
  Tensor x = Tensor::full({2, 8}, 1.0f);
  const std::vector<float> got = ops::dropout(x, 0.5f, /*key=*/3).to_vector();
  const std::vector<float> want = {2, 2, 2, 2, 0, 0, 2, 0, 0, 2, 2, 2, 0, 0, 2, 2};  // kept: 1 / (1 - rate)
  EXPECT_EQ(got, want);
}

TEST(RandomTest, ShuffleOrderIsPinned) {
  std::vector<float> xs(10);
  for (int i = 0; i < 10; ++i) xs[static_cast<size_t>(i)] = static_cast<float>(i);
  const Dataset ds = Dataset::from_tensor_slices({Tensor::from_vector({10}, xs), Tensor::from_vector({10}, xs)});
  EXPECT_EQ(testing::values(testing::all(ds.shuffle(10, 42))), (std::vector<float>{1, 3, 9, 8, 7, 4, 0, 2, 5, 6}));
}

}  // namespace
}  // namespace keel
