// ProgbarLogger: Keras's progress line, one plain line per epoch off a terminal, redrawn in place on one.
// TerminateOnNaN: stops training at a non-finite loss or gradient, and says where.
#include "framework/model/callbacks.h"

#include <fcntl.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstdlib>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/dataset.h"
#include "framework/layers/core_layers.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// A regular file as the logger's output: not a terminal.
class File {
 public:
  File() : f_(std::tmpfile()) {}
  ~File() {
    if (f_) std::fclose(f_);
  }
  std::FILE* get() const { return f_; }
  std::string contents() const {
    std::fflush(f_);
    const long end = std::ftell(f_);
    std::string s(static_cast<size_t>(end), '\0');
    std::rewind(f_);
    const size_t n = std::fread(s.data(), 1, s.size(), f_);
    s.resize(n);
    std::fseek(f_, 0, SEEK_END);
    return s;
  }

 private:
  std::FILE* f_;
};

TrainingState state(int epoch, int epochs, int64_t batch, int64_t steps_per_epoch) {
  TrainingState st;
  st.epoch = epoch;
  st.epochs = epochs;
  st.batch = batch;
  st.steps_per_epoch = steps_per_epoch;
  return st;
}

TEST(ProgbarLoggerTest, EpochHeaderCountsFromOne) {
  File out;
  ASSERT_NE(out.get(), nullptr);
  ProgbarLogger bar(out.get());
  TrainingState st = state(1, 5, 0, 10);
  bar.on_epoch_begin(st);
  EXPECT_EQ(out.contents(), "Epoch 2/5\n");
}

TEST(ProgbarLoggerTest, OffATerminalBatchesPrintNothingAndTheEpochOneLine) {
  File out;
  ProgbarLogger bar(out.get());
  TrainingState st = state(0, 1, 0, 4);
  bar.on_epoch_begin(st);
  const Logs logs = {{"loss", 0.51234}, {"accuracy", 0.8}};
  for (int64_t b = 1; b <= 4; ++b) {
    st.batch = b;
    bar.on_train_batch_end(st, logs);
  }
  EXPECT_EQ(out.contents(), "Epoch 1/1\n") << "no redraws in a log file";
  bar.on_epoch_end(st, logs);
  const std::string text = out.contents();
  ASSERT_EQ(text.rfind("Epoch 1/1\n", 0), 0u) << text;
  // The loss first, then the metrics, with four decimals.
  EXPECT_THAT(text.substr(10),
              MatchesRegex("4/4 \\[={30}\\] - [0-9]+s [0-9]+ms/step - loss: 0\\.5123 - accuracy: 0\\.8000\n"));
}

TEST(ProgbarLoggerTest, LossComesFirstAndOtherMetricsFollowByName) {
  File out;
  ProgbarLogger bar(out.get());
  TrainingState st = state(0, 1, 0, 2);
  bar.on_epoch_begin(st);
  st.batch = 2;
  bar.on_epoch_end(st, {{"accuracy", 0.25}, {"auc", 0.125}, {"loss", 1.0}, {"zeta", 2.0}});
  EXPECT_THAT(out.contents(),
              HasSubstr(" - loss: 1.0000 - accuracy: 0.2500 - auc: 0.1250 - zeta: 2.0000\n"));
}

TEST(ProgbarLoggerTest, BarOfAStoppedEpochAndOfAnUnknownLength) {
  {
    File out;
    ProgbarLogger bar(out.get());
    TrainingState st = state(0, 1, 0, 10);
    bar.on_epoch_begin(st);
    st.batch = 3;  // 3 of 10: 9 of 30 cells, then the arrow
    bar.on_epoch_end(st, {{"loss", 0.5}});
    EXPECT_THAT(out.contents().substr(10),
                MatchesRegex("3/10 \\[={9}>\\.{20}\\] - [0-9]+s [0-9]+ms/step - loss: 0\\.5000\n"));
  }
  {
    File out;
    ProgbarLogger bar(out.get());
    TrainingState st = state(0, 1, 0, -1);
    bar.on_epoch_begin(st);
    st.batch = 7;
    bar.on_epoch_end(st, {{"loss", 0.5}});
    EXPECT_THAT(out.contents().substr(10), MatchesRegex("7 - [0-9]+s [0-9]+ms/step - loss: 0\\.5000\n"));
  }
}

int ms_per_step(const std::string& text) {
  std::smatch m;
  const std::regex re(" ([0-9]+)ms/step");
  if (!std::regex_search(text, m, re)) return -1;
  return std::atoi(m[1].str().c_str());
}

TEST(ProgbarLoggerTest, TimePerStepCountsOnlyTheStepsOfThisRun) {
  // Resumed at batch 5 of the epoch: the time is divided by the 2 steps run since, not by 7.
  File out;
  ProgbarLogger bar(out.get());
  TrainingState st = state(0, 1, 5, 7);
  const auto start = std::chrono::steady_clock::now();
  bar.on_epoch_begin(st);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  st.batch = 7;
  bar.on_epoch_end(st, {{"loss", 0.5}});
  const double outer_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const int ms = ms_per_step(out.contents());
  EXPECT_GE(ms, 49) << out.contents();
  EXPECT_LE(ms, outer_ms / 2 + 1) << out.contents();
}

// A pseudo-terminal: the logger's output is a tty, read back from the master side.
class Pty {
 public:
  Pty() {
    master_ = posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) return;
    const char* name = ptsname(master_);
    if (name == nullptr) return;
    const int slave = open(name, O_RDWR | O_NOCTTY);
    if (slave < 0) return;
    termios t{};
    tcgetattr(slave, &t);
    cfmakeraw(&t);  // no "\n" -> "\r\n"
    tcsetattr(slave, TCSANOW, &t);
    out_ = fdopen(slave, "w");
  }
  ~Pty() {
    if (out_) std::fclose(out_);
    if (master_ >= 0) close(master_);
  }
  std::FILE* out() const { return out_; }
  // Everything written so far.
  std::string read() {
    std::fflush(out_);
    std::string s;
    pollfd p{master_, POLLIN, 0};
    while (poll(&p, 1, s.empty() ? 1000 : 50) > 0) {
      char buf[512];
      const ssize_t n = ::read(master_, buf, sizeof buf);
      if (n <= 0) break;
      s.append(buf, static_cast<size_t>(n));
    }
    return s;
  }

 private:
  int master_ = -1;
  std::FILE* out_ = nullptr;
};

TEST(ProgbarLoggerTest, OnATerminalTheLineIsRedrawnInPlace) {
  Pty pty;
  if (pty.out() == nullptr) GTEST_SKIP() << "no pseudo-terminal available";
  ProgbarLogger bar(pty.out());
  TrainingState st = state(0, 2, 0, 3);
  bar.on_epoch_begin(st);
  st.batch = 1;
  bar.on_train_batch_end(st, {{"loss", 0.25}});
  // Redrawn at most every 100 ms, except at the epoch's last step.
  EXPECT_EQ(pty.read(), "Epoch 1/2\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  st.batch = 2;
  bar.on_train_batch_end(st, {{"loss", 0.25}});
  st.batch = 3;
  bar.on_train_batch_end(st, {{"loss", 0.125}});
  const std::string redraws = pty.read();
  EXPECT_THAT(redraws, MatchesRegex("\r2/3 \\[={20}>\\.{9}\\] - ETA: [0-9]+s - loss: 0\\.2500\033\\[K"
                                    "\r3/3 \\[={30}\\] - ETA: 0s - loss: 0\\.1250\033\\[K"));
  bar.on_epoch_end(st, {{"loss", 0.125}});
  EXPECT_THAT(pty.read(), MatchesRegex("\r3/3 \\[={30}\\] - [0-9]+s [0-9]+ms/step - loss: 0\\.1250\033\\[K\n"));
}

TEST(ProgbarLoggerTest, PrintsFitsEpochsWithTheLossesOfTheHistory) {
  clear_session();
  File out;
  ProgbarLogger bar(out.get());
  Sequential m({Dense(3, "relu", Shape{2}), Dense(2, "softmax")});
  m.compile(std::make_shared<SGD>(), std::make_shared<CategoricalCrossentropy>());
  const Tensor x = testing::random_host({6, 2}, -1, 1, 4);
  const Tensor y = testing::host({6, 2}, {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1});
  FitOptions o;
  o.epochs = 2;
  o.callbacks = {&bar};
  const History h = m.fit(Dataset::from_tensor_slices({x, y}).batch(3), o);
  ASSERT_EQ(h.epochs.size(), 2u);
  char loss0[64], loss1[64];
  std::snprintf(loss0, sizeof loss0, "loss: %.4f - accuracy: %.4f\n", h.epochs[0].at("loss"), h.epochs[0].at("accuracy"));
  std::snprintf(loss1, sizeof loss1, "loss: %.4f - accuracy: %.4f\n", h.epochs[1].at("loss"), h.epochs[1].at("accuracy"));
  const std::string text = out.contents();
  EXPECT_THAT(text, MatchesRegex("Epoch 1/2\n2/2 \\[={30}\\] - [0-9]+s [0-9]+ms/step - [^\n]*\n"
                                 "Epoch 2/2\n2/2 \\[={30}\\] - [0-9]+s [0-9]+ms/step - [^\n]*\n"));
  const size_t second = text.find("Epoch 2/2");
  ASSERT_NE(second, std::string::npos);
  EXPECT_THAT(text.substr(0, second), HasSubstr(loss0));
  EXPECT_THAT(text.substr(second), HasSubstr(loss1));
}

TEST(TerminateOnNaNTest, AFiniteLossDoesNothing) {
  File out;
  TerminateOnNaN t(out.get());
  TrainingState st = state(0, 1, 3, 10);
  t.on_train_batch_end(st, {{"loss", 0.5}, {"accuracy", 0.25}});
  EXPECT_FALSE(st.stop_training);
  EXPECT_FALSE(t.terminated().has_value());
  EXPECT_EQ(out.contents(), "");
}

TEST(TerminateOnNaNTest, ANanOrInfiniteLossStopsTrainingWithKerasMessage) {
  for (const double loss : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    File out;
    TerminateOnNaN t(out.get());
    TrainingState st = state(0, 1, 3, 10);  // the third batch: Keras's batch index 2
    t.on_train_batch_end(st, {{"loss", loss}});
    EXPECT_TRUE(st.stop_training) << loss;
    ASSERT_TRUE(t.terminated().has_value()) << loss;
    EXPECT_THAT(out.contents(), MatchesRegex("Batch 2: Invalid loss, terminating training: step [0-9]+: the loss is "
                                             "(nan|inf|-inf)\n"));
  }
}

TEST(TerminateOnNaNTest, ANonFiniteGradientStopsTrainingNamingStepAndVariable) {
  File out;
  TerminateOnNaN t(out.get());
  TrainingState st = state(1, 2, 5, 10);
  st.non_finite = NonFiniteStep{15, 0.75, "dense_1/kernel", true};
  t.on_train_batch_end(st, {{"loss", 0.75}});
  EXPECT_TRUE(st.stop_training);
  ASSERT_TRUE(t.terminated().has_value());
  EXPECT_EQ(t.terminated()->step, 15);
  EXPECT_EQ(t.terminated()->variable, "dense_1/kernel");
  EXPECT_EQ(out.contents(),
            "Batch 4: Invalid gradient, terminating training: step 15: the gradient of dense_1/kernel is not finite "
            "(the update was not applied; loss 0.75)\n");
}

TEST(TerminateOnNaNTest, SilentWithoutAnOutput) {
  TerminateOnNaN t(nullptr);
  TrainingState st = state(0, 1, 1, 10);
  t.on_train_batch_end(st, {{"loss", std::nan("")}});
  EXPECT_TRUE(st.stop_training);
  EXPECT_TRUE(t.terminated().has_value());
}

// Sees what every callback after TerminateOnNaN sees: the steps and whether fit flagged them.
class StepRecorder : public Callback {
 public:
  void on_train_batch_end(TrainingState& st, const Logs&) override {
    steps.push_back(st.model->optimizer().iterations());
    flagged.push_back(st.non_finite.has_value());
  }
  std::vector<int64_t> steps;
  std::vector<bool> flagged;
};

TEST(TerminateOnNaNTest, FitStopsAtTheDivergingStepWithoutApplyingIt) {
  clear_session();
  File out;
  TerminateOnNaN terminate(out.get());
  StepRecorder recorder;
  Sequential m({Dense(4, "relu", Shape{2}), Dense(2, "softmax")});
  // A learning rate no training survives: the first update is finite but huge, and the next step's
  // logits overflow.
  m.compile(std::make_shared<SGD>(SGD::Options{.learning_rate = 1e30f}), std::make_shared<CategoricalCrossentropy>());
  const Tensor x = testing::random_host({32, 2}, -1, 1, 4);
  std::vector<float> labels;
  for (int i = 0; i < 32; ++i) labels.insert(labels.end(), {i % 2 ? 1.0f : 0.0f, i % 2 ? 0.0f : 1.0f});
  const Tensor y = testing::host({32, 2}, labels);
  FitOptions o;
  o.epochs = 3;
  o.callbacks = {&terminate, &recorder};
  m.fit(Dataset::from_tensor_slices({x, y}).batch(4), o);
  ASSERT_TRUE(terminate.terminated().has_value()) << out.contents();
  const NonFiniteStep& t = *terminate.terminated();
  // Every step before it was finite and applied; this one was flagged and stopped the run.
  ASSERT_EQ(recorder.steps.size(), static_cast<size_t>(t.step)) << out.contents();
  for (size_t i = 0; i + 1 < recorder.flagged.size(); ++i) EXPECT_FALSE(recorder.flagged[i]) << i;
  EXPECT_TRUE(recorder.flagged.back());
  EXPECT_GE(t.step, 2);
  EXPECT_TRUE(t.update_skipped);
  EXPECT_FALSE(t.variable.empty());
  EXPECT_EQ(m.optimizer().iterations(), t.step - 1) << "the diverging update was not applied";
  for (Variable* v : m.variables()) {
    for (float value : v->value().to_vector()) ASSERT_TRUE(std::isfinite(value)) << v->name();
  }
  EXPECT_THAT(out.contents(), HasSubstr("terminating training: step " + std::to_string(t.step) + ": "));
  EXPECT_THAT(out.contents(), HasSubstr("the gradient of " + t.variable + " is not finite"));
}

TEST(ProgbarLoggerTest, ValidationValuesFollowTheTrainingOnesAsInKeras) {
  File out;
  ProgbarLogger bar(out.get());
  TrainingState st = state(0, 1, 2, 2);
  bar.on_epoch_begin(st);
  bar.on_epoch_end(st, {{"loss", 0.5}, {"accuracy", 0.75}, {"val_loss", 0.41}, {"val_accuracy", 0.85}});
  EXPECT_THAT(out.contents(), HasSubstr(" - loss: 0.5000 - accuracy: 0.7500 - val_loss: 0.4100 - val_accuracy: 0.8500\n"));
}

// A tiny compiled model, for the callbacks that act on one (SGD with learning rate 0.1).
std::unique_ptr<Sequential> tiny_model() {
  clear_session();
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(2, "softmax", Shape{2})});
  m->compile(std::make_shared<SGD>(SGD::Options{.learning_rate = 0.1f}), std::make_shared<CategoricalCrossentropy>());
  return m;
}

// Feeds `values` of `monitor` to `cb` as the logs of epochs first, first + 1, ...; returns the
// epoch (0-based) at which it stopped training, or -1.
int feed(Callback& cb, const std::string& monitor, const std::vector<double>& values, Model* model = nullptr,
         int first = 0) {
  TrainingState st = state(first, 100, 1, 1);
  st.model = model;
  if (first == 0) cb.on_train_begin(st);
  for (size_t i = 0; i < values.size(); ++i) {
    st.epoch = first + static_cast<int>(i);
    cb.on_epoch_end(st, {{"loss", 1.0}, {monitor, values[i]}});
    if (st.stop_training) return st.epoch;
  }
  return -1;
}

TEST(EarlyStoppingTest, StopsAfterPatienceEpochsWithoutImprovement) {
  EarlyStopping es({.patience = 2});
  EXPECT_EQ(feed(es, "val_loss", {1.0, 0.9, 0.95, 0.92, 0.91}), 3);
  EXPECT_EQ(es.stopped_epoch(), 3);
  EXPECT_EQ(es.best_epoch(), 1);
  EXPECT_DOUBLE_EQ(*es.best(), 0.9);
  EarlyStopping zero({});  // Keras's default patience 0: the first epoch without improvement stops
  EXPECT_EQ(feed(zero, "val_loss", {1.0, 0.9, 0.9}), 2);
}

TEST(EarlyStoppingTest, AnImprovementMustExceedMinDelta) {
  EarlyStopping es({.min_delta = 0.1, .patience = 1});
  EXPECT_EQ(feed(es, "val_loss", {1.0, 0.95, 0.5}), 1);
  EarlyStopping negative({.min_delta = -0.1, .patience = 1});  // Keras takes its absolute value
  EXPECT_EQ(feed(negative, "val_loss", {1.0, 0.95, 0.5}), 1);
}

TEST(EarlyStoppingTest, AutoModeMaximisesAccuracyAndMinimisesTheRest) {
  EarlyStopping acc({.monitor = "val_accuracy", .patience = 1});
  EXPECT_EQ(feed(acc, "val_accuracy", {0.5, 0.6, 0.6}), 2);
  EarlyStopping forced({.monitor = "val_accuracy", .patience = 1, .mode = "min"});
  EXPECT_EQ(feed(forced, "val_accuracy", {0.5, 0.6, 0.4}), 1);
  EXPECT_TRUE(monitor_is_max("val_accuracy", "auto"));
  EXPECT_FALSE(monitor_is_max("val_loss", "auto"));
  EXPECT_THROW(monitor_is_max("val_loss", "sideways"), std::invalid_argument);
}

TEST(EarlyStoppingTest, TheWaitRestartsOnlyWhenTheBaselineIsBeaten) {
  EarlyStopping without({.patience = 2});
  EXPECT_EQ(feed(without, "val_loss", {1.0, 0.9, 0.95}), -1);
  EarlyStopping with({.patience = 2, .baseline = 0.5});
  EXPECT_EQ(feed(with, "val_loss", {1.0, 0.9, 0.95}), 2);
}

TEST(EarlyStoppingTest, AMissingMonitorIsIgnored) {
  EarlyStopping es({.patience = 0});
  EXPECT_EQ(feed(es, "loss_of_something_else", {1.0, 2.0, 3.0}), -1);
}

TEST(EarlyStoppingTest, ResumedFromItsStateItStopsWhereAStraightRunStops) {
  const std::vector<double> values = {1.0, 0.8, 0.85, 0.9, 0.7, 0.75, 0.76, 0.77};
  EarlyStopping straight({.patience = 3});
  const int stopped = feed(straight, "val_loss", values);
  ASSERT_EQ(stopped, 7);
  EarlyStopping first({.patience = 3});
  ASSERT_EQ(feed(first, "val_loss", {values.begin(), values.begin() + 5}), -1);
  EarlyStopping second({.patience = 3});
  second.set_state(nlohmann::json::parse(first.get_state().dump()));
  TrainingState st = state(5, 100, 0, 1);
  second.on_train_begin(st);  // keeps the restored state
  EXPECT_EQ(feed(second, "val_loss", {values.begin() + 5, values.end()}, nullptr, 5), stopped);
  EXPECT_EQ(second.best_epoch(), straight.best_epoch());
}

TEST(EarlyStoppingTest, RestoresTheBestEpochsWeightsAtTheEnd) {
  auto m = tiny_model();
  EarlyStopping es({.patience = 1, .restore_best_weights = true});
  TrainingState st = state(0, 10, 1, 1);
  st.model = m.get();
  es.on_train_begin(st);
  Variable* kernel = m->trainable_variables()[0];
  for (int epoch = 0; epoch < 3 && !st.stop_training; ++epoch) {
    st.epoch = epoch;
    std::fill(kernel->mutable_value().data(), kernel->mutable_value().data() + 4, static_cast<float>(epoch));
    es.on_epoch_end(st, {{"val_loss", epoch == 1 ? 0.5 : 1.0}});
  }
  ASSERT_TRUE(st.stop_training);
  EXPECT_EQ(kernel->value().to_vector()[0], 2.0f);
  es.on_train_end(st);
  EXPECT_EQ(kernel->value().to_vector()[0], 1.0f) << "epoch 1's weights";
}

TEST(ReduceLROnPlateauTest, ReducesAfterPatienceThenCoolsDownAndStopsAtMinLr) {
  auto m = tiny_model();
  File out;
  ReduceLROnPlateau reduce({.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.02}, out.get());
  TrainingState st = state(0, 10, 1, 1);
  st.model = m.get();
  reduce.on_train_begin(st);
  std::vector<float> rates;
  for (int epoch = 0; epoch < 8; ++epoch) {
    st.epoch = epoch;
    reduce.on_epoch_end(st, {{"val_loss", 1.0}});
    rates.push_back(m->optimizer().learning_rate());
  }
  EXPECT_THAT(rates, ::testing::ElementsAre(0.1f, 0.1f, 0.05f, 0.05f, 0.025f, 0.025f, 0.02f, 0.02f));
  EXPECT_THAT(out.contents(), HasSubstr("Epoch 3: ReduceLROnPlateau reducing learning rate to 0.05.\n"));
  EXPECT_FALSE(st.stop_training);
}

TEST(ReduceLROnPlateauTest, AnImprovementBeyondMinDeltaResetsTheWait) {
  auto m = tiny_model();
  ReduceLROnPlateau reduce({.patience = 2});  // factor 0.1, min_delta 1e-4
  feed(reduce, "val_loss", {1.0, 0.9, 0.89995, 0.8}, m.get());
  EXPECT_EQ(reduce.wait(), 0);
  EXPECT_FLOAT_EQ(m->optimizer().learning_rate(), 0.1f);
  feed(reduce, "val_loss", {0.85, 0.9}, m.get(), 4);
  EXPECT_FLOAT_EQ(m->optimizer().learning_rate(), 0.01f);
}

TEST(ReduceLROnPlateauTest, ItsStateCarriesTheRateAcrossAResume) {
  auto m = tiny_model();
  ReduceLROnPlateau first({.patience = 1, .cooldown = 2});
  feed(first, "val_loss", {1.0, 1.0}, m.get());
  ASSERT_FLOAT_EQ(m->optimizer().learning_rate(), 0.01f);
  const nlohmann::json saved = nlohmann::json::parse(first.get_state().dump());
  auto fresh = tiny_model();  // a new process: the configured rate
  ReduceLROnPlateau second({.patience = 1, .cooldown = 2});
  second.set_state(saved);
  TrainingState st = state(2, 10, 0, 1);
  st.model = fresh.get();
  second.on_train_begin(st);
  EXPECT_FLOAT_EQ(fresh->optimizer().learning_rate(), 0.01f);
  EXPECT_EQ(second.cooldown_counter(), 2);
  EXPECT_DOUBLE_EQ(second.best(), 1.0);
}

std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::string text;
  if (f == nullptr) return text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

TEST(CSVLoggerTest, WritesEpochThenTheSortedKeys) {
  const std::string path = ::testing::TempDir() + "/csv_logger_test.csv";
  CSVLogger csv(path);
  TrainingState st = state(0, 2, 1, 1);
  csv.on_train_begin(st);
  csv.on_epoch_end(st, {{"loss", 0.5}, {"accuracy", 0.25}, {"val_loss", 0.1}});
  st.epoch = 1;
  csv.on_epoch_end(st, {{"loss", 0.125}, {"accuracy", 1.0}});
  EXPECT_EQ(read_text(path), "epoch,accuracy,loss,val_loss\n0,0.25,0.5,0.1\n1,1,0.125,NA\n");
  CSVLogger again(path, ";", /*append=*/false);  // truncates
  again.on_train_begin(st);
  again.on_epoch_end(st, {{"loss", 2.0}});
  EXPECT_EQ(read_text(path), "epoch;loss\n1;2\n");
}

TEST(CSVLoggerTest, AppendingKeepsTheHeaderAndItsColumns) {
  const std::string path = ::testing::TempDir() + "/csv_logger_append_test.csv";
  std::remove(path.c_str());
  TrainingState st = state(0, 2, 1, 1);
  {
    CSVLogger csv(path, ",", true);
    csv.on_train_begin(st);
    csv.on_epoch_end(st, {{"loss", 0.5}, {"accuracy", 0.25}});
  }
  CSVLogger csv(path, ",", true);
  csv.on_train_begin(st);
  st.epoch = 1;
  csv.on_epoch_end(st, {{"loss", 0.1}, {"accuracy", 0.75}});
  EXPECT_EQ(read_text(path), "epoch,accuracy,loss\n0,0.25,0.5\n1,0.75,0.1\n");
}

TEST(FitValidationTest, EveryValidationFreqEpochsTheLogsGainValLossAndAccuracy) {
  auto m = tiny_model();
  const Tensor x = testing::random_host({6, 2}, -1, 1, 4);
  const Tensor y = testing::host({6, 2}, {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1});
  const Dataset data = Dataset::from_tensor_slices({x, y}).batch(3);
  FitOptions o;
  o.epochs = 4;
  o.validation_data = data;
  o.validation_freq = 2;
  const History h = m->fit(data, o);
  ASSERT_EQ(h.epochs.size(), 4u);
  EXPECT_FALSE(h.epochs[0].count("val_loss"));
  ASSERT_TRUE(h.epochs[1].count("val_loss"));
  const Logs evaluated = m->evaluate(data);
  EXPECT_DOUBLE_EQ(h.epochs[3].at("val_loss"), evaluated.at("loss"));
  EXPECT_DOUBLE_EQ(h.epochs[3].at("val_accuracy"), evaluated.at("accuracy"));
  FitOptions split;
  split.validation_split = 0.2;
  EXPECT_THROW(m->fit(data, split), std::invalid_argument);
}

}  // namespace
}  // namespace keel
