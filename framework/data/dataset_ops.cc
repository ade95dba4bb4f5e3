// Dataset ops without threads of their own: from_generator, list_files, filter, skip, cache.
#include <glob.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>

#include "framework/data/data_error.h"
#include "framework/data/dataset.h"
#include "framework/data/dataset_node.h"
#include "framework/device/context.h"

namespace keel {

using nlohmann::json;

namespace {

// ---- from_generator -------------------------------------------------------------------------------

class GeneratorNode final : public DatasetNode {
 public:
  explicit GeneratorNode(std::function<Generator(uint64_t)> make) : make_(std::move(make)) {
    if (!make_) throw std::invalid_argument("from_generator: empty function");
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return kUnknownCardinality; }
  std::string describe() const override { return "from_generator"; }
  json state_json(const Position& words, size_t& at) const override {
    return {{"op", "from_generator"}, {"index", take_int(words, at)}};
  }

  std::function<Generator(uint64_t)> make_;
};

class GeneratorIterator final : public IteratorNode {
 public:
  GeneratorIterator(const GeneratorNode& node, uint64_t iteration) : node_(node), iteration_(iteration) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    if (!generator_) start();
    std::optional<Element> e = generator_();
    if (e) {
      ++index_;
    } else {
      done_ = true;
    }
    return e;
  }
  void save(Position& out) const override { out.push_back(static_cast<uint64_t>(index_)); }
  void restore(const json& state) override {
    const int64_t index = int_field(state, "from_generator", "index", 0, std::numeric_limits<int64_t>::max());
    for (int64_t k = 0; k < index; ++k) {
      if (!next()) {
        state_mismatch("from_generator was saved after " + std::to_string(index) +
                       " elements but its generator ends after " + std::to_string(k) +
                       " (a generator must be deterministic)");
      }
    }
  }

 private:
  void start() {
    HostScope host;
    generator_ = node_.make_(iteration_);
    if (!generator_) throw std::invalid_argument("from_generator: the factory returned an empty generator");
  }

  const GeneratorNode& node_;
  uint64_t iteration_;
  Generator generator_;  // made on the first next(), so that an unused iterator costs nothing
  int64_t index_ = 0;    // elements produced
  bool done_ = false;
};

std::unique_ptr<IteratorNode> GeneratorNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<GeneratorIterator>(*this, iteration);
}

// ---- list_files -----------------------------------------------------------------------------------

std::string quoted_list(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + json(items[i]).dump();
  return s + "]";
}

std::vector<std::string> glob_files(const std::vector<std::string>& patterns) {
  std::set<std::string> found;  // sorted, without duplicates
  for (const std::string& pattern : patterns) {
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) found.insert(g.gl_pathv[i]);
    }
    globfree(&g);
    if (rc == GLOB_ABORTED) {
      throw DataError("list_files: cannot read a directory while expanding pattern \"" + pattern +
                      "\"; check that its directories exist and are readable");
    }
    if (rc == GLOB_NOSPACE) throw std::bad_alloc();
  }
  if (found.empty()) {
    throw DataError("list_files: no files match " +
                    (patterns.size() == 1 ? "pattern \"" + patterns[0] + "\"" : "patterns " + quoted_list(patterns)) +
                    "; check the path and the wildcard");
  }
  return {found.begin(), found.end()};
}

class FilesNode final : public DatasetNode {
 public:
  FilesNode(std::vector<std::string> patterns, std::vector<std::string> files)
      : patterns_(std::move(patterns)), files_(std::move(files)) {}
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return static_cast<int64_t>(files_.size()); }
  // The file count is included: a state saved before files were added or removed is refused.
  std::string describe() const override {
    return "list_files(patterns=" + quoted_list(patterns_) + ", files=" + std::to_string(files_.size()) + ")";
  }
  json state_json(const Position& words, size_t& at) const override {
    return {{"op", "list_files"}, {"index", take_int(words, at)}};
  }

  std::vector<std::string> patterns_;
  std::vector<std::string> files_;
};

class FilesIterator final : public IteratorNode {
 public:
  explicit FilesIterator(const FilesNode& node) : node_(node) {}
  std::optional<Element> next() override {
    if (index_ >= node_.files_.size()) return std::nullopt;
    return Element{Tensor::from_string(node_.files_[index_++])};
  }
  void save(Position& out) const override { out.push_back(index_); }
  void restore(const json& state) override {
    index_ = static_cast<size_t>(
        int_field(state, "list_files", "index", 0, static_cast<int64_t>(node_.files_.size())));
  }

 private:
  const FilesNode& node_;
  size_t index_ = 0;
};

std::unique_ptr<IteratorNode> FilesNode::make_iterator(uint64_t) const {
  return std::make_unique<FilesIterator>(*this);
}

// ---- filter ---------------------------------------------------------------------------------------

class FilterNode final : public DatasetNode {
 public:
  FilterNode(std::shared_ptr<const DatasetNode> input, std::function<bool(const Element&)> predicate)
      : input_(std::move(input)), predicate_(std::move(predicate)) {
    if (!predicate_) throw std::invalid_argument("filter: empty predicate");
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return kUnknownCardinality; }  // as tf.data
  std::string describe() const override { return input_->describe() + " -> filter"; }
  json state_json(const Position& words, size_t& at) const override {
    return {{"op", "filter"}, {"input", input_->state_json(words, at)}};
  }

  std::shared_ptr<const DatasetNode> input_;
  std::function<bool(const Element&)> predicate_;
};

class FilterIterator final : public IteratorNode {
 public:
  FilterIterator(const FilterNode& node, uint64_t iteration)
      : node_(node), input_(node.input_->make_iterator(iteration)) {}
  std::optional<Element> next() override {
    for (;;) {
      std::optional<Element> e = input_->next();
      if (!e) return std::nullopt;
      HostScope host;
      if (node_.predicate_(*e)) return e;
    }
  }
  void save(Position& out) const override { input_->save(out); }
  void restore(const json& state) override { input_->restore(state_field(state, "filter", "input")); }

 private:
  const FilterNode& node_;
  std::unique_ptr<IteratorNode> input_;
};

std::unique_ptr<IteratorNode> FilterNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<FilterIterator>(*this, iteration);
}

// ---- skip -----------------------------------------------------------------------------------------

class SkipNode final : public DatasetNode {
 public:
  SkipNode(std::shared_ptr<const DatasetNode> input, int64_t count) : input_(std::move(input)), count_(count) {
    if (count_ < -1) {
      throw std::invalid_argument("skip: count must be -1 (all) or >= 0, got " + std::to_string(count_));
    }
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override {  // as tf.data's SkipDataset
    const int64_t n = input_->cardinality();
    if (n < 0) return n;
    return count_ < 0 ? 0 : std::max<int64_t>(0, n - count_);
  }
  std::string describe() const override {
    return input_->describe() + " -> skip(" + std::to_string(count_) + ")";
  }
  json state_json(const Position& words, size_t& at) const override {
    const int64_t skipped = take_int(words, at);
    return {{"op", "skip"}, {"skipped", skipped}, {"input", input_->state_json(words, at)}};
  }

  std::shared_ptr<const DatasetNode> input_;
  int64_t count_;
};

class SkipIterator final : public IteratorNode {
 public:
  SkipIterator(const SkipNode& node, uint64_t iteration)
      : node_(node), input_(node.input_->make_iterator(iteration)) {}
  std::optional<Element> next() override {
    while (node_.count_ < 0 || skipped_ < node_.count_) {
      if (!(input_->row_source() ? input_->next_row().has_value() : input_->next().has_value())) return std::nullopt;
      ++skipped_;
    }
    return input_->next();
  }
  const RowSource* row_source() const override { return input_->row_source(); }
  std::optional<int64_t> next_row() override {
    while (node_.count_ < 0 || skipped_ < node_.count_) {
      if (!input_->next_row()) return std::nullopt;
      ++skipped_;
    }
    return input_->next_row();
  }
  void save(Position& out) const override {
    out.push_back(static_cast<uint64_t>(skipped_));
    input_->save(out);
  }
  void restore(const json& state) override {
    const int64_t max_skipped = node_.count_ >= 0 ? node_.count_ : std::numeric_limits<int64_t>::max();
    skipped_ = int_field(state, "skip", "skipped", 0, max_skipped);
    input_->restore(state_field(state, "skip", "input"));
  }

 private:
  const SkipNode& node_;
  std::unique_ptr<IteratorNode> input_;
  int64_t skipped_ = 0;
};

std::unique_ptr<IteratorNode> SkipNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<SkipIterator>(*this, iteration);
}

// ---- cache ----------------------------------------------------------------------------------------

using Elements = std::vector<Element>;

class CacheNode final : public DatasetNode {
 public:
  explicit CacheNode(std::shared_ptr<const DatasetNode> input) : input_(std::move(input)) {}
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string describe() const override { return input_->describe() + " -> cache"; }
  json state_json(const Position& words, size_t& at) const override {
    const bool reading = take_word(words, at) != 0;
    const uint64_t filled_by = take_word(words, at);
    const int64_t index = take_int(words, at);
    json state = {{"op", "cache"}, {"mode", reading ? "read" : "fill"}, {"filled_by", filled_by}, {"index", index}};
    if (!reading) state["input"] = input_->state_json(words, at);
    return state;
  }

  // The complete cache and the iteration that filled it, or {nullptr, 0}.
  std::pair<std::shared_ptr<const Elements>, uint64_t> cached() const {
    std::lock_guard lock(mu_);
    return {cache_, filled_by_};
  }
  // Installs `elements` (all of iteration `iteration`) unless a cache is already complete; returns
  // the cache now in place.
  std::pair<std::shared_ptr<const Elements>, uint64_t> install(std::shared_ptr<const Elements> elements,
                                                               uint64_t iteration) const {
    std::lock_guard lock(mu_);
    if (!cache_) {
      cache_ = std::move(elements);
      filled_by_ = iteration;
    }
    return {cache_, filled_by_};
  }

  std::shared_ptr<const DatasetNode> input_;

 private:
  // The cache is the one mutable part of a Dataset: shared by every iterator of every copy.
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Elements> cache_;  // guarded by mu_; null until complete
  mutable uint64_t filled_by_ = 0;                 // guarded by mu_
};

class CacheIterator final : public IteratorNode {
 public:
  CacheIterator(const CacheNode& node, uint64_t iteration) : node_(node), iteration_(iteration) {
    std::tie(reading_, filled_by_) = node_.cached();
    if (!reading_) start_filling();
  }
  std::optional<Element> next() override {
    if (reading_) {
      if (index_ >= static_cast<int64_t>(reading_->size())) return std::nullopt;
      return (*reading_)[static_cast<size_t>(index_++)];
    }
    if (done_) return std::nullopt;
    std::optional<Element> e = input_->next();
    if (!e) {
      done_ = true;
      node_.install(std::make_shared<const Elements>(std::move(gathered_)), iteration_);
      gathered_.clear();
      return std::nullopt;
    }
    gathered_.push_back(*e);
    ++index_;
    return e;
  }
  void save(Position& out) const override {
    out.push_back(reading_ ? 1 : 0);
    out.push_back(filled_by_);
    out.push_back(static_cast<uint64_t>(index_));
    if (!reading_) input_->save(out);
  }
  void restore(const json& state) override {
    const json& mode = state_field(state, "cache", "mode");
    const uint64_t filled_by = uint_field(state_field(state, "cache", "filled_by"), "cache.filled_by");
    const int64_t index = int_field(state, "cache", "index", 0, std::numeric_limits<int64_t>::max());
    if (mode == "read") {
      auto [elements, by] = node_.cached();
      if (!elements || by != filled_by) {
        // A fresh process (or one whose cache another iteration filled): replay iteration
        // `filled_by` of the input, which holds exactly the elements the saved iterator was reading.
        Elements replayed;
        std::unique_ptr<IteratorNode> input = node_.input_->make_iterator(filled_by);
        while (std::optional<Element> e = input->next()) replayed.push_back(std::move(*e));
        auto all = std::make_shared<const Elements>(std::move(replayed));
        std::tie(elements, by) = node_.install(all, filled_by);
        if (by != filled_by) elements = all;  // this iterator keeps its own copy
      }
      if (index > static_cast<int64_t>(elements->size())) {
        state_mismatch("the cache was read up to element " + std::to_string(index) + " but holds " +
                       std::to_string(elements->size()));
      }
      reading_ = std::move(elements);
      input_.reset();
      gathered_.clear();
      filled_by_ = filled_by;
      index_ = index;
      return;
    }
    if (mode != "fill") state_mismatch("'cache.mode' is " + mode.dump() + ", not \"read\" or \"fill\"");
    if (filled_by != iteration_) {
      state_mismatch("the cache was being filled by iteration " + std::to_string(filled_by) +
                     " but this iterator was made for iteration " + std::to_string(iteration_));
    }
    const json& input_state = state_field(state, "cache", "input");
    reading_.reset();
    start_filling();
    // Gather again what the saved iterator had gathered, so that this one can complete the cache.
    for (int64_t k = 0; k < index; ++k) {
      std::optional<Element> e = input_->next();
      if (!e) {
        state_mismatch("the cache was saved after " + std::to_string(index) + " elements but its input ends after " +
                       std::to_string(k));
      }
      gathered_.push_back(std::move(*e));
    }
    index_ = index;
    if (current_state(*node_.input_, *input_) != input_state) {
      state_mismatch("replaying the cache's input did not reach the saved input position");
    }
  }

 private:
  void start_filling() {
    input_ = node_.input_->make_iterator(iteration_);
    filled_by_ = iteration_;
    gathered_.clear();
    index_ = 0;
    done_ = false;
  }

  const CacheNode& node_;
  uint64_t iteration_;
  std::shared_ptr<const Elements> reading_;  // set: reading a complete cache; null: filling
  uint64_t filled_by_ = 0;                   // the iteration whose elements reading_/gathered_ are
  std::unique_ptr<IteratorNode> input_;      // while filling
  Elements gathered_;                        // while filling: the elements so far
  int64_t index_ = 0;                        // elements produced
  bool done_ = false;
};

std::unique_ptr<IteratorNode> CacheNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<CacheIterator>(*this, iteration);
}

}  // namespace

Dataset Dataset::from_generator(std::function<Generator(uint64_t iteration)> make) {
  return from_node(std::make_shared<GeneratorNode>(std::move(make)));
}

Dataset Dataset::list_files(const std::vector<std::string>& patterns, bool shuffle, std::optional<uint64_t> seed) {
  if (patterns.empty()) throw std::invalid_argument("list_files: no patterns");
  std::vector<std::string> files = glob_files(patterns);
  const auto n = static_cast<int64_t>(files.size());
  Dataset ds = from_node(std::make_shared<FilesNode>(patterns, std::move(files)));
  return shuffle ? ds.shuffle(n, seed.value_or(0), /*reshuffle_each_iteration=*/true) : ds;
}

Dataset Dataset::list_files(const std::string& pattern, bool shuffle, std::optional<uint64_t> seed) {
  return list_files(std::vector<std::string>{pattern}, shuffle, seed);
}

Dataset Dataset::filter(std::function<bool(const Element&)> predicate) const {
  return from_node(std::make_shared<FilterNode>(node_, std::move(predicate)));
}

Dataset Dataset::skip(int64_t count) const { return from_node(std::make_shared<SkipNode>(node_, count)); }

Dataset Dataset::cache() const { return from_node(std::make_shared<CacheNode>(node_)); }

}  // namespace keel
