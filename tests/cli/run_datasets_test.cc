// Per-host input pipelines (issue 12): under mpirun each process decodes, augments and resizes only
// the examples of its rows of every global batch. The pipelines of every process count must hold the
// same examples in the same rows (a process's rows bit for bit the one-process pipeline's), leave the
// other rows unfilled (zeros: never decoded), and describe and save the same iterator states, so that
// a run resumes under any process count.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/image_ops.h"
#include "framework/device/input_context.h"
#include "tests/support/cli_runner.h"
#include "tools/cli/run_config.h"

namespace keel::cli {
namespace {

RunConfig image_run(const std::string& dataset, const std::string& augment) {
  RunConfig c;
  c.model = "resnet18";
  c.input_shape = {32, 32, 1};
  c.dataset = dataset;
  c.device = DeviceSpec::custom(4, int64_t{1} << 32, /*hosts=*/2);  // 2 hosts x 2 cores
  c.batch_per_core = 3;                                              // global batches of 12
  c.augment = augment;
  c.shuffle_buffer = 64;
  c.seed = 11;
  return c;
}

TrainingInput process_share(const RunConfig& c, int processes, int rank) {
  TrainingInput share;
  share.input_context = input_context(c.device, processes, rank, c.global_batch());
  return share;
}

bool all_zero(const Tensor& rows) {
  for (int64_t i = 0; i < rows.size(); ++i) {
    if (rows.data()[i] != 0.0f) return false;
  }
  return true;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a.data()[i], b.data()[i]) << what << " at " << i;
  }
}

// `batches` global batches of process `rank` of `processes` against the one-process pipeline's: the
// rows it feeds are the same bits (images and labels), the others zeros.
void expect_share_of_one_process(const RunConfig& c, int processes, int rank, int64_t batches) {
  const TrainingInput share = process_share(c, processes, rank);
  const Dataset whole = training_dataset(c);
  const Dataset mine = training_dataset(c, share);
  EXPECT_EQ(mine.describe(), whole.describe());
  Iterator a = whole.make_iterator(1), b = mine.make_iterator(1);
  const int64_t first = share.input_context.first_row, end = share.input_context.end_row;
  ASSERT_LT(end - first, c.global_batch());
  for (int64_t k = 0; k < batches; ++k) {
    const Element x = *a.next(), y = *b.next();
    const std::string what = "batch " + std::to_string(k) + " of rank " + std::to_string(rank);
    for (size_t component = 0; component < x.size(); ++component) {
      expect_same_bits(x[component].slice_rows(first, end), y[component].slice_rows(first, end), what);
    }
    EXPECT_FALSE(all_zero(y[0].slice_rows(first, end))) << what;
    if (first > 0) EXPECT_TRUE(all_zero(y[0].slice_rows(0, first))) << what;
    if (end < c.global_batch()) EXPECT_TRUE(all_zero(y[0].slice_rows(end, c.global_batch()))) << what;
  }
}

TEST(RunDatasets, InputContextNamesEachProcessesRows) {
  const DeviceSpec slice = DeviceSpec::custom(8, 0, /*hosts=*/4);
  const InputContext one = input_context(slice, 1, 0, 16);
  EXPECT_TRUE(one.feeds_everything());
  const InputContext third = input_context(slice, 4, 2, 16);
  EXPECT_EQ(third.first_row, 8);
  EXPECT_EQ(third.end_row, 12);
  EXPECT_EQ(third.num_input_pipelines, 4);
  EXPECT_EQ(third.input_pipeline_id, 2);
  EXPECT_EQ(third.get_per_replica_batch_size(16), 2);
  EXPECT_TRUE(third.feeds(16 * 5 + 9));
  EXPECT_FALSE(third.feeds(16 * 5 + 12));
  // A batch the cores do not divide evenly: infeed's split (the first cores take one row more).
  const InputContext uneven = input_context(slice, 2, 1, 11);
  EXPECT_EQ(uneven.first_row, 7);  // cores 0..2 take rows [0, 6), core 3 row 6
  EXPECT_EQ(uneven.end_row, 11);
  EXPECT_THROW(input_context(slice, 3, 0, 16), std::invalid_argument);
}

TEST(RunDatasets, FashionMnistAugmentedPerProcessHoldsTheOneProcessRows) {
  const RunConfig c = image_run("fashion_mnist", "flip,crop:4");
  for (int rank : {0, 1}) expect_share_of_one_process(c, 2, rank, 3);
  RunConfig rgb = c;  // the gray images are augmented first, their channel repeated per batch
  rgb.input_shape = {32, 32, 3};
  expect_share_of_one_process(rgb, 2, 1, 2);
}

TEST(RunDatasets, FashionMnistResizedPerProcessHoldsTheOneProcessRows) {
  const RunConfig c = image_run("fashion_mnist", "");
  expect_share_of_one_process(c, 2, 1, 3);
}

TEST(RunDatasets, TFRecordsDecodedPerProcessHoldTheOneProcessRows) {
  const std::string records = testing::shared_export("tfrecord_jpeg", "--format tfrecord --shards 4");
  const RunConfig c = image_run("tfrecord:" + records, "flip,translate:0.1");
  expect_share_of_one_process(c, 2, 0, 2);
  expect_share_of_one_process(c, 2, 1, 2);
  const RunConfig plain = image_run("tfrecord:" + records, "");
  expect_share_of_one_process(plain, 2, 1, 2);
}

// A state saved by one process of two restores into the one-process pipeline (and the reverse): the
// next batches are the same examples.
TEST(RunDatasets, IteratorStatesMoveBetweenProcessCounts) {
  const std::string records = testing::shared_export("tfrecord_jpeg", "--format tfrecord --shards 4");
  const RunConfig c = image_run("tfrecord:" + records, "flip");
  const TrainingInput share = process_share(c, 2, 1);
  const Dataset whole = training_dataset(c), mine = training_dataset(c, share);
  Iterator b = mine.make_iterator(0);
  b.next();
  b.next();
  Iterator a = whole.make_iterator(0);
  a.restore(b.save());
  Iterator straight = whole.make_iterator(0);
  for (int k = 0; k < 2; ++k) straight.next();
  const int64_t first = share.input_context.first_row, end = share.input_context.end_row;
  for (int k = 0; k < 2; ++k) {
    const Element from_state = *a.next(), expected = *straight.next(), own = *b.next();
    expect_same_bits(from_state[0], expected[0], "restored whole pipeline");
    expect_same_bits(own[0].slice_rows(first, end), expected[0].slice_rows(first, end), "process 1's rows");
  }
}

// A run saved before keel decoded per host had an unkeyed decode map: that form still builds (so its
// iterator state restores) and decodes every example.
TEST(RunDatasets, RunsSavedBeforePerHostDecodingKeepTheirPipeline) {
  const std::string records = testing::shared_export("tfrecord_jpeg", "--format tfrecord --shards 4");
  const RunConfig c = image_run("tfrecord:" + records, "");
  TrainingInput legacy = process_share(c, 2, 1);
  legacy.keyed_decode = false;
  const Dataset old_form = training_dataset(c, legacy);
  EXPECT_NE(old_form.describe(), training_dataset(c).describe());
  EXPECT_NE(old_form.describe().find("-> map -> filter"), std::string::npos) << old_form.describe();
  const Element batch = *old_form.make_iterator(0).next();
  EXPECT_FALSE(all_zero(batch[0].slice_rows(0, 6)));
  // --skip-corrupt decides which example lands in which row only after decoding: every process
  // decodes every example (and skips the same ones).
  RunConfig skipping = c;
  skipping.skip_corrupt = true;
  const Element skipped = *training_dataset(skipping, process_share(skipping, 2, 1)).make_iterator(0).next();
  EXPECT_FALSE(all_zero(skipped[0].slice_rows(0, 6)));
}

}  // namespace
}  // namespace keel::cli
