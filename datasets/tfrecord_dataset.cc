#include "datasets/tfrecord_dataset.h"

#include <cstdio>
#include <limits>

#include "framework/data/dataset_node.h"
#include "framework/device/context.h"

namespace keel {
namespace {

using nlohmann::json;

class TFRecordNode final : public DatasetNode {
 public:
  TFRecordNode(std::vector<std::string> filenames, TFRecordOptions options)
      : filenames_(std::move(filenames)), options_(std::move(options)) {}
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return kUnknownCardinality; }
  // Neither the file names nor skip_corrupt are part of it (the records up to a damaged one are the
  // same either way): a run resumes with --skip-corrupt turned on after it met a damaged record.
  std::string describe() const override {
    return "tfrecord(files=" + std::to_string(filenames_.size()) +
           ", compression=" + (options_.compression == TFRecordCompression::kGzip ? "GZIP" : "none") + ")";
  }
  json state_json(const Position& words, size_t& at) const override {
    const int64_t file = take_int(words, at);
    const uint64_t offset = take_word(words, at);
    const int64_t index = take_int(words, at);
    return {{"op", "tfrecord"}, {"file", file}, {"offset", offset}, {"index", index}};
  }

  const std::vector<std::string> filenames_;
  const TFRecordOptions options_;
};

class TFRecordIterator final : public IteratorNode {
 public:
  explicit TFRecordIterator(const TFRecordNode& node) : node_(node) {}

  std::optional<Element> next() override {
    const TFRecordOptions& o = node_.options_;
    while (file_ < node_.filenames_.size()) {
      if (!reader_) open();
      std::string record;
      const int64_t skipped_before = reader_->skipped();
      const bool got = reader_->read(&record);
      if (reader_->skipped() != skipped_before) {
        if (o.skipped) *o.skipped += reader_->skipped() - skipped_before;
        std::fprintf(stderr, "keel: skipped (--skip-corrupt): %s\n", reader_->last_skip_message().c_str());
      }
      if (got) {
        HostScope host;
        Element e{Tensor::from_string(std::move(record))};
        if (o.include_source) {
          // The index of the record just read: read() may have skipped corrupt ones before it.
          e.push_back(Tensor::from_string(reader_->path() + " record " + std::to_string(reader_->next_index() - 1)));
        }
        return e;
      }
      reader_.reset();
      ++file_;
    }
    return std::nullopt;
  }

  void save(Position& out) const override {
    out.push_back(static_cast<uint64_t>(file_));
    out.push_back(reader_ ? reader_->offset() : 0);
    out.push_back(reader_ ? static_cast<uint64_t>(reader_->next_index()) : 0);
  }

  void restore(const json& state) override {
    const int64_t files = static_cast<int64_t>(node_.filenames_.size());
    file_ = static_cast<size_t>(int_field(state, "tfrecord", "file", 0, files));
    const uint64_t offset = uint_field(state_field(state, "tfrecord", "offset"), "tfrecord.offset");
    const int64_t index = int_field(state, "tfrecord", "index", 0, std::numeric_limits<int64_t>::max());
    reader_.reset();
    if (file_ == node_.filenames_.size()) {
      if (offset != 0 || index != 0) state_mismatch("'tfrecord' state is past the last file but has a position");
      return;
    }
    if (offset == 0 && index == 0) return;  // opened on the first next()
    open();
    reader_->seek(offset, index);
  }

 private:
  void open() {
    reader_ = std::make_unique<TFRecordReader>(node_.filenames_[file_], node_.options_.compression,
                                               node_.options_.skip_corrupt);
  }

  const TFRecordNode& node_;
  size_t file_ = 0;                        // the file being read
  std::unique_ptr<TFRecordReader> reader_;  // null before its first record and between files
};

std::unique_ptr<IteratorNode> TFRecordNode::make_iterator(uint64_t) const {
  return std::make_unique<TFRecordIterator>(*this);
}

}  // namespace

TFRecordCompression tfrecord_compression_for(const std::string& path) {
  return path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0 ? TFRecordCompression::kGzip
                                                                             : TFRecordCompression::kNone;
}

Dataset TFRecordDataset(std::vector<std::string> filenames, TFRecordOptions options) {
  if (filenames.empty()) throw std::invalid_argument("TFRecordDataset: no file names");
  return Dataset::from_node(std::make_shared<TFRecordNode>(std::move(filenames), std::move(options)));
}

}  // namespace keel
