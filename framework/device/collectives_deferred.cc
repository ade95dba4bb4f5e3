// The optimizer's all-reduce over kernel gradients the replicas deferred (framework/device/
// deferred_product.h). When every replica deferred its product, the products and their tree sum are
// computed together, block by block in registers (framework/device/chained_product.h). Otherwise
// each deferred product is computed a tile of rows at a time into a scratch that stays in cache and
// the tile's tree sum taken at once. Either way the products a replica would have written and the
// same sums: the same bits.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "framework/core/finite.h"
#include "framework/device/collectives.h"

namespace keel {
namespace {

// Floats of one replica's tile: the seed MLP's kernel (784 x 128) in 7 tiles of 112 rows; 8 replicas'
// tiles (448 KiB) stay in a core's L2.
constexpr int64_t kTileFloats = 112 * 128;
// Parts of an in-process sum per local replica (sum_claimed_parts): enough for the replicas of a
// slot that is ahead to take over a slower one's, few enough that each part is blocks of rows.
constexpr int kSumPartsPerReplica = 4;

// Elements [lo, hi) of the sum of parts' products (cols floats a row; the value `shape` describes:
// zeros outside the product's rows), divided by divisor, into out: whole rows at once, a row cut by
// lo or hi by its columns.
void chained_range(std::span<const ChainedOperands> parts, const DeferredProduct& shape, int64_t lo, int64_t hi, float* out,
                   int divisor) {
  const int64_t cols = shape.cols;
  for (int64_t at = lo; at < hi;) {
    const int64_t row = at / cols, c0 = at % cols;
    if (c0 == 0 && hi - at >= cols) {
      const int64_t rows = (hi - at) / cols;
      chained_value_rows(parts, shape.first_row, shape.product_row_count(), row, row + rows, 0, cols, out + (at - lo), cols, divisor);
      at += rows * cols;
    } else {
      const int64_t c1 = std::min(cols, c0 + (hi - at));
      chained_value_rows(parts, shape.first_row, shape.product_row_count(), row, row + 1, c0, c1, out + (at - lo), cols, divisor);
      at += c1 - c0;
    }
  }
}

int64_t first_non_finite(const float* values, int64_t count) {
  if (all_finite(values, count)) return count;
  int64_t k = 0;
  while (std::isfinite(values[k])) ++k;
  return k;
}

}  // namespace

bool InProcessCollectives::posted_deferred(size_t i) const {
  for (const Posted& p : posted_) {
    if (p.deferred_at(i) != nullptr) return true;
  }
  return false;
}

ShardRange InProcessCollectives::summation_share(int64_t elements, int part, int parts) const {
  // A boundary of the even split, moved within its tensor to the nearest multiple of kChainedBlockRows rows
  // when the tensor is deferred: the same function for a share's end and the next one's begin, and
  // never decreasing, so the shares still cover every element once.
  const auto snap = [&](int64_t boundary) {
    int64_t at = 0;
    for (size_t i = 0; i < posted_[0].values.size(); ++i) {
      const Tensor& t = posted_[0].values[i];
      const int64_t size = t.defined() ? t.size() : 0;
      if (boundary < at + size) {
        const DeferredProduct* d = nullptr;
        for (const Posted& p : posted_) d = d != nullptr ? d : p.deferred_at(i);
        if (d == nullptr || boundary == at) return boundary;
        // Blocks of the product's rows, counted from its first (the rows before it are zeros).
        const int64_t block = kChainedBlockRows * d->cols, product = d->first_row * d->cols;
        const int64_t into = boundary - at - product;
        const int64_t rounded = into < 0 ? -((-into + block / 2) / block * block) : (into + block / 2) / block * block;
        return at + std::clamp(product + rounded, int64_t{0}, size);
      }
      at += size;
    }
    return boundary;
  };
  const ShardRange even = shard_range(elements, parts, part);
  return {snap(even.begin), snap(even.end)};
}

size_t InProcessCollectives::sum_claimed_parts(int64_t elements, ReduceOp op, bool find_non_finite) {
  const int parts = kSumPartsPerReplica * local_replicas_;
  size_t vote = posted_[0].values.size();
  for (int p = next_sum_part_.fetch_add(1, std::memory_order_relaxed); p < parts;
       p = next_sum_part_.fetch_add(1, std::memory_order_relaxed)) {
    const ShardRange range = summation_share(elements, p, parts);
    if (range.size() > 0) vote = std::min(vote, local_sum_range(range.begin, range.end, op, find_non_finite, true));
  }
  return vote;
}

int64_t InProcessCollectives::sum_deferred(size_t i, int64_t lo, int64_t hi, std::span<const float* const> in, float* out,
                                           int divisor, bool check) const {
  // Every replica's operands where all deferred it (the products and their sum at once), checked
  // for one shape.
  const DeferredProduct* shape = nullptr;
  thread_local std::vector<ChainedOperands> chained;
  chained.clear();
  for (const Posted& p : posted_) {
    const DeferredProduct* d = p.deferred_at(i);
    if (d == nullptr) continue;
    if (shape == nullptr) shape = d;
    if (d->rows != shape->rows || d->cols != shape->cols || d->first_row != shape->first_row ||
        d->product_row_count() != shape->product_row_count()) {
      throw std::logic_error("all_reduce_for_update: replicas deferred products of different shapes");
    }
    chained.push_back(d->operands);
  }
  const int64_t cols = shape->cols;
  if (shape->rows * cols != posted_[0].values[i].size()) throw std::logic_error("all_reduce_for_update: a product of another size");
  if (chained.size() == posted_.size() && chained.size() <= static_cast<size_t>(kMaxChainedParts)) {
    chained_range(chained, *shape, lo, hi, out, divisor);
    return check ? first_non_finite(out, hi - lo) : hi - lo;
  }
  const int64_t tile_rows = std::max<int64_t>(1, kTileFloats / std::max<int64_t>(cols, 1));
  thread_local std::vector<float> scratch;
  const size_t replicas = posted_.size();
  if (scratch.size() < replicas * static_cast<size_t>(tile_rows * cols)) scratch.resize(replicas * static_cast<size_t>(tile_rows * cols));
  std::vector<const float*> parts(replicas);
  int64_t first_bad = hi - lo;
  for (int64_t row = lo / cols; row * cols < hi; row += tile_rows) {
    const int64_t end_row = std::min({shape->rows, row + tile_rows, (hi + cols - 1) / cols});
    const int64_t from = std::max(lo, row * cols), to = std::min(hi, end_row * cols);  // elements of the tensor
    for (size_t r = 0; r < replicas; ++r) {
      const DeferredProduct* d = posted_[r].deferred_at(i);
      if (d == nullptr) {
        parts[r] = in[r] + (from - lo);  // written whole by its replica
        continue;
      }
      float* tile = scratch.data() + r * static_cast<size_t>(tile_rows * cols);
      d->compute_rows(row, end_row, tile);
      parts[r] = tile + (from - row * cols);
    }
    const bool checking = check && first_bad == hi - lo;
    const int64_t ok = tree_sum_into(parts, out + (from - lo), to - from, divisor, checking);
    if (checking && ok < to - from) first_bad = from - lo + ok;
  }
  return first_bad;
}

}  // namespace keel
