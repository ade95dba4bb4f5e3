// Dataset::interleave: cycle_length inner iterators read in turn, optionally advanced ahead of the
// consumer by worker threads. It produces exactly the sequential order and saves exactly the
// sequential state, so a state resumes under any thread count.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "framework/data/dataset.h"
#include "framework/data/dataset_node.h"
#include "framework/device/context.h"

namespace keel {

using nlohmann::json;

namespace {

// ---- interleave -----------------------------------------------------------------------------------

class InterleaveNode final : public DatasetNode {
 public:
  InterleaveNode(std::shared_ptr<const DatasetNode> input, std::function<Dataset(const Element&)> fn,
                 int64_t cycle_length, int64_t block_length, int64_t num_parallel_calls)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        cycle_length_(cycle_length == AUTOTUNE ? autotune_cycle_length() : cycle_length),
        block_length_(block_length) {
    if (!fn_) throw std::invalid_argument("interleave: empty function");
    if (cycle_length_ < 1) {
      throw std::invalid_argument("interleave: cycle_length must be AUTOTUNE or at least 1, got " +
                                  std::to_string(cycle_length));
    }
    if (block_length_ < 1) {
      throw std::invalid_argument("interleave: block_length must be at least 1, got " + std::to_string(block_length));
    }
    if (num_parallel_calls < 0 && num_parallel_calls != AUTOTUNE) {
      throw std::invalid_argument("interleave: num_parallel_calls must be AUTOTUNE or at least 0, got " +
                                  std::to_string(num_parallel_calls));
    }
    const int64_t wanted = num_parallel_calls == AUTOTUNE ? autotune_threads() : num_parallel_calls;
    workers_ = std::min(wanted, cycle_length_);
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return kUnknownCardinality; }  // as tf.data
  std::string describe() const override {
    return input_->describe() + " -> interleave(cycle_length=" + std::to_string(cycle_length_) +
           ", block_length=" + std::to_string(block_length_) + ")";
  }
  // Words: consumed, end_of_input, cycle_index, block_index, then per slot: open, and if open its
  // input_index, the length of its inner position and the inner position itself; then the input's.
  // Inner positions stay raw words: only fn(element) knows the inner pipeline that reads them.
  json state_json(const Position& words, size_t& at) const override {
    json state = {{"op", "interleave"}};
    state["consumed"] = take_int(words, at);
    state["end_of_input"] = take_word(words, at) != 0;
    state["cycle_index"] = take_int(words, at);
    state["block_index"] = take_int(words, at);
    json slots = json::array();
    for (int64_t s = 0; s < cycle_length_; ++s) {
      if (take_word(words, at) == 0) {
        slots.push_back(nullptr);
        continue;
      }
      const int64_t input_index = take_int(words, at);
      const auto n = static_cast<size_t>(take_word(words, at));
      if (n > words.size() - std::min(at, words.size())) throw std::logic_error("interleave: short position");
      slots.push_back({{"input_index", input_index},
                       {"position", Position(words.begin() + static_cast<std::ptrdiff_t>(at),
                                             words.begin() + static_cast<std::ptrdiff_t>(at + n))}});
      at += n;
    }
    state["slots"] = std::move(slots);
    state["input"] = input_->state_json(words, at);
    return state;
  }

  std::shared_ptr<const DatasetNode> input_;
  std::function<Dataset(const Element&)> fn_;
  int64_t cycle_length_;
  int64_t block_length_;
  int64_t workers_ = 0;  // 0: everything on the consumer's thread
};

// tf.data's InterleaveDatasetOp::Iterator::GetNext, step by step: the consumer visits slot
// cycle_index_; an empty slot is opened with the next input element (if any); an exhausted inner
// iterator closes its slot and the cycle moves on; every element produced advances block_index_ and,
// after block_length elements, the cycle. With workers, each open inner iterator is advanced ahead
// of the consumer into its slot's buffer, together with a snapshot of its position after each
// element, and the consumer replays exactly the same steps on the buffered results.
class InterleaveIterator final : public IteratorNode {
 public:
  InterleaveIterator(const InterleaveNode& node, uint64_t iteration)
      : node_(node),
        iteration_(iteration),
        input_(node.input_->make_iterator(iteration)),
        slots_(static_cast<size_t>(node.cycle_length_)),
        capacity_(static_cast<size_t>(std::max<int64_t>(node.block_length_, 2))) {}
  ~InterleaveIterator() override { stop_workers(); }

  std::optional<Element> next() override {
    if (error_) std::rethrow_exception(error_);
    try {
      return step();
    } catch (...) {
      error_ = std::current_exception();
      stop_workers();
      throw;
    }
  }

  void save(Position& out) const override {
    out.push_back(static_cast<uint64_t>(consumed_));
    out.push_back(end_of_input_ ? 1 : 0);
    out.push_back(static_cast<uint64_t>(cycle_index_));
    out.push_back(static_cast<uint64_t>(block_index_));
    for (const Slot& slot : slots_) {
      out.push_back(slot.open ? 1 : 0);
      if (!slot.open) continue;
      out.push_back(static_cast<uint64_t>(slot.input_index));
      Position inner;
      if (node_.workers_ > 0) {
        inner = slot.consumed;
      } else {
        slot.it->save(inner);
      }
      out.push_back(inner.size());
      out.insert(out.end(), inner.begin(), inner.end());
    }
    input_->save(out);
  }

  void restore(const json& state) override {
    if (started_) throw std::logic_error("interleave: restore() on a used iterator");
    const int64_t consumed = int_field(state, "interleave", "consumed", 0, std::numeric_limits<int64_t>::max());
    const json& end = state_field(state, "interleave", "end_of_input");
    if (!end.is_boolean()) state_mismatch("'interleave.end_of_input' is " + end.dump() + ", not a boolean");
    const int64_t cycle_index = int_field(state, "interleave", "cycle_index", 0, node_.cycle_length_ - 1);
    const int64_t block_index = int_field(state, "interleave", "block_index", 0, node_.block_length_ - 1);
    const json& slots = state_field(state, "interleave", "slots");
    if (!slots.is_array() || static_cast<int64_t>(slots.size()) != node_.cycle_length_) {
      state_mismatch("'interleave.slots' must be an array of " + std::to_string(node_.cycle_length_) + " entries");
    }
    const json& input_state = state_field(state, "interleave", "input");

    std::vector<int64_t> wanted(slots_.size(), -1);
    std::vector<Position> positions(slots_.size());
    parse_slots(slots, consumed, wanted, positions);
    std::vector<std::optional<Element>> elements = replay_input(consumed, end.get<bool>(), input_state, wanted);
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (wanted[s] >= 0) restore_slot(slots_[s], *elements[s], wanted[s], positions[s]);
    }
    consumed_ = consumed;
    end_of_input_ = end.get<bool>();
    cycle_index_ = cycle_index;
    block_index_ = block_index;
  }

 private:
  struct Item {
    std::optional<Element> element;  // nullopt with no error: the inner iterator's end
    Position snapshot;               // the inner position right after producing `element`
    std::exception_ptr error;
  };
  struct Slot {
    // Consumer-side only:
    bool open = false;
    int64_t input_index = 0;
    std::shared_ptr<const DatasetNode> node;  // fn's dataset, kept alive for `it`
    Position consumed;                        // with workers: `it`'s position after the last element taken
    // Guarded by mu_; a worker uses `it` outside the lock while it has set `busy`:
    std::unique_ptr<IteratorNode> it;
    std::deque<Item> buffer;
    bool busy = false;
    bool ended = false;  // the end (or an error) is in `buffer`: nothing more to produce
  };

  void open_slot(Slot& slot, const Element& element, int64_t input_index) {
    std::shared_ptr<const DatasetNode> node;
    {
      HostScope host;
      node = node_.fn_(element).node();
    }
    std::unique_ptr<IteratorNode> it = node->make_iterator(iteration_);
    slot.open = true;
    slot.input_index = input_index;
    slot.node = std::move(node);
    slot.consumed.clear();
    if (node_.workers_ > 0) it->save(slot.consumed);
    {
      std::lock_guard lock(mu_);
      slot.it = std::move(it);
      slot.buffer.clear();
      slot.ended = false;
    }
    work_cv_.notify_all();
  }

  void close_slot(Slot& slot) {
    std::unique_ptr<IteratorNode> it;
    {
      std::unique_lock lock(mu_);
      done_cv_.wait(lock, [&] { return !slot.busy; });
      it = std::move(slot.it);
      slot.buffer.clear();
    }
    it.reset();  // outside the lock: an inner prefetch joins its thread here
    slot.open = false;
    slot.node.reset();
    slot.consumed.clear();
  }

  // Which input element each open slot of a saved state came from (wanted[s], -1 for a closed slot),
  // and its saved inner position.
  void parse_slots(const json& slots, int64_t consumed, std::vector<int64_t>& wanted,
                   std::vector<Position>& positions) const {
    for (size_t s = 0; s < slots_.size(); ++s) {
      const json& slot = slots[s];
      if (slot.is_null()) continue;
      if (!slot.is_object() || !slot.contains("input_index") || !slot.contains("position") ||
          !slot["position"].is_array()) {
        state_mismatch("'interleave.slots[" + std::to_string(s) + "]' is malformed");
      }
      const uint64_t index = uint_field(slot["input_index"], "interleave.slots.input_index");
      if (index >= static_cast<uint64_t>(consumed)) {
        state_mismatch("an interleave slot came from input element " + std::to_string(index) + " but only " +
                       std::to_string(consumed) + " were consumed");
      }
      wanted[s] = static_cast<int64_t>(index);
      for (const json& w : slot["position"]) positions[s].push_back(uint_field(w, "interleave.slots.position"));
    }
  }

  // Replays the input up to the saved position, keeping the elements the open slots came from.
  std::vector<std::optional<Element>> replay_input(int64_t consumed, bool end_of_input, const json& input_state,
                                                   const std::vector<int64_t>& wanted) {
    std::vector<std::optional<Element>> elements(slots_.size());
    for (int64_t k = 0; k < consumed; ++k) {
      std::optional<Element> e = input_->next();
      if (!e) {
        state_mismatch("interleave was saved after " + std::to_string(consumed) +
                       " input elements but its input ends after " + std::to_string(k));
      }
      for (size_t s = 0; s < slots_.size(); ++s) {
        if (wanted[s] == k) elements[s] = *e;
      }
    }
    if (end_of_input && input_->next()) state_mismatch("interleave's input was saved at its end but is not");
    if (current_state(*node_.input_, *input_) != input_state) {
      state_mismatch("replaying interleave's input did not reach the saved input position");
    }
    return elements;
  }

  // Reopens `slot` on the input element it came from and moves its inner iterator to `position`.
  void restore_slot(Slot& slot, const Element& element, int64_t input_index, const Position& position) {
    open_slot(slot, element, input_index);
    json inner_state;
    try {
      size_t at = 0;
      inner_state = slot.node->state_json(position, at);
      if (at != position.size()) throw std::logic_error("long");
    } catch (const std::logic_error&) {
      state_mismatch("an interleave slot's saved position does not fit the dataset its function returns");
    }
    slot.it->restore(inner_state);
    slot.consumed = position;
  }

  // The next item of an open slot: produced here, or taken from the workers' buffer.
  Item take(Slot& slot) {
    if (node_.workers_ == 0) {
      Item item;
      item.element = slot.it->next();
      return item;
    }
    Item item;
    {
      std::unique_lock lock(mu_);
      priority_ = &slot - slots_.data();
      done_cv_.wait(lock, [&] { return !slot.buffer.empty(); });
      item = std::move(slot.buffer.front());
      slot.buffer.pop_front();
    }
    work_cv_.notify_all();
    if (item.error) std::rethrow_exception(item.error);
    if (item.element) slot.consumed = item.snapshot;
    return item;
  }

  void advance_cycle() {
    block_index_ = 0;
    cycle_index_ = (cycle_index_ + 1) % node_.cycle_length_;
  }

  std::optional<Element> step() {
    if (!started_) {
      started_ = true;
      for (int64_t w = 0; w < node_.workers_; ++w) workers_.emplace_back([this] { work(); });
    }
    int64_t open = 0;
    for (const Slot& slot : slots_) open += slot.open ? 1 : 0;
    while (!end_of_input_ || open > 0) {
      Slot& slot = slots_[static_cast<size_t>(cycle_index_)];
      if (slot.open) {
        Item item = take(slot);
        if (item.element) {
          if (++block_index_ == node_.block_length_) advance_cycle();
          return std::move(item.element);
        }
        close_slot(slot);
        --open;
        advance_cycle();
      } else if (!end_of_input_) {
        std::optional<Element> e = input_->next();
        if (e) {
          open_slot(slot, *e, consumed_++);
          ++open;
        } else {
          end_of_input_ = true;
        }
      } else {
        advance_cycle();
      }
    }
    return std::nullopt;
  }

  // A worker fills the buffers of open slots, the one the consumer waits on first, then the others
  // in cycle order.
  void work() {
    HostScope host;
    std::unique_lock lock(mu_);
    for (;;) {
      Slot* pick = nullptr;
      work_cv_.wait(lock, [&] {
        if (stop_) return true;
        const size_t n = slots_.size();
        for (size_t d = 0; d < n; ++d) {
          Slot& s = slots_[(static_cast<size_t>(priority_) + d) % n];
          if (s.it && !s.busy && !s.ended && s.buffer.size() < capacity_) {
            pick = &s;
            return true;
          }
        }
        return false;
      });
      if (stop_) return;
      pick->busy = true;
      IteratorNode* it = pick->it.get();
      lock.unlock();
      Item item;
      try {
        item.element = it->next();
        if (item.element) it->save(item.snapshot);
      } catch (...) {
        item.element.reset();
        item.error = std::current_exception();
      }
      lock.lock();
      pick->ended = !item.element;
      pick->buffer.push_back(std::move(item));
      pick->busy = false;
      done_cv_.notify_all();
    }
  }

  void stop_workers() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  const InterleaveNode& node_;
  uint64_t iteration_;
  std::unique_ptr<IteratorNode> input_;  // consumer-side only
  std::vector<Slot> slots_;              // fixed size: workers hold pointers into it
  const size_t capacity_;                // per slot buffer, with workers
  // Consumer-side only:
  int64_t consumed_ = 0;  // input elements pulled
  bool end_of_input_ = false;
  int64_t cycle_index_ = 0;
  int64_t block_index_ = 0;
  bool started_ = false;
  std::exception_ptr error_;
  // Shared with the workers:
  std::mutex mu_;
  std::condition_variable work_cv_;  // workers wait for work
  std::condition_variable done_cv_;  // the consumer waits for items / idle slots
  bool stop_ = false;                // guarded by mu_
  int64_t priority_ = 0;             // guarded by mu_: the slot the consumer waits on
  std::vector<std::thread> workers_;
};

std::unique_ptr<IteratorNode> InterleaveNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<InterleaveIterator>(*this, iteration);
}

}  // namespace

Dataset Dataset::interleave(std::function<Dataset(const Element&)> fn, int64_t cycle_length, int64_t block_length,
                            int64_t num_parallel_calls, bool) const {
  return from_node(
      std::make_shared<InterleaveNode>(node_, std::move(fn), cycle_length, block_length, num_parallel_calls));
}

}  // namespace keel
