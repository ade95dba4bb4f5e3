// TFRecord files, byte-compatible with tf.io.TFRecordWriter / tf.data.TFRecordDataset.
//
// A file is a sequence of records, each
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
// optionally inside one gzip stream (compression_type "GZIP"; concatenated gzip members are read as
// one stream, like gzip(1) does).
//
// Positions: offset() is a byte offset in the *uncompressed* record stream and next_index() the index
// of the next record in the file, so (offset(), next_index()) taken between two reads is a position
// seek() can resume from exactly, whatever the compression.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace keel {

// CRC-32C (Castagnoli, as in iSCSI / RFC 3720): crc32c("123456789") == 0xE3069283. Uses SSE4.2's
// crc32 instruction when the CPU has it, a table otherwise.
uint32_t crc32c(std::string_view data);
// TensorFlow's masked form, stored in TFRecord files: rotate right by 15, add 0xa282ead8.
uint32_t masked_crc32c(std::string_view data);

enum class TFRecordCompression { kNone, kGzip };

// TF's compression_type strings: "" or "NONE" -> kNone, "GZIP" -> kGzip. Anything else (including
// "ZLIB", which keel does not read) throws std::invalid_argument naming the allowed values.
TFRecordCompression parse_tfrecord_compression(std::string_view compression_type);
// "" or "GZIP": the spelling TF uses.
const char* tfrecord_compression_name(TFRecordCompression compression);

// Writes records to a new file (an existing one is replaced). Not thread-safe.
// GZIP output is one gzip member at zlib's default level, as TF's ZlibCompressionOptions::GZIP().
class TFRecordWriter {
 public:
  // Throws DataError if the file cannot be created.
  explicit TFRecordWriter(std::string path, TFRecordCompression compression = TFRecordCompression::kNone);
  // Closes; an error there is printed to stderr, never thrown. Call close() to see errors.
  ~TFRecordWriter();
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  // Throws DataError naming the file on a write error (a full disk); std::logic_error after close().
  void write(std::string_view record);
  // Hands every record written so far to the operating system (GZIP: a zlib sync flush), so that a
  // reader sees whole records; throws DataError naming the file on a write error.
  void flush();
  // Flushes everything to the operating system and closes the file; throws DataError naming the file
  // if any byte could not be written. Idempotent.
  void close();

  const std::string& path() const { return path_; }
  int64_t records_written() const { return records_; }

 private:
  void write_out(const char* data, size_t n);  // to the file, through the compressor if any
  void write_file(const char* data, size_t n);
  [[noreturn]] void fail(const std::string& what);

  std::string path_;
  TFRecordCompression compression_;
  std::FILE* file_ = nullptr;
  struct Deflater;
  std::unique_ptr<Deflater> deflater_;
  int64_t records_ = 0;
  bool failed_ = false;
};

// Reads records with buffered I/O and checks both CRCs of every record.
//
// Errors. By default every problem throws DataError naming the file, the record index and the byte
// offset (in the uncompressed stream): a truncated length header or record, a length- or data-CRC
// mismatch, a corrupt gzip stream, a length that cannot be right (beyond the end of an uncompressed
// file; over kMaxRecordBytes in a GZIP file, whose buffer also grows only with the bytes that
// arrive). A length is checked before anything is allocated for it.
//
// skip_corrupt = true (keel's --skip-corrupt): a record whose *data* CRC fails is skipped — its
// length had a valid CRC, so the next record starts where it says — and reading goes on. Any other
// problem leaves no trustworthy way to find the next record, so it ends this file: read() returns
// false as at the end of the file. Either way skipped() counts one and last_skip_message() holds
// the message the error would have thrown, for the caller to log. A skipped record still uses its
// index: next_index() counts records passed, read or skipped, so indices always name positions in
// the file.
class TFRecordReader {
 public:
  static constexpr uint64_t kMaxRecordBytes = uint64_t{2} << 30;  // 2 GiB, for GZIP files

  // Throws DataError if the file cannot be opened.
  explicit TFRecordReader(std::string path, TFRecordCompression compression = TFRecordCompression::kNone,
                          bool skip_corrupt = false);
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // The next record into *record; false at a clean end of file (or, in skip mode, when a corruption
  // ended the file). After it has returned false it keeps returning false (until seek()). After a
  // DataError it may be called again: it goes on with the next record after a data-CRC mismatch and
  // returns false after any other error.
  bool read(std::string* record);

  // Index of the next record in the file (records read or skipped so far, when reading from the start).
  int64_t next_index() const { return index_; }
  // Byte offset of the next record in the uncompressed stream.
  uint64_t offset() const { return offset_; }
  // Resumes at a position taken from offset()/next_index() of a reader of the same file. Uncompressed:
  // a file seek. GZIP: reopens the file and decompresses and discards `offset` bytes, so it costs as
  // much as reading the file up to there. Throws DataError if the file is shorter than `offset`.
  // A position that is not a record boundary is caught by the next read's length CRC.
  void seek(uint64_t offset, int64_t index);

  int64_t skipped() const { return skipped_; }
  const std::string& last_skip_message() const { return last_skip_message_; }
  const std::string& path() const { return path_; }

 private:
  class Source;
  // Reads exactly n bytes unless the stream ends; returns the count read.
  size_t read_fully(char* dst, size_t n);
  bool read_record(std::string* record);
  // A problem at the current record: throws DataError, or in skip mode counts the skip. `ends_file`:
  // no way to find the next record, so this file is done.
  // An empty `advice` stands for the usual one (re-create the file or skip corrupt records).
  void corrupt(const std::string& what, bool ends_file, const std::string& advice = "");
  void fail_or_skip(std::string message, bool ends_file);
  // "FILE record N (byte offset O): what; advice"
  std::string at_record(const std::string& what, const std::string& advice = "") const;
  std::string where() const;

  std::string path_;
  TFRecordCompression compression_;
  bool skip_corrupt_;
  std::unique_ptr<Source> source_;
  int64_t index_ = 0;
  uint64_t offset_ = 0;
  int64_t skipped_ = 0;
  std::string last_skip_message_;
  bool done_ = false;
};

}  // namespace keel
