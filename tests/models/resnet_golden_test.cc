// keel's ResNet18 (training) and ResNet50 (inference) against an independent implementation:
// tests/golden/resnet18_train.json and resnet50_infer.json, produced in float64 by
// bench/golden_resnet.py with a hand-written PyTorch graph of models/resnet.cc.
//
// The weights are not stored: both sides generate every variable from its name (FNV-1a 64 of the
// name keys a SplitMix64 stream; the formula is in the script's docstring and the files' "notes",
// and GeneratorMatchesTheScript checks the two implementations agree bit for bit). Large results are
// compared through fingerprints: sum, sum of squares, sum of |.|, max |.| and 8 sampled values.
//
// Tolerances, each sized from the float32-vs-float64 drift of the same computation in torch (the
// file's "f32_drift"), with a margin for keel's different summation order. In brackets: float32
// torch's drift, then keel's measured error when the tolerances were set.
//   logits, probabilities     |keel - ref| <= 1e-4 * |ref| + 1e-5 * max|ref|
//                             [resnet18 8e-6, keel 4.7e-6 of max|ref|; resnet50 1e-6, keel 6.5e-7]
//   loss                      1e-5 relative [1.5e-6; 4.5e-7]
//   gradients                 sum: 1e-4 * sum|ref|; L2 norm: 1e-4 relative; sampled values: 1e-4 * max|ref|
//                             [1.5e-6, 2.6e-6, 8.2e-6; 7.3e-7, 2.1e-6, 7.0e-6]
//   conv bias gradients       zero in exact arithmetic (every conv feeds a training-mode BN, which
//                             subtracts the batch mean): max|g| <= 2e-5 * max|ref g| of the conv's kernel
//                             [9.5e-7; 7.0e-7]
//   Adam losses               1e-4 absolute: by step 3 the loss is ~3e-3 and Adam's ~lr-sized step on
//                             all 11M weights amplifies round-off [1.6e-5; 4.7e-6]
//   weight changes (3 steps)  sum: 2e-3 * sum|ref|; L2: 1e-3 relative; sampled values: 2e-2 * max|ref|
//                             (an element whose gradient is near zero takes a round-off-decided Adam
//                             step) [2.6e-4, 1.4e-4, 4.5e-3; 1.2e-5, 9.3e-6, 2.2e-4]
//   conv bias changes         round-off-driven in float32 (zero in the reference); Adam's first steps
//                             move a weight at most ~lr each, so max|change| <= 3.01 * lr [1.6e-3; 1.5e-3]
//   moving statistic changes  sum: 5e-3 * sum|ref|; L2: 1e-3 relative; sampled values: 1e-3 * |ref| +
//                             1e-2 * max|ref|; plus atol 3e-5 per element: the batch means carry the conv
//                             biases' round-off-driven changes (<= lr before step 2, 2 lr before step 3)
//                             times 1 - momentum = 0.01 [1.7e-3, 3.7e-5, 4.4e-3; 9.3e-4, 2.3e-4, 3.3e-3]
// Checked to fail against goldens generated with symmetric SAME padding, BN epsilon 1e-3, the
// unbiased variance in the moving average, momentum 0.9, or Adam epsilon 1e-8.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/autodiff/tape.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/model/model.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "models/zoo.h"
#include "tests/support/golden.h"

namespace keel {
namespace {

using nlohmann::json;
using testing::generate;
using testing::Range;

const json& golden(const std::string& file) {
  static std::map<std::string, json> docs;
  auto it = docs.find(file);
  if (it == docs.end()) {
    const std::string path = std::string(KEEL_TESTS_DIR) + "/golden/" + file;
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    it = docs.emplace(file, json::parse(in)).first;
  }
  return it->second;
}

// --- the generator (bench/golden_resnet.py's variable_range; generate is tests/support/golden's) ----

Range variable_range(const std::string& name, const Shape& shape) {
  const std::string kind = name.substr(name.rfind('/') + 1);
  if (kind == "kernel") {
    // Keras's fans: conv HWIO (KH*KW*Cin, KH*KW*Cout), Dense (in, out).
    const int64_t receptive = shape.size() == 4 ? shape[0] * shape[1] : 1;
    const int64_t fan_in = receptive * shape[shape.size() - 2], fan_out = receptive * shape.back();
    return {0.0, static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)))};
  }
  if (kind == "bias") return {0.0, 0.05f};
  if (kind == "gamma") return {1.0, 0.2f};
  if (kind == "beta") return {0.0, 0.1f};
  if (kind == "moving_mean") return {0.0, 0.1f};
  if (kind == "moving_variance") return {1.0, 0.5f};
  throw std::invalid_argument("no generator range for " + name);
}

Tensor initial_value(const Variable& v) { return generate(v.name(), v.shape(), variable_range(v.name(), v.shape())); }

Tensor input_batch(const json& doc) {
  const json& c = doc.at("config");
  Shape shape = c.at("input_shape").get<Shape>();
  shape.insert(shape.begin(), c.at("batch").get<int64_t>());
  return generate("golden/" + c.at("name").get<std::string>() + "/x", shape, {0.0, 1.0});
}

Tensor tensor_of(const json& t) {
  std::vector<float> v;
  for (double d : t.at("values")) v.push_back(static_cast<float>(d));
  return Tensor::from_vector(t.at("shape").get<Shape>(), v);
}

bool zero_in_exact_arithmetic(const std::string& name) {
  const std::string suffix = "_conv/bias";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// --- comparisons --------------------------------------------------------------------------------

struct Fingerprint {
  double sum = 0, sum_sq = 0, sum_abs = 0, max_abs = 0;
  std::vector<double> values;  // at the reference's indices
};

Fingerprint fingerprint(const std::vector<float>& a, const json& want) {
  Fingerprint f;
  for (float x : a) {
    const double d = x;
    f.sum += d;
    f.sum_sq += d * d;
    f.sum_abs += std::fabs(d);
    f.max_abs = std::max(f.max_abs, std::fabs(d));
  }
  for (int64_t i : want.at("index").get<std::vector<int64_t>>()) f.values.push_back(a.at(static_cast<size_t>(i)));
  return f;
}

// atol is per element: the sum of n elements gets n * atol, the L2 norm sqrt(n) * atol.
struct FingerprintTolerance {
  double sum;    // |sum - ref| <= sum * ref sum_abs + n * atol
  double l2;     // |L2 - ref L2| <= l2 * ref L2 + sqrt(n) * atol
  double value;  // |v - ref| <= value_rel * |ref| + value * ref max_abs + atol
  double value_rel = 0;
  double atol = 0;
};

// The worst measured errors over the calls sharing `worst`: |sum diff| / ref sum_abs, |L2 diff| /
// ref L2, |value diff| / ref max_abs (printed at the end of a test, for choosing tolerances).
struct Worst {
  double sum = 0, l2 = 0, value = 0;
  void print(const std::string& what) const {
    std::cout << what << ": worst |sum diff| / sum_abs " << sum << ", |L2 diff| / L2 " << l2
              << ", |value diff| / max_abs " << value << "\n";
  }
};

void expect_fingerprint(const Tensor& got, const json& want, const FingerprintTolerance& tol, const std::string& what,
                        Worst& worst) {
  ASSERT_EQ(got.size(), want.at("size").get<int64_t>()) << what;
  const Fingerprint f = fingerprint(got.to_vector(), want);
  const double sum = want.at("sum"), sum_abs = want.at("sum_abs"), max_abs = want.at("max_abs");
  const double l2 = std::sqrt(want.at("sum_sq").get<double>());
  const std::vector<double> values = want.at("values").get<std::vector<double>>();
  const double n = static_cast<double>(got.size());
  EXPECT_LE(std::fabs(f.sum - sum), tol.sum * sum_abs + n * tol.atol)
      << what << ": sum " << f.sum << ", reference " << sum;
  EXPECT_LE(std::fabs(std::sqrt(f.sum_sq) - l2), tol.l2 * l2 + std::sqrt(n) * tol.atol)
      << what << ": L2 norm " << std::sqrt(f.sum_sq) << ", reference " << l2;
  worst.sum = std::max(worst.sum, std::fabs(f.sum - sum) / sum_abs);
  worst.l2 = std::max(worst.l2, std::fabs(std::sqrt(f.sum_sq) - l2) / l2);
  for (size_t k = 0; k < values.size(); ++k) {
    const double err = std::fabs(f.values[k] - values[k]);
    EXPECT_LE(err, tol.value_rel * std::fabs(values[k]) + tol.value * max_abs + tol.atol)
        << what << " at flat index " << want.at("index")[k] << ": keel " << f.values[k] << ", reference " << values[k];
    worst.value = std::max(worst.value, err / max_abs);
  }
}

// Every element within rel * |ref| + abs_of_max * max|ref|; returns max |diff| / max |ref|.
double expect_close(const Tensor& got, const json& want, double rel, double abs_of_max, const std::string& what) {
  EXPECT_EQ(got.shape(), want.at("shape").get<Shape>()) << what;
  const std::vector<float> g = got.to_vector();
  const std::vector<double> w = want.at("values").get<std::vector<double>>();
  if (g.size() != w.size()) return INFINITY;
  double max_ref = 0, max_diff = 0;
  for (double v : w) max_ref = std::max(max_ref, std::fabs(v));
  for (size_t i = 0; i < w.size(); ++i) {
    const double diff = std::fabs(g[i] - w[i]);
    EXPECT_LE(diff, rel * std::fabs(w[i]) + abs_of_max * max_ref)
        << what << " [" << i << "]: keel " << g[i] << ", reference " << w[i];
    max_diff = std::max(max_diff, diff);
  }
  return max_diff / max_ref;
}

std::vector<std::string> sorted_names(const std::vector<Variable*>& vars) {
  std::vector<std::string> names;
  for (Variable* v : vars) names.push_back(v->name());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

// The golden model with every variable set from the generator. Built outside any strategy scope,
// so it runs on its private one-core cpu strategy.
std::unique_ptr<Model> make_model(const json& doc) {
  clear_session();
  set_random_seed(1);  // irrelevant: every variable is overwritten below
  const json& c = doc.at("config");
  zoo::ModelOptions options;
  options.input_shape = c.at("input_shape").get<Shape>();
  options.classes = c.at("classes").get<int64_t>();
  std::unique_ptr<Model> model = zoo::build(c.at("name").get<std::string>(), options);
  for (Variable* v : model->variables()) v->assign(initial_value(*v));
  return model;
}

// --- ResNet18, training mode --------------------------------------------------------------------

const json& r18() { return golden("resnet18_train.json"); }

constexpr double kLogitsRel = 1e-4, kLogitsAbsOfMax = 1e-5;
constexpr double kLossRel = 1e-5;
constexpr FingerprintTolerance kGradient{.sum = 1e-4, .l2 = 1e-4, .value = 1e-4};
constexpr double kConvBiasGradientOfKernel = 2e-5;
constexpr double kAdamLossAbs = 1e-4;
constexpr FingerprintTolerance kWeightDelta{.sum = 2e-3, .l2 = 1e-3, .value = 2e-2};
constexpr FingerprintTolerance kMovingDelta{.sum = 5e-3, .l2 = 1e-3, .value = 1e-2, .value_rel = 1e-3, .atol = 3e-5};

TEST(ResNetGolden, GeneratorMatchesTheScript) {
  for (const char* file : {"resnet18_train.json", "resnet50_infer.json"}) {
    const json& doc = golden(file);
    Worst unused;
    const FingerprintTolerance exact{.sum = 1e-12, .l2 = 1e-12, .value = 0};
    expect_fingerprint(input_batch(doc), doc.at("x"), exact, std::string(file) + ": x", unused);
    std::unique_ptr<Model> model = make_model(doc);
    EXPECT_EQ(sorted_names(model->trainable_variables()),
              sorted(doc.at("trainable_variables").get<std::vector<std::string>>()))
        << file << ": the script's graph has keel's variables";
    EXPECT_EQ(sorted_names(model->non_trainable_variables()),
              sorted(doc.at("moving_variables").get<std::vector<std::string>>()))
        << file;
    int checked = 0;
    for (Variable* v : model->variables()) {
      if (!doc.at("initial_values").contains(v->name())) continue;
      expect_fingerprint(v->value(), doc.at("initial_values").at(v->name()), exact, std::string(file) + ": " + v->name(),
                         unused);
      ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(doc.at("initial_values").size())) << file;
  }
}

TEST(ResNetGolden, Resnet18TrainingForwardAndLoss) {
  const json& doc = r18();
  std::unique_ptr<Model> model = make_model(doc);
  const Tensor x = input_batch(doc), y = tensor_of(doc.at("y"));
  Tensor probs = (*model)(x, /*training=*/true);
  ASSERT_TRUE(probs.keras_logits().defined()) << "the softmax Dense output remembers its logits";
  const double logits = expect_close(probs.keras_logits(), doc.at("logits"), kLogitsRel, kLogitsAbsOfMax, "logits");
  const double p = expect_close(probs, doc.at("probabilities"), kLogitsRel, kLogitsAbsOfMax, "probabilities");
  const double loss = CategoricalCrossentropy()(y, probs).item();
  const double want = doc.at("loss");
  EXPECT_NEAR(loss, want, kLossRel * std::fabs(want)) << "loss";
  std::cout << "resnet18 max |diff| / max |ref|: logits " << logits << ", probabilities " << p
            << "; loss relative error " << std::fabs(loss - want) / want << "\n";
}

TEST(ResNetGolden, Resnet18GradientOfEveryVariable) {
  const json& doc = r18();
  std::unique_ptr<Model> model = make_model(doc);
  const Tensor x = input_batch(doc), y = tensor_of(doc.at("y"));
  const std::vector<Variable*> vars = model->trainable_variables();
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    Tensor probs = (*model)(x, /*training=*/true);
    grads = tape.gradient(CategoricalCrossentropy()(y, probs), vars);
  }
  ASSERT_EQ(grads.size(), doc.at("gradients").size());
  std::map<std::string, double> kernel_max_abs;
  for (const auto& [name, fp] : doc.at("gradients").items()) kernel_max_abs[name] = fp.at("max_abs");
  Worst worst;
  double worst_bias = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    const std::string& name = vars[i]->name();
    ASSERT_TRUE(grads[i].defined()) << name;
    if (zero_in_exact_arithmetic(name)) {
      const std::string kernel = name.substr(0, name.rfind('/')) + "/kernel";
      const std::vector<float> g = grads[i].to_vector();
      double max_abs = 0;
      for (float v : g) max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
      EXPECT_LE(max_abs, kConvBiasGradientOfKernel * kernel_max_abs.at(kernel))
          << "d loss / d " << name << " is zero in exact arithmetic (a training-mode BN follows)";
      worst_bias = std::max(worst_bias, max_abs / kernel_max_abs.at(kernel));
      continue;
    }
    expect_fingerprint(grads[i], doc.at("gradients").at(name), kGradient, "d loss / d " + name, worst);
  }
  worst.print("resnet18 gradients");
  std::cout << "resnet18 conv bias gradients: worst max|g| / max|kernel g| " << worst_bias << "\n";
}

TEST(ResNetGolden, Resnet18ThreeAdamSteps) {
  const json& doc = r18();
  std::unique_ptr<Model> model = make_model(doc);
  const json& c = doc.at("config").at("adam");
  Adam::Options o;
  o.learning_rate = c.at("learning_rate").get<float>();
  o.beta_1 = c.at("beta_1").get<float>();
  o.beta_2 = c.at("beta_2").get<float>();
  o.epsilon = c.at("epsilon").get<float>();
  model->compile(std::make_shared<Adam>(o), std::make_shared<CategoricalCrossentropy>());
  const Tensor x = input_batch(doc), y = tensor_of(doc.at("y"));
  const std::vector<double> losses = doc.at("adam").at("losses").get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 3u);
  double worst_loss = 0;
  for (size_t step = 0; step < losses.size(); ++step) {
    const StepTotals t = model->train_step(Batch{x, y});
    ASSERT_EQ(t.samples, x.dim(0));
    const double loss = t.loss_sum / static_cast<double>(t.samples);
    EXPECT_NEAR(loss, losses[step], kAdamLossAbs) << "loss before update " << step + 1;
    worst_loss = std::max(worst_loss, std::fabs(loss - losses[step]));
  }
  EXPECT_EQ(model->optimizer().iterations(), 3);

  Worst weights, moving;
  double worst_bias = 0;
  const double lr = o.learning_rate;
  for (Variable* v : model->variables()) {
    const std::string& name = v->name();
    std::vector<float> delta = v->value().to_vector();
    const std::vector<float> initial = initial_value(*v).to_vector();
    for (size_t i = 0; i < delta.size(); ++i) delta[i] -= initial[i];
    const Tensor d = Tensor::from_vector(v->shape(), delta);
    if (!v->trainable()) {
      expect_fingerprint(d, doc.at("adam").at("moving_deltas").at(name), kMovingDelta, "change of " + name, moving);
    } else if (zero_in_exact_arithmetic(name)) {
      double max_abs = 0;
      for (float e : delta) max_abs = std::max(max_abs, static_cast<double>(std::fabs(e)));
      EXPECT_LE(max_abs, 3.01 * lr) << "change of " << name << ": three Adam steps move a weight ~lr each at most";
      worst_bias = std::max(worst_bias, max_abs);
    } else {
      expect_fingerprint(d, doc.at("adam").at("weight_deltas").at(name), kWeightDelta, "change of " + name, weights);
    }
  }
  std::cout << "resnet18 Adam: worst |loss diff| " << worst_loss << "; conv bias max |change| " << worst_bias << "\n";
  weights.print("resnet18 weight changes");
  moving.print("resnet18 moving statistic changes");
}

// --- ResNet50, inference mode -------------------------------------------------------------------

TEST(ResNetGolden, Resnet50InferenceLogits) {
  const json& doc = golden("resnet50_infer.json");
  std::unique_ptr<Model> model = make_model(doc);
  Tensor probs = (*model)(input_batch(doc), /*training=*/false);
  ASSERT_TRUE(probs.keras_logits().defined());
  const double logits = expect_close(probs.keras_logits(), doc.at("logits"), kLogitsRel, kLogitsAbsOfMax, "logits");
  const double p = expect_close(probs, doc.at("probabilities"), kLogitsRel, kLogitsAbsOfMax, "probabilities");
  std::cout << "resnet50 max |diff| / max |ref|: logits " << logits << ", probabilities " << p << "\n";
}

}  // namespace
}  // namespace keel
