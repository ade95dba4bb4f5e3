#include "framework/checkpoint/run_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/checkpoint/h5_file.h"

namespace keel {
namespace {

namespace fs = std::filesystem;

class RunDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("keel_run_directory_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(root_);
    // Deliberately not created: save() must create the run directory and its parents.
    run_ = root_ / "nested" / "run";
  }
  void TearDown() override { fs::remove_all(root_); }

  static std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void write_file(const fs::path& p, const std::string& contents) {
    std::ofstream(p, std::ios::binary) << contents;
  }
  std::set<std::string> listing() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(run_)) names.insert(entry.path().filename());
    return names;
  }
  // A `write` callback that stores `contents` at the temporary path.
  static std::function<void(const std::string&)> writes(const std::string& contents) {
    return [contents](const std::string& tmp) { write_file(tmp, contents); };
  }

  fs::path root_, run_;
};

TEST_F(RunDirectoryTest, SaveWritesCheckpointThenLatest) {
  RunDirectory run(run_.string());
  EXPECT_EQ(run.dir(), run_.string());
  EXPECT_EQ(run.latest(), std::nullopt);
  EXPECT_TRUE(run.checkpoints().empty());

  std::string seen_tmp;
  run.save(700, [&](const std::string& tmp) {
    seen_tmp = tmp;
    // The temporary lives in the run directory under a hidden name, and nothing is published yet.
    EXPECT_EQ(fs::path(tmp).parent_path(), run_);
    EXPECT_EQ(fs::path(tmp).filename().string().rfind(".ckpt-700.h5.tmp-", 0), 0u) << tmp;
    EXPECT_FALSE(fs::exists(run_ / "ckpt-700.h5"));
    EXPECT_FALSE(fs::exists(run_ / "latest"));
    write_file(tmp, "weights of step 700");
  }, 3);

  EXPECT_FALSE(seen_tmp.empty());
  EXPECT_FALSE(fs::exists(seen_tmp));
  EXPECT_EQ(read_file(run_ / "ckpt-700.h5"), "weights of step 700");
  EXPECT_EQ(read_file(run_ / "latest"), "ckpt-700.h5\n");
  EXPECT_EQ(run.latest(), (run_ / "ckpt-700.h5").string());
  EXPECT_EQ(run.checkpoint_path(700), (run_ / "ckpt-700.h5").string());
  EXPECT_EQ(run.checkpoints(),
            (std::vector<std::pair<int64_t, std::string>>{{700, (run_ / "ckpt-700.h5").string()}}));
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-700.h5", "latest"}));

  // Saving the same step again replaces it.
  run.save(700, writes("again"), 3);
  EXPECT_EQ(read_file(run_ / "ckpt-700.h5"), "again");
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-700.h5", "latest"}));
}

TEST_F(RunDirectoryTest, KeepPrunesTheOldest) {
  RunDirectory run(run_.string());
  for (int64_t step : {100, 200, 300, 1000}) run.save(step, writes(std::to_string(step)), 2);
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-300.h5", "ckpt-1000.h5", "latest"}));
  EXPECT_EQ(run.latest(), (run_ / "ckpt-1000.h5").string());
  EXPECT_EQ(read_file(run_ / "ckpt-300.h5"), "300");

  // keep <= 0 keeps everything.
  for (int64_t step : {2000, 3000}) run.save(step, writes("x"), 0);
  EXPECT_EQ(run.checkpoints().size(), 4u);
}

TEST_F(RunDirectoryTest, PruningNeverDeletesTheNewOneNorAnyOfAHigherStep) {
  RunDirectory run(run_.string());
  run.save(300, writes("300"), 0);
  run.save(200, writes("200"), 0);
  // Step 100 is the lowest, yet it is the one just saved; 200 and 300 are newer: none may go.
  run.save(100, writes("100"), 1);
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-100.h5", "ckpt-200.h5", "ckpt-300.h5", "latest"}));
  EXPECT_EQ(run.latest(), (run_ / "ckpt-100.h5").string());
  run.save(400, writes("400"), 2);
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-300.h5", "ckpt-400.h5", "latest"}));
}

TEST_F(RunDirectoryTest, FailedWriteLeavesEverythingUntouched) {
  RunDirectory run(run_.string());
  run.save(100, writes("good checkpoint"), 2);
  const std::string before_ckpt = read_file(run_ / "ckpt-100.h5");
  const std::string before_latest = read_file(run_ / "latest");

  // The callback's own exception comes through unchanged, after it had written half a file.
  EXPECT_THROW(run.save(200, [](const std::string& tmp) {
                 write_file(tmp, "half a checkp");
                 throw std::runtime_error("disk full");
               }, 2),
               std::runtime_error);
  EXPECT_EQ(read_file(run_ / "ckpt-100.h5"), before_ckpt);
  EXPECT_EQ(read_file(run_ / "latest"), before_latest);
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-100.h5", "latest"}));

  // A callback that writes nothing is an error too, and also publishes nothing.
  EXPECT_THROW(run.save(300, [](const std::string&) {}, 2), CheckpointError);
  EXPECT_EQ(read_file(run_ / "latest"), before_latest);
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-100.h5", "latest"}));
}

TEST_F(RunDirectoryTest, BrokenLatestPointerThrows) {
  RunDirectory run(run_.string());
  fs::create_directories(run_);
  write_file(run_ / "latest", "ckpt-5.h5\n");
  try {
    (void)run.latest();
    ADD_FAILURE() << "latest pointing to a missing file was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt-5.h5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  for (const std::string garbage : {"", "hello\n", "../../etc/passwd\n", "ckpt-05.h5\n",
                                    "ckpt-.h5", "ckpt-1.h5\nckpt-2.h5\n", "\x01\x02"}) {
    SCOPED_TRACE(garbage);
    write_file(run_ / "latest", garbage);
    EXPECT_THROW((void)run.latest(), CheckpointError);
  }
  write_file(run_ / "ckpt-5.h5", "x");
  write_file(run_ / "latest", "ckpt-5.h5");  // a missing newline is tolerated
  EXPECT_EQ(run.latest(), (run_ / "ckpt-5.h5").string());
  EXPECT_THROW((void)run.checkpoint_path(-1), CheckpointError);
}

TEST_F(RunDirectoryTest, CheckpointsAreSortedNumericallyAndCanonicalOnly) {
  RunDirectory run(run_.string());
  fs::create_directories(run_ / "ckpt-9.h5");  // a directory, not a checkpoint
  for (const char* name : {"ckpt-1000.h5", "ckpt-200.h5", "ckpt-0.h5", "ckpt-007.h5", "ckpt-x.h5",
                           "ckpt-5.h5.bak", ".ckpt-6.h5.tmp-1", "ckpt--1.h5", "notes.txt"})
    write_file(run_ / name, "x");
  std::vector<int64_t> steps;
  for (const auto& [step, p] : run.checkpoints()) {
    steps.push_back(step);
    EXPECT_EQ(p, run.checkpoint_path(step));
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 200, 1000}));
}

TEST_F(RunDirectoryTest, RemoveStaleTemporaries) {
  RunDirectory run(run_.string());
  run.remove_stale_temporaries();  // no directory yet: nothing to do
  run.save(100, writes("100"), 0);
  for (const char* name : {".ckpt-200.h5.tmp-1234", ".ckpt-300.h5.tmp-1", ".latest.tmp-99",
                           "notes.txt", ".hidden", "ckpt-100.h5.tmp"})
    write_file(run_ / name, "x");
  run.remove_stale_temporaries();
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-100.h5", "latest", "notes.txt", ".hidden",
                                              "ckpt-100.h5.tmp"}));
  EXPECT_EQ(read_file(run_ / "ckpt-100.h5"), "100");
}

// End to end with the HDF5 writer: what `latest` names opens and holds what was saved.
TEST_F(RunDirectoryTest, SavesAndReopensAnHdf5Checkpoint) {
  RunDirectory run(run_.string());
  for (int64_t step : {10, 20}) {
    run.save(step, [step](const std::string& tmp) {
      H5File f = H5File::create(tmp);
      f.write_int64("keel/train_state/step", step);
      f.close();
    }, 1);
  }
  std::optional<std::string> latest = run.latest();
  ASSERT_TRUE(latest.has_value());
  H5File f = H5File::open_read(*latest);
  EXPECT_EQ(f.read_int64("keel/train_state/step"), 20);
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-20.h5", "latest"}));
}

// A verifier that accepts files whose contents start with "good".
void accepts_good(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(4, '\0');
  in.read(head.data(), 4);
  if (head != "good") throw CheckpointError("checkpoint " + path + " is damaged");
}

TEST_F(RunDirectoryTest, NewestVerifiedSkipsDamagedFilesAndSetsThemAsideOnlyWhenAsked) {
  RunDirectory run(run_.string());
  run.save(100, writes("good 100"), 0);
  run.save(200, writes("good 200"), 0);
  run.save(300, writes("bad 300"), 0);
  run.save(400, writes("bad 400"), 0);
  std::vector<RunDirectory::Rejected> rejected;
  // Reading only: the damaged files stay where they are.
  EXPECT_EQ(run.newest_verified(accepts_good, false, &rejected), (run_ / "ckpt-200.h5").string());
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_EQ(rejected[0].path, (run_ / "ckpt-400.h5").string());
  EXPECT_EQ(rejected[0].moved_to, "");
  EXPECT_EQ(listing().size(), 5u);
  // Resuming: set aside, bytes untouched; an existing .corrupt is never replaced.
  write_file(run_ / "ckpt-300.h5.corrupt", "an earlier damaged 300");
  rejected.clear();
  EXPECT_EQ(run.newest_verified(accepts_good, true, &rejected), (run_ / "ckpt-200.h5").string());
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_EQ(rejected[1].moved_to, (run_ / "ckpt-300.h5.corrupt-2").string());
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-100.h5", "ckpt-200.h5", "ckpt-300.h5.corrupt", "ckpt-300.h5.corrupt-2",
                                              "ckpt-400.h5.corrupt", "latest"}));
  EXPECT_EQ(read_file(run_ / "ckpt-300.h5.corrupt"), "an earlier damaged 300");
  EXPECT_EQ(read_file(run_ / "ckpt-300.h5.corrupt-2"), "bad 300");
  EXPECT_EQ(read_file(run_ / "ckpt-400.h5.corrupt"), "bad 400");
  // `latest` is only a hint: it may name anything, or nothing.
  fs::remove(run_ / "latest");
  EXPECT_EQ(run.newest_verified(accepts_good, true, nullptr), (run_ / "ckpt-200.h5").string());
  run.save(500, writes("bad 500"), 0);
  run.save(600, writes("bad 600"), 0);
  EXPECT_TRUE(run.holds_a_run());
}

TEST_F(RunDirectoryTest, NoCheckpointVerifies) {
  RunDirectory run(run_.string());
  EXPECT_EQ(run.newest_verified(accepts_good, true, nullptr), std::nullopt);  // no directory
  run.save(1, writes("bad"), 0);
  std::vector<RunDirectory::Rejected> rejected;
  EXPECT_EQ(run.newest_verified(accepts_good, true, &rejected), std::nullopt);
  EXPECT_EQ(rejected.size(), 1u);
  EXPECT_TRUE(run.checkpoints().empty());
  EXPECT_TRUE(run.holds_a_run());  // the set-aside file and `latest` still belong to it
}

TEST_F(RunDirectoryTest, ASaveThatFailsVerificationPublishesNothing) {
  RunDirectory run(run_.string());
  run.save(100, writes("good 100"), 1, accepts_good);
  EXPECT_THROW(run.save(200, writes("bad 200"), 1, accepts_good), CheckpointError);
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-100.h5", "latest"}));
  EXPECT_EQ(read_file(run_ / "latest"), "ckpt-100.h5\n");
  run.save(300, writes("good 300"), 1, accepts_good);
  EXPECT_EQ(listing(), (std::set<std::string>{"ckpt-300.h5", "latest"}));
}

TEST_F(RunDirectoryTest, MovingAPreviousRunAsideDeletesNothing) {
  RunDirectory run(run_.string());
  EXPECT_FALSE(run.holds_a_run());
  run.save(100, writes("good 100"), 0);
  run.save(200, writes("bad 200"), 0);
  run.newest_verified(accepts_good, true, nullptr);
  write_file(run_ / "notes.txt", "mine");
  const std::string moved = run.move_previous_run_aside();
  EXPECT_EQ(moved, (run_ / "replaced-1").string());
  EXPECT_FALSE(run.holds_a_run());
  EXPECT_EQ(listing(), (std::set<std::string>{"notes.txt", "replaced-1"}));
  EXPECT_EQ(read_file(run_ / "replaced-1" / "ckpt-100.h5"), "good 100");
  EXPECT_EQ(read_file(run_ / "replaced-1" / "ckpt-200.h5.corrupt"), "bad 200");
  EXPECT_EQ(read_file(run_ / "replaced-1" / "latest"), "ckpt-200.h5\n");
  run.save(5, writes("good 5"), 0);
  EXPECT_EQ(run.move_previous_run_aside(), (run_ / "replaced-2").string());
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

// best.h5 (ModelCheckpoint's): replaced atomically, verified first, invisible to resume and pruning,
// its temporaries cleaned, and moved aside with the run's other outputs.
TEST_F(RunDirectoryTest, BestIsReplacedAtomicallyAndNeverACheckpoint) {
  RunDirectory run(run_.string());
  run.save(5, writes("ckpt"), /*keep=*/1);
  replace_file(run.best_path(), writes("best 1"));
  replace_file(run.best_path(), writes("best 2"));
  EXPECT_EQ(read_file(run.best_path()), "best 2");
  EXPECT_THROW(replace_file(run.best_path(), writes("bad"), [](const std::string&) { throw CheckpointError("damaged"); }),
               CheckpointError);
  EXPECT_THROW(replace_file((run_ / "missing" / "best.h5").string(), writes("x")), CheckpointError);
  EXPECT_EQ(read_file(run.best_path()), "best 2");  // a save that fails verification leaves the old one
  run.save(9, writes("ckpt"), /*keep=*/1);          // pruning: ckpt-5 goes, best.h5 stays
  EXPECT_EQ(listing(), (std::set<std::string>{"best.h5", "ckpt-9.h5", "latest"}));
  ASSERT_EQ(run.checkpoints().size(), 1u);
  EXPECT_EQ(run.checkpoints()[0].first, 9);

  write_file(run_ / ".best.h5.tmp-123", "torn");
  run.remove_stale_temporaries();
  EXPECT_FALSE(fs::exists(run_ / ".best.h5.tmp-123"));

  write_file(run_ / "history.csv", "epoch\n");
  fs::create_directories(run_ / "logs" / "train");
  write_file(run_ / "notes.txt", "mine");
  const fs::path aside = run.move_previous_run_aside();
  EXPECT_EQ(listing(), (std::set<std::string>{"notes.txt", aside.filename().string()}));
  for (const char* name : {"best.h5", "ckpt-9.h5", "latest", "history.csv", "logs"}) EXPECT_TRUE(fs::exists(aside / name)) << name;
}

}  // namespace
}  // namespace keel
