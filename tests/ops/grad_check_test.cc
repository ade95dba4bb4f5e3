// The op-test harness itself (tests/support/grad_check): every op test relies on it, so it must
// fail when a backward is wrong, when a gradient is missing, and when a planning run charges
// differently from the real one.
#include <vector>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::expect_abstract_matches_real;
using testing::expect_gradients_match;
using testing::random_host;

// y = x * x elementwise, with a backward scaled by `backward_factor` (2 is right).
Tensor square_with_backward(const Tensor& x, float backward_factor) {
  Tensor y = Tensor::empty(x.shape());
  if (ops::detail::compute(y, {&x})) y.array() = x.array().square();
  if (GradientTape::is_recording({&x})) {
    GradientTape::record({x}, {y}, [x, backward_factor](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = Tensor::empty(x.shape());
      if (ops::detail::compute(dx, {&dy[0]})) dx.array() = backward_factor * x.array() * dy[0].array();
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

TEST(GradCheckTest, AcceptsACorrectBackward) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return square_with_backward(in[0], 2.0f); },
                         {random_host({3, 2}, -2, 2, 1)}, testing::tolerances("square", 1e-3, 1e-4, 1e-3));
}

TEST(GradCheckTest, RejectsAWrongBackwardAndNamesTheElement) {
  EXPECT_NONFATAL_FAILURE(
      expect_gradients_match([](const std::vector<Tensor>& in) { return square_with_backward(in[0], 2.1f); },
                             {random_host({3, 2}, 0.5f, 2, 1)}, testing::tolerances("square", 1e-3, 1e-4, 1e-3)),
      "differs from central differences at 6 of 6 elements; worst at (");
}

TEST(GradCheckTest, RejectsAWrongBackwardInOneOutputElementOnly) {
  // The weighting reduces every output element: an error confined to one element must show.
  auto f = [](const std::vector<Tensor>& in) {
    Tensor y = square_with_backward(in[0], 2.0f);
    Tensor z = Tensor::empty(y.shape());
    z.copy_from(y);
    GradientTape::record({y}, {z}, [](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor d = dy[0].clone();
      d.data()[3] *= 1.5f;  // wrong for element 3 only
      return std::vector<Tensor>{d};
    });
    return z;
  };
  EXPECT_NONFATAL_FAILURE(expect_gradients_match(f, {random_host({2, 3}, 0.5f, 2, 2)}), "worst at (1, 0)");
}

TEST(GradCheckTest, RejectsAMissingGradient) {
  // An op that records nothing: the output depends on x numerically, the tape knows nothing of it.
  auto f = [](const std::vector<Tensor>& in) {
    Tensor y = Tensor::empty(in[0].shape());
    y.copy_from(in[0]);
    return y;
  };
  EXPECT_NONFATAL_FAILURE(expect_gradients_match(f, {random_host({3}, -1, 1, 3)}), "is undefined");
}

TEST(GradCheckTest, RejectsAnAbstractRunThatChargesDifferently) {
  // A kernel whose real path allocates a workspace the planning path does not know about.
  auto f = [](const std::vector<Tensor>& in) {
    Tensor y = ops::scale(in[0], 2.0f);
    if (!y.is_abstract()) y.set_keras_logits(Tensor::empty(in[0].shape()));  // kept alive by y
    return y;
  };
  EXPECT_NONFATAL_FAILURE(expect_abstract_matches_real(f, {random_host({4}, -1, 1, 4)}), "after forward");
}

}  // namespace
}  // namespace keel
