// batch(): elements stacked along a new dim 0; rows of from_tensor_slices copied straight into the
// batch (the row fast path of dataset_node.h), and a parallel map's results copied into it by the
// workers that computed them (map-and-batch fusion, dataset_parallel.cc).
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/data/data_error.h"
#include "framework/data/dataset_node.h"
#include "framework/device/context.h"

namespace keel {

using nlohmann::json;

namespace {

// ---- batch ----------------------------------------------------------------------------------------

class BatchNode final : public DatasetNode {
 public:
  BatchNode(std::shared_ptr<const DatasetNode> input, int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {
    if (batch_size_ < 1) {
      throw std::invalid_argument("batch: batch_size must be at least 1, got " + std::to_string(batch_size_));
    }
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }
  std::string describe() const override {
    return input_->describe() + " -> batch(" + std::to_string(batch_size_) +
           ", drop_remainder=" + (drop_remainder_ ? "true" : "false") + ")";
  }
  json state_json(const Position& words, size_t& at) const override {
    return {{"op", "batch"}, {"input", input_->state_json(words, at)}};
  }

  std::shared_ptr<const DatasetNode> input_;
  int64_t batch_size_;
  bool drop_remainder_;
};

}  // namespace

Element stack_elements(const std::vector<Element>& items) {
  const size_t n = items.size();
  const size_t num_components = items[0].size();
  Element out;
  out.reserve(num_components);
  HostScope host;
  for (size_t c = 0; c < num_components; ++c) {
    const Shape& shape = items[0][c].shape();
    for (size_t j = 0; j < n; ++j) {
      if (c < items[j].size() && items[j][c].is_string()) {
        throw DataError("batch(): component " + std::to_string(c) +
                        " is a string; decode it with map() before batching");
      }
      if (items[j].size() != num_components) {
        throw DataError("batch: element " + std::to_string(j) + " of a batch has " +
                        std::to_string(items[j].size()) + " components but element 0 has " +
                        std::to_string(num_components) + "; every element must have the same structure");
      }
      if (items[j][c].shape() != shape) {
        throw DataError("batch: component " + std::to_string(c) + " of element " + std::to_string(j) +
                        " of a batch has shape " + shape_string(items[j][c].shape()) +
                        " but element 0's has " + shape_string(shape) +
                        "; batch() needs equal shapes (resize or pad them in map())");
      }
    }
    Shape batched{static_cast<int64_t>(n)};
    batched.insert(batched.end(), shape.begin(), shape.end());
    Tensor t = Tensor::empty(batched);
    const int64_t per = num_elements(shape);
    if (per > 0) {
      float* dst = t.data();
      // Rows that are adjacent in memory (an unshuffled from_tensor_slices) go in one memcpy.
      size_t j = 0;
      while (j < n) {
        const float* src = items[j][c].data();
        if (src == nullptr) {
          throw DataError("batch: component " + std::to_string(c) + " has no data (abstract tensor)");
        }
        size_t end = j + 1;
        while (end < n && items[end][c].data() == src + static_cast<int64_t>(end - j) * per) ++end;
        std::memcpy(dst + static_cast<int64_t>(j) * per, src,
                    static_cast<size_t>(end - j) * static_cast<size_t>(per) * sizeof(float));
        j = end;
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

class BatchIterator final : public IteratorNode {
 public:
  BatchIterator(const BatchNode& node, uint64_t iteration)
      : node_(node), input_(node.input_->make_iterator(iteration)) {}
  std::optional<Element> next() override {
    if (const RowSource* source = input_->row_source()) return next_rows(*source);
    if (input_->batches_itself()) return input_->next_batch(node_.batch_size_, node_.drop_remainder_);
    std::vector<Element> items;
    items.reserve(static_cast<size_t>(std::min<int64_t>(node_.batch_size_, 4096)));
    while (static_cast<int64_t>(items.size()) < node_.batch_size_) {
      std::optional<Element> e = input_->next();
      if (!e) break;
      items.push_back(std::move(*e));
    }
    if (items.empty()) return std::nullopt;
    if (node_.drop_remainder_ && static_cast<int64_t>(items.size()) < node_.batch_size_) return std::nullopt;
    return stack_elements(items);
  }
  void save(Position& out) const override { input_->save(out); }
  void restore(const json& state) override { input_->restore(state_field(state, "batch", "input")); }

 private:
  // The row fast path (dataset_node.h): the batch's row indices, then one copy per row.
  std::optional<Element> next_rows(const RowSource& source) {
    rows_.clear();
    while (static_cast<int64_t>(rows_.size()) < node_.batch_size_) {
      const std::optional<int64_t> row = input_->next_row();
      if (!row) break;
      rows_.push_back(*row);
    }
    if (rows_.empty()) return std::nullopt;
    if (node_.drop_remainder_ && static_cast<int64_t>(rows_.size()) < node_.batch_size_) return std::nullopt;
    return source.gather(rows_);
  }

  const BatchNode& node_;
  std::unique_ptr<IteratorNode> input_;
  std::vector<int64_t> rows_;
};

std::unique_ptr<IteratorNode> BatchNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<BatchIterator>(*this, iteration);
}

}  // namespace

std::shared_ptr<const DatasetNode> make_batch_node(std::shared_ptr<const DatasetNode> input, int64_t batch_size,
                                                   bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(input), batch_size, drop_remainder);
}

}  // namespace keel
