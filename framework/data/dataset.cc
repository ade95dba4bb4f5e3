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

class SlicesNode final : public DatasetNode, public RowSource {
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
    rows_of_float32_ = std::all_of(components_.begin(), components_.end(),
                                   [](const Tensor& t) { return !t.is_string() && t.dtype() == DType::float32; });
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
  const RowSource* float32_rows() const { return rows_of_float32_ ? this : nullptr; }
  Element gather(const std::vector<int64_t>& rows) const override;
  Element row(int64_t i) const override {
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
  bool rows_of_float32_ = false;
};

constexpr size_t kPrefetchAhead = 4;
constexpr int64_t kPrefetchBytes = 1024;

Element SlicesNode::gather(const std::vector<int64_t>& rows) const {
  Element out;
  out.reserve(components_.size());
  HostScope host;
  for (size_t c = 0; c < components_.size(); ++c) {
    Shape batched{static_cast<int64_t>(rows.size())};
    batched.insert(batched.end(), element_shapes_[c].begin(), element_shapes_[c].end());
    Tensor t = Tensor::empty(batched);
    const int64_t per = num_elements(element_shapes_[c]);
    const float* src = components_[c].data();
    float* dst = t.data();
    // Rows adjacent in the components (an unshuffled run) go in one copy. Shuffled rows are far apart
    // in a large array: the start of the row kPrefetchAhead places on is asked for early, so its
    // memory (and page-table) latency overlaps this row's copy.
    const int64_t prefetch_bytes = std::min<int64_t>(per * static_cast<int64_t>(sizeof(float)), kPrefetchBytes);
    for (size_t j = 0, end = 0; j < rows.size(); j = end) {
      if (j + kPrefetchAhead < rows.size()) {
        const char* ahead = reinterpret_cast<const char*>(src + rows[j + kPrefetchAhead] * per);
        for (int64_t b = 0; b < prefetch_bytes; b += 64) __builtin_prefetch(ahead + b);
      }
      for (end = j + 1; end < rows.size() && rows[end] == rows[j] + static_cast<int64_t>(end - j);) ++end;
      if (per > 0) {
        std::memcpy(dst + static_cast<int64_t>(j) * per, src + rows[j] * per,
                    static_cast<size_t>(end - j) * static_cast<size_t>(per) * sizeof(float));
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

class SlicesIterator final : public IteratorNode {
 public:
  explicit SlicesIterator(const SlicesNode& node) : node_(node) {}
  std::optional<Element> next() override {
    if (index_ >= node_.rows()) return std::nullopt;
    return node_.row(index_++);
  }
  const RowSource* row_source() const override { return node_.float32_rows(); }
  std::optional<int64_t> next_row() override {
    if (index_ >= node_.rows()) return std::nullopt;
    return index_++;
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
        input_(node.input_->make_iterator(iteration)),
        rows_(input_->row_source()) {}

  std::optional<Element> next() override {
    if (rows_ == nullptr) return draw(buffer_, [&] { return input_->next(); });
    const std::optional<int64_t> row = next_row();
    if (!row) return std::nullopt;
    return rows_->row(*row);
  }
  // Over rows of from_tensor_slices the buffer holds row indices: the same draws, no tensors.
  const RowSource* row_source() const override { return rows_; }
  std::optional<int64_t> next_row() override { return draw(rows_buffer_, [&] { return input_->next_row(); }); }

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
      if (!(rows_ != nullptr ? next_row().has_value() : next().has_value())) {
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
  // One draw: a uniformly chosen buffered item out, the input's next one (pull()) in its place.
  template <class T, class Pull>
  std::optional<T> draw(std::vector<T>& buffer, Pull&& pull) {
    if (!filled_) fill(buffer, pull);
    if (buffer.empty()) return std::nullopt;
    const size_t i = static_cast<size_t>(rng_.uniform(buffer.size()));
    T out = std::move(buffer[i]);
    std::optional<T> refill;
    if (!input_done_) {
      refill = pull();
      input_done_ = !refill;
    }
    if (refill) {
      buffer[i] = std::move(*refill);
    } else {
      if (i + 1 != buffer.size()) buffer[i] = std::move(buffer.back());
      buffer.pop_back();
    }
    ++emitted_;
    return out;
  }

  template <class T, class Pull>
  void fill(std::vector<T>& buffer, Pull& pull) {
    filled_ = true;
    const int64_t card = node_.input_->cardinality();
    const int64_t expect = card >= 0 ? std::min(card, node_.buffer_size_) : node_.buffer_size_;
    buffer.reserve(static_cast<size_t>(std::min<int64_t>(expect, int64_t{1} << 16)));
    while (static_cast<int64_t>(buffer.size()) < node_.buffer_size_) {
      std::optional<T> item = pull();
      if (!item) {
        input_done_ = true;
        break;
      }
      buffer.push_back(std::move(*item));
    }
  }

  const ShuffleNode& node_;
  uint64_t seed_;
  SplitMix64 rng_;
  std::unique_ptr<IteratorNode> input_;
  const RowSource* rows_;
  std::vector<Element> buffer_;
  std::vector<int64_t> rows_buffer_;
  bool filled_ = false;
  bool input_done_ = false;
  int64_t emitted_ = 0;
};

std::unique_ptr<IteratorNode> ShuffleNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<ShuffleIterator>(*this, iteration);
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
  const RowSource* row_source() const override { return input_->row_source(); }
  std::optional<int64_t> next_row() override {
    if (node_.count_ >= 0 && taken_ >= node_.count_) return std::nullopt;
    std::optional<int64_t> row = input_->next_row();
    if (row) ++taken_;
    return row;
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
  return Dataset(make_batch_node(node_, batch_size, drop_remainder));
}
Dataset Dataset::repeat(int64_t count) const { return Dataset(std::make_shared<RepeatNode>(node_, count)); }
Dataset Dataset::take(int64_t count) const { return Dataset(std::make_shared<TakeNode>(node_, count)); }
int64_t Dataset::cardinality() const { return node_->cardinality(); }
std::string Dataset::describe() const { return node_->describe(); }
Iterator Dataset::make_iterator(uint64_t iteration) const { return Iterator(node_, iteration); }

}  // namespace keel
