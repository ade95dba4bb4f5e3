// Bad input never crashes and never loses data: one clear message, a non-zero exit, nothing overwritten.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class BadInputCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-bad"); }
  void TearDown() override { fs::remove_all(dir_); }

  // A copy of the Fashion-MNIST files, one of which `damage` then changes.
  std::string data_copy() {
    const std::string d = dir_ + "/data";
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator("/usr/share/datasets/fashion-mnist")) {
      fs::copy_file(e.path(), d + "/" + e.path().filename().string());
    }
    return d;
  }
  // A finished short run to damage or to protect.
  std::string short_run(const std::string& name) {
    const std::string run = dir_ + "/" + name;
    CommandResult r = run_keel("train --model mlp --device cpu --batch-per-core 128 --epochs 1 --stop-after-steps 5 --quiet "
                               "--checkpoint-dir " + run);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return run;
  }
  std::string dir_;
};

TEST_F(BadInputCli, MissingDatasetNamesThePackageAndTheFlag) {
  CommandResult r = run_keel("train --model mlp --data-dir " + dir_ + "/nowhere --checkpoint-dir " + dir_ + "/run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("apt-get install dataset-fashion-mnist"));
  EXPECT_THAT(r.err, HasSubstr("--data-dir"));
  EXPECT_FALSE(fs::exists(dir_ + "/run/latest"));
}

TEST_F(BadInputCli, TruncatedGzipIsReported) {
  const std::string d = data_copy();
  fs::resize_file(d + "/train-images-idx3-ubyte.gz", 100000);
  CommandResult r = run_keel("train --model mlp --data-dir " + d + " --checkpoint-dir " + dir_ + "/run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("train-images-idx3-ubyte.gz"));
}

TEST_F(BadInputCli, CorruptIdxHeaderIsReported) {
  const std::string d = data_copy();
  // A valid gzip stream of a file that is not IDX.
  CommandResult g = run_command("printf 'not an idx file at all' | gzip -c > " + d + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_EQ(g.exit_code, 0);
  const std::string run = short_run("run");
  CommandResult r = run_keel("evaluate " + run + " --data-dir " + d);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("t10k-labels-idx1-ubyte.gz"));
}

TEST_F(BadInputCli, UnknownModelPresetAndFlag) {
  CommandResult m = run_keel("train --model nosuch --checkpoint-dir " + dir_ + "/run");
  EXPECT_EQ(m.exit_code, 2);
  EXPECT_THAT(m.err, HasSubstr("unknown model 'nosuch'"));
  EXPECT_THAT(m.err, HasSubstr("mlp"));
  CommandResult p = run_keel("memory --model mlp --device v9-8");
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_THAT(p.err, HasSubstr("unknown device preset 'v9-8'"));
  EXPECT_THAT(p.err, HasSubstr("v3-8"));
  CommandResult f = run_keel("train --model mlp --no-such-flag");
  EXPECT_EQ(f.exit_code, 2);
  CommandResult s = run_keel("memory --model mlp --cores 2 --hbm-per-core 12 parsecs");
  EXPECT_EQ(s.exit_code, 2);
  CommandResult v = run_keel("frobnicate");
  EXPECT_EQ(v.exit_code, 2);
  CommandResult b = run_keel("memory --model mlp --batch-per-core 0");
  EXPECT_EQ(b.exit_code, 2);
}

TEST_F(BadInputCli, ACheckpointThatIsNotKeelsIsRefused) {
  const std::string file = dir_ + "/not.h5";
  std::ofstream(file) << "this is not HDF5";
  CommandResult r = run_keel("evaluate " + file);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(file));
  // A real HDF5 file that keel did not write.
  CommandResult py = run_command("/usr/bin/python3 -c \"import h5py; h5py.File('" + dir_ +
                                 "/other.h5', 'w').create_dataset('x', data=[1.0])\"");
  ASSERT_EQ(py.exit_code, 0) << py.err;
  CommandResult r2 = run_keel("evaluate " + dir_ + "/other.h5");
  EXPECT_EQ(r2.exit_code, 2);
  EXPECT_THAT(r2.err, HasSubstr("not a keel checkpoint"));
}

TEST_F(BadInputCli, TruncatedCheckpointIsRefusedSetAsideAndNothingIsModified) {
  const std::string run = short_run("run");
  const std::string ckpt = run + "/ckpt-5.h5";
  fs::resize_file(ckpt, fs::file_size(ckpt) / 2);
  const std::string truncated = read_file(ckpt);
  // evaluate only reads: it reports and leaves the file where it is.
  CommandResult e = run_keel("evaluate " + run);
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_THAT(e.err, HasSubstr("ckpt-5.h5"));
  EXPECT_TRUE(fs::exists(ckpt));
  CommandResult f = run_keel("evaluate " + ckpt);
  EXPECT_EQ(f.exit_code, 2);
  // resume sets it aside, its bytes untouched, and has nothing left to continue from.
  CommandResult r = run_keel("resume " + run + " --quiet");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("ckpt-5.h5"));
  EXPECT_THAT(r.err, HasSubstr("no checkpoint in"));
  EXPECT_FALSE(fs::exists(ckpt));
  EXPECT_EQ(read_file(ckpt + ".corrupt"), truncated);
  EXPECT_EQ(read_file(run + "/latest"), "ckpt-5.h5\n");
}

TEST_F(BadInputCli, LatestPointingNowhereIsOnlyAHint) {
  const std::string run = short_run("run");
  std::ofstream(run + "/latest") << "ckpt-999.h5\n";
  CommandResult r = run_keel("resume " + run + " --stop-after-steps 1 --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Resuming " + run + "/ckpt-5.h5"));
}

TEST_F(BadInputCli, ResumeWithoutARun) {
  CommandResult r = run_keel("resume " + dir_ + "/nothing-here");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
}

}  // namespace
}  // namespace keel::testing
