#include "framework/device/collectives.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "framework/core/finite.h"
#include "framework/device/ledger.h"
#include "framework/device/process_group.h"

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

ShardRange shard_range(int64_t elements, int num_replicas, int replica) {
  const int64_t n = num_replicas, r = replica;
  const int64_t begin = r * (elements / n) + std::min(r, elements % n);
  return {begin, begin + elements / n + (r < elements % n ? 1 : 0)};
}

std::vector<ShardRange> process_shard_ranges(int64_t elements, int num_replicas, int replicas_per_process) {
  std::vector<ShardRange> out;
  for (int first = 0; first < num_replicas; first += replicas_per_process) {
    out.push_back({shard_range(elements, num_replicas, first).begin,
                   shard_range(elements, num_replicas, first + replicas_per_process - 1).end});
  }
  return out;
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
    : InProcessCollectives(ledger, num_replicas, 0, num_replicas, nullptr, std::move(barrier)) {}

InProcessCollectives::InProcessCollectives(Ledger& ledger, int num_replicas, int first_replica, int local_replicas,
                                           ProcessGroup* processes, std::function<void(int)> barrier)
    : ledger_(ledger), num_replicas_(num_replicas), first_(first_replica), local_replicas_(local_replicas),
      processes_(processes != nullptr && processes->size() > 1 ? processes : nullptr), barrier_(std::move(barrier)),
      posted_(static_cast<size_t>(local_replicas)), votes_(static_cast<size_t>(local_replicas)),
      non_finite_votes_(static_cast<size_t>(local_replicas)) {
  if (num_replicas < 1 || local_replicas < 1) throw std::logic_error("InProcessCollectives: at least one replica");
  const int process_count = processes_ ? processes_->size() : 1;
  if (local_replicas * process_count != num_replicas) {
    throw std::invalid_argument("InProcessCollectives: " + std::to_string(process_count) + " processes of " +
                                std::to_string(local_replicas) + " replicas are not " + std::to_string(num_replicas));
  }
  if (processes_ && ((local_replicas & (local_replicas - 1)) != 0 || first_replica % local_replicas != 0)) {
    throw std::invalid_argument("each process must run a power-of-two number of cores (this one runs " +
                                std::to_string(local_replicas) + "), so that its cores' sums are a subtree of the slice's "
                                "reduction and the result is the same bits as in one process");
  }
}

std::vector<ShardRange> InProcessCollectives::process_ranges(int64_t elements) const {
  return process_shard_ranges(elements, num_replicas_, local_replicas_);
}

ShardRange InProcessCollectives::this_process_range(int64_t elements) const {
  return {shard_range(elements, num_replicas_, first_).begin,
          shard_range(elements, num_replicas_, first_ + local_replicas_ - 1).end};
}

// Every replica checks every local replica's arguments against `reference`'s, so all of them reach
// the same verdict; on a mismatch they meet once more before throwing, so that no replica unwinds
// (and frees what it published) while another still reads it.
void InProcessCollectives::check_same_shapes(int replica, const char* op, int reference, bool dim0_may_differ) const {
  const Posted& first = posted_[static_cast<size_t>(local(reference))];
  int bad = -1;
  for (int r = 0; r < local_replicas_ && bad < 0; ++r) {
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
    if (!same) bad = first_ + r;
  }
  if (bad < 0) return;
  barrier_(replica);
  throw std::logic_error(std::string(op) + ": replica " + std::to_string(bad) + " contributed other tensors than replica " +
                         std::to_string(reference) + " (every replica must pass the same shapes)");
}

template <class Fn>
void InProcessCollectives::for_each_slice(int64_t begin, int64_t end, Fn&& fn) const {
  int64_t offset = 0;
  for (size_t i = 0; i < posted_[0].values.size() && offset < end; ++i) {
    const int64_t size = posted_[0].values[i].defined() ? posted_[0].values[i].size() : 0;
    const int64_t lo = std::max(begin, offset) - offset, hi = std::min(end, offset + size) - offset;
    offset += size;
    if (hi > lo && !posted_[0].values[i].is_abstract()) fn(i, offset - size, lo, hi);
  }
}

size_t InProcessCollectives::local_sum_range(int64_t begin, int64_t end, ReduceOp op, bool find_non_finite,
                                             bool in_process_sum) {
  std::vector<const float*> in(static_cast<size_t>(local_replicas_));
  size_t first_non_finite = posted_[0].values.size();
  for_each_slice(begin, end, [&](size_t i, int64_t at, int64_t lo, int64_t hi) {
    for (size_t r = 0; r < in.size(); ++r) in[r] = posted_[r].values[i].data() + lo;
    if (several_processes()) return local_sum_for_processes(i, at, lo, hi, in);
    // The sum divided and checked in the same pass: in place, or where the replicas read their shards.
    const bool check = find_non_finite && i < first_non_finite;
    const int divisor = op == ReduceOp::Mean ? num_replicas_ : 1;
    float* out = in_process_sum ? in_process_sum_.data() + at + lo : posted_[0].values[i].data() + lo;
    const int64_t ok = in_process_sum && posted_deferred(i) ? sum_deferred(i, lo, hi, in, out, divisor, check)
                                                            : tree_sum_into(in, out, hi - lo, divisor, check);
    if (ok < hi - lo && check) first_non_finite = i;
  });
  return first_non_finite;
}

size_t InProcessCollectives::finish_range(ReduceOp op, int64_t begin, int64_t end, bool find_non_finite, Results results,
                                         size_t summed_vote) {
  if (!several_processes() && results != Results::everywhere) return summed_vote;  // read in place
  size_t first_non_finite = summed_vote;
  for_each_slice(begin, end, [&](size_t i, int64_t at, int64_t lo, int64_t hi) {
    const float* sum = nullptr;
    if (several_processes() && shared_memory_) {
      // The sum across processes, divided and checked already where it was summed.
      sum = summed_ + at + lo;
      const bool here = summed_first_non_finite_ >= at + lo && summed_first_non_finite_ < at + hi;
      if (find_non_finite && i < first_non_finite && here) first_non_finite = i;
      if (results != Results::everywhere) return;  // each replica reads its shard in place
    } else {
      float* own = several_processes() ? staging_.data() + at + lo : posted_[0].values[i].data() + lo;
      if (several_processes()) {  // in one process, divided and checked by local_sum_range
        if (op == ReduceOp::Mean) divide(own, hi - lo, num_replicas_);
        if (find_non_finite && i < first_non_finite && !all_finite(own, hi - lo)) first_non_finite = i;
      }
      sum = own;
    }
    for (size_t r = several_processes() ? 0 : 1; r < posted_.size(); ++r) {
      int64_t from = lo, to = hi;  // of the tensor's elements
      if (results != Results::everywhere) {
        const int64_t size = posted_[r].values[i].size();
        const ShardRange own = results == Results::process_shards
                                   ? shard_range(size, local_replicas_, static_cast<int>(r))
                                   : shard_range(size, num_replicas_, first_ + static_cast<int>(r));
        from = std::max(lo, own.begin), to = std::min(hi, own.end);
      }
      if (to > from) std::memcpy(posted_[r].values[i].data() + from, sum + (from - lo), static_cast<size_t>(to - from) * sizeof(float));
    }
  });
  return first_non_finite;
}

void InProcessCollectives::all_reduce(int replica, ReduceOp op, std::span<Tensor> values) {
  all_reduce_voting(replica, op, values, false, Results::everywhere, {});
}

size_t InProcessCollectives::all_reduce_for_update(int replica, ReduceOp op, std::span<Tensor> values, bool slice_shards,
                                                   std::span<const float*> results,
                                                   std::span<const DeferredProduct* const> deferred) {
  if (results.size() != values.size()) throw std::logic_error("all_reduce_for_update: one result per value");
  if (!deferred.empty() && deferred.size() != values.size()) throw std::logic_error("all_reduce_for_update: one product per value");
  return all_reduce_voting(replica, op, values, true, slice_shards ? Results::slice_shards : Results::process_shards,
                           results, deferred);
}

void InProcessCollectives::locate_results(std::span<Tensor> values, std::span<const float*> results,
                                          bool in_process_sum) const {
  const bool in_place = several_processes() && shared_memory_;
  int64_t at = 0;  // where each tensor starts in the concatenation of the defined ones
  for (size_t i = 0; i < results.size(); ++i) {
    results[i] = nullptr;
    if (!values[i].defined()) continue;
    if (!values[i].is_abstract()) {
      results[i] = in_place ? summed_ + at : in_process_sum ? in_process_sum_.data() + at : values[i].data();
    }
    at += values[i].size();
  }
}

size_t InProcessCollectives::all_reduce_voting(int replica, ReduceOp op, std::span<Tensor> values, bool find_non_finite,
                                               Results results, std::span<const float*> located,
                                               std::span<const DeferredProduct* const> deferred) {
  const bool in_process_sum = !several_processes() && results != Results::everywhere;
  if (!in_process_sum || num_replicas_ == 1) {  // each replica computes its deferred values whole, first
    for (size_t i = 0; i < deferred.size(); ++i) {
      if (deferred[i] != nullptr) deferred[i]->compute_rows(0, deferred[i]->rows, values[i].data());
    }
    deferred = {};
  }
  if (num_replicas_ == 1) {
    locate_results(values, located, false);
    size_t first = values.size();
    for (size_t i = 0; i < values.size() && find_non_finite && first == values.size(); ++i) {
      const Tensor& t = values[i];
      if (t.defined() && !t.is_abstract() && !all_finite(t.data(), t.size())) first = i;
    }
    return first;
  }
  int64_t elements = 0, largest = 0;
  bool concrete = false;  // some value has storage (a planned step has none: nothing to sum)
  for (const Tensor& t : values) {
    if (!t.defined()) continue;
    elements += t.size();
    largest = std::max(largest, t.bytes());
    concrete = concrete || !t.is_abstract();
  }
  const std::vector<int> children = ReductionTree::children(replica, num_replicas_);
  WorkspaceCharge receive(ledger_, replica, children.empty() ? 0 : largest, "all_reduce");
  if (several_processes() && replica == first_) stage_partials(elements, results, values);
  // In one process, the sum of the replicas' shards goes where they read it: nothing is copied back.
  if (in_process_sum && concrete && replica == first_ && in_process_sum_.size() < static_cast<size_t>(elements)) {
    in_process_sum_.resize(static_cast<size_t>(elements));
  }
  if (in_process_sum && replica == first_) next_sum_part_.store(0, std::memory_order_relaxed);
  posted(replica) = Posted{values, nullptr, deferred};
  barrier_(replica);
  check_same_shapes(replica, "all_reduce", first_, false);
  if (in_process_sum) {  // nothing to finish: each replica reads its shard where the parts were summed
    non_finite_votes_[static_cast<size_t>(local(replica))] = sum_claimed_parts(elements, op, find_non_finite);
    locate_results(values, located, true);
    return finish_all_reduce(replica, elements, children.size());
  }
  const ShardRange mine = shard_range(elements, local_replicas_, local(replica));
  const size_t summed_vote = local_sum_range(mine.begin, mine.end, op, find_non_finite, false);
  if (several_processes()) {
    barrier_(replica);
    if (replica == first_) all_reduce_across_processes(elements, op, results);
    barrier_(replica);
  }
  // Every process's replicas together cover every element of the whole sum, so each process finds
  // the same first non-finite tensor without asking the others.
  non_finite_votes_[static_cast<size_t>(local(replica))] = finish_range(op, mine.begin, mine.end, find_non_finite, results, summed_vote);
  locate_results(values, located, false);  // before the leader's next call may stage elsewhere
  return finish_all_reduce(replica, elements, children.size());
}

void InProcessCollectives::record_all_reduce_traffic(int replica, int64_t elements, size_t children) {
  const int64_t links = static_cast<int64_t>(children) + (replica == 0 ? 0 : 1);
  ledger_.core(replica).record_collective(links * bytes_of(elements), links * bytes_of(elements));
}

void InProcessCollectives::record_host_all_reduce(int replica, std::span<const Tensor> values) {
  int64_t elements = 0, largest = 0;
  for (const Tensor& t : values) {
    if (!t.defined()) continue;
    elements += t.size();
    largest = std::max(largest, t.bytes());
  }
  const std::vector<int> children = ReductionTree::children(replica, num_replicas_);
  { const WorkspaceCharge receive(ledger_, replica, children.empty() ? 0 : largest, "all_reduce"); }
  record_all_reduce_traffic(replica, elements, children.size());
}

size_t InProcessCollectives::finish_all_reduce(int replica, int64_t elements, size_t children) {
  barrier_(replica);  // every range is reduced and copied out; the published spans may go
  record_all_reduce_traffic(replica, elements, children);
  // Written again only after the next all_reduce's first barrier, which this replica must reach first.
  return *std::min_element(non_finite_votes_.begin(), non_finite_votes_.end());
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
  if (several_processes() && replica == first_ && !value.is_abstract()) staging_.resize(static_cast<size_t>(value.size()));
  posted(replica) = Posted{{}, &value};
  barrier_(replica);
  check_same_shapes(replica, "reduce_scatter", first_, false);
  if (!value.is_abstract()) {
    // This process's partial sum over its replicas (all of it in one process: the sum), then in
    // several processes the processes' partials of each shard summed where the shard lives.
    const ShardRange part = several_processes() ? shard_range(value.size(), local_replicas_, local(replica)) : mine;
    float* sum = several_processes() ? staging_.data() + part.begin : shard.data();
    std::vector<const float*> in(static_cast<size_t>(local_replicas_));
    for (size_t r = 0; r < in.size(); ++r) in[r] = posted_[r].tensor->data() + part.begin;
    tree_sum(in, sum, part.size());
    if (several_processes()) {
      barrier_(replica);
      if (replica == first_) reduce_scatter_across_processes(value.size());
      barrier_(replica);
      std::memcpy(shard.data(), staging_.data() + mine.begin, static_cast<size_t>(mine.size()) * sizeof(float));
    }
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

Tensor InProcessCollectives::all_gather(int replica, const Tensor& shard, std::vector<int64_t>* rows_before) {
  if (shard.rank() == 0) throw std::logic_error("all_gather: shards need a leading dimension");
  posted(replica) = Posted{{}, &shard};
  if (num_replicas_ > 1) barrier_(replica);
  if (local_replicas_ > 1) check_same_shapes(replica, "all_gather (beyond dim 0)", first_, true);
  if (replica == first_) gather_rows_across_processes(shard, rows_before_);  // and the rows, across processes
  if (num_replicas_ > 1) barrier_(replica);
  if (rows_before != nullptr) *rows_before = rows_before_;
  Shape out_shape = shard.shape();
  out_shape[0] = rows_before_.back();
  Tensor out = Tensor::empty(out_shape);
  if (!out.is_abstract() && several_processes()) {
    std::memcpy(out.data(), staging_.data(), static_cast<size_t>(out.size()) * sizeof(float));
  } else if (!out.is_abstract()) {
    for (int r = 0; r < num_replicas_; ++r) {
      const Tensor& t = *posted_[static_cast<size_t>(r)].tensor;
      out.slice_rows(rows_before_[static_cast<size_t>(r)], rows_before_[static_cast<size_t>(r) + 1]).copy_from(t);
    }
  }
  if (num_replicas_ == 1) return out;
  barrier_(replica);
  // Up the tree: each subtree's shards; down the tree: the whole result.
  const int64_t row_bytes = bytes_of(num_elements(Shape(shard.shape().begin() + 1, shard.shape().end())));
  auto subtree_bytes = [&](int first) {
    const int end = ReductionTree::subtree_end(first, num_replicas_);
    return (rows_before_[static_cast<size_t>(end)] - rows_before_[static_cast<size_t>(first)]) * row_bytes;
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

void InProcessCollectives::copy_other_processes_ranges(std::span<Tensor> values) const {
  for (size_t i = 0; i < values.size(); ++i) {
    Tensor& mine = values[i];
    const Tensor& leader = posted_[0].values[i];
    if (!mine.defined() || mine.is_abstract() || leader.data() == mine.data()) continue;
    const ShardRange here = this_process_range(mine.size());
    std::memcpy(mine.data(), leader.data(), static_cast<size_t>(here.begin) * sizeof(float));
    std::memcpy(mine.data() + here.end, leader.data() + here.end, static_cast<size_t>(mine.size() - here.end) * sizeof(float));
  }
}

void InProcessCollectives::share_process_shards(int replica, std::span<Tensor> values) {
  if (num_replicas_ == 1) return;
  if (!several_processes()) return barrier_(replica);
  posted(replica) = Posted{values, nullptr};
  barrier_(replica);
  check_same_shapes(replica, "share_process_shards", first_, false);
  if (replica == first_) share_parameters_across_processes();
  barrier_(replica);
  copy_other_processes_ranges(values);
  barrier_(replica);  // the published spans may go
}

void InProcessCollectives::all_gather_shards(int replica, std::span<Tensor> values) {
  if (num_replicas_ == 1) return;
  posted(replica) = Posted{values, nullptr};
  barrier_(replica);
  check_same_shapes(replica, "all_gather_shards", first_, false);
  // Each replica copies the other local replicas' shards into its own tensors, where they are not
  // the same host buffer as the owner's; then the leader gathers the other processes' shards and the
  // others copy them from it.
  for (size_t i = 0; i < values.size(); ++i) {
    Tensor& mine = values[i];
    if (!mine.defined() || mine.is_abstract()) continue;
    for (int r = first_; r < first_ + local_replicas_; ++r) {
      const Tensor& theirs = posted(r).values[i];
      const ShardRange range = shard_range(mine.size(), num_replicas_, r);
      if (r == replica || theirs.data() == mine.data() || range.size() == 0) continue;
      std::memcpy(mine.data() + range.begin, theirs.data() + range.begin, static_cast<size_t>(range.size()) * sizeof(float));
    }
  }
  if (several_processes()) {
    barrier_(replica);
    if (replica == first_) all_gather_shards_across_processes();
    barrier_(replica);
    copy_other_processes_ranges(values);
  }
  barrier_(replica);
  // As all_gather: up the tree each subtree's shards, down the tree the whole tensors.
  int64_t elements = 0, subtree = 0;
  const int end = ReductionTree::subtree_end(replica, num_replicas_);
  for (const Tensor& t : values) {
    if (!t.defined()) continue;
    elements += t.size();
    subtree += subtree_elements(t.size(), num_replicas_, replica, end);
  }
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
  const bool root_here = root >= first_ && root < first_ + local_replicas_;
  posted(replica) = Posted{{}, &value};
  barrier_(replica);
  check_same_shapes(replica, "broadcast", root_here ? root : first_, false);
  if (several_processes()) {
    if (replica == first_ && !value.is_abstract()) {
      staging_.resize(static_cast<size_t>(value.size()));
      if (root_here) std::memcpy(staging_.data(), posted(root).tensor->data(), static_cast<size_t>(value.bytes()));
      processes_->broadcast(staging_, root / local_replicas_);
    }
    barrier_(replica);
    if (replica != root && !value.is_abstract()) std::memcpy(value.data(), staging_.data(), static_cast<size_t>(value.bytes()));
  } else if (replica != root && !value.is_abstract()) {
    value.copy_from(*posted(root).tensor);
  }
  barrier_(replica);
  // The same tree, relabelled so that the root is its node 0.
  const int relative = (replica - root + num_replicas_) % num_replicas_;
  const int64_t links = static_cast<int64_t>(ReductionTree::children(relative, num_replicas_).size());
  ledger_.core(replica).record_collective(links * value.bytes(), relative == 0 ? 0 : value.bytes());
}

int64_t InProcessCollectives::all_reduce_min(int replica, int64_t value) {
  if (num_replicas_ == 1) return value;
  votes_[static_cast<size_t>(local(replica))] = value;
  barrier_(replica);
  if (replica == first_) {
    vote_result_ = *std::min_element(votes_.begin(), votes_.end());
    if (several_processes()) vote_result_ = processes_->min(vote_result_);
  }
  barrier_(replica);
  // The next call's leader writes vote_result_ only after every replica reached that call's barrier.
  return vote_result_;
}

void InProcessCollectives::barrier(int replica) {
  barrier_(replica);
  if (!several_processes()) return;
  if (replica == first_) processes_->barrier();
  barrier_(replica);
}

}  // namespace keel
