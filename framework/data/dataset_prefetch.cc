// Dataset::prefetch: a producer thread runs the input ahead of the consumer, snapshotting the
// input's position after every element so that save() reports the consumer's position.
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

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
class PrefetchIterator final : public IteratorNode {
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
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty(); });
      slot = std::move(queue_.front());
      queue_.pop_front();
    }
    cv_.notify_all();
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
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || queue_.size() < capacity_; });
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
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
        queue_.push_back(std::move(slot));
      }
      cv_.notify_all();
      if (last) return;
    }
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    queue_.clear();
  }

  const size_t capacity_;
  std::unique_ptr<IteratorNode> input_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Slot> queue_;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
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
