// Fuzzes TFRecordReader (datasets/tfrecord.h). Input: one mode byte, then the file's bytes.
//   mode bit 0: GZIP (else uncompressed); bit 1: skip_corrupt; bits 2..7: which read position to
//   seek() back to at the end.
// Contract under test: reading to the end only ever throws DataError; after a DataError, read() may be
// called again and the reader makes progress (it ends within one call per input byte or so); and a
// (offset(), next_index()) taken before a successful read, given to seek(), reads the same record
// again. Never a crash, a leak, or memory that grows with a length field rather than the bytes present.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/data/data_error.h"
#include "datasets/tfrecord.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

struct Position {
  uint64_t offset;
  int64_t index;
  std::string record;  // what read() returned from here
};

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "tfrecord_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static keel::fuzz::ScratchFile file("keel-tfrecord-fuzz");
  const uint8_t mode = data[0];
  const auto compression = (mode & 1) ? keel::TFRecordCompression::kGzip : keel::TFRecordCompression::kNone;
  const bool skip_corrupt = (mode & 2) != 0;
  const std::string& path = file.write(data + 1, size - 1);

  std::vector<Position> good;
  try {
    keel::TFRecordReader reader(path, compression, skip_corrupt);
    std::string record;
    // Every call consumes at least a length header (12 bytes) or ends the file; a GZIP stream can
    // expand, hence the generous bound.
    const size_t max_calls = 64 + 1024 * size;
    size_t calls = 0;
    for (;;) {
      if (++calls > max_calls) finding("read() keeps returning records or errors without reaching the end");
      const uint64_t offset = reader.offset();
      const int64_t index = reader.next_index();
      try {
        if (!reader.read(&record)) break;
        if (good.size() < 64) good.push_back({offset, index, record});
      } catch (const keel::DataError&) {
        if (skip_corrupt) finding("skip_corrupt reader threw DataError");
      }
    }
    if (reader.read(&record)) finding("read() returned a record after it had returned false");
    if (!good.empty()) {
      const Position& p = good[(mode >> 2) % good.size()];
      reader.seek(p.offset, p.index);
      if (!reader.read(&record) || record != p.record || reader.next_index() <= p.index) {
        finding("seek() to a position taken before a successful read does not read the same record");
      }
    }
  } catch (const keel::DataError&) {
    // The constructor or seek() refused the file: the documented outcome for bad input.
  }
  return 0;
}
