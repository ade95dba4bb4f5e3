// Trust nothing on disk, end to end: a damaged checkpoint is detected, set aside and skipped, and the
// run continues from the previous one to the same final weights as a run never damaged; `latest` is a
// hint; one process trains in a run at a time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"
#include "tests/support/file_damage.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// 468 steps of batch 128 on one core: an epoch in a few seconds.
const std::string kModel = "--model mlp --device cpu --batch-per-core 128 --seed 3 --quiet --keep 5 ";
const std::string kTrustRun = kModel + "--epochs 1 ";

class CheckpointTrustCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-trust"); }
  void TearDown() override { fs::remove_all(dir_); }

  // A run stopped after `steps` steps, saved every 100.
  std::string stopped_run(const std::string& name, int steps) {
    const std::string run = dir_ + "/" + name;
    CommandResult r = run_keel("train " + kTrustRun + "--save-every-steps 100 --stop-after-steps " + std::to_string(steps) +
                               " --checkpoint-dir " + run);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return run;
  }
  // The reference: the same run, never interrupted.
  std::string straight_run() {
    const std::string run = dir_ + "/straight";
    CommandResult r = run_keel("train " + kTrustRun + "--save-every-steps 100 --checkpoint-dir " + run);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return run;
  }
  std::string dir_;
};

TEST_F(CheckpointTrustCli, ADamagedCheckpointIsSetAsideAndTheRunEndsAsIfNeverDamaged) {
  const std::string straight = straight_run();
  const std::string run = stopped_run("damaged", 300);
  const std::string ckpt = run + "/ckpt-300.h5";
  flip_byte(ckpt, dataset_offset(ckpt, "/model_weights/dense/dense/kernel:0") + 4096, 0x10);
  const std::string damaged = read_file(ckpt);

  // evaluate reports it and uses the previous checkpoint, touching nothing.
  CommandResult e = run_keel("evaluate " + run + " --json");
  EXPECT_EQ(e.exit_code, 0) << e.err;
  EXPECT_THAT(e.err, HasSubstr("ckpt-300.h5"));
  EXPECT_THAT(e.err, HasSubstr("fails its checksum"));
  EXPECT_TRUE(fs::exists(ckpt));
  // evaluate on the file itself refuses it.
  CommandResult f = run_keel("evaluate " + ckpt);
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_THAT(f.err, HasSubstr("fails its checksum"));

  CommandResult r = run_keel("resume " + run + " --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("kept aside, untouched, as " + ckpt + ".corrupt"));
  EXPECT_THAT(r.out, HasSubstr("Resuming " + run + "/ckpt-200.h5"));
  EXPECT_EQ(read_file(ckpt + ".corrupt"), damaged);
  expect_bit_identical(straight + "/ckpt-468.h5", run + "/ckpt-468.h5");
  expect_bit_identical(straight + "/ckpt-300.h5", run + "/ckpt-300.h5");
}

TEST_F(CheckpointTrustCli, LatestIsAHintTheNewestGoodCheckpointWins) {
  const std::string straight = straight_run();
  // `latest` deleted.
  const std::string a = stopped_run("no-latest", 300);
  fs::remove(a + "/latest");
  CommandResult ra = run_keel("resume " + a + " --quiet");
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_THAT(ra.out, HasSubstr("Resuming " + a + "/ckpt-300.h5"));
  expect_bit_identical(straight + "/ckpt-468.h5", a + "/ckpt-468.h5");
  // A kill between a checkpoint's rename and the update of `latest`: it still names the previous one.
  const std::string b = stopped_run("stale-latest", 300);
  std::ofstream(b + "/latest") << "ckpt-200.h5\n";
  CommandResult rb = run_keel("resume " + b + " --quiet");
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_THAT(rb.out, HasSubstr("Resuming " + b + "/ckpt-300.h5"));
  expect_bit_identical(straight + "/ckpt-468.h5", b + "/ckpt-468.h5");
  // And `latest` pointing at a file that does not exist.
  const std::string c = stopped_run("missing-latest", 300);
  std::ofstream(c + "/latest") << "ckpt-999.h5\n";
  CommandResult rc = run_keel("resume " + c + " --quiet");
  ASSERT_EQ(rc.exit_code, 0) << rc.err;
  expect_bit_identical(straight + "/ckpt-468.h5", c + "/ckpt-468.h5");
}

TEST_F(CheckpointTrustCli, OneWriterPerRunAndAKilledWriterDoesNotBlock) {
  const std::string run = dir_ + "/locked";
  const std::string log = dir_ + "/log";
  const std::string pid_file = dir_ + "/pid";
  // A long run in the background, saving often.
  CommandResult start = run_command(std::string(KEEL_BINARY) + " train " + kModel + "--epochs 1000 --save-every-steps 50 " +
                                    "--checkpoint-dir " + run + " > " + log + " 2>&1 & echo $! > " + pid_file +
                                    "; for i in $(seq 1 400); do [ -f " + run + "/latest ] && break; sleep 0.05; done");
  ASSERT_EQ(start.exit_code, 0);
  const std::string pid = read_file(pid_file).substr(0, read_file(pid_file).find('\n'));
  ASSERT_TRUE(fs::exists(run + "/latest")) << read_file(log);

  CommandResult second = run_keel("train " + kTrustRun + "--overwrite --checkpoint-dir " + run);
  EXPECT_EQ(second.exit_code, 2);
  EXPECT_THAT(second.err, HasSubstr("in use by another keel process (pid " + pid + ")"));
  CommandResult resume = run_keel("resume " + run + " --quiet");
  EXPECT_EQ(resume.exit_code, 2);
  EXPECT_THAT(resume.err, HasSubstr("pid " + pid));
  // Readers read while it trains.
  CommandResult eval = run_keel("evaluate " + run + " --json");
  EXPECT_EQ(eval.exit_code, 0) << eval.err;

  // SIGKILLed: the kernel drops its lock, and its leftovers are cleaned up by the next writer.
  run_command("kill -KILL " + pid + "; while kill -0 " + pid + " 2>/dev/null; do sleep 0.05; done");
  std::ofstream(run + "/.ckpt-123.h5.tmp-" + pid) << "half a checkpoint";
  CommandResult after = run_keel("resume " + run + " --epochs 1 --quiet");
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_FALSE(fs::exists(run + "/.ckpt-123.h5.tmp-" + pid));
}

TEST_F(CheckpointTrustCli, OverwriteMovesThePreviousRunAsideAndDeletesNothing) {
  const std::string run = stopped_run("run", 200);
  const std::string before = md5_of_dir(run);
  CommandResult r = run_keel("train " + kTrustRun + "--stop-after-steps 5 --overwrite --checkpoint-dir " + run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Moved the previous run in " + run + " to " + run + "/replaced-1"));
  EXPECT_EQ(md5_of_dir(run + "/replaced-1"), before);
  EXPECT_TRUE(fs::exists(run + "/ckpt-5.h5"));
  EXPECT_FALSE(fs::exists(run + "/ckpt-200.h5"));
}

}  // namespace
}  // namespace keel::testing
