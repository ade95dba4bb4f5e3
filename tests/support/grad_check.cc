#include "tests/support/grad_check.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/core/random.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/ops/ops.h"

namespace keel::testing {
namespace {

Tensor host_copy(const Tensor& t) {
  HostScope host_scope;
  Tensor c = Tensor::empty(t.shape());
  c.copy_from(t);
  return c;
}

// The weighted sum the checker differentiates, in double, from f's float outputs.
double weighted_sum(const Tensor& out, const std::vector<double>& weights) {
  const std::vector<float> v = out.to_vector();
  double s = 0;
  for (size_t k = 0; k < v.size(); ++k) s += weights[k] * static_cast<double>(v[k]);
  return s;
}

std::vector<double> output_weights(int64_t n, uint64_t seed) {
  if (n == 1) return {1.0};
  Rng rng(seed);
  std::vector<double> w(static_cast<size_t>(n));
  for (double& x : w) {
    // Magnitude in [0.5, 1.5) and a random sign: errors in different elements cannot cancel.
    const double mag = 0.5 + static_cast<double>(rng.next_float());
    x = (rng.next_u64() & 1) ? mag : -mag;
  }
  return w;
}

bool all_finite(const Tensor& t) {
  for (float v : t.to_vector()) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

}  // namespace

std::string index_string(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  std::ostringstream os;
  os << "(";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << ")";
  return os.str();
}

GradCheckOptions tolerances(std::string name, double eps, double atol, double rtol) {
  GradCheckOptions o;
  o.name = std::move(name);
  o.eps = eps;
  o.atol = atol;
  o.rtol = rtol;
  return o;
}

Tensor host(const Shape& shape, std::vector<float> values) { return Tensor::from_vector(shape, values); }

Tensor random_host(const Shape& shape, float lo, float hi, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (float& x : v) x = lo + (hi - lo) * rng.next_float();
  return Tensor::from_vector(shape, v);
}

Tensor random_host_away_from_zero(const Shape& shape, float min_abs, float max_abs, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (float& x : v) {
    const float mag = min_abs + (max_abs - min_abs) * rng.next_float();
    x = (rng.next_u64() & 1) ? mag : -mag;
  }
  return Tensor::from_vector(shape, v);
}

void expect_gradients_match(TensorFn f, std::vector<Tensor> inputs, GradCheckOptions opts) {
  const std::string who = opts.name.empty() ? std::string("gradient check") : opts.name;
  for (Tensor& t : inputs) t = host_copy(t);
  std::vector<int> checked = opts.check_inputs;
  if (checked.empty()) {
    for (int i = 0; i < static_cast<int>(inputs.size()); ++i) checked.push_back(i);
  }
  std::vector<std::vector<float>> before;
  for (const Tensor& t : inputs) before.push_back(t.to_vector());

  // Analytic: one tape watching every checked input (and a tensor the output cannot depend on).
  std::vector<double> weights;
  std::vector<Tensor> analytic;
  Tensor unrelated_grad;
  {
    Tensor unrelated = Tensor::from_vector({2}, std::vector<float>{0.25f, -0.75f});
    GradientTape tape;
    for (int i : checked) tape.watch(inputs[static_cast<size_t>(i)]);
    tape.watch(unrelated);
    Tensor out = f(inputs);
    ASSERT_TRUE(out.defined()) << who << ": f returned an undefined tensor";
    ASSERT_GT(out.size(), 0) << who << ": f returned an empty tensor";
    ASSERT_TRUE(all_finite(out)) << who << ": f's output is not finite at the unperturbed inputs";
    weights = output_weights(out.size(), opts.seed);
    Tensor target = out;
    if (out.size() != 1) {
      HostScope host_scope;
      std::vector<float> w(weights.begin(), weights.end());
      Tensor wt = Tensor::from_vector({out.size(), 1}, w);
      target = ops::matmul(ops::reshape(out, {1, out.size()}), wt);
    }
    std::vector<Tensor> sources;
    for (int i : checked) sources.push_back(inputs[static_cast<size_t>(i)]);
    sources.push_back(unrelated);
    std::vector<Tensor> grads = tape.gradient(target, sources);
    unrelated_grad = grads.back();
    grads.pop_back();
    for (Tensor& g : grads) analytic.push_back(g.defined() ? host_copy(g) : Tensor());
  }
  EXPECT_FALSE(unrelated_grad.defined())
      << who << ": gradient() w.r.t. a watched tensor the output does not depend on must be undefined";
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(inputs[i].to_vector(), before[i]) << who << ": the forward/backward pass modified input " << i;
  }

  // Numeric: central differences, one element at a time.
  for (size_t c = 0; c < checked.size(); ++c) {
    const int i = checked[c];
    Tensor& x = inputs[static_cast<size_t>(i)];
    const Tensor& g = analytic[c];
    if (g.defined()) {
      EXPECT_EQ(g.shape(), x.shape()) << who << ": gradient of input " << i << " has shape "
                                      << shape_string(g.shape()) << ", input " << shape_string(x.shape());
      if (g.shape() != x.shape()) continue;
    }
    const std::vector<float> ga = g.defined() ? g.to_vector() : std::vector<float>(static_cast<size_t>(x.size()), 0.0f);
    double worst_ratio = -1;
    int64_t worst = -1, bad = 0;
    double worst_a = 0, worst_n = 0;
    for (int64_t j = 0; j < x.size(); ++j) {
      float* p = x.data() + j;
      const float orig = *p;
      const double h = opts.eps * std::max(1.0, std::fabs(static_cast<double>(orig)));
      const float xp = static_cast<float>(orig + h), xm = static_cast<float>(orig - h);
      *p = xp;
      const double fp = weighted_sum(f(inputs), weights);
      *p = xm;
      const double fm = weighted_sum(f(inputs), weights);
      *p = orig;
      const double numeric = (fp - fm) / (static_cast<double>(xp) - static_cast<double>(xm));
      const double a = static_cast<double>(ga[static_cast<size_t>(j)]);
      const double tol = opts.atol + opts.rtol * std::max(std::fabs(a), std::fabs(numeric));
      const double ratio = std::isfinite(numeric) && std::isfinite(a) ? std::fabs(a - numeric) / tol : INFINITY;
      if (ratio > 1) ++bad;
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        worst = j;
        worst_a = a;
        worst_n = numeric;
      }
    }
    if (!g.defined()) {
      ADD_FAILURE() << who << ": gradient of input " << i << " is undefined (largest numeric derivative "
                    << worst_n << " at " << index_string(x.shape(), worst) << ")";
      continue;
    }
    if (bad > 0) {
      ADD_FAILURE() << who << ": d(output)/d(input " << i << ") differs from central differences at " << bad
                    << " of " << x.size() << " elements; worst at " << index_string(x.shape(), worst)
                    << ": analytic " << worst_a << ", numeric " << worst_n << ", |diff| "
                    << std::fabs(worst_a - worst_n) << " > tolerance "
                    << opts.atol + opts.rtol * std::max(std::fabs(worst_a), std::fabs(worst_n));
    }
  }
}

namespace {

struct LedgerRun {
  std::vector<Shape> output_shape;  // one entry, vector for printing convenience
  bool output_abstract = false;
  bool output_has_data = false;
  std::vector<bool> grad_defined;
  std::vector<Shape> grad_shapes;
  std::vector<bool> grad_abstract;
  std::array<MemoryStat, kNumCategories> after_forward{};
  std::array<MemoryStat, kNumCategories> after_backward{};
  std::array<MemoryStat, kNumCategories> after_release{};
};

std::array<MemoryStat, kNumCategories> snapshot(const Ledger& ledger) {
  std::array<MemoryStat, kNumCategories> s{};
  for (int c = 0; c < kNumCategories; ++c) s[static_cast<size_t>(c)] = ledger.core(0).stat(static_cast<Category>(c));
  return s;
}

LedgerRun run_on_ledger(const TensorFn& f, const std::vector<Tensor>& inputs, bool abstract) {
  LedgerRun run;
  Ledger ledger(DeviceSpec::custom(1, 0));
  DeviceContext ctx;
  ctx.ledger = &ledger;
  ctx.core = 0;
  ctx.abstract = abstract;
  ctx.category = Category::activations;
  ctx.owner = "activation:op";
  ContextScope scope(ctx);
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) {
    Tensor c = Tensor::empty(t.shape(), Category::inputs, "infeed:input");
    c.copy_from(t);  // no-op when abstract
    in.push_back(c);
  }
  {
    GradientTape tape;
    for (const Tensor& t : in) tape.watch(t);
    Tensor y = f(in);
    run.output_shape.push_back(y.shape());
    run.output_abstract = y.is_abstract();
    run.output_has_data = y.data() != nullptr;
    run.after_forward = snapshot(ledger);
    Tensor target = ops::reduce_sum(y);
    std::vector<Tensor> grads = tape.gradient(target, in);
    for (const Tensor& g : grads) {
      run.grad_defined.push_back(g.defined());
      run.grad_shapes.push_back(g.defined() ? g.shape() : Shape{});
      run.grad_abstract.push_back(g.defined() && g.is_abstract());
    }
    run.after_backward = snapshot(ledger);
  }
  run.after_release = snapshot(ledger);
  return run;
}

// Appends "when, category: field real R, abstract A" for every statistic that differs.
void diff_stats(const std::array<MemoryStat, kNumCategories>& real, const std::array<MemoryStat, kNumCategories>& plan,
                const char* when, std::ostringstream& out) {
  for (int c = 0; c < kNumCategories; ++c) {
    const MemoryStat& r = real[static_cast<size_t>(c)];
    const MemoryStat& p = plan[static_cast<size_t>(c)];
    const char* cat = category_name(static_cast<Category>(c));
    const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
        {"current", {r.current, p.current}},         {"peak", {r.peak, p.peak}},
        {"allocated", {r.allocated, p.allocated}},   {"freed", {r.freed, p.freed}},
        {"alloc_count", {r.alloc_count, p.alloc_count}}, {"free_count", {r.free_count, p.free_count}}};
    for (const auto& [name, values] : fields) {
      if (values.first != values.second) {
        out << "  " << when << ", " << cat << "." << name << ": real " << values.first << ", abstract "
            << values.second << "\n";
      }
    }
  }
}

}  // namespace

void expect_abstract_matches_real(TensorFn f, const std::vector<Tensor>& inputs) {
  const LedgerRun real = run_on_ledger(f, inputs, false);
  const LedgerRun plan = run_on_ledger(f, inputs, true);
  EXPECT_FALSE(real.output_abstract);
  EXPECT_TRUE(real.output_has_data);
  EXPECT_TRUE(plan.output_abstract) << "an op in an abstract context must produce an abstract tensor";
  EXPECT_FALSE(plan.output_has_data) << "an abstract tensor must have no storage";
  EXPECT_EQ(plan.output_shape, real.output_shape);
  EXPECT_EQ(plan.grad_defined, real.grad_defined);
  EXPECT_EQ(plan.grad_shapes, real.grad_shapes);
  for (size_t i = 0; i < plan.grad_abstract.size(); ++i) {
    if (plan.grad_defined[i]) {
      EXPECT_TRUE(plan.grad_abstract[i]) << "gradient " << i << " of the abstract run";
    }
  }
  // The real run must charge something, or the comparison would prove nothing.
  EXPECT_GT(real.after_forward[static_cast<size_t>(Category::activations)].allocated +
                real.after_forward[static_cast<size_t>(Category::inputs)].allocated,
            0);
  std::ostringstream diffs;
  diff_stats(real.after_forward, plan.after_forward, "after forward", diffs);
  diff_stats(real.after_backward, plan.after_backward, "after backward", diffs);
  diff_stats(real.after_release, plan.after_release, "after release", diffs);
  if (!diffs.str().empty()) {
    ADD_FAILURE() << "the abstract (planning) run's ledger differs from the real run's:\n" << diffs.str();
  }
}

}  // namespace keel::testing
