// InProcessCollectives' steps across processes: each is run by the process's first replica (its
// leader) between two barriers of the local replicas, on the first local replica's tensors.
#include <algorithm>
#include <cstring>
#include <vector>

#include "framework/device/collectives.h"
#include "framework/device/process_group.h"

namespace keel {

void InProcessCollectives::stage_partials(int64_t elements, Results results, std::span<const Tensor> values) {
  const std::span<float> shared = processes_->shared_partials(elements);
  shared_memory_ = !shared.empty();
  own_in_place_ = shared_memory_ && results == Results::slice_shards;
  arena_mode_ = own_in_place_ && values_in_arena(values);
  if (!shared_memory_) staging_.resize(static_cast<size_t>(elements));
  stage_ = arena_mode_ ? processes_->gradient_arena(arena_half_).data() : shared_memory_ ? shared.data() : staging_.data();
}

bool InProcessCollectives::values_in_arena(std::span<const Tensor> values) const {
  const std::span<float> arena = processes_->gradient_arena(arena_half_);
  int64_t at = 0;
  size_t j = 0;
  for (const Tensor& t : values) {
    if (!t.defined()) continue;
    if (j == arena_sizes_.size() || arena_sizes_[j] != t.size() || t.is_abstract() || t.dtype() != DType::float32 ||
        at + t.size() > static_cast<int64_t>(arena.size()) || t.data() != arena.data() + at) {
      return false;
    }
    at += t.size();
    ++j;
  }
  return j > 0 && j == arena_sizes_.size();
}

void InProcessCollectives::plan_gradient_arena(int64_t elements) {
  if (!shared_memory_) return;
  // Once: every process reaches here at the same call, with the same elements (the same values).
  if (processes_->gradient_arena(0).empty() && !arena_refused_) arena_refused_ = !processes_->allocate_gradient_arena(elements);
  arena_half_ ^= 1;  // the halves alternate, as the segments do: this call's sum stays valid through the next
  arena_sizes_.clear();
  for (const Tensor& t : posted_[0].values) {
    if (t.defined()) arena_sizes_.push_back(t.size());
  }
}

Collectives::GradientArenaPlan InProcessCollectives::gradient_arena_plan(int replica) const {
  GradientArenaPlan plan;
  if (!several_processes() || replica != first_) return plan;
  const std::span<float> arena = processes_->gradient_arena(arena_half_);
  int64_t at = 0;
  for (const int64_t size : arena_sizes_) {
    if (at + size > static_cast<int64_t>(arena.size())) return {};  // no arena, or one too small for these
    plan.memory.push_back(arena.data() + at);
    plan.sizes.push_back(size);
    at += size;
  }
  return plan;
}

void InProcessCollectives::local_sum_for_processes(size_t i, int64_t at, int64_t lo, int64_t hi,
                                                   std::span<const float*> in) {
  if (arena_mode_) {  // the first replica's values are this process's partials where the others read them
    if (local_replicas_ > 1) tree_sum(in, posted_[0].values[i].data() + lo, hi - lo);  // in place
    return;
  }
  if (!own_in_place_) return tree_sum(in, stage_ + at + lo, hi - lo);  // the packed buffer the processes exchange
  // This process's own range of the tensor stays where it is, summed into the first local replica's
  // tensor (nothing to do for one): the processes read only the others' ranges from stage_.
  const ShardRange own = this_process_range(posted_[0].values[i].size());
  const int64_t cut[4] = {lo, std::clamp(own.begin, lo, hi), std::clamp(own.end, lo, hi), hi};
  for (int part = 0; part < 3; ++part) {
    const int64_t from = cut[part], to = cut[part + 1];
    if (to > from && part != 1) {
      tree_sum(in, stage_ + at + from, to - from);
    } else if (to > from && local_replicas_ > 1) {
      tree_sum(in, posted_[0].values[i].data() + from, to - from);  // in place, as in one process
    }
    for (const float*& p : in) p += to - from;  // local_sum_range points them afresh for each slice
  }
}

void InProcessCollectives::all_reduce_across_processes(int64_t elements, ReduceOp op, Results results) {
  if (shared_memory_) {
    // Where each replica reads only its shard of the slice, this process sums the shards of its
    // replicas, of each tensor: what it reads of the sum is what it summed. Its own partials of
    // them are in the first local replica's tensors.
    std::vector<ShardRange> mine;
    std::vector<const float*> own;
    if (results == Results::slice_shards) {
      int64_t at = 0;
      for (const Tensor& t : posted_[0].values) {
        if (!t.defined()) continue;
        const ShardRange r = this_process_range(t.size());
        if (r.size() > 0 && !t.is_abstract()) {
          mine.push_back({at + r.begin, at + r.end});
          own.push_back(t.data() + r.begin);
        }
        at += t.size();
      }
    } else {
      mine.push_back(shard_range(elements, processes_->size(), processes_->rank()));
    }
    const ProcessGroup::SharedSum sum = processes_->sum_shared_partials(
        elements, op == ReduceOp::Mean ? num_replicas_ : 1, mine, results != Results::slice_shards, own,
        arena_mode_ ? arena_half_ : -1);
    summed_ = sum.values;
    summed_first_non_finite_ = sum.first_non_finite;
    if (results == Results::slice_shards) plan_gradient_arena(elements);
    return;
  }
  processes_->all_reduce_tree(staging_);
  summed_ = staging_.data();
}

void InProcessCollectives::reduce_scatter_across_processes(int64_t elements) {
  const std::vector<ShardRange> ranges = process_ranges(elements);
  const ShardRange here = ranges[static_cast<size_t>(first_ / local_replicas_)];
  // In place: the exchange reads every range of staging_ before the sum overwrites this one.
  processes_->reduce_scatter_tree(staging_, ranges, std::span<float>(staging_).subspan(static_cast<size_t>(here.begin),
                                                                                      static_cast<size_t>(here.size())));
}

void InProcessCollectives::all_gather_shards_across_processes() {
  int64_t elements = 0, largest_share = 0;  // process 0's ranges are the largest (shard_range)
  for (const Tensor& t : posted_[0].values) {
    if (!t.defined() || t.is_abstract()) continue;
    elements += t.size();
    largest_share += process_ranges(t.size())[0].size();
  }
  const std::span<float> mine = processes_->shared_partials(largest_share);
  if (mine.empty()) {  // between machines: one MPI all-gather per tensor
    for (Tensor& t : posted_[0].values) {
      if (!t.defined() || t.is_abstract()) continue;
      processes_->all_gather_ranges(std::span<float>(t.data(), static_cast<size_t>(t.size())), process_ranges(t.size()));
    }
    return;
  }
  // One machine: each process packs its range of every tensor into its shared segment, then copies
  // every other process's ranges out of theirs.
  const int me = processes_->rank();
  const auto copy_ranges = [&](int process, const float* packed, bool pack) {
    int64_t at = 0;
    for (Tensor& t : posted_[0].values) {
      if (!t.defined() || t.is_abstract()) continue;
      const ShardRange r = process_ranges(t.size())[static_cast<size_t>(process)];
      float* values = t.data() + r.begin;
      if (pack) std::memcpy(mine.data() + at, values, static_cast<size_t>(r.size()) * sizeof(float));
      if (!pack) std::memcpy(values, packed + at, static_cast<size_t>(r.size()) * sizeof(float));
      at += r.size();
    }
    return at;
  };
  const int64_t own = copy_ranges(me, nullptr, /*pack=*/true);
  processes_->shared_barrier();
  for (int p = 0; p < processes_->size(); ++p) {
    if (p != me) copy_ranges(p, processes_->shared_segment(p), /*pack=*/false);
  }
  processes_->count_shared_exchange(own * (processes_->size() - 1) * static_cast<int64_t>(sizeof(float)),
                                    (elements - own) * static_cast<int64_t>(sizeof(float)));
}

void InProcessCollectives::share_parameters_across_processes() {
  const bool shares = processes_->shares_memory();
  bool placed = shares;
  for (const Tensor& t : posted_[0].values) {
    if (t.defined() && !t.is_abstract() && !processes_->in_shared_memory(t)) placed = false;
  }
  if (!shares || processes_->shared_barrier_any(!placed)) {
    all_gather_shards_across_processes();  // every process's copy whole, then (once) one copy for all
    if (shares && !placement_refused_) {
      placement_refused_ = !processes_->place_in_shared_memory(posted_[0].values);
    }
    return;
  }
  // The other processes wrote their shards into this process's parameters: what was derived from
  // them (a convolution's reordered kernel) is stale.
  for (Tensor& t : posted_[0].values) {
    if (t.defined() && !t.is_abstract()) t.storage().data();
  }
}

// rows_before[r]: the rows of replicas before r, for every replica of the slice; and, in several
// processes, every replica's shard concatenated in staging_.
void InProcessCollectives::gather_rows_across_processes(const Tensor& first, std::vector<int64_t>& rows_before) {
  std::vector<int64_t> local_rows, rows(static_cast<size_t>(num_replicas_));
  for (const Posted& p : posted_) local_rows.push_back(p.tensor->dim(0));
  if (several_processes()) {
    processes_->all_gather_bytes(local_rows.data(), static_cast<int64_t>(local_rows.size() * sizeof(int64_t)), rows.data());
  } else {
    rows = local_rows;
  }
  rows_before.assign(rows.size() + 1, 0);
  for (size_t r = 0; r < rows.size(); ++r) rows_before[r + 1] = rows_before[r] + rows[r];
  if (!several_processes() || first.is_abstract()) return;
  const int64_t row = num_elements(Shape(first.shape().begin() + 1, first.shape().end()));
  staging_.resize(static_cast<size_t>(rows_before.back() * row));
  for (int r = first_; r < first_ + local_replicas_; ++r) {
    const Tensor& t = *posted_[static_cast<size_t>(r - first_)].tensor;
    if (t.size() > 0) std::memcpy(staging_.data() + rows_before[static_cast<size_t>(r)] * row, t.data(), static_cast<size_t>(t.bytes()));
  }
  std::vector<ShardRange> ranges;
  for (int p = 0; p < processes_->size(); ++p) {
    const size_t begin = static_cast<size_t>(p * local_replicas_), end = begin + static_cast<size_t>(local_replicas_);
    ranges.push_back({rows_before[begin] * row, rows_before[end] * row});
  }
  processes_->all_gather_ranges(staging_, ranges);
}

}  // namespace keel
