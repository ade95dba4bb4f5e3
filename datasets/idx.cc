#include "datasets/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "framework/core/host_allocator.h"
#include "framework/data/data_error.h"

namespace keel {
namespace {

constexpr size_t kInputChunkBytes = size_t{1} << 16;
constexpr size_t kFirstDataChunkBytes = size_t{1} << 20;
// At most this much is reserved before the data arrives; a larger array grows as it arrives.
constexpr uint64_t kMostReservedBytes = uint64_t{1} << 30;
// Counting trailing bytes for the error message stops here (a gzip bomb must not keep us busy).
constexpr size_t kTrailingCountLimit = size_t{1} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

// The bytes of a file, inflated when the file starts with the gzip magic. read() returns fewer bytes
// than asked only at the end of the data; a gzip stream that ends early or fails its checks throws.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path), in_(kInputChunkBytes) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && !ec) {
      fail(path, "file not found (it does not exist); check the path");
    }
    if (std::filesystem::is_directory(path, ec)) {
      fail(path, "is a directory, not an IDX file; pass the path of the file itself");
    }
    file_.reset(std::fopen(path.c_str(), "rb"));
    if (file_ == nullptr) {
      fail(path, std::string("cannot open: ") + std::strerror(errno) + "; check the file's permissions");
    }
    refill();
    gzip_ = in_len_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
      strm_.next_in = in_.data();
      strm_.avail_in = static_cast<uInt>(in_len_);
      // 16 + MAX_WBITS: gzip wrapper only, so the header and CRC-32 / length trailer are checked.
      if (inflateInit2(&strm_, 16 + MAX_WBITS) != Z_OK) {
        fail(path, "zlib could not start decompressing (out of memory?)");
      }
      strm_ready_ = true;
    }
  }
  ~ByteSource() {
    if (strm_ready_) inflateEnd(&strm_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  size_t read(uint8_t* dst, size_t n) { return gzip_ ? read_gzip(dst, n) : read_plain(dst, n); }

  // The most bytes read() can return from here on: the file's size, or 1032 times it for gzip
  // (deflate's largest ratio); 0 when its size is unknown (a pipe).
  uint64_t most_bytes() const {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path_, ec);
    if (ec) return 0;
    constexpr uint64_t kDeflateMaxRatio = 1032;
    return gzip_ ? (size > UINT64_MAX / kDeflateMaxRatio ? UINT64_MAX : size * kDeflateMaxRatio) : size;
  }

 private:
  // Reads the next chunk of the file into in_; returns its size (0 at end of file).
  size_t refill() {
    in_pos_ = 0;
    in_len_ = std::fread(in_.data(), 1, in_.size(), file_.get());
    if (in_len_ == 0 && std::ferror(file_.get())) {
      fail(path_, std::string("read error: ") + std::strerror(errno));
    }
    return in_len_;
  }

  size_t read_plain(uint8_t* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      if (in_pos_ == in_len_ && refill() == 0) break;
      const size_t take = std::min(n - done, in_len_ - in_pos_);
      std::memcpy(dst + done, in_.data() + in_pos_, take);
      in_pos_ += take;
      done += take;
    }
    return done;
  }

  size_t read_gzip(uint8_t* dst, size_t n) {
    size_t done = 0;
    while (done < n && !finished_) {
      if (strm_.avail_in == 0) {
        if (refill() == 0) {
          fail(path_,
               "truncated gzip stream: the file ends before the compressed data does; "
               "the file is incomplete — download or copy it again");
        }
        strm_.next_in = in_.data();
        strm_.avail_in = static_cast<uInt>(in_len_);
      }
      if (at_member_start_ && strm_.next_in[0] != 0x1f) {
        fail(path_,
             "trailing bytes after the end of the gzip stream; the file is corrupt or "
             "something was appended to it — download or copy it again");
      }
      at_member_start_ = false;
      // avail_out is a uInt; a huge request is served over several iterations.
      const size_t want = std::min<size_t>(n - done, std::numeric_limits<uInt>::max());
      strm_.next_out = dst + done;
      strm_.avail_out = static_cast<uInt>(want);
      const int ret = inflate(&strm_, Z_NO_FLUSH);
      done += want - strm_.avail_out;
      if (ret == Z_STREAM_END) {
        // Another gzip member may follow (concatenated .gz files are valid gzip).
        if (strm_.avail_in == 0 && refill() > 0) {
          strm_.next_in = in_.data();
          strm_.avail_in = static_cast<uInt>(in_len_);
        }
        if (strm_.avail_in == 0) {
          finished_ = true;
        } else {
          inflateReset(&strm_);
          at_member_start_ = true;
        }
      } else if (ret != Z_OK) {
        const char* msg = strm_.msg != nullptr ? strm_.msg : zError(ret);
        fail(path_, std::string("corrupt gzip data (zlib: ") + msg +
                        "); the file is damaged — download or copy it again");
      }
    }
    return done;
  }

  std::string path_;
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::vector<uint8_t> in_;
  size_t in_pos_ = 0;  // plain files: next unread byte of in_
  size_t in_len_ = 0;
  bool gzip_ = false;
  z_stream strm_{};
  bool strm_ready_ = false;
  bool at_member_start_ = false;
  bool finished_ = false;
};

// Reads the 4 magic bytes and returns the number of dimensions they declare.
size_t read_magic(ByteSource& src, const std::string& path) {
  uint8_t magic[4];
  const size_t got = src.read(magic, 4);
  if (got < 4) {
    fail(path, "is too short to be an IDX file (" + std::to_string(got) +
                   " bytes; the header alone needs 4); the file is damaged or not an IDX file");
  }
  if (magic[0] != 0 || magic[1] != 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    fail(path, std::string("is not an IDX file: bad magic bytes ") + buf +
                   " (an IDX file starts 00 00 <type> <ndims>)");
  }
  if (magic[2] != 0x08) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "0x%02x", magic[2]);
    fail(path, std::string("has IDX element type ") + buf +
                   "; only 0x08 (unsigned byte), the type of the MNIST-family files, is supported");
  }
  const size_t ndims = magic[3];
  if (ndims == 0) fail(path, "IDX header declares 0 dimensions; the file is damaged");
  return ndims;
}

// Reads `ndims` big-endian dimensions into *dims and returns the number of data bytes they describe.
uint64_t read_dims(ByteSource& src, const std::string& path, size_t ndims, std::vector<int64_t>* dims) {
  uint8_t dim_bytes[4 * 255];
  const size_t dim_got = src.read(dim_bytes, 4 * ndims);
  if (dim_got < 4 * ndims) {
    fail(path, "IDX header is truncated: it declares " + std::to_string(ndims) + " dimensions (" +
                   std::to_string(4 * ndims) + " bytes) but only " + std::to_string(dim_got) +
                   " bytes follow; the file is damaged");
  }
  dims->resize(ndims);
  // Kept below 2^62 so that sizes fit int64 and size_t with room to spare.
  constexpr uint64_t kMaxElements = uint64_t{1} << 62;
  uint64_t expected = 1;
  bool overflow = false;
  for (size_t i = 0; i < ndims; ++i) {
    const uint32_t d = (uint32_t{dim_bytes[4 * i]} << 24) | (uint32_t{dim_bytes[4 * i + 1]} << 16) |
                       (uint32_t{dim_bytes[4 * i + 2]} << 8) | uint32_t{dim_bytes[4 * i + 3]};
    (*dims)[i] = d;
    if (!overflow && d != 0 && expected > kMaxElements / d) overflow = true;
    if (!overflow) expected *= d;
  }
  if (overflow && std::find(dims->begin(), dims->end(), 0) == dims->end()) {
    fail(path, "IDX header dims " + dims_string(*dims) +
                   " describe more than 2^62 bytes; the header is corrupt");
  }
  if (overflow) expected = 0;  // a zero dim makes the array empty whatever the others say
  if (expected > std::numeric_limits<size_t>::max()) {
    fail(path, "IDX header dims " + dims_string(*dims) + " are too large for this machine");
  }
  return expected;
}

// Reads the `expected` data bytes into out->data.
void read_data(ByteSource& src, const std::string& path, uint64_t expected, IdxArray* out) {
  // Room for all of them at once (no copies as it grows, and its pages in 2 MiB huge pages where the
  // kernel has them), unless the file is too small to hold what the header claims: a lying header
  // must not make us allocate its claim, so the data then grows with the bytes that actually arrive.
  const uint64_t room = std::min({expected, std::max<uint64_t>(src.most_bytes(), kFirstDataChunkBytes), kMostReservedBytes});
  out->data.reserve(static_cast<size_t>(room));
  advise_huge_pages(out->data.data(), out->data.capacity());
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min<uint64_t>(expected, kFirstDataChunkBytes)));
  uint64_t have = 0;
  while (have < expected) {
    const size_t ask = static_cast<size_t>(std::min<uint64_t>(expected - have, chunk.size()));
    const size_t n = src.read(chunk.data(), ask);
    out->data.insert(out->data.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
    have += n;
    if (n < ask) break;
  }
  if (have < expected) {
    fail(path, "data is truncated: the header dims " + dims_string(out->dims) + " need " +
                   std::to_string(expected) + " data bytes but the file holds only " + std::to_string(have) +
                   "; the file is incomplete — download or copy it again");
  }
}

// Throws if anything follows the data.
void check_no_trailing_bytes(ByteSource& src, const std::string& path, uint64_t expected,
                             const std::vector<int64_t>& dims) {
  uint8_t extra[4096];
  size_t trailing = 0;
  while (trailing <= kTrailingCountLimit) {
    const size_t n = src.read(extra, sizeof(extra));
    trailing += n;
    if (n < sizeof(extra)) break;
  }
  if (trailing > 0) {
    fail(path, "has " + std::string(trailing > kTrailingCountLimit ? "more than " : "") +
                   std::to_string(std::min(trailing, kTrailingCountLimit)) + " trailing bytes after the " +
                   std::to_string(expected) + " data bytes its header dims " + dims_string(dims) +
                   " describe; the file is corrupt");
  }
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  ByteSource src(path);
  const size_t ndims = read_magic(src, path);
  IdxArray out;
  const uint64_t expected = read_dims(src, path, ndims, &out.dims);
  read_data(src, path, expected, &out);
  check_no_trailing_bytes(src, path, expected, out.dims);
  return out;
}

}  // namespace keel
