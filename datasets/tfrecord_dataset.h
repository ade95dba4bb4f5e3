// tf.data.TFRecordDataset: the records of TFRecord files, in file order, as string tensors.
//
//   Dataset records = Dataset::list_files(dir + "/train-*.tfrecord", true, seed)
//                         .interleave([](const Element& f) { return TFRecordDataset({f[0].string_value()}); },
//                                     /*cycle_length=*/4, /*block_length=*/1, AUTOTUNE);
//
// Resume: the saved position is (file number, byte offset, record index) — a few words, never data. An
// uncompressed file resumes with one seek; a GZIP file is decompressed again up to the offset.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "framework/data/dataset.h"
#include "datasets/tfrecord.h"

namespace keel {

struct TFRecordOptions {
  TFRecordCompression compression = TFRecordCompression::kNone;
  // keel's --skip-corrupt: a record whose data CRC fails is skipped, and a file whose framing is
  // damaged (bad length CRC, truncation) ends there; each skip is counted in `skipped` (if set) and
  // its message printed to stderr. Without it the first problem throws DataError naming the file,
  // the record index and the byte offset.
  bool skip_corrupt = false;
  std::shared_ptr<std::atomic<int64_t>> skipped;
  // Each element is {record} or, with include_source, {record, "FILE record N"} so that later stages
  // (parse, decode) can name the record in their errors.
  bool include_source = false;
};

// The compression of a file named like keel's exports: ".gz" at the end means GZIP.
TFRecordCompression tfrecord_compression_for(const std::string& path);

Dataset TFRecordDataset(std::vector<std::string> filenames, TFRecordOptions options = {});

}  // namespace keel
