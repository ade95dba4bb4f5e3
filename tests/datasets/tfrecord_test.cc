#include "datasets/tfrecord.h"

#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/data_error.h"
#include "datasets/example.h"
#include "tests/support/golden.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using Records = std::vector<std::string>;

constexpr TFRecordCompression kNone = TFRecordCompression::kNone;
constexpr TFRecordCompression kGzip = TFRecordCompression::kGzip;

// CRC-32C bit by bit from its definition (reflected polynomial 0x82F63B78).
uint32_t reference_crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

std::string random_record(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string gzip(const std::string& raw) {
  z_stream s{};
  // 16 + MAX_WBITS: a gzip wrapper.
  EXPECT_EQ(deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&s, raw.size()) + 64, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  s.avail_in = static_cast<uInt>(raw.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Records read_all(const std::string& path, TFRecordCompression compression) {
  TFRecordReader reader(path, compression);
  Records out;
  std::string r;
  while (reader.read(&r)) out.push_back(r);
  return out;
}

class TFRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("keel_tfrecord_test_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_records(const std::string& name, const Records& records, TFRecordCompression compression) {
    TFRecordWriter writer(path(name), compression);
    for (const auto& r : records) writer.write(r);
    writer.close();
    EXPECT_EQ(writer.records_written(), static_cast<int64_t>(records.size()));
    return path(name);
  }

  std::string write_bytes(const std::string& name, std::string_view bytes) {
    std::ofstream out(path(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }

  // The DataError a full read of `file` throws; fails the test if there is none.
  static std::string read_error(const std::string& file, TFRecordCompression compression) {
    try {
      read_all(file, compression);
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr(file));
      return e.what();
    }
    ADD_FAILURE() << "no DataError reading " << file;
    return "";
  }

  std::filesystem::path dir_;
};

// Records of assorted sizes: empty, tiny, binary with NULs, and one over the reader's buffers.
Records assorted_records() {
  Records r = {"", "a", std::string("\0\xff\0\x01", 4), random_record(3'000'000, 1)};
  for (int i = 0; i < 1000; ++i) r.push_back(random_record(static_cast<size_t>(i % 37), static_cast<uint32_t>(i)));
  r.push_back("");
  return r;
}

TEST(Crc32cTest, Rfc3720Vectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[static_cast<size_t>(i)] = static_cast<char>(i);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(Crc32cTest, MatchesBitwiseDefinitionAtEveryLengthAndAlignment) {
  const std::string data = random_record(300, 7);
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; start + n <= data.size(); n += 7) {
      const std::string_view s(data.data() + start, n);
      ASSERT_EQ(crc32c(s), reference_crc32c(s)) << "start " << start << " length " << n;
    }
  }
}

TEST(Crc32cTest, MaskIsTensorFlows) {
  const uint32_t crc = crc32c("123456789");
  EXPECT_EQ(masked_crc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  // Values from bench/golden_tfrecord.py's independent implementation; the first is the length CRC
  // every empty record carries.
  EXPECT_EQ(masked_crc32c(std::string(8, '\0')), 0x07980329u);
  EXPECT_EQ(masked_crc32c("123456789"), 0xc78ab0e5u);
}

TEST(TFRecordCompressionTest, ParsesTensorFlowsStrings) {
  EXPECT_EQ(parse_tfrecord_compression(""), kNone);
  EXPECT_EQ(parse_tfrecord_compression("NONE"), kNone);
  EXPECT_EQ(parse_tfrecord_compression("GZIP"), kGzip);
  for (const char* bad : {"ZLIB", "gzip", "none", "snappy"}) {
    try {
      parse_tfrecord_compression(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("'") + bad + "'"));
      EXPECT_THAT(e.what(), HasSubstr("\"GZIP\""));
      EXPECT_THAT(e.what(), HasSubstr("\"NONE\""));
    }
  }
  EXPECT_STREQ(tfrecord_compression_name(kGzip), "GZIP");
  EXPECT_STREQ(tfrecord_compression_name(kNone), "");
}

TEST_F(TFRecordTest, RoundTripUncompressedAndGzip) {
  const Records records = assorted_records();
  for (TFRecordCompression c : {kNone, kGzip}) {
    const std::string file = write_records(c == kGzip ? "r.tfrecord.gz" : "r.tfrecord", records, c);
    TFRecordReader reader(file, c);
    std::string r;
    uint64_t bytes = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      ASSERT_TRUE(reader.read(&r)) << "record " << i;
      ASSERT_EQ(r, records[i]) << "record " << i;
      bytes += 16 + records[i].size();
      EXPECT_EQ(reader.offset(), bytes);
    }
    EXPECT_FALSE(reader.read(&r));
    EXPECT_FALSE(reader.read(&r));
    EXPECT_EQ(reader.next_index(), static_cast<int64_t>(records.size()));
    EXPECT_EQ(reader.skipped(), 0);
    if (c == kNone) { EXPECT_EQ(std::filesystem::file_size(file), bytes); }
    if (c == kGzip) { EXPECT_LT(std::filesystem::file_size(file), bytes); }  // really compressed
  }
}

TEST_F(TFRecordTest, EmptyFiles) {
  for (TFRecordCompression c : {kNone, kGzip}) {
    EXPECT_TRUE(read_all(write_records("none", {}, c), c).empty());
    EXPECT_TRUE(read_all(write_bytes("zero_bytes", ""), c).empty());
  }
}

TEST_F(TFRecordTest, ConcatenatedGzipMembersReadAsOneStream) {
  const std::string a = read_text_file(write_records("a.gz", {"one", "two"}, kGzip));
  const std::string b = read_text_file(write_records("b.gz", {"three"}, kGzip));
  EXPECT_EQ(read_all(write_bytes("ab.gz", a + b), kGzip), (Records{"one", "two", "three"}));
}

TEST_F(TFRecordTest, SeekResumesAtEveryRecordBothCompressions) {
  Records records;
  for (int i = 0; i < 40; ++i) records.push_back(random_record(static_cast<size_t>(i * 13 % 200), static_cast<uint32_t>(i)));
  for (TFRecordCompression c : {kNone, kGzip}) {
    const std::string file = write_records("s", records, c);
    TFRecordReader first(file, c);
    std::string r;
    for (size_t k = 0; k <= records.size(); ++k) {
      TFRecordReader resumed(file, c);
      resumed.seek(first.offset(), first.next_index());
      EXPECT_EQ(resumed.next_index(), static_cast<int64_t>(k));
      for (size_t i = k; i < records.size(); ++i) {
        ASSERT_TRUE(resumed.read(&r)) << "resumed at " << k << ", record " << i;
        ASSERT_EQ(r, records[i]) << "resumed at " << k << ", record " << i;
      }
      EXPECT_FALSE(resumed.read(&r));
      if (k < records.size()) { ASSERT_TRUE(first.read(&r)); }
    }
    // Seeking back in a reader that has reached the end works too.
    first.seek(0, 0);
    ASSERT_TRUE(first.read(&r));
    EXPECT_EQ(r, records[0]);
  }
}

TEST_F(TFRecordTest, SeekBeyondTheEndIsADataError) {
  for (TFRecordCompression c : {kNone, kGzip}) {
    const std::string file = write_records("s", {"abc", "defg"}, c);
    TFRecordReader reader(file, c);
    try {
      reader.seek(16 + 3 + 16 + 4 + 1, 2);
      ADD_FAILURE() << "seek beyond the end accepted";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr(file));
      EXPECT_THAT(e.what(), HasSubstr("shorter"));
    }
  }
}

TEST_F(TFRecordTest, SeekToANonBoundaryIsCaughtByTheLengthCrc) {
  const std::string file = write_records("s", {"abcdef", "ghi"}, kNone);
  TFRecordReader reader(file, kNone);
  reader.seek(5, 1);
  std::string r;
  try {
    reader.read(&r);
    ADD_FAILURE() << "read at a non-boundary accepted";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("record 1 (byte offset 5)"));
    EXPECT_THAT(e.what(), HasSubstr("length CRC mismatch"));
  }
}

// The independent implementation (bench/golden_tfrecord.py: CRC-32C, framing and protobuf encoding
// written from their specifications) against keel's reader, parser, builder and writer.
class GoldenTFRecordTest : public TFRecordTest {
 protected:
  static std::string golden(const std::string& name) { return std::string(KEEL_TESTS_DIR) + "/golden/tfrecord/" + name; }
  static FeatureSpec spec() {
    return {{"image", FixedLenFeature{{}, FeatureType::kString}},
            {"label", FixedLenFeature{{1}, FeatureType::kInt64}},
            {"scores", VarLenFeature{FeatureType::kFloat32}},
            {"offsets", VarLenFeature{FeatureType::kInt64}}};
  }
  static std::string unhex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
  }
};

TEST_F(GoldenTFRecordTest, ReadsEveryValueOfThePythonWrittenFiles) {
  const auto& want = testing::load_golden("tfrecord/examples.json")["records"];
  ASSERT_EQ(want.size(), 4u);
  for (const auto& [file, c] : {std::pair{golden("examples.tfrecord"), kNone}, std::pair{golden("examples.tfrecord.gz"), kGzip}}) {
    SCOPED_TRACE(file);
    TFRecordReader reader(file, c);
    std::string record;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(reader.read(&record)) << "record " << i;
      const auto parsed = parse_single_example(record, spec());
      EXPECT_EQ(parsed.at("image").string_value(), unhex(want[i]["image_hex"].get<std::string>()));
      EXPECT_EQ(parsed.at("label").shape(), (Shape{1}));
      EXPECT_EQ(parsed.at("label").to_vector(), std::vector<float>{want[i]["label"].get<float>()});
      std::vector<float> scores, offsets;
      for (const auto& s : want[i]["scores"]) scores.push_back(static_cast<float>(s.get<double>()));
      for (const auto& o : want[i]["offsets"]) offsets.push_back(static_cast<float>(o.get<int64_t>()));
      EXPECT_EQ(parsed.at("scores").shape(), (Shape{static_cast<int64_t>(scores.size())}));
      EXPECT_EQ(parsed.at("scores").to_vector(), scores) << "record " << i;
      EXPECT_EQ(parsed.at("offsets").to_vector(), offsets) << "record " << i;
    }
    EXPECT_FALSE(reader.read(&record));
    EXPECT_EQ(reader.next_index(), 4);
  }
}

TEST_F(GoldenTFRecordTest, BuilderAndWriterReproduceTheUncompressedFileByteForByte) {
  const auto& want = testing::load_golden("tfrecord/examples.json")["records"];
  const std::string file = path("rebuilt.tfrecord");
  TFRecordWriter writer(file);
  for (const auto& r : want) {
    std::vector<float> scores;
    for (const auto& s : r["scores"]) scores.push_back(static_cast<float>(s.get<double>()));
    ExampleBuilder b;
    b.add_bytes("image", unhex(r["image_hex"].get<std::string>()))
        .add_int64("label", {r["label"].get<int64_t>()})
        .add_float("scores", scores)
        .add_int64("offsets", r["offsets"].get<std::vector<int64_t>>());
    writer.write(b.serialize());
  }
  writer.close();
  const std::string golden_bytes = read_text_file(golden("examples.tfrecord"));
  ASSERT_FALSE(golden_bytes.empty());
  EXPECT_EQ(read_text_file(file), golden_bytes);
}

// A file of 3 records and where each record starts.
struct SmallFile {
  Records records = {"first record", std::string("\x00\x01\x02", 3), "the third and last record"};
  std::vector<size_t> starts;
  std::string bytes;
  // The record a byte belongs to, and whether it lies in its 12-byte length header.
  std::pair<int, bool> locate(size_t pos) const {
    int rec = 0;
    while (rec + 1 < static_cast<int>(starts.size()) && starts[static_cast<size_t>(rec) + 1] <= pos) ++rec;
    return {rec, pos - starts[static_cast<size_t>(rec)] < 12};
  }
};

TEST_F(TFRecordTest, EveryByteFlipIsCaught) {
  SmallFile f;
  f.bytes = read_text_file(write_records("small", f.records, kNone));
  for (size_t i = 0, pos = 0; i < f.records.size(); pos += 16 + f.records[i].size(), ++i) f.starts.push_back(pos);
  for (size_t pos = 0; pos < f.bytes.size(); ++pos) {
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string bad = f.bytes;
      bad[pos] = static_cast<char>(bad[pos] ^ mask);
      const std::string file = write_bytes("flipped", bad);
      const auto [rec, in_header] = f.locate(pos);
      SCOPED_TRACE("byte " + std::to_string(pos) + " mask " + std::to_string(mask) + " record " + std::to_string(rec));

      const std::string message = read_error(file, kNone);
      EXPECT_THAT(message, HasSubstr(file + " record " + std::to_string(rec) + " (byte offset " +
                                     std::to_string(f.starts[static_cast<size_t>(rec)]) + ")"));
      EXPECT_THAT(message, HasSubstr(in_header ? "length CRC mismatch" : "data CRC mismatch"));

      // Skip mode: a bad data CRC skips that record only; a bad length header ends the file there.
      TFRecordReader reader(file, kNone, /*skip_corrupt=*/true);
      Records got;
      std::string r;
      while (reader.read(&r)) got.push_back(r);
      Records want;
      for (int i = 0; i < static_cast<int>(f.records.size()); ++i) {
        if (i == rec) {
          if (in_header) break;
          continue;
        }
        want.push_back(f.records[static_cast<size_t>(i)]);
      }
      EXPECT_EQ(got, want);
      EXPECT_EQ(reader.skipped(), 1);
      EXPECT_THAT(reader.last_skip_message(), HasSubstr(file + " record " + std::to_string(rec)));
      EXPECT_EQ(reader.next_index(), in_header ? rec : 3);
    }
  }
}

TEST_F(TFRecordTest, ReadingGoesOnAfterADataCrcErrorWhenAsked) {
  SmallFile f;
  std::string bytes = read_text_file(write_records("small", f.records, kNone));
  bytes[12] ^= 0x01;  // first data byte of record 0
  const std::string file = write_bytes("bad", bytes);
  TFRecordReader reader(file);
  std::string r;
  EXPECT_THROW(reader.read(&r), DataError);
  EXPECT_EQ(reader.next_index(), 1);
  ASSERT_TRUE(reader.read(&r));
  EXPECT_EQ(r, f.records[1]);
}

TEST_F(TFRecordTest, EveryGzipByteFlipIsCaught) {
  SmallFile f;
  const std::string bytes = read_text_file(write_records("small.gz", f.records, kGzip));
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    // The gzip header's MTIME, XFL and OS bytes (4..9) are informational; gzip(1) ignores them too.
    if (pos >= 4 && pos <= 9) continue;
    std::string bad = bytes;
    bad[pos] = static_cast<char>(bad[pos] ^ 0xff);
    SCOPED_TRACE("byte " + std::to_string(pos));
    const std::string message = read_error(write_bytes("flipped.gz", bad), kGzip);
    EXPECT_THAT(message, HasSubstr(" record "));
  }
}

TEST_F(TFRecordTest, TruncationAtEveryLengthIsACleanError) {
  SmallFile f;
  for (TFRecordCompression c : {kNone, kGzip}) {
    const std::string bytes = read_text_file(write_records("small", f.records, c));
    std::vector<size_t> boundaries = {0};
    for (const auto& r : f.records) boundaries.push_back(boundaries.back() + 16 + r.size());
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      SCOPED_TRACE(std::string(tfrecord_compression_name(c)) + " cut at " + std::to_string(cut));
      const std::string file = write_bytes("cut", bytes.substr(0, cut));
      size_t complete = 0;  // records wholly before the cut
      while (complete + 1 < boundaries.size() && boundaries[complete + 1] <= cut) ++complete;
      const bool at_boundary = c == kNone ? boundaries[complete] == cut : cut == 0;
      if (at_boundary) {
        // Indistinguishable from a shorter file.
        EXPECT_EQ(read_all(file, c), Records(f.records.begin(), f.records.begin() + static_cast<long>(complete)));
        continue;
      }
      const std::string message = read_error(file, c);
      if (c == kNone) {
        EXPECT_THAT(message, HasSubstr(" record " + std::to_string(complete) + " "));
        EXPECT_THAT(message, HasSubstr("truncated"));
      } else {
        EXPECT_THAT(message, HasSubstr("gzip"));
      }
      TFRecordReader skipping(file, c, /*skip_corrupt=*/true);
      std::string r;
      int64_t n = 0;
      while (skipping.read(&r)) ++n;
      EXPECT_EQ(skipping.skipped(), 1);
      if (c == kNone) { EXPECT_EQ(n, static_cast<int64_t>(complete)); }
    }
  }
}

std::string header_claiming(uint64_t length) {
  std::string h(8, '\0');
  for (int i = 0; i < 8; ++i) h[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));
  const uint32_t crc = masked_crc32c(h);
  for (int i = 0; i < 4; ++i) h.push_back(static_cast<char>(crc >> (8 * i)));
  return h;
}

TEST_F(TFRecordTest, AbsurdLengthsAreRejectedBeforeAllocating) {
  // Valid length CRCs, so only the lengths themselves give them away.
  const std::string plain = write_bytes("huge", header_claiming(uint64_t{1} << 40) + "abcd");
  EXPECT_THAT(read_error(plain, kNone), HasSubstr("has only 4 bytes left"));
  // Lengths near 2^64, where length + CRC bytes would wrap around.
  for (uint64_t near_max : {~uint64_t{0}, ~uint64_t{0} - 1, ~uint64_t{0} - 3}) {
    const std::string wrap = write_bytes("wrap", header_claiming(near_max) + "abcd");
    EXPECT_THAT(read_error(wrap, kNone), HasSubstr("has only 4 bytes left"));
  }

  const std::string gz = write_bytes("huge.gz", gzip(header_claiming(uint64_t{1} << 40) + "abcd"));
  EXPECT_THAT(read_error(gz, kGzip), HasSubstr("over the 2 GiB limit"));

  // 1 GiB claimed, 3 bytes there: the reader must find out without holding the gigabyte.
  const long peak_before_kib = peak_rss_kib();
  const std::string short_gz = write_bytes("short.gz", gzip(header_claiming(uint64_t{1} << 30) + "abc"));
  EXPECT_THAT(read_error(short_gz, kGzip), HasSubstr("the stream ends 3 bytes into its 1073741824 data bytes"));
  EXPECT_LT(peak_rss_kib() - peak_before_kib, 64 * 1024);
}

TEST_F(TFRecordTest, WrongCompressionGetsAHint) {
  const std::string gz = write_records("r.gz", {"abc"}, kGzip);
  EXPECT_THAT(read_error(gz, kNone), HasSubstr("read it with compression_type \"GZIP\""));
  const std::string plain = write_records("r", {"abc"}, kNone);
  EXPECT_THAT(read_error(plain, kGzip), HasSubstr("compression_type \"\""));
}

TEST_F(TFRecordTest, OpenErrorsNameTheFile) {
  try {
    TFRecordReader reader(path("missing.tfrecord"));
    ADD_FAILURE() << "opened a missing file";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path("missing.tfrecord")));
  }
  EXPECT_THROW(TFRecordReader reader(dir_.string()), DataError);
  try {
    TFRecordWriter writer(path("no/such/dir/out.tfrecord"));
    ADD_FAILURE() << "created a file in a missing directory";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path("no/such/dir/out.tfrecord")));
  }
}

TEST(TFRecordWriterTest, AFullDiskIsADataErrorNamingTheFile) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  for (TFRecordCompression c : {kNone, kGzip}) {
    TFRecordWriter writer("/dev/full", c);
    try {
      writer.write("small enough to sit in the buffer");
      writer.close();
      ADD_FAILURE() << "writing to /dev/full succeeded";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr("/dev/full"));
      EXPECT_THAT(e.what(), HasSubstr("No space left"));
    }
    EXPECT_THROW(writer.write("more"), std::logic_error);
  }
  // The destructor reports instead of throwing.
  EXPECT_NO_THROW({
    TFRecordWriter writer("/dev/full");
    writer.write("x");
  });
}

}  // namespace
}  // namespace keel
