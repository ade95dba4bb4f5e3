#include "framework/device/collectives.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "framework/device/ledger.h"

namespace keel {

int ReductionTree::parent(int replica) { return replica == 0 ? -1 : replica & (replica - 1); }

std::vector<int> ReductionTree::children(int replica, int num_replicas) {
  std::vector<int> out;
  for (int step = 1; step < num_replicas; step *= 2) {
    if (replica % (2 * step) != 0) break;
    if (replica + step < num_replicas) out.push_back(replica + step);
  }
  return out;
}

int ReductionTree::subtree_end(int replica, int num_replicas) {
  if (replica == 0) return num_replicas;
  const int lowest_bit = replica & -replica;
  return std::min(replica + lowest_bit, num_replicas);
}

void tree_sum(std::span<const float* const> in, float* out, int64_t count) {
  const size_t n = in.size();
  if (n == 0) throw std::logic_error("tree_sum: no inputs");
  if (n == 1) {
    if (out != in[0] && count > 0) std::memcpy(out, in[0], static_cast<size_t>(count) * sizeof(float));
    return;
  }
  // Level by level over a chunk small enough to stay in cache: level 1 pairs (x0 + x1), (x2 + x3), ...
  // and each further level adds the partial sum of the subtree `stride` away.
  constexpr int64_t kChunk = 1024;
  thread_local std::vector<float> partial;
  if (partial.size() < n * kChunk) partial.resize(n * kChunk);
  for (int64_t at = 0; at < count; at += kChunk) {
    const int64_t len = std::min(kChunk, count - at);
    for (size_t j = 0; j < n; j += 2) {
      float* t = partial.data() + j * kChunk;
      const float* a = in[j] + at;
      if (j + 1 < n) {
        const float* b = in[j + 1] + at;
        for (int64_t k = 0; k < len; ++k) t[k] = a[k] + b[k];
      } else {
        std::memcpy(t, a, static_cast<size_t>(len) * sizeof(float));
      }
    }
    for (size_t stride = 2; stride < n; stride *= 2) {
      for (size_t j = 0; j + stride < n; j += 2 * stride) {
        float* t = partial.data() + j * kChunk;
        const float* u = partial.data() + (j + stride) * kChunk;
        for (int64_t k = 0; k < len; ++k) t[k] += u[k];
      }
    }
    std::memcpy(out + at, partial.data(), static_cast<size_t>(len) * sizeof(float));
  }
}

ShardRange shard_range(int64_t elements, int num_replicas, int replica) {
  const int64_t n = num_replicas, r = replica;
  const int64_t begin = r * (elements / n) + std::min(r, elements % n);
  return {begin, begin + elements / n + (r < elements % n ? 1 : 0)};
}

namespace {

// The receive buffer a core holds while partial sums arrive from its children.
class WorkspaceCharge {
 public:
  WorkspaceCharge(Ledger& ledger, int core, int64_t bytes, const char* op) : ledger_(ledger), core_(core) {
    if (bytes > 0) {
      handle_ = ledger.core(core).charge(bytes, Category::workspace, std::string("collective:") + op,
                                         {bytes / static_cast<int64_t>(sizeof(float))});
    }
  }
  ~WorkspaceCharge() {
    if (handle_ != 0) ledger_.core(core_).release(handle_);
  }
  WorkspaceCharge(const WorkspaceCharge&) = delete;
  WorkspaceCharge& operator=(const WorkspaceCharge&) = delete;

 private:
  Ledger& ledger_;
  int core_;
  uint64_t handle_ = 0;
};

int64_t bytes_of(int64_t elements) { return elements * static_cast<int64_t>(sizeof(float)); }

void divide(float* values, int64_t count, int num_replicas) {
  const float n = static_cast<float>(num_replicas);
  for (int64_t k = 0; k < count; ++k) values[k] /= n;
}

// Elements of the shards of replicas [first, end).
int64_t subtree_elements(int64_t elements, int num_replicas, int first, int end) {
  return shard_range(elements, num_replicas, end - 1).end - shard_range(elements, num_replicas, first).begin;
}

}  // namespace

InProcessCollectives::InProcessCollectives(Ledger& ledger, int num_replicas, std::function<void(int)> barrier)
    : ledger_(ledger), num_replicas_(num_replicas), barrier_(std::move(barrier)),
      posted_(static_cast<size_t>(num_replicas)) {
  if (num_replicas < 1) throw std::logic_error("InProcessCollectives: at least one replica");
}

// Every replica checks every replica's arguments against `reference`'s, so all of them reach the same
// verdict; on a mismatch they meet once more before throwing, so that no replica unwinds (and frees
// what it published) while another still reads it.
void InProcessCollectives::check_same_shapes(int replica, const char* op, int reference, bool dim0_may_differ) const {
  const Posted& first = posted_[static_cast<size_t>(reference)];
  int bad = -1;
  for (int r = 0; r < num_replicas_ && bad < 0; ++r) {
    const Posted& other = posted_[static_cast<size_t>(r)];
    bool same = other.values.size() == first.values.size();
    for (size_t i = 0; same && i < other.values.size(); ++i) {
      const Tensor &a = other.values[i], &b = first.values[i];
      same = a.defined() == b.defined() && (!a.defined() || a.shape() == b.shape());
    }
    if ((other.tensor == nullptr) != (first.tensor == nullptr)) same = false;
    if (same && other.tensor != nullptr) {
      const Shape &a = other.tensor->shape(), &b = first.tensor->shape();
      same = dim0_may_differ ? a.size() == b.size() && !a.empty() && std::equal(a.begin() + 1, a.end(), b.begin() + 1) : a == b;
    }
    if (!same) bad = r;
  }
  if (bad < 0) return;
  barrier_(replica);
  throw std::logic_error(std::string(op) + ": replica " + std::to_string(bad) + " contributed other tensors than replica " +
                         std::to_string(reference) + " (every replica must pass the same shapes)");
}

// Reduces the elements [begin, end) of the concatenation of every replica's values, in tree order,
// and writes the result to every replica's values.
void InProcessCollectives::reduce_range(ReduceOp op, int64_t begin, int64_t end) {
  const size_t n = static_cast<size_t>(num_replicas_);
  std::vector<const float*> in(n);
  int64_t offset = 0;
  for (size_t i = 0; i < posted_[0].values.size() && offset < end; ++i) {
    const int64_t size = posted_[0].values[i].defined() ? posted_[0].values[i].size() : 0;
    const int64_t lo = std::max(begin, offset) - offset, hi = std::min(end, offset + size) - offset;
    offset += size;
    if (hi <= lo || posted_[0].values[i].is_abstract()) continue;
    for (size_t r = 0; r < n; ++r) in[r] = posted_[r].values[i].data() + lo;
    float* out = posted_[0].values[i].data() + lo;
    tree_sum(in, out, hi - lo);
    if (op == ReduceOp::Mean) divide(out, hi - lo, num_replicas_);
    for (size_t r = 1; r < n; ++r) {
      std::memcpy(posted_[r].values[i].data() + lo, out, static_cast<size_t>(hi - lo) * sizeof(float));
    }
  }
}

void InProcessCollectives::all_reduce(int replica, ReduceOp op, std::span<Tensor> values) {
  if (num_replicas_ == 1) return;
  int64_t elements = 0, largest = 0;
  for (const Tensor& t : values) {
    if (!t.defined()) continue;
    elements += t.size();
    largest = std::max(largest, t.bytes());
  }
  const std::vector<int> children = ReductionTree::children(replica, num_replicas_);
  WorkspaceCharge receive(ledger_, replica, children.empty() ? 0 : largest, "all_reduce");
  posted_[static_cast<size_t>(replica)] = Posted{values, nullptr};
  barrier_(replica);
  check_same_shapes(replica, "all_reduce", 0, false);
  const ShardRange mine = shard_range(elements, num_replicas_, replica);
  reduce_range(op, mine.begin, mine.end);
  barrier_(replica);  // every range is reduced and copied out; the published spans may go
  const int64_t links = static_cast<int64_t>(children.size()) + (replica == 0 ? 0 : 1);
  ledger_.core(replica).record_collective(links * bytes_of(elements), links * bytes_of(elements));
}

Tensor InProcessCollectives::reduce_scatter(int replica, ReduceOp op, const Tensor& value) {
  const ShardRange mine = shard_range(value.size(), num_replicas_, replica);
  Tensor shard = Tensor::empty({mine.size()});
  if (num_replicas_ == 1) {
    if (!value.is_abstract()) shard.copy_from(value);
    return shard;
  }
  const std::vector<int> children = ReductionTree::children(replica, num_replicas_);
  WorkspaceCharge receive(ledger_, replica, children.empty() ? 0 : value.bytes(), "reduce_scatter");
  posted_[static_cast<size_t>(replica)] = Posted{{}, &value};
  barrier_(replica);
  check_same_shapes(replica, "reduce_scatter", 0, false);
  if (!value.is_abstract()) {
    std::vector<const float*> in(static_cast<size_t>(num_replicas_));
    for (size_t r = 0; r < in.size(); ++r) in[r] = posted_[r].tensor->data() + mine.begin;
    tree_sum(in, shard.data(), mine.size());
    if (op == ReduceOp::Mean) divide(shard.data(), mine.size(), num_replicas_);
  }
  barrier_(replica);
  // Up the tree: whole partial sums; down the tree: the shards of each subtree.
  const int64_t elements = value.size();
  int64_t sent = 0, received = 0;
  if (replica != 0) {
    sent += bytes_of(elements);
    received += bytes_of(subtree_elements(elements, num_replicas_, replica, ReductionTree::subtree_end(replica, num_replicas_)));
  }
  for (int c : children) {
    received += bytes_of(elements);
    sent += bytes_of(subtree_elements(elements, num_replicas_, c, ReductionTree::subtree_end(c, num_replicas_)));
  }
  ledger_.core(replica).record_collective(sent, received);
  return shard;
}

Tensor InProcessCollectives::all_gather(int replica, const Tensor& shard) {
  if (shard.rank() == 0) throw std::logic_error("all_gather: shards need a leading dimension");
  posted_[static_cast<size_t>(replica)] = Posted{{}, &shard};
  if (num_replicas_ > 1) barrier_(replica);
  Shape out_shape = shard.shape();
  out_shape[0] = 0;
  std::vector<int64_t> rows_before(static_cast<size_t>(num_replicas_) + 1, 0);
  if (num_replicas_ > 1) check_same_shapes(replica, "all_gather (beyond dim 0)", 0, true);
  for (int r = 0; r < num_replicas_; ++r) {
    const Tensor& t = *posted_[static_cast<size_t>(r)].tensor;
    rows_before[static_cast<size_t>(r) + 1] = rows_before[static_cast<size_t>(r)] + t.dim(0);
  }
  out_shape[0] = rows_before.back();
  Tensor out = Tensor::empty(out_shape);
  if (!out.is_abstract()) {
    for (int r = 0; r < num_replicas_; ++r) {
      const Tensor& t = *posted_[static_cast<size_t>(r)].tensor;
      out.slice_rows(rows_before[static_cast<size_t>(r)], rows_before[static_cast<size_t>(r) + 1]).copy_from(t);
    }
  }
  if (num_replicas_ == 1) return out;
  barrier_(replica);
  // Up the tree: each subtree's shards; down the tree: the whole result.
  const int64_t row_bytes = bytes_of(num_elements(Shape(shard.shape().begin() + 1, shard.shape().end())));
  auto subtree_bytes = [&](int first) {
    const int end = ReductionTree::subtree_end(first, num_replicas_);
    return (rows_before[static_cast<size_t>(end)] - rows_before[static_cast<size_t>(first)]) * row_bytes;
  };
  const int64_t total = out.bytes();
  int64_t sent = 0, received = 0;
  if (replica != 0) {
    sent += subtree_bytes(replica);
    received += total;
  }
  for (int c : ReductionTree::children(replica, num_replicas_)) {
    received += subtree_bytes(c);
    sent += total;
  }
  ledger_.core(replica).record_collective(sent, received);
  return out;
}

void InProcessCollectives::all_gather_shards(int replica, std::span<Tensor> values) {
  if (num_replicas_ == 1) return;
  posted_[static_cast<size_t>(replica)] = Posted{values, nullptr};
  barrier_(replica);
  check_same_shapes(replica, "all_gather_shards", 0, false);
  // Each replica copies the other replicas' shards into its own tensors, where they are not the
  // same host buffer as the owner's.
  int64_t elements = 0, subtree = 0;
  const int end = ReductionTree::subtree_end(replica, num_replicas_);
  for (size_t i = 0; i < values.size(); ++i) {
    Tensor& mine = values[i];
    if (!mine.defined()) continue;
    elements += mine.size();
    subtree += subtree_elements(mine.size(), num_replicas_, replica, end);
    if (mine.is_abstract()) continue;
    for (int r = 0; r < num_replicas_; ++r) {
      const Tensor& theirs = posted_[static_cast<size_t>(r)].values[i];
      const ShardRange range = shard_range(mine.size(), num_replicas_, r);
      if (r == replica || theirs.data() == mine.data() || range.size() == 0) continue;
      std::memcpy(mine.data() + range.begin, theirs.data() + range.begin, static_cast<size_t>(range.size()) * sizeof(float));
    }
  }
  barrier_(replica);
  // As all_gather: up the tree each subtree's shards, down the tree the whole tensors.
  int64_t sent = 0, received = 0;
  if (replica != 0) {
    sent += bytes_of(subtree);
    received += bytes_of(elements);
  }
  for (int c : ReductionTree::children(replica, num_replicas_)) {
    int64_t child = 0;
    for (const Tensor& t : values) {
      if (t.defined()) child += subtree_elements(t.size(), num_replicas_, c, ReductionTree::subtree_end(c, num_replicas_));
    }
    received += bytes_of(child);
    sent += bytes_of(elements);
  }
  ledger_.core(replica).record_collective(sent, received);
}

void InProcessCollectives::broadcast(int replica, Tensor& value, int root) {
  if (root < 0 || root >= num_replicas_) throw std::logic_error("broadcast: root " + std::to_string(root) + " is not a replica");
  if (num_replicas_ == 1) return;
  posted_[static_cast<size_t>(replica)] = Posted{{}, &value};
  barrier_(replica);
  check_same_shapes(replica, "broadcast", root, false);
  const Tensor& source = *posted_[static_cast<size_t>(root)].tensor;
  if (replica != root && !value.is_abstract()) value.copy_from(source);
  barrier_(replica);
  // The same tree, relabelled so that the root is its node 0.
  const int relative = (replica - root + num_replicas_) % num_replicas_;
  const int64_t links = static_cast<int64_t>(ReductionTree::children(relative, num_replicas_).size());
  ledger_.core(replica).record_collective(links * value.bytes(), relative == 0 ? 0 : value.bytes());
}

}  // namespace keel
