// Model: compile / fit / evaluate / predict on tiny models whose results are worked out by hand, the
// callback protocol of fit, summary, count_params and the variables' order and trainability.
// (tests/model/sequential_test.cc covers the MLP's summary and config, mirroring, and training.)
#include "framework/model/model.h"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/dataset.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/normalization.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using testing::host;

std::vector<std::string> names_of(const std::vector<Variable*>& vars) {
  std::vector<std::string> out;
  for (const Variable* v : vars) out.push_back(v->name());
  return out;
}

// Dense(2, softmax) on 3 features with a zero kernel and bias [1, 0]: every row predicts
// p = [e/(e+1), 1/(e+1)] = [0.7311, 0.2689].
std::unique_ptr<Sequential> constant_classifier() {
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(2, "softmax", Shape{3})});
  m->variables()[0]->assign(Tensor::zeros({3, 2}));
  m->variables()[1]->assign(host({2}, {1, 0}));
  return m;
}

// Four examples, three of class 0 and one of class 1 (one-hot).
Dataset four_examples(int64_t batch) {
  const Tensor x = testing::random_host({4, 3}, -1, 1, 9);
  const Tensor y = host({4, 2}, {1, 0, 0, 1, 1, 0, 1, 0});
  return Dataset::from_tensor_slices({x, y}).batch(batch);
}

// The mean cross-entropy of the constant classifier on four_examples.
double expected_loss() {
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1.0);
  return (3 * -std::log(p0) + -std::log(1 - p0)) / 4;
}

TEST(ModelCompileTest, NeedsAnOptimizerALossAndKnownMetrics) {
  clear_session();
  auto m = constant_classifier();
  EXPECT_FALSE(m->compiled());
  EXPECT_THROW(m->compile(nullptr, std::make_shared<CategoricalCrossentropy>()), std::invalid_argument);
  EXPECT_THROW(m->compile(std::make_shared<Adam>(), nullptr), std::invalid_argument);
  EXPECT_THROW(m->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>(), {"mse"}),
               std::invalid_argument);
  EXPECT_FALSE(m->compiled()) << "a refused compile leaves the model uncompiled";
  auto sgd = std::make_shared<SGD>();
  m->compile(sgd, std::make_shared<CategoricalCrossentropy>());
  EXPECT_TRUE(m->compiled());
  EXPECT_EQ(&m->optimizer(), sgd.get());
  EXPECT_EQ(m->loss().name(), "categorical_crossentropy");
}

TEST(ModelCompileTest, TrainingAndEvaluatingBeforeCompileIsALogicError) {
  clear_session();
  auto m = constant_classifier();
  const Batch b{Tensor::zeros({2, 3}), host({2, 2}, {1, 0, 0, 1})};
  EXPECT_THROW(m->train_step(b), std::logic_error);
  EXPECT_THROW(m->test_step(b), std::logic_error);
  EXPECT_THROW(m->fit(four_examples(2), {}), std::logic_error);
  EXPECT_THROW(m->evaluate(four_examples(2)), std::logic_error);
}

TEST(ModelTest, BuiltOutsideAnyScopeItRunsOnAPrivateCpu) {
  clear_session();
  auto m = constant_classifier();
  EXPECT_EQ(m->strategy().num_replicas(), 1);
  EXPECT_EQ(m->strategy().spec().name, "cpu");
  EXPECT_FALSE(m->strategy().spec().has_budget());
}

TEST(ModelTest, EvaluateGivesTheMeanLossAndAccuracy) {
  clear_session();
  auto m = constant_classifier();
  m->compile(std::make_shared<SGD>(), std::make_shared<CategoricalCrossentropy>());
  for (int64_t batch : {4, 3, 1}) {
    const Logs logs = m->evaluate(four_examples(batch));
    EXPECT_NEAR(logs.at("loss"), expected_loss(), 1e-6) << "batch " << batch;
    EXPECT_DOUBLE_EQ(logs.at("accuracy"), 0.75) << "batch " << batch;
    EXPECT_EQ(logs.at("samples"), 4) << "batch " << batch;
  }
  EXPECT_EQ(m->optimizer().iterations(), 0) << "evaluation trains nothing";
  EXPECT_EQ(m->variables()[1]->value().to_vector(), (std::vector<float>{1, 0}));
}

// Keras's evaluate(steps=): the first `steps` batches only; more steps than batches: every batch.
TEST(ModelTest, EvaluateStepsTakesTheFirstBatches) {
  clear_session();
  auto m = constant_classifier();
  m->compile(std::make_shared<SGD>(), std::make_shared<CategoricalCrossentropy>());
  Logs logs = m->evaluate(four_examples(1), 2);  // rows 0 (class 0: right) and 1 (class 1: wrong)
  EXPECT_EQ(logs.at("samples"), 2);
  EXPECT_DOUBLE_EQ(logs.at("accuracy"), 0.5);
  logs = m->evaluate(four_examples(3), 1);
  EXPECT_EQ(logs.at("samples"), 3);
  EXPECT_DOUBLE_EQ(logs.at("accuracy"), 2.0 / 3.0);
  logs = m->evaluate(four_examples(3), 10);
  EXPECT_EQ(logs.at("samples"), 4);
  EXPECT_NEAR(logs.at("loss"), expected_loss(), 1e-6);
  EXPECT_THROW(m->evaluate(four_examples(2), 0), std::invalid_argument);
}

TEST(ModelCompileTest, TopKMetricsByKerasNameForTheLossesLabels) {
  clear_session();
  auto m = constant_classifier();
  auto one_hot = std::make_shared<CategoricalCrossentropy>();
  EXPECT_THROW(m->compile(std::make_shared<SGD>(), one_hot, {"accuracy", "sparse_top_k_categorical_accuracy"}),
               std::invalid_argument);
  EXPECT_THROW(m->compile(std::make_shared<SGD>(), std::make_shared<SparseCategoricalCrossentropy>(),
                          {"top_k_categorical_accuracy"}),
               std::invalid_argument);
  EXPECT_THROW(m->compile(std::make_shared<SGD>(), one_hot, {"accuracy", "accuracy"}), std::invalid_argument);
  m->compile(std::make_shared<SGD>(), one_hot, {"accuracy", "top_k_categorical_accuracy"});
  EXPECT_EQ(m->metrics(), (std::vector<std::string>{"accuracy", "top_k_categorical_accuracy"}));
}

TEST(ModelTest, EveryCompiledMetricIsLoggedAndOnlyThose) {
  clear_session();
  auto m = constant_classifier();
  // Two classes: every label is in the top 5.
  m->compile(std::make_shared<SGD>(), std::make_shared<CategoricalCrossentropy>(), {"top_k_categorical_accuracy"});
  const Logs logs = m->evaluate(four_examples(3));
  EXPECT_EQ(logs.size(), 3u);  // loss, samples and the metric: no accuracy
  EXPECT_EQ(logs.at("top_k_categorical_accuracy"), 1.0);
  FitOptions fit;
  fit.validation_data = four_examples(2);
  const History h = m->fit(four_examples(2), fit);
  ASSERT_EQ(h.epochs.size(), 1u);
  EXPECT_EQ(h.epochs[0].count("accuracy"), 0u);
  EXPECT_EQ(h.epochs[0].at("top_k_categorical_accuracy"), 1.0);
  EXPECT_EQ(h.epochs[0].at("val_top_k_categorical_accuracy"), 1.0);
  EXPECT_EQ(h.epochs[0].count("val_samples"), 0u);
}

TEST(ModelTest, EvaluateOnMoreCoresThanRowsCountsEverySampleOnce) {
  // Batches of 3 on 4 cores: shards of 1, 1, 1 and 0 rows, then 1, 0, 0, 0.
  clear_session();
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::unique_ptr<Sequential> m;
  {
    auto scope = s.scope();
    m = constant_classifier();
  }
  m->compile(std::make_shared<SGD>(), std::make_shared<CategoricalCrossentropy>());
  const Logs logs = m->evaluate(four_examples(3));
  EXPECT_NEAR(logs.at("loss"), expected_loss(), 1e-6);
  EXPECT_DOUBLE_EQ(logs.at("accuracy"), 0.75);
  EXPECT_EQ(logs.at("samples"), 4);
}

// Dense(2) on 3 features: y = x [[1, 0], [0, 1], [1, 1]] + [0.5, -1].
std::unique_ptr<Sequential> known_linear() {
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(2, "linear", Shape{3})});
  m->variables()[0]->assign(host({3, 2}, {1, 0, 0, 1, 1, 1}));
  m->variables()[1]->assign(host({2}, {0.5f, -1.0f}));
  return m;
}

TEST(ModelPredictTest, EveryRowInOrderWhateverTheBatchSizeAndCores) {
  clear_session();
  const Tensor x = host({5, 3}, {1, 2, 3, 4, 5, 6, 0, 0, 0, -1, 1, 2, 10, 0, -10});
  const std::vector<float> want = {4.5f, 4.0f, 10.5f, 10.0f, 0.5f, -1.0f, 1.5f, 2.0f, 0.5f, -11.0f};
  auto single = known_linear();
  for (int64_t batch : {1, 2, 5, 32}) {
    const Tensor y = single->predict(x, batch);
    EXPECT_EQ(y.shape(), (Shape{5, 2})) << "batch " << batch;
    EXPECT_EQ(y.to_vector(), want) << "batch " << batch;
  }
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::unique_ptr<Sequential> replicated;
  {
    auto scope = s.scope();
    replicated = known_linear();
  }
  for (int64_t batch : {2, 3, 5}) {
    const Tensor y = replicated->predict(x, batch);
    EXPECT_EQ(y.shape(), (Shape{5, 2})) << "batch " << batch;
    EXPECT_EQ(y.to_vector(), want) << "4 cores, batch " << batch;
  }
  EXPECT_TRUE(replicated->predict(x, 5).storage().charges().empty()) << "predictions come back to the host";
  EXPECT_GT(s.ledger().core(0).transfers().core_to_host_bytes, 0) << "counted as outfeed";
  EXPECT_THROW(single->predict(x, 0), std::invalid_argument);
}

// Records the callback protocol of fit.
class Recorder : public Callback {
 public:
  void on_train_begin(TrainingState& st) override { events.push_back("train_begin"); model = st.model; }
  void on_epoch_begin(TrainingState& st) override {
    events.push_back("epoch_begin " + std::to_string(st.epoch) + " batch " + std::to_string(st.batch));
  }
  void on_train_batch_end(TrainingState& st, const Logs& logs) override {
    events.push_back("batch_end " + std::to_string(st.epoch) + ":" + std::to_string(st.batch));
    epochs_seen = st.epochs;
    steps_per_epoch = st.steps_per_epoch;
    last_flags.push_back(st.last_batch_of_epoch);
    samples.push_back(st.epoch_totals.samples);
    ASSERT_NE(st.position, nullptr);
    ASSERT_NE(st.iterator, nullptr);
    // The saved position is that of the last batch trained on, not the prefetched one.
    saved_produced.push_back(st.iterator_state().at("produced").get<int64_t>());
    iterator_produced.push_back(st.iterator->produced());
    batch_logs.push_back(logs);
    if (stop_at_batch == st.batch) st.stop_training = true;
  }
  void on_epoch_end(TrainingState& st, const Logs& logs) override {
    events.push_back("epoch_end " + std::to_string(st.epoch));
    epoch_logs.push_back(logs);
    infeed_bytes.push_back(st.infeed_bytes);
  }
  void on_train_end(TrainingState&) override { events.push_back("train_end"); }

  int64_t stop_at_batch = -1;
  Model* model = nullptr;
  int epochs_seen = 0;
  int64_t steps_per_epoch = 0;
  std::vector<std::string> events;
  std::vector<bool> last_flags;
  std::vector<int64_t> samples, saved_produced, iterator_produced, infeed_bytes;
  std::vector<Logs> batch_logs, epoch_logs;
};

// Eight examples in batches of 4: two steps per epoch.
Dataset eight_examples() {
  const Tensor x = testing::random_host({8, 3}, -1, 1, 5);
  const Tensor y = host({8, 2}, {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1});
  return Dataset::from_tensor_slices({x, y}).batch(4, /*drop_remainder=*/true);
}

std::unique_ptr<Sequential> compiled_model() {
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(4, "relu", Shape{3}), Dense(2, "softmax")});
  m->compile(std::make_shared<SGD>(), std::make_shared<CategoricalCrossentropy>());
  return m;
}

TEST(ModelFitTest, CallbacksSeeEveryStepOfEveryEpochInOrder) {
  clear_session();
  auto m = compiled_model();
  Recorder r;
  FitOptions o;
  o.epochs = 2;
  o.callbacks = {&r};
  const History h = m->fit(eight_examples(), o);
  EXPECT_EQ(r.events, (std::vector<std::string>{"train_begin", "epoch_begin 0 batch 0", "batch_end 0:1", "batch_end 0:2",
                                                "epoch_end 0", "epoch_begin 1 batch 0", "batch_end 1:1", "batch_end 1:2",
                                                "epoch_end 1", "train_end"}));
  EXPECT_EQ(r.model, m.get());
  EXPECT_EQ(r.epochs_seen, 2);
  EXPECT_EQ(r.steps_per_epoch, 2);
  EXPECT_EQ(r.last_flags, (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(r.samples, (std::vector<int64_t>{4, 8, 4, 8})) << "running sums restart each epoch";
  EXPECT_EQ(r.saved_produced, (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(r.iterator_produced, (std::vector<int64_t>{2, 2, 2, 2})) << "the next batch is prefetched before a step";
  ASSERT_EQ(h.epochs.size(), 2u);
  ASSERT_EQ(r.epoch_logs.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(r.epoch_logs[e], h.epochs[e]);
    EXPECT_EQ(r.batch_logs[2 * e + 1], h.epochs[e]) << "an epoch's logs are those of its last step";
    EXPECT_TRUE(std::isfinite(h.epochs[e].at("loss")));
    EXPECT_GE(h.epochs[e].at("accuracy"), 0.0);
    EXPECT_LE(h.epochs[e].at("accuracy"), 1.0);
    // Two batches of 4 x 3 images and 4 x 2 labels moved to the core.
    EXPECT_EQ(r.infeed_bytes[e], 2 * (4 * 3 + 4 * 2) * 4);
  }
  EXPECT_EQ(m->optimizer().iterations(), 4);
}

TEST(ModelFitTest, StopTrainingMidEpochEndsFitWithoutThatEpochsLogs) {
  clear_session();
  auto m = compiled_model();
  Recorder r;
  r.stop_at_batch = 1;
  FitOptions o;
  o.epochs = 3;
  o.callbacks = {&r};
  const History h = m->fit(eight_examples(), o);
  EXPECT_EQ(r.events, (std::vector<std::string>{"train_begin", "epoch_begin 0 batch 0", "batch_end 0:1", "train_end"}));
  EXPECT_TRUE(h.epochs.empty());
  EXPECT_EQ(m->optimizer().iterations(), 1) << "the prefetched batch is not trained on";
}

TEST(ModelFitTest, StopTrainingOnAnEpochsLastBatchKeepsThatEpoch) {
  clear_session();
  auto m = compiled_model();
  Recorder r;
  r.stop_at_batch = 2;
  FitOptions o;
  o.epochs = 3;
  o.callbacks = {&r};
  const History h = m->fit(eight_examples(), o);
  EXPECT_EQ(r.events, (std::vector<std::string>{"train_begin", "epoch_begin 0 batch 0", "batch_end 0:1", "batch_end 0:2",
                                                "epoch_end 0", "train_end"}));
  EXPECT_EQ(h.epochs.size(), 1u);
  EXPECT_EQ(m->optimizer().iterations(), 2);
}

TEST(ModelFitTest, InitialEpochAndMidEpochResume) {
  clear_session();
  auto m = compiled_model();
  const Dataset ds = eight_examples();
  {
    Recorder r;
    FitOptions o;
    o.epochs = 3;
    o.initial_epoch = 2;
    o.callbacks = {&r};
    EXPECT_EQ(m->fit(ds, o).epochs.size(), 1u);
    EXPECT_EQ(r.events, (std::vector<std::string>{"train_begin", "epoch_begin 2 batch 0", "batch_end 2:1", "batch_end 2:2",
                                                  "epoch_end 2", "train_end"}));
    EXPECT_EQ(m->optimizer().iterations(), 2);
  }
  // Resume epoch 0 after its first batch, with that batch's running sums.
  Iterator it = ds.make_iterator(0);
  ASSERT_TRUE(it.next().has_value());
  Recorder r;
  FitOptions o;
  o.epochs = 1;
  o.initial_iterator_state = it.save();
  o.initial_epoch_totals = StepTotals{100.0, 4, 4};
  o.callbacks = {&r};
  const History h = m->fit(ds, o);
  EXPECT_EQ(r.events, (std::vector<std::string>{"train_begin", "epoch_begin 0 batch 1", "batch_end 0:2", "epoch_end 0",
                                                "train_end"}));
  EXPECT_EQ(r.samples, (std::vector<int64_t>{8}));
  EXPECT_EQ(m->optimizer().iterations(), 3);
  ASSERT_EQ(h.epochs.size(), 1u);
  EXPECT_GE(h.epochs[0].at("loss"), 100.0 / 8) << "the resumed sums are part of the epoch's mean";
  EXPECT_GE(h.epochs[0].at("accuracy"), 0.5);
}

TEST(ModelFitTest, ElementsMustBeImageLabelPairs) {
  clear_session();
  auto m = compiled_model();
  const Dataset only_x = Dataset::from_tensor_slices({testing::random_host({4, 3}, 0, 1, 1)}).batch(2);
  EXPECT_THROW(m->fit(only_x, {}), std::invalid_argument);
  EXPECT_THROW(m->evaluate(only_x), std::invalid_argument);
  EXPECT_EQ(m->optimizer().iterations(), 0);
}

TEST(ModelTrainStepTest, ShardsMustMatchTheReplicas) {
  clear_session();
  auto m = compiled_model();
  std::vector<Batch> two(2, Batch{Tensor::zeros({1, 3}), host({1, 2}, {1, 0})});
  EXPECT_THROW(m->train_step_on_cores(two), std::invalid_argument);
  EXPECT_EQ(m->optimizer().iterations(), 0);
  const StepTotals t = m->train_step(Batch{Tensor::zeros({3, 3}), host({3, 2}, {1, 0, 0, 1, 1, 0})});
  EXPECT_EQ(t.samples, 3);
  EXPECT_EQ(m->optimizer().iterations(), 1);
}

TEST(ModelVariablesTest, PerLayerTrainableThenNonTrainable) {
  clear_session();
  Sequential m({Dense(4, "relu", Shape{3}), BatchNormalization(), Dense(2)});
  EXPECT_EQ(names_of(m.variables()),
            (std::vector<std::string>{"dense/kernel", "dense/bias", "batch_normalization/gamma", "batch_normalization/beta",
                                      "batch_normalization/moving_mean", "batch_normalization/moving_variance",
                                      "dense_1/kernel", "dense_1/bias"}));
  EXPECT_EQ(names_of(m.trainable_variables()),
            (std::vector<std::string>{"dense/kernel", "dense/bias", "batch_normalization/gamma", "batch_normalization/beta",
                                      "dense_1/kernel", "dense_1/bias"}));
  EXPECT_EQ(names_of(m.non_trainable_variables()),
            (std::vector<std::string>{"batch_normalization/moving_mean", "batch_normalization/moving_variance"}));
  // (3*4 + 4) + 4*4 + (4*2 + 2)
  EXPECT_EQ(m.count_params(), 16 + 16 + 10);
  const std::string s = m.summary();
  EXPECT_THAT(s, HasSubstr("Total params: 42 (168.00 Byte)\n"));
  EXPECT_THAT(s, HasSubstr("Trainable params: 34 (136.00 Byte)\n"));
  EXPECT_THAT(s, HasSubstr("Non-trainable params: 8 (32.00 Byte)\n"));
}

TEST(ModelSummaryTest, KerasTableOfATinyModel) {
  clear_session();
  Sequential m({Dense(2, "relu", Shape{3})}, "tiny");
  const std::string rule(65, '_'), double_rule(65, '=');
  const std::string want = "Model: \"tiny\"\n" + rule + "\n" +
                           " Layer (type)                Output Shape              Param #   \n" + double_rule + "\n" +
                           " dense (Dense)               (None, 2)                 8         \n" +
                           std::string(65, ' ') + "\n" + double_rule + "\n" +
                           "Total params: 8 (32.00 Byte)\n"
                           "Trainable params: 8 (32.00 Byte)\n"
                           "Non-trainable params: 0 (0.00 Byte)\n" +
                           rule + "\n";
  EXPECT_EQ(m.summary(), want);
}

TEST(ModelSummaryTest, LargeCountsHaveCommasAndKerasUnits) {
  clear_session();
  Sequential m({Dense(128, "relu", Shape{784}), Dense(10, "softmax")});
  const std::string s = m.summary();
  EXPECT_THAT(s, HasSubstr("Total params: 101,770 (397.54 KB)\n"));
  Sequential wide({Dense(1024, "relu", Shape{1024}), Dense(1024)}, "wide");
  // 2 * (1024 * 1024 + 1024) = 2,099,200 params = 8,396,800 bytes = 8.01 MB.
  EXPECT_THAT(wide.summary(), HasSubstr("Total params: 2,099,200 (8.01 MB)\n"));
  // A name longer than its column is cut to fit.
  layers::Dense::Options o;
  o.input_shape = Shape{1};
  o.name = "a_rather_long_layer_name_indeed";
  Sequential named({Dense(1, o)}, "n");
  EXPECT_THAT(named.summary(), HasSubstr("\n a_rather_long_layer_name_in (None, 1)"));
}

TEST(SequentialTest, NeedsLayersAndNamesItself) {
  clear_session();
  Sequential a({Dense(2, "linear", Shape{3})});
  Sequential b({Dense(2, "linear", Shape{3})});
  EXPECT_EQ(a.name(), "sequential");
  EXPECT_EQ(b.name(), "sequential_1");
  EXPECT_EQ(Sequential({Dense(1, "linear", Shape{1})}, "mine").name(), "mine");
  EXPECT_EQ(a.class_name(), "Sequential");
  EXPECT_EQ(a.input_shape(), (Shape{3}));
  EXPECT_EQ(a.output_shape(), (Shape{2}));
  EXPECT_THROW(Sequential(std::vector<LayerPtr>{}), std::invalid_argument);
  EXPECT_THROW(Sequential(std::vector<LayerPtr>{Dense(2), nullptr}), std::invalid_argument);
}

}  // namespace
}  // namespace keel
