#include "framework/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "framework/data/data_error.h"
#include "framework/data/dataset_node.h"
#include "framework/device/context.h"

namespace keel {

using nlohmann::json;

namespace {

std::string shapes_string(const std::vector<Shape>& shapes) {
  std::string s = "[";
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shape_string(shapes[i]);
  return s + "]";
}

// ---- from_tensor_slices ---------------------------------------------------------------------------

class SlicesNode final : public DatasetNode {
 public:
  explicit SlicesNode(std::vector<Tensor> components) : components_(std::move(components)) {
    if (components_.empty()) throw std::invalid_argument("from_tensor_slices: no components");
    for (size_t c = 0; c < components_.size(); ++c) {
      const Tensor& t = components_[c];
      if (!t.defined() || t.rank() < 1 || t.is_abstract()) {
        throw std::invalid_argument("from_tensor_slices: component " + std::to_string(c) +
                                    " must be a tensor with data and at least one dimension" +
                                    (t.defined() ? ", got shape " + shape_string(t.shape()) : std::string()));
      }
      if (t.dim(0) != components_[0].dim(0)) {
        throw std::invalid_argument("from_tensor_slices: components have different sizes along dim 0: " +
                                    shape_string(components_[0].shape()) + " and " + shape_string(t.shape()));
      }
      element_shapes_.emplace_back(t.shape().begin() + 1, t.shape().end());
    }
    rows_ = components_[0].dim(0);
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t) const override;
  int64_t cardinality() const override { return rows_; }
  std::string describe() const override {
    return "from_tensor_slices(n=" + std::to_string(rows_) + ", shapes=" + shapes_string(element_shapes_) +
           ")";
  }
  json state_json(const Position& words, size_t& at) const override {
    return {{"op", "from_tensor_slices"}, {"index", take_int(words, at)}};
  }

  int64_t rows() const { return rows_; }
  Element row(int64_t i) const {
    Element e;
    e.reserve(components_.size());
    for (size_t c = 0; c < components_.size(); ++c) {
      e.push_back(components_[c].slice_rows(i, i + 1).reshape(element_shapes_[c]));
    }
    return e;
  }

 private:
  std::vector<Tensor> components_;
  std::vector<Shape> element_shapes_;  // components_[c].shape() without dim 0
  int64_t rows_ = 0;
};

class SlicesIterator final : public IteratorNode {
 public:
  explicit SlicesIterator(const SlicesNode& node) : node_(node) {}
  std::optional<Element> next() override {
    if (index_ >= node_.rows()) return std::nullopt;
    return node_.row(index_++);
  }
  void save(Position& out) const override { out.push_back(static_cast<uint64_t>(index_)); }
  void restore(const json& state) override {
    index_ = int_field(state, "from_tensor_slices", "index", 0, node_.rows());
  }

 private:
  const SlicesNode& node_;
  int64_t index_ = 0;  // next row
};

std::unique_ptr<IteratorNode> SlicesNode::make_iterator(uint64_t) const {
  return std::make_unique<SlicesIterator>(*this);
}

// ---- map ------------------------------------------------------------------------------------------

class MapNode final : public DatasetNode {
 public:
  // keyed: map_with_key (the index is part of the state and the description); else map(fn).
  MapNode(std::shared_ptr<const DatasetNode> input, KeyedMapFunction fn, bool keyed)
      : input_(std::move(input)), fn_(std::move(fn)), keyed_(keyed) {
    if (!fn_) throw std::invalid_argument("map: empty function");
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string describe() const override { return input_->describe() + (keyed_ ? " -> map(keyed)" : " -> map"); }
  json state_json(const Position& words, size_t& at) const override {
    json state = {{"op", "map"}};
    if (keyed_) state["index"] = take_int(words, at);
    state["input"] = input_->state_json(words, at);
    return state;
  }

  std::shared_ptr<const DatasetNode> input_;
  KeyedMapFunction fn_;
  bool keyed_;
};

class MapIterator final : public IteratorNode {
 public:
  MapIterator(const MapNode& node, uint64_t iteration)
      : node_(node), input_(node.input_->make_iterator(iteration)), key_{iteration, 0} {}
  std::optional<Element> next() override {
    std::optional<Element> e = input_->next();
    if (!e) return std::nullopt;
    HostScope host;
    const ElementKey key = key_;
    ++key_.index;  // counted before fn runs: an element whose fn throws still takes its index
    return node_.fn_(*e, key);
  }
  void save(Position& out) const override {
    if (node_.keyed_) out.push_back(static_cast<uint64_t>(key_.index));
    input_->save(out);
  }
  void restore(const json& state) override {
    if (node_.keyed_) key_.index = int_field(state, "map", "index", 0, std::numeric_limits<int64_t>::max() / 2);
    input_->restore(state_field(state, "map", "input"));
  }

 private:
  const MapNode& node_;
  std::unique_ptr<IteratorNode> input_;
  ElementKey key_;  // of the next element
};

std::unique_ptr<IteratorNode> MapNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<MapIterator>(*this, iteration);
}

// ---- shuffle --------------------------------------------------------------------------------------

class ShuffleNode final : public DatasetNode {
 public:
  ShuffleNode(std::shared_ptr<const DatasetNode> input, int64_t buffer_size, uint64_t seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {
    if (buffer_size_ < 1) {
      throw std::invalid_argument("shuffle: buffer_size must be at least 1, got " +
                                  std::to_string(buffer_size_));
    }
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string describe() const override {
    return input_->describe() + " -> shuffle(buffer=" + std::to_string(buffer_size_) +
           ", seed=" + std::to_string(seed_) + ", reshuffle=" + (reshuffle_ ? "true" : "false") + ")";
  }
  json state_json(const Position& words, size_t& at) const override {
    const uint64_t seed = take_word(words, at);
    const int64_t emitted = take_int(words, at);
    return {
        {"op", "shuffle"}, {"seed", seed}, {"emitted", emitted}, {"input", input_->state_json(words, at)}};
  }
  // The RNG seed of one iteration: distinct iterations get unrelated streams.
  uint64_t iteration_seed(uint64_t iteration) const {
    return mix64(seed_ ^ mix64(reshuffle_ ? iteration + 1 : 0));
  }

  std::shared_ptr<const DatasetNode> input_;
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
};

class ShuffleIterator final : public IteratorNode {
 public:
  ShuffleIterator(const ShuffleNode& node, uint64_t iteration)
      : node_(node),
        seed_(node.iteration_seed(iteration)),
        rng_(seed_),
        input_(node.input_->make_iterator(iteration)) {}

  std::optional<Element> next() override {
    if (!filled_) fill();
    if (buffer_.empty()) return std::nullopt;
    const size_t i = static_cast<size_t>(rng_.uniform(buffer_.size()));
    Element out = std::move(buffer_[i]);
    std::optional<Element> refill;
    if (!input_done_) {
      refill = input_->next();
      input_done_ = !refill;
    }
    if (refill) {
      buffer_[i] = std::move(*refill);
    } else {
      if (i + 1 != buffer_.size()) buffer_[i] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    ++emitted_;
    return out;
  }

  // The buffer is not saved (it holds tensors): restore() replays the iteration up to `emitted`.
  void save(Position& out) const override {
    out.push_back(seed_);
    out.push_back(static_cast<uint64_t>(emitted_));
    input_->save(out);
  }

  void restore(const json& state) override {
    const uint64_t seed = uint_field(state_field(state, "shuffle", "seed"), "shuffle.seed");
    if (seed != seed_) {
      state_mismatch("the shuffle was saved with iteration seed " + std::to_string(seed) +
                     " but this iterator uses " + std::to_string(seed_));
    }
    const int64_t card = node_.input_->cardinality();
    const int64_t emitted =
        int_field(state, "shuffle", "emitted", 0, card >= 0 ? card : std::numeric_limits<int64_t>::max());
    const json& input_state = state_field(state, "shuffle", "input");
    for (int64_t k = 0; k < emitted; ++k) {
      if (!next()) {
        state_mismatch("the shuffle was saved after " + std::to_string(emitted) +
                       " elements but its input ends after " + std::to_string(k));
      }
    }
    if (current_state(*node_.input_, *input_) != input_state) {
      state_mismatch(
          "replaying the shuffle's input did not reach the saved input position (the state comes from "
          "another pipeline, or a map function is not deterministic)");
    }
  }

 private:
  void fill() {
    filled_ = true;
    const int64_t card = node_.input_->cardinality();
    const int64_t expect = card >= 0 ? std::min(card, node_.buffer_size_) : node_.buffer_size_;
    buffer_.reserve(static_cast<size_t>(std::min<int64_t>(expect, int64_t{1} << 16)));
    while (static_cast<int64_t>(buffer_.size()) < node_.buffer_size_) {
      std::optional<Element> e = input_->next();
      if (!e) {
        input_done_ = true;
        break;
      }
      buffer_.push_back(std::move(*e));
    }
  }

  const ShuffleNode& node_;
  uint64_t seed_;
  SplitMix64 rng_;
  std::unique_ptr<IteratorNode> input_;
  std::vector<Element> buffer_;
  bool filled_ = false;
  bool input_done_ = false;
  int64_t emitted_ = 0;
};

std::unique_ptr<IteratorNode> ShuffleNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<ShuffleIterator>(*this, iteration);
}

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

// Stacks elements (all of equal component shapes) into new host tensors along a new dim 0.
Element stack(const std::vector<Element>& items) {
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

class BatchIterator final : public IteratorNode {
 public:
  BatchIterator(const BatchNode& node, uint64_t iteration)
      : node_(node), input_(node.input_->make_iterator(iteration)) {}
  std::optional<Element> next() override {
    std::vector<Element> items;
    items.reserve(static_cast<size_t>(std::min<int64_t>(node_.batch_size_, 4096)));
    while (static_cast<int64_t>(items.size()) < node_.batch_size_) {
      std::optional<Element> e = input_->next();
      if (!e) break;
      items.push_back(std::move(*e));
    }
    if (items.empty()) return std::nullopt;
    if (node_.drop_remainder_ && static_cast<int64_t>(items.size()) < node_.batch_size_) return std::nullopt;
    return stack(items);
  }
  void save(Position& out) const override { input_->save(out); }
  void restore(const json& state) override { input_->restore(state_field(state, "batch", "input")); }

 private:
  const BatchNode& node_;
  std::unique_ptr<IteratorNode> input_;
};

std::unique_ptr<IteratorNode> BatchNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<BatchIterator>(*this, iteration);
}

// ---- repeat ---------------------------------------------------------------------------------------

class RepeatNode final : public DatasetNode {
 public:
  RepeatNode(std::shared_ptr<const DatasetNode> input, int64_t count)
      : input_(std::move(input)), count_(count) {
    if (count_ < -1) {
      throw std::invalid_argument("repeat: count must be -1 (forever) or >= 0, got " +
                                  std::to_string(count_));
    }
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (count_ < 0) return n == 0 ? 0 : kInfiniteCardinality;  // as tf.data
    if (count_ == 0) return 0;
    if (n < 0) return n;
    return n * count_;
  }
  std::string describe() const override {
    return input_->describe() + " -> repeat(" + std::to_string(count_) + ")";
  }
  json state_json(const Position& words, size_t& at) const override {
    const int64_t repetition = take_int(words, at);
    const bool has_input = take_word(words, at) != 0;
    return {{"op", "repeat"},
            {"repetition", repetition},
            {"input", has_input ? input_->state_json(words, at) : json(nullptr)}};
  }
  // The iteration the input runs as in repetition r of iteration k: distinct for distinct (k, r)
  // (for count = -1 while k, r < 2^32).
  uint64_t sub_iteration(uint64_t iteration, int64_t repetition) const {
    const auto r = static_cast<uint64_t>(repetition);
    return count_ > 0 ? iteration * static_cast<uint64_t>(count_) + r : (iteration << 32) + r;
  }

  std::shared_ptr<const DatasetNode> input_;
  int64_t count_;
};

class RepeatIterator final : public IteratorNode {
 public:
  RepeatIterator(const RepeatNode& node, uint64_t iteration) : node_(node), iteration_(iteration) {
    if (node_.count_ == 0) return;
    input_ = node_.input_->make_iterator(node_.sub_iteration(iteration_, 0));
  }
  std::optional<Element> next() override {
    while (input_) {
      std::optional<Element> e = input_->next();
      if (e) {
        fresh_ = false;
        return e;
      }
      ++repetition_;
      // An input that is empty from its start would make repeat() spin forever: end instead.
      if (fresh_ || (node_.count_ > 0 && repetition_ >= node_.count_)) {
        input_.reset();
        break;
      }
      input_ = node_.input_->make_iterator(node_.sub_iteration(iteration_, repetition_));
      fresh_ = true;
    }
    return std::nullopt;
  }
  void save(Position& out) const override {
    out.push_back(static_cast<uint64_t>(repetition_));
    out.push_back(input_ ? 1 : 0);
    if (input_) input_->save(out);
  }
  void restore(const json& state) override {
    const int64_t max_rep = node_.count_ >= 0 ? node_.count_ : std::numeric_limits<int64_t>::max();
    repetition_ = int_field(state, "repeat", "repetition", 0, max_rep);
    const json& input_state = state_field(state, "repeat", "input");
    if (input_state.is_null()) {
      input_.reset();
      return;
    }
    if (repetition_ == node_.count_) {
      state_mismatch("'repeat.repetition' equals the count but the input is not done");
    }
    input_ = node_.input_->make_iterator(node_.sub_iteration(iteration_, repetition_));
    input_->restore(input_state);
    fresh_ = false;
  }

 private:
  const RepeatNode& node_;
  uint64_t iteration_;
  std::unique_ptr<IteratorNode> input_;  // null once the repeat is done
  int64_t repetition_ = 0;
  bool fresh_ = true;  // input_ has produced nothing yet
};

std::unique_ptr<IteratorNode> RepeatNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<RepeatIterator>(*this, iteration);
}

// ---- take -----------------------------------------------------------------------------------------

class TakeNode final : public DatasetNode {
 public:
  TakeNode(std::shared_ptr<const DatasetNode> input, int64_t count)
      : input_(std::move(input)), count_(count) {
    if (count_ < -1) {
      throw std::invalid_argument("take: count must be -1 (all) or >= 0, got " + std::to_string(count_));
    }
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (count_ < 0) return n;
    if (n == kInfiniteCardinality) return count_;
    if (n == kUnknownCardinality) return n;
    return std::min(n, count_);
  }
  std::string describe() const override {
    return input_->describe() + " -> take(" + std::to_string(count_) + ")";
  }
  json state_json(const Position& words, size_t& at) const override {
    const int64_t taken = take_int(words, at);
    return {{"op", "take"}, {"taken", taken}, {"input", input_->state_json(words, at)}};
  }

  std::shared_ptr<const DatasetNode> input_;
  int64_t count_;
};

class TakeIterator final : public IteratorNode {
 public:
  TakeIterator(const TakeNode& node, uint64_t iteration)
      : node_(node), input_(node.input_->make_iterator(iteration)) {}
  std::optional<Element> next() override {
    if (node_.count_ >= 0 && taken_ >= node_.count_) return std::nullopt;
    std::optional<Element> e = input_->next();
    if (e) ++taken_;
    return e;
  }
  void save(Position& out) const override {
    out.push_back(static_cast<uint64_t>(taken_));
    input_->save(out);
  }
  void restore(const json& state) override {
    const int64_t max_taken = node_.count_ >= 0 ? node_.count_ : std::numeric_limits<int64_t>::max();
    taken_ = int_field(state, "take", "taken", 0, max_taken);
    input_->restore(state_field(state, "take", "input"));
  }

 private:
  const TakeNode& node_;
  std::unique_ptr<IteratorNode> input_;
  int64_t taken_ = 0;
};

std::unique_ptr<IteratorNode> TakeNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<TakeIterator>(*this, iteration);
}

}  // namespace

// ---- Dataset ---------------------------------------------------------------------------------------

Dataset Dataset::from_node(std::shared_ptr<const DatasetNode> node) {
  if (!node) throw std::invalid_argument("Dataset::from_node: null node");
  return Dataset(std::move(node));
}
Dataset Dataset::from_tensor_slices(std::vector<Tensor> components) {
  return Dataset(std::make_shared<SlicesNode>(std::move(components)));
}
Dataset Dataset::map(std::function<Element(const Element&)> fn) const {
  if (!fn) throw std::invalid_argument("map: empty function");
  return Dataset(std::make_shared<MapNode>(
      node_, [fn = std::move(fn)](const Element& e, const ElementKey&) { return fn(e); }, /*keyed=*/false));
}
Dataset Dataset::map_with_key(KeyedMapFunction fn, int64_t num_parallel_calls, bool deterministic) const {
  if (num_parallel_calls == 0) return Dataset(std::make_shared<MapNode>(node_, std::move(fn), /*keyed=*/true));
  return Dataset(make_parallel_map_node(node_, std::move(fn), num_parallel_calls, deterministic, /*keyed=*/true));
}
Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  return Dataset(std::make_shared<ShuffleNode>(node_, buffer_size, seed, reshuffle_each_iteration));
}
Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  return Dataset(std::make_shared<BatchNode>(node_, batch_size, drop_remainder));
}
Dataset Dataset::repeat(int64_t count) const { return Dataset(std::make_shared<RepeatNode>(node_, count)); }
Dataset Dataset::take(int64_t count) const { return Dataset(std::make_shared<TakeNode>(node_, count)); }
int64_t Dataset::cardinality() const { return node_->cardinality(); }
std::string Dataset::describe() const { return node_->describe(); }
Iterator Dataset::make_iterator(uint64_t iteration) const { return Iterator(node_, iteration); }

}  // namespace keel
