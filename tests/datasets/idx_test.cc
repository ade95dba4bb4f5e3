#include "datasets/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/data_error.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using Bytes = std::vector<uint8_t>;

Bytes make_idx(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t type = 0x08) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(static_cast<uint8_t>(d >> 24));
    out.push_back(static_cast<uint8_t>(d >> 16));
    out.push_back(static_cast<uint8_t>(d >> 8));
    out.push_back(static_cast<uint8_t>(d));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes idx_gzip(const Bytes& raw) {
  z_stream s{};
  // 16 + MAX_WBITS: write a gzip wrapper, as gzip(1) does.
  EXPECT_EQ(deflateInit2(&s, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&s, raw.size()) + 64);
  s.next_in = const_cast<Bytef*>(raw.data());
  s.avail_in = static_cast<uInt>(raw.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

Bytes iota_bytes(size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  return b;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("keel_idx_test_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  // The DataError message read_idx throws for `bytes`; fails the test if it does not throw one.
  std::string error_for(const Bytes& bytes, const std::string& name = "f-idx1-ubyte.gz") {
    const std::string path = write(name, bytes);
    try {
      read_idx(path);
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr(path));
      return e.what();
    }
    ADD_FAILURE() << "read_idx accepted " << name;
    return "";
  }

  std::filesystem::path dir_;
};

TEST_F(IdxTest, RoundTripGzip) {
  const Bytes data = iota_bytes(3 * 2 * 4);
  const IdxArray a = read_idx(write("a.gz", idx_gzip(make_idx({3, 2, 4}, data))));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{3, 2, 4}));
  EXPECT_EQ(a.data, data);
}

TEST_F(IdxTest, RoundTripPlainAndLarge) {
  // Larger than the reader's 64 KiB input chunk and 1 MiB first data chunk.
  const Bytes data = iota_bytes(3000 * 784);
  const IdxArray plain = read_idx(write("plain", make_idx({3000, 28, 28}, data)));
  EXPECT_EQ(plain.dims, (std::vector<int64_t>{3000, 28, 28}));
  EXPECT_EQ(plain.data, data);
  const IdxArray gz = read_idx(write("gz", idx_gzip(make_idx({3000, 28, 28}, data))));
  EXPECT_EQ(gz.data, data);
}

TEST_F(IdxTest, EmptyArray) {
  const IdxArray a = read_idx(write("e.gz", idx_gzip(make_idx({0, 28}, {}))));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{0, 28}));
  EXPECT_TRUE(a.data.empty());
}

TEST_F(IdxTest, ConcatenatedGzipMembers) {
  const Bytes raw = make_idx({10}, iota_bytes(10));
  Bytes gz = idx_gzip(Bytes(raw.begin(), raw.begin() + 7));
  const Bytes second = idx_gzip(Bytes(raw.begin() + 7, raw.end()));
  gz.insert(gz.end(), second.begin(), second.end());
  EXPECT_EQ(read_idx(write("two.gz", gz)).data, iota_bytes(10));
}

TEST_F(IdxTest, MissingFile) {
  const std::string path = (dir_ / "nope-idx3-ubyte.gz").string();
  try {
    read_idx(path);
    FAIL() << "no error for a missing file";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("not found"));
  }
}

TEST_F(IdxTest, DirectoryIsNotAFile) {
  try {
    read_idx(dir_.string());
    FAIL() << "no error for a directory";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is a directory"));
  }
}

TEST_F(IdxTest, TruncatedGzip) {
  const Bytes gz = idx_gzip(make_idx({100, 10}, iota_bytes(1000)));
  EXPECT_THAT(error_for(Bytes(gz.begin(), gz.begin() + gz.size() / 2)), HasSubstr("truncated gzip"));
  // Only the CRC/length trailer missing: every data byte decompresses, the stream is still incomplete.
  EXPECT_THAT(error_for(Bytes(gz.begin(), gz.end() - 8)), HasSubstr("truncated gzip"));
}

TEST_F(IdxTest, CorruptGzip) {
  Bytes gz = idx_gzip(make_idx({100, 10}, iota_bytes(1000)));
  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0xff;  // inside the CRC-32 of the trailer
  EXPECT_THAT(error_for(bad_crc), HasSubstr("corrupt gzip data"));
  Bytes bad_header = gz;
  bad_header[2] = 0x07;  // compression method must be 8 (deflate)
  EXPECT_THAT(error_for(bad_header), HasSubstr("corrupt gzip data"));
}

TEST_F(IdxTest, TrailingGarbageAfterGzip) {
  Bytes gz = idx_gzip(make_idx({4}, iota_bytes(4)));
  gz.push_back('x');
  EXPECT_THAT(error_for(gz), HasSubstr("trailing bytes after the end of the gzip stream"));
}

TEST_F(IdxTest, TrailingBytesAfterData) {
  Bytes raw = make_idx({4}, iota_bytes(6));
  EXPECT_THAT(error_for(raw, "plain"), HasSubstr("has 2 trailing bytes"));
  EXPECT_THAT(error_for(idx_gzip(raw)), HasSubstr("has 2 trailing bytes"));
}

TEST_F(IdxTest, BadMagic) {
  EXPECT_THAT(error_for(Bytes{0x01, 0x02, 0x08, 0x01, 0, 0, 0, 0}, "plain"),
              HasSubstr("bad magic bytes 01 02 08 01"));
  EXPECT_THAT(error_for(idx_gzip(Bytes{'h', 'e', 'l', 'l', 'o'})), HasSubstr("bad magic"));
}

TEST_F(IdxTest, UnsupportedType) {
  EXPECT_THAT(error_for(idx_gzip(make_idx({2}, Bytes(8), 0x0d))), HasSubstr("element type 0x0d"));
}

TEST_F(IdxTest, TooShortForHeader) {
  EXPECT_THAT(error_for(Bytes{}, "empty"), HasSubstr("too short"));
  EXPECT_THAT(error_for(idx_gzip(Bytes{0, 0, 8})), HasSubstr("too short"));
  EXPECT_THAT(error_for(idx_gzip(Bytes{0, 0, 8, 3, 0, 0, 0, 5})), HasSubstr("header is truncated"));
  EXPECT_THAT(error_for(idx_gzip(Bytes{0, 0, 8, 0})), HasSubstr("0 dimensions"));
}

TEST_F(IdxTest, ShortData) {
  const std::string msg = error_for(idx_gzip(make_idx({10, 3}, iota_bytes(25))));
  EXPECT_THAT(msg, HasSubstr("need 30 data bytes but the file holds only 25"));
  EXPECT_THAT(msg, HasSubstr("(10, 3)"));
}

TEST_F(IdxTest, HugeDimsNeitherOverflowNorAllocateTheClaim) {
  EXPECT_THAT(error_for(idx_gzip(make_idx({0xffffffff, 0xffffffff, 0xffffffff}, {}))),
              HasSubstr("more than 2^62"));
  // 2^60 bytes claimed, 3 present: reported as short data without allocating the claim.
  EXPECT_THAT(error_for(idx_gzip(make_idx({1u << 30, 1u << 30}, {1, 2, 3}))),
              HasSubstr("need 1152921504606846976 data bytes but the file holds only 3"));
  // A zero dim makes the array empty even when the other dims overflow.
  const IdxArray a = read_idx(write("zero.gz", idx_gzip(make_idx({0, 0xffffffff, 0xffffffff, 0xffffffff}, {}))));
  EXPECT_TRUE(a.data.empty());
}

// A small in-process fuzz: random byte flips, truncations and insertions of valid files must give
// either an array or a DataError — never a crash, hang or another exception type.
TEST_F(IdxTest, MutatedInputsOnlyEverThrowDataError) {
  const Bytes raw = make_idx({20, 5, 5}, iota_bytes(500));
  const Bytes gz = idx_gzip(raw);
  uint64_t state = 12345;
  auto rnd = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  int accepted = 0;
  int rejected = 0;
  const std::string path = (dir_ / "fuzz").string();
  for (int round = 0; round < 3000; ++round) {
    Bytes b = (round % 2) ? gz : raw;
    const int edits = 1 + static_cast<int>(rnd(4));
    for (int k = 0; k < edits; ++k) {
      switch (rnd(3)) {
        case 0:
          b[rnd(b.size())] ^= static_cast<uint8_t>(1 + rnd(255));
          break;
        case 1:
          b.resize(rnd(b.size() + 1));
          break;
        default:
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(rnd(b.size() + 1)),
                   static_cast<uint8_t>(rnd(256)));
      }
      if (b.empty()) break;
    }
    write("fuzz", b);
    try {
      const IdxArray a = read_idx(path);
      int64_t n = 1;
      for (int64_t d : a.dims) n *= d;
      ASSERT_EQ(static_cast<int64_t>(a.data.size()), n);
      ++accepted;
    } catch (const DataError& e) {
      ASSERT_THAT(e.what(), HasSubstr(path));
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(accepted, 0);  // data-byte flips of plain files stay valid
}

}  // namespace
}  // namespace keel
