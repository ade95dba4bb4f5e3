// Dataset::prefetch: a producer thread runs the input ahead of the consumer, snapshotting the
// input's position after every element so that save() reports the consumer's position.
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "framework/core/host_threads.h"
#include "framework/data/dataset.h"
#include "framework/data/dataset_node.h"
#include "framework/device/context.h"

namespace keel {

using nlohmann::json;

namespace {

// ---- prefetch -------------------------------------------------------------------------------------

class PrefetchNode final : public DatasetNode {
 public:
  PrefetchNode(std::shared_ptr<const DatasetNode> input, int64_t buffer_size)
      : input_(std::move(input)), buffer_size_(buffer_size == AUTOTUNE ? kAutotunePrefetch : buffer_size) {
    if (buffer_size_ < 1) {
      throw std::invalid_argument("prefetch: buffer_size must be AUTOTUNE or at least 1, got " +
                                  std::to_string(buffer_size));
    }
  }
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  // The buffer size changes no element, so it is left out: a state resumes with another size.
  std::string describe() const override { return input_->describe() + " -> prefetch"; }
  json state_json(const Position& words, size_t& at) const override {
    return {{"op", "prefetch"}, {"input", input_->state_json(words, at)}};
  }

  std::shared_ptr<const DatasetNode> input_;
  int64_t buffer_size_;
};

// The producer thread starts on the first next() and owns input_ until it is stopped; the consumer
// touches input_ only while no producer runs (before the first next(), in restore()).
//
// Waking a thread asleep on an idle core costs the waker a system call and an inter-processor
// interrupt: 28-31 us on this project's 2-core virtual machine (build/bench/wake_bench), which the
// training loop paid on every step when the consumer woke the producer after each pop. So where
// the producer has a core of its own (the compute threads leave one: host_threads() <
// machine_threads()), it finds the room itself, waking on its own core's timer just after the
// consumer's next pop at its pace, and the consumer wakes it only when it took the last element.
// Where the producer shares the compute threads' cores, the consumer wakes it at each pop, so that
// it runs while the loop moves the batch to the cores, not in the middle of the step's kernels
// (polling there measured 6-9% slower). The producer wakes the consumer only when it waits.
class PrefetchIterator final : public IteratorNode {
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::duration kShortestPoll = std::chrono::microseconds(50);
  static constexpr Clock::duration kLongestPoll = std::chrono::milliseconds(20);

 public:
  PrefetchIterator(const PrefetchNode& node, uint64_t iteration)
      : capacity_(static_cast<size_t>(node.buffer_size_)), input_(node.input_->make_iterator(iteration)) {}
  ~PrefetchIterator() override { stop(); }

  std::optional<Element> next() override {
    if (done_) {
      if (error_) std::rethrow_exception(error_);
      return std::nullopt;
    }
    if (!thread_.joinable()) start();
    Slot slot;
    bool wake_producer = false;
    {
      std::unique_lock lock(mu_);
      consumer_waiting_ = true;
      not_empty_.wait(lock, [&] { return !queue_.empty(); });
      consumer_waiting_ = false;
      slot = std::move(queue_.front());
      queue_.pop_front();
      note_pop();
      wake_producer = producer_waiting_ && (!producer_polls_ || queue_.empty());
    }
    if (wake_producer) not_full_.notify_one();
    if (slot.error || !slot.element) {
      // The producer has exited after queueing its last slot.
      done_ = true;
      error_ = slot.error;
      thread_.join();
      if (error_) std::rethrow_exception(error_);
    }
    if (!slot.error) consumed_ = std::move(slot.snapshot);
    return std::move(slot.element);
  }

  void save(Position& out) const override {
    if (started_) {
      out.insert(out.end(), consumed_.begin(), consumed_.end());
    } else {
      input_->save(out);
    }
  }

  void restore(const json& state) override {
    const json& input_state = state_field(state, "prefetch", "input");
    stop();
    input_->restore(input_state);
    started_ = false;
    done_ = false;
    error_ = nullptr;
  }

 private:
  struct Slot {
    std::optional<Element> element;  // nullopt with no error: the end of the input
    Position snapshot;               // input_'s position right after producing `element`
    std::exception_ptr error;
  };

  void start() {
    consumed_.clear();
    input_->save(consumed_);
    started_ = true;
    stop_ = false;
    thread_ = std::thread([this] { produce(); });
  }

  void produce() {
    HostScope host;
    // Its timed waits are due just after the consumer's pop: Linux's default 50 us of timer slack
    // would let them fire that much later.
    ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    for (;;) {
      {
        std::unique_lock lock(mu_);
        Clock::duration backoff = kShortestPoll;
        while (!stop_ && queue_.size() >= capacity_) {
          producer_waiting_ = true;
          if (producer_polls_) {
            not_full_.wait_until(lock, next_poll(backoff));
          } else {
            not_full_.wait(lock);
          }
          producer_waiting_ = false;
        }
        if (stop_) return;
      }
      Slot slot;
      try {
        slot.element = input_->next();
        input_->save(slot.snapshot);
      } catch (...) {
        slot.element.reset();
        slot.error = std::current_exception();
      }
      const bool last = !slot.element;
      bool wake_consumer = false;
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
        queue_.push_back(std::move(slot));
        wake_consumer = consumer_waiting_;
      }
      if (wake_consumer) not_empty_.notify_one();
      if (last) return;
    }
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    not_full_.notify_all();
    if (thread_.joinable()) thread_.join();
    queue_.clear();
  }

  // The consumer's pace, for the producer's polls (guarded by mu_).
  void note_pop() {
    const Clock::time_point now = Clock::now();
    if (last_pop_ != Clock::time_point{}) {
      const Clock::duration since = now - last_pop_;
      pop_interval_ = pop_interval_ == Clock::duration::zero() ? since : (3 * pop_interval_ + since) / 4;
    }
    last_pop_ = now;
  }
  // When the producer looks for room again: just after the consumer's next pop at its pace (the
  // moment the consumer used to wake it), else, while the consumer is late or paused (evaluation, a
  // checkpoint), ever less often.
  Clock::time_point next_poll(Clock::duration& backoff) const {
    const Clock::time_point now = Clock::now();
    if (pop_interval_ != Clock::duration::zero()) {
      const Clock::time_point due = last_pop_ + pop_interval_ + kShortestPoll;
      if (due > now) return due;
    }
    const Clock::time_point at = now + backoff;
    backoff = std::min<Clock::duration>(backoff * 2, kLongestPoll);
    return at;
  }

  const size_t capacity_;
  std::unique_ptr<IteratorNode> input_;
  std::mutex mu_;
  std::condition_variable not_empty_;  // the consumer waits on it
  std::condition_variable not_full_;   // the producer waits on it
  std::deque<Slot> queue_;             // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  const bool producer_polls_ = host_threads() < machine_threads();
  bool consumer_waiting_ = false;      // guarded by mu_
  bool producer_waiting_ = false;      // guarded by mu_
  Clock::time_point last_pop_{};       // guarded by mu_
  Clock::duration pop_interval_{};     // guarded by mu_: a moving average; zero until two pops
  std::thread thread_;
  // Consumer-side only:
  bool started_ = false;
  bool done_ = false;
  std::exception_ptr error_;
  Position consumed_;  // input_'s position right after the last element the consumer took
};

std::unique_ptr<IteratorNode> PrefetchNode::make_iterator(uint64_t iteration) const {
  return std::make_unique<PrefetchIterator>(*this, iteration);
}

}  // namespace

Dataset Dataset::prefetch(int64_t buffer_size) const {
  return Dataset(std::make_shared<PrefetchNode>(node_, buffer_size));
}

}  // namespace keel
