// Dataset ops that run user code on worker threads: map(fn, num_parallel_calls) here, interleave() in
// dataset_interleave.cc. Both produce exactly the sequential order and save exactly the sequential
// ops' states, so a state resumes under any thread count. A deterministic map followed by batch()
// also stacks the batches itself (map-and-batch fusion, ParallelMapIterator::next_batch).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "framework/data/data_error.h"
#include "framework/data/dataset.h"
#include "framework/data/dataset_node.h"
#include "framework/device/context.h"

namespace keel {

using nlohmann::json;

namespace {

// A fixed set of threads running queued tasks in order. The destructor discards the tasks not yet
// started and joins after the running ones finish.
class ThreadPool {
 public:
  explicit ThreadPool(int64_t threads) {
    for (int64_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      tasks_.clear();
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void submit(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void work() {
    HostScope host;
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (stop_) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;
};

// ---- map(fn, num_parallel_calls) ------------------------------------------------------------------

class ParallelMapNode final : public DatasetNode {
 public:
  // keyed: map_with_key (see MapNode in dataset.cc).
  ParallelMapNode(std::shared_ptr<const DatasetNode> input, KeyedMapFunction fn, int64_t num_parallel_calls,
                  bool deterministic, bool keyed)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        parallelism_(num_parallel_calls == AUTOTUNE ? autotune_threads() : num_parallel_calls),
        deterministic_(deterministic),
        keyed_(keyed) {
    if (!fn_) throw std::invalid_argument("map: empty function");
    if (parallelism_ < 1) {
      throw std::invalid_argument("map: num_parallel_calls must be AUTOTUNE or at least 0, got " +
                                  std::to_string(num_parallel_calls));
    }
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  // Deterministic: the sequential map's description and state, since the thread count changes no
  // element. Otherwise the state has another layout, hence another description.
  std::string describe() const override {
    const char* name = keyed_ ? (deterministic_ ? " -> map(keyed)" : " -> map(keyed, deterministic=false)")
                              : (deterministic_ ? " -> map" : " -> map(deterministic=false)");
    return input_->describe() + name;
  }
  // Deterministic: the index (keyed only) and the input's position. Otherwise: watermark, the number
  // of returned indices, the indices, then the input's position at the watermark.
  json state_json(const Position& words, size_t& at) const override {
    json state = {{"op", "map"}};
    if (deterministic_ && keyed_) state["index"] = take_int(words, at);
    if (!deterministic_) {
      state["watermark"] = take_int(words, at);
      const uint64_t n = take_word(words, at);
      json returned = json::array();
      for (uint64_t i = 0; i < n; ++i) returned.push_back(take_int(words, at));
      state["returned"] = std::move(returned);
    }
    state["input"] = input_->state_json(words, at);
    return state;
  }
  // How far past the oldest unreturned element the input may be read, i.e. how many elements may be
  // in flight: 4 per thread, so that a worker finds the next element queued when it finishes one
  // instead of waiting for the consumer to hand it over (with only one per thread, the wake-ups cost
  // more than decoding a small image).
  int64_t window() const { return 4 * parallelism_; }

  std::shared_ptr<const DatasetNode> input_;
  KeyedMapFunction fn_;
  int64_t parallelism_;
  bool deterministic_;
  bool keyed_;
};

// The consumer pulls input elements (on its own thread) until window() are in flight and hands
// each to the pool. Deterministic, next() returns the oldest once it is done; otherwise the oldest of
// those done. The window holds the elements from the oldest unreturned one (the watermark) on, and
// save() writes the input position at the watermark plus (non-deterministic) the indices already
// returned beyond it: restore() re-reads the input from the watermark and skips those.
class ParallelMapIterator final : public IteratorNode {
 public:
  ParallelMapIterator(const ParallelMapNode& node, uint64_t iteration)
      : node_(node), input_(node.input_->make_iterator(iteration)), iteration_(iteration) {}
  ~ParallelMapIterator() override { pool_.reset(); }  // joins before the tasks' targets go away

  std::optional<Element> next() override {
    start_if_needed();
    top_up();
    if (unreturned_ == 0) return std::nullopt;
    std::shared_ptr<Task> task;
    {
      std::unique_lock lock(mu_);
      Entry* pick = nullptr;
      cv_.wait(lock, [&] {
        for (Entry& entry : window_) {
          if (entry.returned) continue;
          if (entry.task->ready) {
            pick = &entry;
            return true;
          }
          if (node_.deterministic_) return false;  // only the oldest may go
        }
        return false;
      });
      pick->returned = true;
      task = std::move(pick->task);
    }
    --unreturned_;
    advance_watermark();
    top_up();  // keep the workers busy while the caller uses this element
    if (task->error) std::rethrow_exception(task->error);
    return std::move(task->result);
  }

  // Map-and-batch fusion (dataset_node.h): a deterministic map stacks its own batches. Each element
  // is copied into its batch by the worker that mapped it (the first to finish allocates the batch),
  // and the consumer wakes once a batch, when its last element is done; where the elements do not
  // stack (another structure, a string, an error, the last partial batch) it stacks them in order as
  // batch() does, with batch()'s errors.
  bool batches_itself() const override { return node_.deterministic_; }
  std::optional<Element> next_batch(int64_t n, bool drop_remainder) override {
    if (batch_size_ == 0) {  // before any element is submitted: every one knows its batch row
      batch_size_ = n;
      batch_base_ = next_index_;
    } else if (batch_size_ != n) {
      throw std::logic_error("map: next_batch() with another batch size");
    }
    start_if_needed();
    top_up();
    const size_t m = std::min(static_cast<size_t>(n), window_.size());  // fewer only at the end
    if (m == 0) return std::nullopt;
    wait_ready(m);
    if (std::shared_ptr<BatchBuffer> whole = stacked_batch(m)) {
      consume(m);
      top_up();
      return std::move(whole->stacked);
    }
    return batch_in_order(m, n, drop_remainder);
  }

  void save(Position& out) const override {
    if (node_.deterministic_ && node_.keyed_) out.push_back(static_cast<uint64_t>(watermark_));
    if (!node_.deterministic_) {
      std::vector<int64_t> returned(skip_.begin(), skip_.end());
      for (const Entry& entry : window_) {
        if (entry.returned) returned.push_back(entry.index);
      }
      std::sort(returned.begin(), returned.end());
      out.push_back(static_cast<uint64_t>(watermark_));
      out.push_back(returned.size());
      for (int64_t i : returned) out.push_back(static_cast<uint64_t>(i));
    }
    if (started_) {
      out.insert(out.end(), watermark_position_.begin(), watermark_position_.end());
    } else {
      input_->save(out);
    }
  }

  void restore(const json& state) override {
    if (started_) throw std::logic_error("map: restore() on a used iterator");
    if (node_.deterministic_ && node_.keyed_) {
      watermark_ = int_field(state, "map", "index", 0, std::numeric_limits<int64_t>::max() / 2);
      next_index_ = watermark_;
    }
    if (!node_.deterministic_) {
      watermark_ = int_field(state, "map", "watermark", 0, std::numeric_limits<int64_t>::max() / 2);
      const json& returned = state_field(state, "map", "returned");
      if (!returned.is_array() || static_cast<int64_t>(returned.size()) > node_.window()) {
        state_mismatch("'map.returned' must be an array of at most " + std::to_string(node_.window()) + " indices");
      }
      skip_.clear();
      for (const json& i : returned) {
        const uint64_t index = uint_field(i, "map.returned");
        if (index <= static_cast<uint64_t>(watermark_) ||
            index >= static_cast<uint64_t>(watermark_ + node_.window())) {
          state_mismatch("'map.returned' holds " + std::to_string(index) + ", outside the window after watermark " +
                         std::to_string(watermark_));
        }
        skip_.insert(static_cast<int64_t>(index));
      }
      next_index_ = watermark_;
    }
    input_->restore(state_field(state, "map", "input"));
  }

 private:
  // A batch its elements' workers stack into (map-and-batch fusion), keyed by its first element's index.
  struct BatchBuffer {
    int64_t first_index = 0;
    Element stacked;             // batch_size_ rows of each component
    std::vector<Shape> shapes;   // an element's components
  };
  struct Task {
    std::optional<Element> result;  // empty where the worker copied it into `buffer`
    std::exception_ptr error;
    int64_t first_index = -1, slot = -1;  // fused: its batch's first element and its row there
    std::shared_ptr<BatchBuffer> buffer;  // guarded by mu_
    bool ready = false;    // guarded by mu_
    bool awaited = false;  // guarded by mu_: the consumer waits for it (wait_ready)
  };
  struct Entry {
    int64_t index = 0;       // in the input, from the start of the iteration
    Position snapshot;       // input_'s position right after pulling this element
    std::shared_ptr<Task> task;
    bool returned = false;   // guarded by mu_ (read by the wait predicate)
  };

  void top_up() {
    while (!input_done_ && static_cast<int64_t>(window_.size()) < window()) {
      Entry entry;
      entry.index = next_index_++;
      entry.task = std::make_shared<Task>();
      std::optional<Element> e;
      try {
        e = input_->next();
      } catch (...) {
        // An input error takes this element's place in the order.
        entry.task->error = std::current_exception();
        entry.task->ready = true;
      }
      if (!e && !entry.task->error) {
        input_done_ = true;
        break;
      }
      input_->save(entry.snapshot);
      if (skip_.erase(entry.index) > 0) {  // returned before the state was saved
        entry.task.reset();
        entry.returned = true;
        push(std::move(entry));
        advance_watermark();
        continue;
      }
      if (batch_size_ > 0) {
        entry.task->first_index = batch_base_ + (entry.index - batch_base_) / batch_size_ * batch_size_;
        entry.task->slot = entry.index - entry.task->first_index;
      }
      std::shared_ptr<Task> task = entry.task;
      const int64_t entry_index = entry.index;
      ++unreturned_;
      push(std::move(entry));
      if (!e) continue;
      pool_->submit([this, task, key = ElementKey{iteration_, entry_index}, element = std::move(*e)] {
        run(*task, element, key);
      });
    }
  }

  // A worker's part: the map function on one element, its result kept or (fused) copied into its
  // batch, then the task marked done, waking the consumer where it waits for it.
  void run(Task& task, const Element& element, const ElementKey& key) {
    std::optional<Element> result;
    std::exception_ptr error;
    try {
      result = node_.fn_(element, key);
    } catch (...) {
      error = std::current_exception();
    }
    std::shared_ptr<BatchBuffer> into;
    if (!error && task.slot >= 0) {
      try {
        into = buffer_for(task, *result);
      } catch (...) {  // no memory for the batch: the consumer stacks it in order, as batch() would
        into = nullptr;
      }
      if (into) {
        copy_into(*into, task.slot, *result);  // a row of its own: outside the lock
        result.reset();
      }
    }
    bool wake = true;
    {
      std::lock_guard lock(mu_);
      task.result = std::move(result);
      task.error = error;
      task.buffer = std::move(into);
      task.ready = true;
      if (batch_size_ > 0) wake = task.awaited && --pending_ == 0;  // the batch's last
    }
    if (wake) cv_.notify_all();
  }

  void start_if_needed() {
    if (started_) return;
    watermark_position_.clear();
    input_->save(watermark_position_);
    pool_ = std::make_unique<ThreadPool>(node_.parallelism_);
    started_ = true;
  }

  // How many elements may be in flight: with fusion, two batches' worth at least.
  int64_t window() const { return std::max(node_.window(), 2 * batch_size_); }

  // The buffer of `task`'s batch, made by the first of its elements to finish; null where the result
  // does not stack into it (a string or abstract component, another structure than the first's).
  std::shared_ptr<BatchBuffer> buffer_for(const Task& task, const Element& result) {
    if (result.empty()) return nullptr;
    for (const Tensor& t : result) {
      if (t.is_string() || t.dtype() != DType::float32 || t.is_abstract()) return nullptr;
    }
    std::lock_guard lock(mu_);
    std::shared_ptr<BatchBuffer>& b = buffers_[task.first_index];
    if (!b) {
      b = std::make_shared<BatchBuffer>();
      b->first_index = task.first_index;
      const HostScope host;
      for (const Tensor& t : result) {
        Shape batched{batch_size_};
        batched.insert(batched.end(), t.shape().begin(), t.shape().end());
        b->stacked.push_back(Tensor::empty(batched));
        b->shapes.push_back(t.shape());
      }
      return b;
    }
    if (b->shapes.size() != result.size()) return nullptr;
    for (size_t c = 0; c < result.size(); ++c) {
      if (result[c].shape() != b->shapes[c]) return nullptr;
    }
    return b;
  }

  static void copy_into(BatchBuffer& b, int64_t slot, const Element& e) {
    for (size_t c = 0; c < e.size(); ++c) {
      const int64_t per = num_elements(b.shapes[c]);
      if (per > 0) std::memcpy(b.stacked[c].data() + slot * per, e[c].data(), static_cast<size_t>(per) * sizeof(float));
    }
  }

  // An element whose worker copied it into its batch: its row there (a view).
  static Element element_of(Task& task) {
    if (!task.buffer) return std::move(*task.result);
    const HostScope host;
    Element e;
    for (size_t c = 0; c < task.buffer->stacked.size(); ++c) {
      e.push_back(task.buffer->stacked[c].slice_rows(task.slot, task.slot + 1).reshape(task.buffer->shapes[c]));
    }
    return e;
  }

  // Returns once the window's first m elements are done: woken by the worker that finishes the last.
  void wait_ready(size_t m) {
    std::unique_lock lock(mu_);
    pending_ = 0;
    for (size_t k = 0; k < m; ++k) {
      Task& t = *window_[k].task;
      t.awaited = !t.ready;
      pending_ += t.awaited ? 1 : 0;
    }
    cv_.wait(lock, [&] { return pending_ == 0; });
  }

  // The window's first m elements as the batch their workers stacked (each in the same buffer, the
  // k-th in row k), or null: a partial batch, an error, an element that did not stack, a batch whose
  // rows were assigned before an error moved the batches' bounds.
  std::shared_ptr<BatchBuffer> stacked_batch(size_t m) {
    if (static_cast<int64_t>(m) != batch_size_) return nullptr;
    std::lock_guard lock(mu_);
    const std::shared_ptr<BatchBuffer> first = window_[0].task->buffer;
    if (!first || first->first_index != window_[0].index) return nullptr;
    for (size_t k = 0; k < m; ++k) {
      const Task& t = *window_[k].task;
      if (t.error || t.buffer != first || t.slot != static_cast<int64_t>(k)) return nullptr;
    }
    buffers_.erase(buffers_.begin(), buffers_.upper_bound(first->first_index));
    return first;
  }

  // Marks the window's first m elements returned and moves the watermark past them.
  void consume(size_t m) {
    {
      std::lock_guard lock(mu_);
      for (size_t k = 0; k < m; ++k) window_[k].returned = true;
    }
    unreturned_ -= static_cast<int64_t>(m);
    advance_watermark();
  }

  // batch()'s own way with the next m elements: in order, the first error rethrown after the
  // elements before it are taken, a partial batch dropped or stacked. Later batches start after the
  // last element taken.
  std::optional<Element> batch_in_order(size_t m, int64_t n, bool drop_remainder) {
    std::vector<Element> items;
    items.reserve(m);
    for (size_t k = 0; k < m; ++k) {
      const std::shared_ptr<Task> task = window_.front().task;
      consume(1);
      {
        std::lock_guard lock(mu_);
        batch_base_ = window_.empty() ? next_index_ : window_.front().index;  // the next unreturned element
        buffers_.erase(buffers_.begin(), buffers_.lower_bound(batch_base_));
      }
      if (task->error) {
        top_up();
        std::rethrow_exception(task->error);
      }
      items.push_back(element_of(*task));
    }
    top_up();
    if (drop_remainder && static_cast<int64_t>(items.size()) < n) return std::nullopt;
    return stack_elements(items);
  }

  void push(Entry entry) {
    std::lock_guard lock(mu_);
    window_.push_back(std::move(entry));
  }

  void advance_watermark() {
    std::lock_guard lock(mu_);
    while (!window_.empty() && window_.front().returned) {
      watermark_position_ = std::move(window_.front().snapshot);
      ++watermark_;
      window_.pop_front();
    }
  }

  const ParallelMapNode& node_;
  std::unique_ptr<IteratorNode> input_;  // consumer-side only
  uint64_t iteration_;
  bool started_ = false;
  bool input_done_ = false;
  int64_t next_index_ = 0;        // index of the next input element to pull
  int64_t watermark_ = 0;         // index of the oldest element not returned
  Position watermark_position_;   // input_'s position before the element at the watermark
  int64_t unreturned_ = 0;        // entries of window_ not returned yet
  std::set<int64_t> skip_;        // after restore: indices beyond the watermark returned before the save
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> window_;          // guarded by mu_ (the consumer alone changes it)
  int64_t batch_size_ = 0;            // fused: the batch size next_batch() stacks (0: not fused)
  int64_t batch_base_ = 0;            // fused: an index where a batch starts (they follow every n)
  int64_t pending_ = 0;               // guarded by mu_: awaited elements not done (wait_ready)
  std::map<int64_t, std::shared_ptr<BatchBuffer>> buffers_;  // guarded by mu_: by first index
  std::unique_ptr<ThreadPool> pool_;  // last: destroyed (joined) first
};

std::unique_ptr<IteratorNode> ParallelMapNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<ParallelMapIterator>(*this, iteration);
}

}  // namespace

std::shared_ptr<const DatasetNode> make_parallel_map_node(std::shared_ptr<const DatasetNode> input, KeyedMapFunction fn,
                                                          int64_t num_parallel_calls, bool deterministic, bool keyed) {
  return std::make_shared<ParallelMapNode>(std::move(input), std::move(fn), num_parallel_calls, deterministic, keyed);
}

Dataset Dataset::map(std::function<Element(const Element&)> fn, int64_t num_parallel_calls,
                     bool deterministic) const {
  if (num_parallel_calls == 0) return map(std::move(fn));
  if (!fn) throw std::invalid_argument("map: empty function");
  return from_node(make_parallel_map_node(
      node_, [fn = std::move(fn)](const Element& e, const ElementKey&) { return fn(e); }, num_parallel_calls,
      deterministic, /*keyed=*/false));
}

}  // namespace keel
