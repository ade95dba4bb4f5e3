// TFRecordDataset: the records of several files in order, exact save/restore at every position
// (plain and GZIP), corrupt records skipped and counted with skip_corrupt.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "framework/data/data_error.h"
#include "datasets/tfrecord_dataset.h"
#include "tests/support/cli_runner.h"

namespace keel {
namespace {

namespace fs = std::filesystem;

class TFRecordDatasetTest : public ::testing::TestWithParam<TFRecordCompression> {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("keel-tfrecord-dataset");
    const std::string ext = GetParam() == TFRecordCompression::kGzip ? ".tfrecord.gz" : ".tfrecord";
    for (int f = 0; f < 3; ++f) {
      files_.push_back(dir_ + "/part-" + std::to_string(f) + ext);
      TFRecordWriter w(files_.back(), GetParam());
      for (int i = 0; i < 4 + f; ++i) {  // 4, 5 and 6 records of different lengths
        expected_.push_back("file " + std::to_string(f) + " record " + std::to_string(i) + std::string(i * 7, 'x'));
        w.write(expected_.back());
      }
      w.close();
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  Dataset dataset() const {
    TFRecordOptions o;
    o.compression = tfrecord_compression_for(files_[0]);
    return TFRecordDataset(files_, o);
  }

  std::string dir_;
  std::vector<std::string> files_;
  std::vector<std::string> expected_;
};

std::vector<std::string> drain(Iterator& it) {
  std::vector<std::string> out;
  while (auto e = it.next()) out.push_back((*e)[0].string_value());
  return out;
}

TEST_P(TFRecordDatasetTest, ReadsEveryRecordOfEveryFileInOrder) {
  Iterator it = dataset().make_iterator();
  EXPECT_EQ(drain(it), expected_);
  EXPECT_EQ(dataset().cardinality(), kUnknownCardinality);
}

TEST_P(TFRecordDatasetTest, RestoresExactlyAtEveryPosition) {
  const Dataset ds = dataset();
  for (size_t k = 0; k <= expected_.size(); ++k) {
    SCOPED_TRACE(k);
    Iterator a = ds.make_iterator();
    for (size_t i = 0; i < k; ++i) ASSERT_TRUE(a.next());
    const nlohmann::json state = a.save();
    Iterator b = ds.make_iterator();
    b.restore(state);
    const std::vector<std::string> rest(expected_.begin() + static_cast<std::ptrdiff_t>(k), expected_.end());
    EXPECT_EQ(drain(b), rest);
    EXPECT_EQ(drain(a), rest);
  }
}

TEST_P(TFRecordDatasetTest, RejectsAStateOfAnotherShape) {
  Iterator a = dataset().make_iterator();
  ASSERT_TRUE(a.next());
  nlohmann::json state = a.save();
  state["state"]["file"] = 7;  // there are 3 files
  Iterator b = dataset().make_iterator();
  EXPECT_THROW(b.restore(state), DataError);
}

INSTANTIATE_TEST_SUITE_P(Compressions, TFRecordDatasetTest,
                         ::testing::Values(TFRecordCompression::kNone, TFRecordCompression::kGzip));

TEST(TFRecordDatasetSkip, ACorruptRecordIsSkippedCountedAndNamed) {
  const std::string dir = testing::make_temp_dir("keel-tfrecord-skip");
  const std::string path = dir + "/a.tfrecord";
  {
    TFRecordWriter w(path);
    for (int i = 0; i < 5; ++i) w.write("record " + std::to_string(i));
    w.close();
  }
  {  // record 2's data: each record is 8 + 4 + 8 + 4 = 24 bytes
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2 * 24 + 12 + 3);
    f.put('X');
  }
  TFRecordOptions strict;
  strict.include_source = true;
  Iterator it = TFRecordDataset({path}, strict).make_iterator();
  ASSERT_TRUE(it.next());
  auto second = it.next();
  ASSERT_TRUE(second);
  EXPECT_EQ((*second)[1].string_value(), path + " record 1");
  try {
    it.next();
    FAIL() << "the corrupt record was not reported";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path + " record 2"), std::string::npos) << e.what();
  }

  TFRecordOptions skip;
  skip.skip_corrupt = true;
  skip.include_source = true;
  skip.skipped = std::make_shared<std::atomic<int64_t>>(0);
  Iterator s = TFRecordDataset({path}, skip).make_iterator();
  std::vector<std::string> sources;
  while (auto e = s.next()) sources.push_back((*e)[1].string_value());
  EXPECT_EQ(sources, (std::vector<std::string>{path + " record 0", path + " record 1", path + " record 3",
                                                path + " record 4"}));
  EXPECT_EQ(skip.skipped->load(), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace keel
