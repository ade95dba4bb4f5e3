// `keel train`, `keel resume`, `keel evaluate` end to end on the real Fashion-MNIST.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/h5_file.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-train"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

const std::string kRun = "--model mlp --dataset fashion_mnist --device v3-8 --batch-per-core 16 --seed 1 --quiet ";

TEST_F(TrainCli, ResumeIsBitIdenticalAtEpochBoundaryAndMidEpoch) {
  // 2 epochs straight.
  CommandResult a = run_keel("train " + kRun + "--epochs 2 --checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  // 1 epoch, then resume to 2.
  CommandResult b1 = run_keel("train " + kRun + "--epochs 1 --checkpoint-dir " + dir_ + "/epoch");
  ASSERT_EQ(b1.exit_code, 0) << b1.err;
  CommandResult b2 = run_keel("resume " + dir_ + "/epoch --epochs 2 --quiet");
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  EXPECT_THAT(b2.out, HasSubstr("Resuming"));
  // Stopped mid-epoch 2 (an epoch is 468 steps), then resumed.
  CommandResult c1 = run_keel("train " + kRun + "--epochs 2 --stop-after-steps 700 --checkpoint-dir " + dir_ + "/mid");
  ASSERT_EQ(c1.exit_code, 0) << c1.err;
  EXPECT_THAT(c1.out, HasSubstr("saved step 700"));
  EXPECT_EQ(read_file(dir_ + "/mid/latest"), "ckpt-700.h5\n");
  CommandResult c2 = run_keel("resume " + dir_ + "/mid --quiet");
  ASSERT_EQ(c2.exit_code, 0) << c2.err;

  expect_bit_identical(dir_ + "/straight/ckpt-936.h5", dir_ + "/epoch/ckpt-936.h5");
  expect_bit_identical(dir_ + "/straight/ckpt-936.h5", dir_ + "/mid/ckpt-936.h5");

  // A finished run resumes to a no-op.
  CommandResult again = run_keel("resume " + dir_ + "/straight --quiet");
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_THAT(again.out, HasSubstr("nothing to do"));
}

TEST_F(TrainCli, CosineScheduleResumesExactly) {
  // The schedule spans the run as first configured (decay_steps saved with it).
  CommandResult a = run_keel("train " + kRun + "--epochs 2 --lr-schedule cosine --checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CommandResult b1 = run_keel("train " + kRun + "--epochs 2 --lr-schedule cosine --stop-after-steps 500 --checkpoint-dir " +
                              dir_ + "/split");
  ASSERT_EQ(b1.exit_code, 0) << b1.err;
  CommandResult b2 = run_keel("resume " + dir_ + "/split --quiet");
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  expect_bit_identical(dir_ + "/straight/ckpt-936.h5", dir_ + "/split/ckpt-936.h5");
  // And it is a different run from the constant rate's.
  CommandResult c = run_keel("train " + kRun + "--epochs 1 --checkpoint-dir " + dir_ + "/constant");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(read_checkpoint_values(dir_ + "/constant/ckpt-468.h5"), read_checkpoint_values(dir_ + "/straight/ckpt-468.h5"));
}

// --weight-decay is stored with the run: a resumed run decays as the straight one does, and it is a
// different run from one without decay.
TEST_F(TrainCli, WeightDecayIsStoredAndResumesExactly) {
  const std::string wd = "--epochs 1 --weight-decay 0.05 --lr-schedule cosine ";
  CommandResult a = run_keel("train " + kRun + wd + "--checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CommandResult b1 = run_keel("train " + kRun + wd + "--stop-after-steps 200 --checkpoint-dir " + dir_ + "/split");
  ASSERT_EQ(b1.exit_code, 0) << b1.err;
  CommandResult b2 = run_keel("resume " + dir_ + "/split --quiet");
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  expect_bit_identical(dir_ + "/straight/ckpt-468.h5", dir_ + "/split/ckpt-468.h5");
  CommandResult c = run_keel("train " + kRun + "--epochs 1 --lr-schedule cosine --checkpoint-dir " + dir_ + "/none");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(read_checkpoint_values(dir_ + "/none/ckpt-468.h5"), read_checkpoint_values(dir_ + "/straight/ckpt-468.h5"));
}

TEST_F(TrainCli, LabelSmoothingIsStoredAndResumesExactly) {
  const std::string ls = "--stop-after-steps 60 --label-smoothing 0.1 ";
  ASSERT_EQ(run_keel("train " + kRun + ls + "--checkpoint-dir " + dir_ + "/straight").exit_code, 0);
  ASSERT_EQ(run_keel("train " + kRun + "--stop-after-steps 25 --label-smoothing 0.1 --checkpoint-dir " + dir_ + "/split").exit_code, 0);
  CommandResult r = run_keel("resume " + dir_ + "/split --stop-after-steps 35 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_bit_identical(dir_ + "/straight/ckpt-60.h5", dir_ + "/split/ckpt-60.h5");
  ASSERT_EQ(run_keel("train " + kRun + "--stop-after-steps 60 --checkpoint-dir " + dir_ + "/none").exit_code, 0);
  EXPECT_NE(read_checkpoint_values(dir_ + "/none/ckpt-60.h5"), read_checkpoint_values(dir_ + "/straight/ckpt-60.h5"));
  r = run_keel("train " + kRun + "--label-smoothing 0.1 --loss sparse_categorical_crossentropy --checkpoint-dir " + dir_ + "/bad");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--label-smoothing needs one-hot labels"));
  r = run_keel("train " + kRun + "--label-smoothing 2 --checkpoint-dir " + dir_ + "/bad");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--label-smoothing must be in [0, 1]"));
  // The smoothed labels are planned as they were charged.
  const CommandResult memory = run_keel("memory " + dir_ + "/straight --json");
  ASSERT_EQ(memory.exit_code, 0) << memory.err;
  EXPECT_EQ(nlohmann::json::parse(memory.out)["plan_equals_measured"], true);
  // A run evaluates with the loss it trained with; the flag goes with --weights.
  r = run_keel("evaluate " + dir_ + "/straight --label-smoothing 0.2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--label-smoothing goes with --weights"));
}

TEST_F(TrainCli, SigtermSavesACheckpointAndExitsCleanly) {
  const std::string run = dir_ + "/sig";
  const std::string log = dir_ + "/log";
  // Start training in the background, wait for it to be under way, then SIGTERM it: 1.5 s after its
  // banner, well past the first step even on a loaded machine (0.5 s failed there now and then, the
  // signal arriving before the first step), and far from the end of 50 epochs (about 30 s).
  CommandResult r = run_command("(" + std::string(KEEL_BINARY) + " train " + kRun + "--epochs 50 --checkpoint-dir " + run +
                                " > " + log + " 2>&1 & pid=$!; "
                                "for i in $(seq 1 200); do grep -q 'global batch' " + log + " && break; sleep 0.05; done; "
                                "sleep 1.5; kill -TERM $pid; wait $pid)");
  EXPECT_EQ(r.exit_code, 0) << read_file(log);
  const std::string out = read_file(log);
  EXPECT_THAT(out, HasSubstr("Interrupted by signal"));
  ASSERT_TRUE(std::filesystem::exists(run + "/latest")) << out;
  CommandResult resumed = run_keel("resume " + run + " --epochs 1 --quiet");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
}

// A signal reaches keel before anything slow: sent as soon as `keel train` catches it (it still has to
// plan the step and load the data), it ends the run with a message and the shell's status for the
// signal — never a silent kill — and nothing is saved.
TEST_F(TrainCli, SigintBeforeTheFirstStepEndsWithAMessage) {
  const std::string run = dir_ + "/early";
  const auto start = std::chrono::steady_clock::now();
  const BackgroundKeel p = start_keel({"train", "--model", "mlp", "--device", "v3-8", "--epochs", "1", "--quiet",
                                      "--checkpoint-dir", run},
                                     dir_ + "/out", dir_ + "/err");
  ASSERT_TRUE(wait_until_catching(p.pid, SIGINT, 10000)) << read_file(p.err_path);
  const auto caught = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(::kill(p.pid, SIGINT), 0);
  const int status = wait_for(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << read_file(p.out_path) << read_file(p.err_path);
  EXPECT_THAT(read_file(p.err_path), HasSubstr("keel train: interrupted by signal 2 before the first step; nothing was saved"));
  EXPECT_FALSE(std::filesystem::exists(run + "/latest"));
  // Installed first of all, well within the first half second (slack for a loaded machine).
  EXPECT_LT(caught, std::chrono::milliseconds(2000));
}

TEST_F(TrainCli, SigtermWhileResumingLeavesTheRunAsItWas) {
  const std::string run = dir_ + "/run";
  CommandResult a = run_keel("train " + kRun + "--epochs 1 --stop-after-steps 2 --checkpoint-dir " + run);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string before = md5_of_dir(run);
  const BackgroundKeel p = start_keel({"resume", run, "--quiet"}, dir_ + "/out", dir_ + "/err");
  ASSERT_TRUE(wait_until_catching(p.pid, SIGTERM, 10000)) << read_file(p.err_path);
  ASSERT_EQ(::kill(p.pid, SIGTERM), 0);
  const int status = wait_for(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << read_file(p.out_path) << read_file(p.err_path);
  EXPECT_THAT(read_file(p.err_path), HasSubstr("keel resume: interrupted by signal 15 before the first step; " + run +
                                               " is as it was"));
  EXPECT_EQ(md5_of_dir(run), before);
}

// Tiny IDX files in `dir`: `n` blank 28x28 images and labels 0..9 (gzip'd, as Debian ships them).
void write_tiny_fashion_mnist(const std::string& dir, int n) {
  std::filesystem::create_directories(dir);
  auto be32 = [](std::string& s, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xff));
  };
  for (const std::string split : {"train", "t10k"}) {
    std::string images, labels;
    be32(images, 0x803);
    be32(images, static_cast<uint32_t>(n));
    be32(images, 28);
    be32(images, 28);
    images.append(static_cast<size_t>(n) * 28 * 28, '\0');
    be32(labels, 0x801);
    be32(labels, static_cast<uint32_t>(n));
    for (int i = 0; i < n; ++i) labels.push_back(static_cast<char>(i % 10));
    std::ofstream(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary) << images;
    std::ofstream(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary) << labels;
  }
  ASSERT_EQ(run_command("gzip -f " + dir + "/*-ubyte").exit_code, 0);
}

// Batches drop their remainder, so data smaller than one global batch would train no step at all
// (and used to save a step-0 checkpoint it could not resume): refused before step 0, with both sizes.
TEST_F(TrainCli, DataSmallerThanOneGlobalBatchIsRefusedBeforeStepZero) {
  write_tiny_fashion_mnist(dir_ + "/tiny", 100);
  const std::string run = dir_ + "/run";
  CommandResult r = run_keel("train --model mlp --device v3-8 --batch-per-core 16 --epochs 1 --quiet --data-dir " +
                             dir_ + "/tiny --checkpoint-dir " + run);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("holds 100 examples, fewer than one global batch of 128 (16 per core x 8 cores)"));
  EXPECT_FALSE(std::filesystem::exists(run + "/latest"));
  // One global batch is enough.
  CommandResult ok = run_keel("train --model mlp --device v3-8 --batch-per-core 12 --epochs 1 --quiet --data-dir " +
                              dir_ + "/tiny --checkpoint-dir " + run);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  CommandResult resumed = run_keel("resume " + run + " --epochs 2 --quiet");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
}

TEST_F(TrainCli, TrainRefusesADirectoryHoldingARun) {
  CommandResult a = run_keel("train " + kRun + "--epochs 1 --stop-after-steps 2 --checkpoint-dir " + dir_);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string before = md5_of_dir(dir_);
  CommandResult b = run_keel("train " + kRun + "--epochs 1 --checkpoint-dir " + dir_);
  EXPECT_EQ(b.exit_code, 2);
  EXPECT_THAT(b.err, HasSubstr("keel resume"));
  EXPECT_EQ(md5_of_dir(dir_), before);
}

TEST_F(TrainCli, KeepPrunesOldCheckpoints) {
  CommandResult a = run_keel("train " + kRun + "--epochs 1 --save-every-steps 100 --keep 2 --checkpoint-dir " + dir_);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) count += e.path().extension() == ".h5";
  EXPECT_EQ(count, 2);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt-468.h5"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt-400.h5"));
}

// SGD at 1e7 takes the MLP's loss and gradients to NaN within a few steps (measured: step 5).
TEST_F(TrainCli, ADivergingRunExits4AndEveryCheckpointLeftIsFinite) {
  for (const std::string save : {"", "--sync-save "}) {
    const std::string run = dir_ + "/diverge" + (save.empty() ? "-async" : "-sync");
    CommandResult r = run_keel("train " + kRun + save + "--epochs 1 --optimizer sgd --lr 1e7 --save-every-steps 1 --keep 0 " +
                               "--checkpoint-dir " + run);
    ASSERT_EQ(r.exit_code, 4) << r.out << r.err;
    // One line naming the step and the first non-finite variable.
    std::smatch m;
    ASSERT_TRUE(std::regex_match(r.err, m, std::regex("keel train: training diverged at step ([0-9]+): [^\n]*the gradient of "
                                                      "(dense|dense_1)/(kernel|bias) is not finite \\(the update was not "
                                                      "applied[^\n]*\n")))
        << r.err;
    const int64_t diverged = std::stoll(m[1].str());
    ASSERT_GE(diverged, 3) << "the test needs finite checkpoints before the divergence";
    // Every step before it was saved (--save-every-steps 1), none from it on, and each is finite.
    std::vector<int64_t> steps;
    for (const auto& e : std::filesystem::directory_iterator(run)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ckpt-", 0) == 0) steps.push_back(std::stoll(name.substr(5)));
    }
    std::sort(steps.begin(), steps.end());
    std::vector<int64_t> expected;
    for (int64_t s = 1; s < diverged; ++s) expected.push_back(s);
    EXPECT_EQ(steps, expected) << save;
    EXPECT_EQ(read_file(run + "/latest"), "ckpt-" + std::to_string(diverged - 1) + ".h5\n");
    for (int64_t s : steps) {
      const auto values = read_checkpoint_values(run + "/ckpt-" + std::to_string(s) + ".h5");
      EXPECT_GE(values.size(), 5u);
      for (const auto& [name, v] : values) {
        for (float x : v) ASSERT_TRUE(std::isfinite(x)) << "ckpt-" << s << " " << name;
      }
    }
    // Resuming diverges again at the same step, and saves nothing.
    const std::string before = md5_of_dir(run);
    CommandResult again = run_keel("resume " + run + " --quiet");
    EXPECT_EQ(again.exit_code, 4) << again.err;
    EXPECT_THAT(again.err, HasSubstr("keel resume: training diverged at step " + std::to_string(diverged) + ":"));
    EXPECT_EQ(md5_of_dir(run), before);
  }
}

// Saves are asynchronous by default; --sync-save writes them in the step. Both, stopped and resumed,
// reach the same bits, and the same bits as a straight run.
TEST_F(TrainCli, AsyncAndSyncSavesStopAndResumeToIdenticalCheckpoints) {
  CommandResult a1 = run_keel("train " + kRun + "--epochs 2 --save-every-steps 100 --keep 0 --stop-after-steps 650 --checkpoint-dir " +
                              dir_ + "/async");
  ASSERT_EQ(a1.exit_code, 0) << a1.err;
  EXPECT_THAT(a1.out, HasSubstr("(asynchronous; snapshot 1.16 MiB; "));
  CommandResult a2 = run_keel("resume " + dir_ + "/async --quiet");
  ASSERT_EQ(a2.exit_code, 0) << a2.err;
  CommandResult s1 = run_keel("train " + kRun + "--sync-save --epochs 2 --save-every-steps 100 --keep 0 --stop-after-steps 650 "
                              "--checkpoint-dir " + dir_ + "/sync");
  ASSERT_EQ(s1.exit_code, 0) << s1.err;
  EXPECT_THAT(s1.out, HasSubstr("(synchronous, --sync-save; snapshot 1.16 MiB)"));
  CommandResult s2 = run_keel("resume " + dir_ + "/sync --quiet --sync-save");
  ASSERT_EQ(s2.exit_code, 0) << s2.err;
  for (const char* ckpt : {"ckpt-650.h5", "ckpt-900.h5", "ckpt-936.h5"}) {
    expect_bit_identical(dir_ + "/async/" + ckpt, dir_ + "/sync/" + ckpt);
  }
  CommandResult straight = run_keel("train " + kRun + "--epochs 2 --checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  expect_bit_identical(dir_ + "/straight/ckpt-936.h5", dir_ + "/async/ckpt-936.h5");
}

// A background save that fails ends the run with its error (exit 2), as a synchronous one does; it is
// never lost. Here ckpt-5.h5 cannot be renamed into place: a directory holds that name.
TEST_F(TrainCli, AFailedBackgroundSaveIsReportedAsASynchronousOneIs) {
  for (const std::string save : {"", "--sync-save "}) {
    const std::string run = dir_ + "/run" + (save.empty() ? "-async" : "-sync");
    std::filesystem::create_directories(run + "/ckpt-5.h5/occupied");
    CommandResult r = run_keel("train " + kRun + save + "--epochs 1 --save-every-steps 5 --stop-after-steps 7 " +
                               "--checkpoint-dir " + run);
    EXPECT_EQ(r.exit_code, 2) << save << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("ckpt-5.h5: Is a directory")) << save;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("saved step"))) << save;
    EXPECT_FALSE(std::filesystem::exists(run + "/latest")) << save;
  }
}

TEST_F(TrainCli, EvaluateJsonAndCheckpointReadableByH5py) {
  CommandResult a = run_keel("train " + kRun + "--epochs 1 --checkpoint-dir " + dir_);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CommandResult e = run_keel("evaluate " + dir_ + " --split test --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["samples"], 10000);
  EXPECT_GT(j["accuracy"].get<double>(), 0.80);
  EXPECT_LT(j["loss"].get<double>(), 0.6);
  // Keras's legacy layout, as h5py (and so Keras's load_weights) reads it.
  CommandResult py = run_command(
      "/usr/bin/python3 -c \"import h5py, json, sys\n"
      "f = h5py.File('" + dir_ + "/ckpt-468.h5', 'r')\n"
      "names = [n.decode('utf8') for n in f['model_weights'].attrs['layer_names']]\n"
      "assert names == ['dense', 'dense_1'], names\n"
      "w = [n.decode('utf8') for n in f['model_weights/dense'].attrs['weight_names']]\n"
      "assert w == ['dense/kernel:0', 'dense/bias:0'], w\n"
      "assert f['model_weights/dense/dense/kernel:0'].shape == (784, 128)\n"
      "assert str(f['model_weights/dense/dense/kernel:0'].dtype) == 'float32'\n"
      "cfg = json.loads(f.attrs['model_config'])\n"
      "assert cfg['class_name'] == 'Sequential', cfg\n"
      "layers = cfg['config']['layers']\n"
      "assert layers[0]['class_name'] == 'InputLayer' and layers[0]['config']['batch_input_shape'] == [None, 784]\n"
      "assert layers[1]['config']['units'] == 128 and layers[1]['config']['activation'] == 'relu'\n"
      "assert layers[2]['config']['activation'] == 'softmax'\n"
      "o = [n.decode('utf8') for n in f['optimizer_weights'].attrs['weight_names']]\n"
      "assert o[0] == 'Adam/iterations:0' and o[1] == 'Adam/dense/kernel/m:0' and len(o) == 9, o\n"
      "assert int(f['optimizer_weights/Adam/iterations:0'][()]) == 468\n"
      "state = json.loads(f['keel/train_state'][()])\n"
      "assert state['step'] == 468 and state['epoch'] == 1, state\n"
      "assert f.attrs['backend'] == b'keel' and int(f.attrs['keel_format_version']) == 2\n"
      "import zlib\n"
      "k = f['model_weights/dense/dense/kernel:0']\n"
      "assert zlib.crc32(k[()].astype('<f4').tobytes()) == int(k.attrs['keel_crc32'])\n"
      "assert zlib.crc32(f['keel/train_state'][()]) == int(f['keel/train_state'].attrs['keel_crc32'])\n"
      "\"");
  EXPECT_EQ(py.exit_code, 0) << py.err;
}

}  // namespace
}  // namespace keel::testing
