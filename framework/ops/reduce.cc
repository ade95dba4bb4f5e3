// Full reductions to a scalar: reduce_sum, reduce_mean; and a host program's per-replica means.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/ops/host_program.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {
namespace {

Tensor reduce_scaled(const Tensor& x_in, float factor) {
  if (detail::rows_of(x_in) != nullptr) {
    throw std::logic_error("reduce_sum/reduce_mean over a host program's rows: use replica_means");
  }
  const Tensor x = detail::operand(x_in, DType::float32).value;  // a bfloat16 input widened exactly
  Tensor y = Tensor::empty({});
  if (detail::compute(y, {&x})) y.data()[0] = static_cast<float>(x.array().cast<double>().sum() * factor);
  if (GradientTape::is_recording({&x_in})) {
    const Shape shape = x.shape();
    GradientTape::record({x_in}, {y}, [shape, factor](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = Tensor::empty(shape);
      if (detail::compute(dx, {&dy[0]})) dx.fill(dy[0].data()[0] * factor);
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace

Tensor reduce_sum(const Tensor& x) { return reduce_scaled(x, 1.0f); }

Tensor reduce_mean(const Tensor& x) {
  return reduce_scaled(x, x.size() > 0 ? 1.0f / static_cast<float>(x.size()) : 0.0f);
}

Tensor replica_means(const Tensor& x) {
  const ReplicaRows* rows = detail::rows_of(x);
  if (rows == nullptr || x.rank() != 1) {
    throw std::logic_error("replica_means: a host program's per-row values (rows,) expected, got " + shape_string(x.shape()));
  }
  const int replicas = rows->replicas();
  std::vector<float> factors;  // reduce_mean's of each replica's rows
  for (int r = 0; r < replicas; ++r) factors.push_back(rows->rows(r) > 0 ? 1.0f / static_cast<float>(rows->rows(r)) : 0.0f);
  Tensor y = Tensor::empty({replicas});
  if (detail::compute(y, {&x})) {
    for (int r = 0; r < replicas; ++r) {
      // reduce_scaled's arithmetic over the replica's rows (each replica's start aligned as its own
      // tensor's would be: Model::steps_as_host_program takes shards of multiples of 16 rows).
      const ConstArrayMap part(x.data() + rows->begin(r), rows->rows(r));
      y.data()[r] = static_cast<float>(part.cast<double>().sum() * factors[static_cast<size_t>(r)]);
    }
  }
  if (GradientTape::is_recording({&x})) {
    const ReplicaRows bounds = *rows;
    GradientTape::record({x}, {y}, [bounds, factors](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = Tensor::empty({bounds.total()});
      if (detail::compute(dx, {&dy[0]})) {
        for (int r = 0; r < bounds.replicas(); ++r) {
          std::fill_n(dx.data() + bounds.begin(r), bounds.rows(r), dy[0].data()[r] * factors[static_cast<size_t>(r)]);
        }
      }
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace keel::ops
