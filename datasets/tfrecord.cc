#include "datasets/tfrecord.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <vector>

#include <boost/crc.hpp>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "framework/data/data_error.h"

namespace keel {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 18;
constexpr size_t kHeaderBytes = 12;  // uint64 length + uint32 masked CRC of it
constexpr size_t kFooterBytes = 4;   // uint32 masked CRC of the data
// A gzip record's buffer grows by at most this much (or its current size) before the bytes to fill
// it have arrived, so a stream that ends early never costs the allocation its length claims.
constexpr size_t kGrowBytes = size_t{1} << 20;

constexpr char kCorruptAdvice[] = "re-create the file, or skip damaged records with --skip-corrupt";

uint32_t crc32c_portable(const char* data, size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const char* data, size_t n) {
  uint64_t crc = 0xFFFFFFFFu;
  for (; n >= 8; n -= 8, data += 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    crc = _mm_crc32_u64(crc, word);
  }
  auto crc32 = static_cast<uint32_t>(crc);
  for (; n > 0; --n, ++data) crc32 = _mm_crc32_u8(crc32, static_cast<uint8_t>(*data));
  return ~crc32;
}

bool have_sse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

uint64_t decode_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint32_t decode_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
void encode_u64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void encode_u32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// A problem in the byte stream itself (I/O error, corrupt gzip), thrown by the Source; the reader
// adds the record position. The record checks below return one for a record that ends the file.
struct StreamError {
  std::string what;
  std::string advice;  // empty: the usual advice for a corrupt file
};

// Checks a record header (length and its masked CRC) before anything is allocated for the length.
// plain_bytes_left: what is left of an uncompressed file after the header (unused for GZIP).
std::optional<StreamError> check_header(const char* header, bool gzip, bool at_file_start, uint64_t plain_bytes_left) {
  const uint64_t length = decode_u64(header);
  const uint32_t stored_length_crc = decode_u32(header + 8);
  const uint32_t length_crc = masked_crc32c(std::string_view(header, 8));
  if (length_crc != stored_length_crc) {
    const bool looks_gzip = !gzip && at_file_start && static_cast<uint8_t>(header[0]) == 0x1f &&
                            static_cast<uint8_t>(header[1]) == 0x8b;
    return StreamError{"length CRC mismatch (stored " + hex32(stored_length_crc) + ", computed " + hex32(length_crc) +
                           "): the record's length is corrupt",
                       looks_gzip ? "the file starts like a gzip file: read it with compression_type \"GZIP\"" : ""};
  }
  // Uncompressed, the file's size bounds the length; a gzip stream's size is unknown until read.
  if (gzip && length > TFRecordReader::kMaxRecordBytes) {
    return StreamError{"record length " + std::to_string(length) + " bytes is over the 2 GiB limit", ""};
  }
  if (!gzip && (length > plain_bytes_left || plain_bytes_left - length < kFooterBytes)) {
    return StreamError{"truncated record: its header announces " + std::to_string(length) +
                           " data bytes + 4 CRC bytes but the file has only " + std::to_string(plain_bytes_left) +
                           " bytes left",
                       ""};
  }
  return std::nullopt;
}

// Reads a record's `length` data bytes into *record with read(dst, n) (TFRecordReader::read_fully).
template <typename Read>
std::optional<StreamError> read_data(Read read, bool gzip, uint64_t length, std::string* record) {
  if (!gzip) {
    record->resize(length);
    if (read(record->data(), length) < length) {
      return StreamError{"truncated record: the file ends inside its data", ""};
    }
    return std::nullopt;
  }
  // Grow with the bytes that actually arrive: a truncated stream never costs what `length` claims.
  record->clear();
  size_t have = 0;
  while (have < length) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length - have, std::max(have, kGrowBytes)));
    record->resize(have + chunk);
    const size_t r = read(record->data() + have, chunk);
    have += r;
    if (r < chunk) {
      record->resize(have);
      return StreamError{"truncated record: the stream ends " + std::to_string(have) + " bytes into its " +
                             std::to_string(length) + " data bytes",
                         ""};
    }
  }
  return std::nullopt;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
#if defined(__x86_64__)
  if (have_sse42()) return crc32c_sse42(data.data(), data.size());
#endif
  return crc32c_portable(data.data(), data.size());
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TFRecordCompression parse_tfrecord_compression(std::string_view compression_type) {
  if (compression_type.empty() || compression_type == "NONE") return TFRecordCompression::kNone;
  if (compression_type == "GZIP") return TFRecordCompression::kGzip;
  throw std::invalid_argument("unknown TFRecord compression_type '" + std::string(compression_type) +
                              "'; allowed: \"\" or \"NONE\" (uncompressed), \"GZIP\"");
}

const char* tfrecord_compression_name(TFRecordCompression compression) {
  return compression == TFRecordCompression::kGzip ? "GZIP" : "";
}

// ---------------------------------------------------------------------------------------------------
// Writer

struct TFRecordWriter::Deflater {
  z_stream strm{};
  std::vector<unsigned char> out = std::vector<unsigned char>(kBufferBytes);
  bool ready = false;
  ~Deflater() {
    if (ready) deflateEnd(&strm);
  }
};

TFRecordWriter::TFRecordWriter(std::string path, TFRecordCompression compression)
    : path_(std::move(path)), compression_(compression) {
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    throw DataError(path_ + ": cannot create the TFRecord file: " + std::strerror(errno) +
                    "; check that the directory exists and is writable");
  }
  std::setvbuf(file_, nullptr, _IOFBF, kBufferBytes);
  if (compression_ == TFRecordCompression::kGzip) {
    deflater_ = std::make_unique<Deflater>();
    // 16 + MAX_WBITS: a gzip wrapper, as TF's ZlibCompressionOptions::GZIP().
    if (deflateInit2(&deflater_->strm, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK) {
      std::fclose(file_);
      file_ = nullptr;
      throw DataError(path_ + ": zlib could not start compressing (out of memory?)");
    }
    deflater_->ready = true;
  }
}

TFRecordWriter::~TFRecordWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    std::cerr << "warning: " << e.what() << "\n";
  }
}

void TFRecordWriter::fail(const std::string& what) {
  const int err = errno;
  failed_ = true;
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
  throw DataError(path_ + ": " + what + " after " + std::to_string(records_) + " records: " +
                  std::strerror(err) + "; the file is incomplete (free disk space or write elsewhere, then write it again)");
}

void TFRecordWriter::write_file(const char* data, size_t n) {
  if (n > 0 && std::fwrite(data, 1, n, file_) != n) fail("write failed");
}

void TFRecordWriter::write_out(const char* data, size_t n) {
  if (!deflater_) {
    write_file(data, n);
    return;
  }
  z_stream& s = deflater_->strm;
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, UINT_MAX);
    s.avail_in = static_cast<uInt>(chunk);
    do {
      s.next_out = deflater_->out.data();
      s.avail_out = static_cast<uInt>(deflater_->out.size());
      deflate(&s, Z_NO_FLUSH);  // cannot fail with a valid stream and room to write
      write_file(reinterpret_cast<const char*>(deflater_->out.data()), deflater_->out.size() - s.avail_out);
    } while (s.avail_in > 0 || s.avail_out == 0);
    n -= chunk;
  }
}

void TFRecordWriter::write(std::string_view record) {
  if (file_ == nullptr) {
    throw std::logic_error("TFRecordWriter::write on " + path_ + " after close()" +
                           (failed_ ? " (an earlier write failed)" : ""));
  }
  char header[kHeaderBytes];
  encode_u64(record.size(), header);
  encode_u32(masked_crc32c(std::string_view(header, 8)), header + 8);
  char footer[kFooterBytes];
  encode_u32(masked_crc32c(record), footer);
  write_out(header, sizeof header);
  write_out(record.data(), record.size());
  write_out(footer, sizeof footer);
  ++records_;
}

void TFRecordWriter::flush() {
  if (file_ == nullptr) throw std::logic_error("TFRecordWriter::flush on " + path_ + " after close()");
  if (deflater_) {
    z_stream& s = deflater_->strm;
    s.avail_in = 0;
    do {
      s.next_out = deflater_->out.data();
      s.avail_out = static_cast<uInt>(deflater_->out.size());
      deflate(&s, Z_SYNC_FLUSH);
      write_file(reinterpret_cast<const char*>(deflater_->out.data()), deflater_->out.size() - s.avail_out);
    } while (s.avail_out == 0);
  }
  if (std::fflush(file_) != 0) fail("flush failed");
}

void TFRecordWriter::close() {
  if (file_ == nullptr) return;
  if (deflater_) {
    z_stream& s = deflater_->strm;
    s.avail_in = 0;
    int rc;
    do {
      s.next_out = deflater_->out.data();
      s.avail_out = static_cast<uInt>(deflater_->out.size());
      rc = deflate(&s, Z_FINISH);
      write_file(reinterpret_cast<const char*>(deflater_->out.data()), deflater_->out.size() - s.avail_out);
    } while (rc == Z_OK);
    deflater_.reset();
  }
  if (std::fflush(file_) != 0 || std::ferror(file_)) fail("write failed");
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) {
    failed_ = true;
    throw DataError(path_ + ": closing the TFRecord file failed after " + std::to_string(records_) +
                    " records: " + std::strerror(errno) + "; the file may be incomplete, write it again");
  }
}

// ---------------------------------------------------------------------------------------------------
// Reader

// The record stream's bytes, inflated for GZIP. read() returns fewer bytes than asked only at the
// end of the stream; problems throw StreamError.
class TFRecordReader::Source {
 public:
  Source(const std::string& path, bool gzip) : gzip_(gzip), buf_(kBufferBytes) {
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      const int err = errno;
      throw DataError(path + ": cannot open the TFRecord file: " + std::strerror(err) +
                      (err == ENOENT ? "; check the path" : "; check the file's permissions"));
    }
    struct stat st {};
    if (fstat(fileno(file_), &st) != 0) {
      const int err = errno;
      std::fclose(file_);
      throw DataError(path + ": cannot stat the TFRecord file: " + std::strerror(err));
    }
    if (S_ISDIR(st.st_mode)) {
      std::fclose(file_);
      throw DataError(path + ": is a directory, not a TFRecord file; pass the path of a file");
    }
    file_bytes_ = static_cast<uint64_t>(st.st_size);
    if (gzip_) {
      if (inflateInit2(&strm_, 16 + MAX_WBITS) != Z_OK) {
        std::fclose(file_);
        throw DataError(path + ": zlib could not start decompressing (out of memory?)");
      }
    }
  }
  ~Source() {
    if (gzip_) inflateEnd(&strm_);
    std::fclose(file_);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  size_t read(char* dst, size_t n) { return gzip_ ? read_gzip(dst, n) : read_plain(dst, n); }

  // Bytes left in an uncompressed file (the bound a record's length must respect).
  uint64_t plain_bytes_left() const { return file_bytes_ - position_; }

  // Positions the stream at uncompressed byte `offset`; false if the stream is shorter than that.
  bool seek(uint64_t offset) {
    if (!gzip_) {
      if (offset > file_bytes_) return false;
      if (fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0) io_error("seek");
      position_ = offset;
      pos_ = len_ = 0;
      return true;
    }
    if (fseeko(file_, 0, SEEK_SET) != 0) io_error("seek");
    std::clearerr(file_);
    pos_ = len_ = 0;
    strm_.avail_in = 0;
    in_member_ = false;
    std::vector<char> scratch(kBufferBytes);
    while (offset > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(offset, scratch.size()));
      const size_t got = read_gzip(scratch.data(), want);
      offset -= got;
      if (got < want) return false;
    }
    return true;
  }

 private:
  [[noreturn]] void io_error(const char* what) {
    throw StreamError{std::string(what) + " error: " + std::strerror(errno), ""};
  }

  size_t fill() {
    pos_ = 0;
    len_ = std::fread(buf_.data(), 1, buf_.size(), file_);
    if (len_ == 0 && std::ferror(file_)) io_error("read");
    return len_;
  }

  size_t read_plain(char* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      if (pos_ == len_) {
        // Large reads bypass the buffer.
        if (n - got >= buf_.size()) {
          const size_t r = std::fread(dst + got, 1, n - got, file_);
          if (r < n - got && std::ferror(file_)) io_error("read");
          got += r;
          position_ += r;
          break;
        }
        if (fill() == 0) break;
      }
      const size_t take = std::min(n - got, len_ - pos_);
      std::memcpy(dst + got, buf_.data() + pos_, take);
      pos_ += take;
      got += take;
      position_ += take;
    }
    return got;
  }

  size_t read_gzip(char* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      if (strm_.avail_in == 0) {
        const size_t r = fill();
        strm_.next_in = reinterpret_cast<Bytef*>(buf_.data());
        strm_.avail_in = static_cast<uInt>(r);
        if (r == 0) {
          if (!in_member_) break;  // the end of the last gzip member: a clean end
          throw StreamError{"the gzip stream ends early (the file is truncated)", ""};
        }
      }
      if (!in_member_) {
        // A new gzip member: the first of the file or one concatenated after the last.
        inflateReset(&strm_);
        in_member_ = true;
      }
      const size_t want = std::min<size_t>(n - got, UINT_MAX);
      strm_.next_out = reinterpret_cast<Bytef*>(dst + got);
      strm_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&strm_, Z_NO_FLUSH);
      got += want - strm_.avail_out;
      if (rc == Z_STREAM_END) {
        in_member_ = false;
      } else if (rc == Z_BUF_ERROR && strm_.avail_in == 0) {
        continue;  // needs more input
      } else if (rc != Z_OK) {
        const bool at_start = rc == Z_DATA_ERROR && strm_.total_in < 4 && !any_member_done_;
        throw StreamError{std::string("corrupt gzip stream (zlib: ") + (strm_.msg ? strm_.msg : "error " + std::to_string(rc)) + ")",
                          at_start ? "if the file is not gzip-compressed, read it with compression_type \"\"" : ""};
      }
      if (!in_member_) any_member_done_ = true;
    }
    return got;
  }

  bool gzip_;
  std::FILE* file_ = nullptr;
  uint64_t file_bytes_ = 0;
  uint64_t position_ = 0;  // plain: file offset of the next byte read() returns
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;  // plain: unread bytes are buf_[pos_, len_)
  z_stream strm_{};
  bool in_member_ = false;
  bool any_member_done_ = false;
};

TFRecordReader::TFRecordReader(std::string path, TFRecordCompression compression, bool skip_corrupt)
    : path_(std::move(path)),
      compression_(compression),
      skip_corrupt_(skip_corrupt),
      source_(std::make_unique<Source>(path_, compression == TFRecordCompression::kGzip)) {}

TFRecordReader::~TFRecordReader() = default;

std::string TFRecordReader::where() const {
  return path_ + " record " + std::to_string(index_) + " (byte offset " + std::to_string(offset_) +
         (compression_ == TFRecordCompression::kGzip ? " in the uncompressed stream" : "") + ")";
}

std::string TFRecordReader::at_record(const std::string& what, const std::string& advice) const {
  return where() + ": " + what + "; " + (advice.empty() ? std::string(kCorruptAdvice) : advice);
}

void TFRecordReader::corrupt(const std::string& what, bool ends_file, const std::string& advice) {
  fail_or_skip(at_record(what, advice), ends_file);
}

void TFRecordReader::fail_or_skip(std::string message, bool ends_file) {
  if (ends_file) done_ = true;
  if (!skip_corrupt_) throw DataError(message);
  ++skipped_;
  last_skip_message_ = std::move(message);
}

size_t TFRecordReader::read_fully(char* dst, size_t n) { return source_->read(dst, n); }

bool TFRecordReader::read(std::string* record) {
  while (!done_) {
    try {
      if (read_record(record)) return true;
    } catch (const StreamError& e) {
      corrupt(e.what, /*ends_file=*/true, e.advice);
    }
  }
  return false;
}

// true: *record holds the next record. false: the file ended, or (skip mode) a record was skipped —
// read() tells them apart by done_.
bool TFRecordReader::read_record(std::string* record) {
  const bool gzip = compression_ == TFRecordCompression::kGzip;
  char header[kHeaderBytes];
  const size_t got = read_fully(header, kHeaderBytes);
  if (got == 0) {
    done_ = true;
    return false;
  }
  if (got < kHeaderBytes) {
    corrupt("truncated record header: the file ends " + std::to_string(got) + " bytes into the 12-byte header",
            true);
    return false;
  }
  std::optional<StreamError> problem =
      check_header(header, gzip, offset_ == 0, gzip ? 0 : source_->plain_bytes_left());
  const uint64_t length = decode_u64(header);
  if (!problem) {
    problem = read_data([this](char* dst, size_t n) { return read_fully(dst, n); }, gzip, length, record);
  }
  if (problem) {
    corrupt(problem->what, true, problem->advice);
    return false;
  }
  char footer[kFooterBytes];
  if (read_fully(footer, kFooterBytes) < kFooterBytes) {
    corrupt("truncated record: the file ends inside its data CRC", true);
    return false;
  }
  const uint32_t stored_crc = decode_u32(footer);
  const uint32_t data_crc = masked_crc32c(*record);
  if (stored_crc != data_crc) {
    // The length was sound, so the next record starts right after this one: reading can go on,
    // in skip mode now, and in throwing mode if the caller calls read() again.
    std::string message = at_record("data CRC mismatch (stored " + hex32(stored_crc) + ", computed " +
                                    hex32(data_crc) + "): the record's " + std::to_string(length) +
                                    " bytes are corrupt");
    index_ += 1;
    offset_ += kHeaderBytes + length + kFooterBytes;
    fail_or_skip(std::move(message), /*ends_file=*/false);
    return false;
  }
  index_ += 1;
  offset_ += kHeaderBytes + length + kFooterBytes;
  return true;
}

void TFRecordReader::seek(uint64_t offset, int64_t index) {
  bool ok;
  try {
    ok = source_->seek(offset);
  } catch (const StreamError& e) {
    throw DataError(path_ + ": cannot seek to byte offset " + std::to_string(offset) + " (record " +
                    std::to_string(index) + "): " + e.what + "; " + kCorruptAdvice);
  }
  if (!ok) {
    throw DataError(path_ + ": cannot resume at byte offset " + std::to_string(offset) + " (record " +
                    std::to_string(index) + "): the " + (compression_ == TFRecordCompression::kGzip ? "uncompressed stream" : "file") +
                    " is shorter; the file has changed since that position was saved");
  }
  offset_ = offset;
  index_ = index;
  done_ = false;
}

}  // namespace keel
