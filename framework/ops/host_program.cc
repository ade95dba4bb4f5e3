// Ops' arithmetic inside a host program (ops/host_program.h).
#include "framework/ops/host_program.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/autodiff/recompute.h"
#include "framework/core/thread_pool.h"
#include "framework/device/chained_product.h"
#include "framework/device/collectives.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/ops/gemm.h"
#include "framework/ops/op_util.h"

namespace keel::ops::detail {
namespace {

// Rows of a chained kernel gradient per task: whole blocks of the chained products.
constexpr int64_t kChainedTaskRows = 4 * kChainedBlockRows;

// Host memory of the calling thread for the replicas' partial results, reused, outside the ledger
// (as gemm_scratch): `parts` slots of `each` floats, every slot 64-byte aligned, as a tensor's buffer
// is, so that each replica's kernels run on the alignment they have on its own buffer.
// The first 64-byte boundary in `buffer`, which holds at least 16 floats more than are used past it.
float* aligned_in(std::vector<float>& buffer) {
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<float*>((address + 63) & ~uintptr_t{63});
}

float* replica_scratch(int parts, int64_t each, int64_t& stride) {
  stride = (each + 15) / 16 * 16;
  thread_local std::vector<float> scratch;
  const size_t floats = static_cast<size_t>(parts) * static_cast<size_t>(stride) + 16;
  if (scratch.size() < floats) scratch.resize(floats);
  return aligned_in(scratch);
}

int64_t equal_rows(const ReplicaRows& rows, const char* op) {
  for (int r = 1; r < rows.replicas(); ++r) {
    if (rows.rows(r) != rows.rows(0)) throw std::logic_error(std::string(op) + ": replicas of unequal rows in a host program");
  }
  return rows.rows(0);
}

}  // namespace

const ReplicaRows* rows_of(const Tensor& x) {
  const ReplicaRows* rows = replica_rows();
  return rows != nullptr && x.defined() && x.rank() >= 1 && x.dim(0) == rows->total() ? rows : nullptr;
}

namespace {

// y's rows of each replica = its rows of `in` (N x k) · b: one product per replica's rows, each on one
// thread, as each replica computes its own.
void products_by_replica(float* out, const float* in, int64_t k, int64_t m, const ConstMatrixMap& bm, bool transpose_b,
                         const ReplicaRows& rows) {
  const double flops = 2.0 * static_cast<double>(rows.total()) * static_cast<double>(k) * static_cast<double>(m);
  parallel_for(
      rows.replicas(),
      [&](int64_t r) {
        const KernelThreadsScope one(1);
        const int64_t begin = rows.begin(static_cast<int>(r)), n = rows.rows(static_cast<int>(r));
        const ConstMatrixMap ar(in + begin * k, n, k);
        if (transpose_b) {
          gemm(MatrixMap(out + begin * m, n, m), ar, bm.transpose());
        } else {
          gemm(MatrixMap(out + begin * m, n, m), ar, bm);
        }
      },
      threads_worth(flops, kGemmMinFlopsPerThread));
}

// The same as one product over all the rows (gemm's tiles, as a one-replica step computes it).
void product_whole(float* out, const float* in, int64_t k, int64_t m, const ConstMatrixMap& bm, bool transpose_b,
                   int64_t total) {
  const ConstMatrixMap a(in, total, k);
  if (transpose_b) {
    gemm(MatrixMap(out, total, m), a, bm.transpose());
  } else {
    gemm(MatrixMap(out, total, m), a, bm);
  }
}

// A 64-byte aligned block of `floats` in `buffer`, filled with values of many magnitudes and both signs.
float* probe_operand(std::vector<float>& buffer, int64_t floats, uint64_t& state) {
  buffer.assign(static_cast<size_t>(floats) + 16, 0.0f);
  float* p = aligned_in(buffer);
  for (int64_t i = 0; i < floats; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float unit = static_cast<float>(state >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    p[i] = std::ldexp(unit - 0.5f, static_cast<int>((state >> 32) % 9) - 4);
  }
  return p;
}

// The checks below, each remembered per shape.
enum class CheckKind { product, product_transposed, chained_mean };

// A shape's answer to one of the checks below, computed once per thread and remembered (a model has
// a few shapes; a long-lived thread that sees more forgets them all past 64).
template <class Check>
bool remembered(CheckKind kind, const ReplicaRows& rows, int64_t k, int64_t m, Check check) {
  struct Known {
    CheckKind kind;
    std::vector<int64_t> rows;
    int64_t k, m;
    bool answer;
  };
  thread_local std::vector<Known> known;
  const auto same_rows = [&rows](const std::vector<int64_t>& counts) {
    if (static_cast<int>(counts.size()) != rows.replicas()) return false;
    for (int r = 0; r < rows.replicas(); ++r) {
      if (counts[static_cast<size_t>(r)] != rows.rows(r)) return false;
    }
    return true;
  };
  for (const Known& s : known) {
    if (s.kind == kind && s.k == k && s.m == m && same_rows(s.rows)) return s.answer;
  }
  const bool answer = check();
  if (known.size() >= 64) known.clear();
  std::vector<int64_t> counts;
  for (int r = 0; r < rows.replicas(); ++r) counts.push_back(rows.rows(r));
  known.push_back({kind, std::move(counts), k, m, answer});
  return answer;
}

bool same_bits(const float* a, const float* b, int64_t n) {
  return std::equal(a, a + n, b, [](float x, float y) { return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y); });
}

}  // namespace

// Whether one product over every replica's rows gives each row the bits of its replica's own product.
// With Debian's oneDNN 2.6 on x86 an element's value depends on the inner dimension alone (ops/sgemm.h),
// so it does, and the host program saves the replicas' calls (on `v3-8` x 16 rows, 8 sgemm calls
// and 8 packings of the weights become gemm's 4); but that is a property of a library build, not a
// promise. So it is checked, once per shape and thread, on operands laid out as the step's (each
// replica's rows where they are in the batch, 64-byte aligned): an order of summation that differs
// anywhere shows in the bits of some element of random operands. Where it does, the replicas' products.
bool products_split_alike(const ReplicaRows& rows, int64_t k, int64_t m, bool transpose_b) {
  return remembered(transpose_b ? CheckKind::product_transposed : CheckKind::product, rows, k, m, [&] {
    std::vector<float> a_buffer, b_buffer, apart_buffer, whole_buffer;
    uint64_t state = 0x9e3779b97f4a7c15ull;
    const float* a = probe_operand(a_buffer, rows.total() * k, state);
    const float* b = probe_operand(b_buffer, k * m, state);
    float* apart = probe_operand(apart_buffer, rows.total() * m, state);
    float* whole = probe_operand(whole_buffer, rows.total() * m, state);
    const ConstMatrixMap bm(b, transpose_b ? m : k, transpose_b ? k : m);
    products_by_replica(apart, a, k, m, bm, transpose_b, rows);
    product_whole(whole, a, k, m, bm, transpose_b, rows.total());
    return same_bits(apart, whole, rows.total() * m);
  });
}

void replica_products(Tensor& y, const Tensor& a, const Tensor& b, bool transpose_b, const ReplicaRows& rows) {
  const int64_t k = a.dim(1), m = y.dim(1);
  const ConstMatrixMap bm = b.matrix();
  if (products_split_alike(rows, k, m, transpose_b)) {
    product_whole(y.data(), a.data(), k, m, bm, transpose_b, rows.total());
  } else {
    products_by_replica(y.data(), a.data(), k, m, bm, transpose_b, rows);
  }
}

namespace {

// out (k x m) = the replicas' mean of x_rᵀ · d_r over their n rows each, by keel's chained products
// (the tree's sums and divisor in registers).
void mean_chained(float* out, const float* x, const float* d, int64_t k, int64_t m, int64_t n, const ReplicaRows& rows) {
  const int replicas = rows.replicas();
  std::vector<ChainedOperands> parts;
  for (int r = 0; r < replicas; ++r) parts.push_back({x + rows.begin(r) * k, k, d + rows.begin(r) * m, m, n});
  const double flops = 2.0 * static_cast<double>(k) * static_cast<double>(m) * static_cast<double>(n) * replicas;
  parallel_for(
      (k + kChainedTaskRows - 1) / kChainedTaskRows,
      [&](int64_t t) {
        const int64_t begin = t * kChainedTaskRows, end = std::min(k, begin + kChainedTaskRows);
        chained_value_rows(parts, 0, k, begin, end, 0, m, out + begin * m, m, replicas);
      },
      threads_worth(flops, kGemmMinFlopsPerThread));
}

// The same by each replica's oneDNN product and the collectives' tree mean.
void mean_by_replica(float* out, const float* x, const float* d, int64_t k, int64_t m, int64_t n, const ReplicaRows& rows) {
  const int replicas = rows.replicas();
  const double flops = 2.0 * static_cast<double>(k) * static_cast<double>(m) * static_cast<double>(n) * replicas;
  int64_t stride = 0;
  float* partial = replica_scratch(replicas, k * m, stride);
  parallel_for(
      replicas,
      [&](int64_t r) {
        const KernelThreadsScope one(1);
        const int64_t begin = rows.begin(static_cast<int>(r));
        gemm(MatrixMap(partial + r * stride, k, m), ConstMatrixMap(x + begin * k, n, k).transpose(),
             ConstMatrixMap(d + begin * m, n, m));
      },
      threads_worth(flops, kGemmMinFlopsPerThread));
  std::vector<const float*> parts;
  for (int r = 0; r < replicas; ++r) parts.push_back(partial + r * stride);
  tree_sum_into(parts, out, k * m, replicas, /*check=*/false);
}

}  // namespace

// Whether a small kernel gradient (one the per-replica step leaves to oneDNN and the all-reduce:
// ops/gemm.h chained_kernel_gradient) comes out of the chained products with the same bits: where
// each replica's product over its few rows is one chain of multiply-adds in row order, as oneDNN 2.6
// computes it, they do, in one pass instead of a oneDNN call per replica and a tree sum (the seed
// MLP's 128 x 10 kernel on `v3-8`: 8 calls). Checked once per shape and thread, as
// products_split_alike is.
bool chained_mean_alike(const ReplicaRows& rows, int64_t k, int64_t m, int64_t n) {
  if (!kChainedProductsVectorized || rows.replicas() > kMaxChainedParts || k * m >= kMinChainedElements) return false;
  return remembered(CheckKind::chained_mean, rows, k, m, [&] {
    std::vector<float> x_buffer, d_buffer, apart_buffer, chained_buffer;
    uint64_t state = 0x2545f4914f6cdd1dull;
    const float* x = probe_operand(x_buffer, rows.total() * k, state);
    const float* d = probe_operand(d_buffer, rows.total() * m, state);
    float* apart = probe_operand(apart_buffer, k * m, state);
    float* chained = probe_operand(chained_buffer, k * m, state);
    mean_by_replica(apart, x, d, k, m, n, rows);
    mean_chained(chained, x, d, k, m, n, rows);
    return same_bits(apart, chained, k * m);
  });
}

void replica_mean_kernel_gradient(Tensor& grad, const Tensor& a, const Tensor& dy, const ReplicaRows& rows) {
  const int replicas = rows.replicas();
  const int64_t n = equal_rows(rows, "matmul"), k = a.dim(1), m = dy.dim(1);
  if ((chained_kernel_gradient(k, m, n, replicas) && replicas <= kMaxChainedParts) || chained_mean_alike(rows, k, m, n)) {
    mean_chained(grad.data(), a.data(), dy.data(), k, m, n, rows);
  } else {
    mean_by_replica(grad.data(), a.data(), dy.data(), k, m, n, rows);
  }
}

void replica_mean_column_sums(const Tensor& dy, float* out, const ReplicaRows& rows) {
  const int replicas = rows.replicas();
  const int64_t cols = dy.dim(-1), width = dy.size() / std::max<int64_t>(dy.dim(0), 1);
  if (cols != width) throw std::logic_error("bias_add: a host program's gradient of (rows, channels) expected");
  int64_t stride = 0;
  float* partial = replica_scratch(replicas, cols, stride);
  std::vector<const float*> parts;
  for (int r = 0; r < replicas; ++r) {
    column_sums(dy.data() + rows.begin(r) * cols, rows.rows(r), cols, cols, partial + r * stride);
    parts.push_back(partial + r * stride);
  }
  tree_sum_into(parts, out, cols, replicas, /*check=*/false);
}

void count_forward_flops_by_rows(int64_t flops_per_row, const ReplicaRows& rows) {
  const DeviceContext& ctx = device_context();
  if (ctx.ledger == nullptr || ctx.ledger->num_cores() != rows.replicas()) return;
  for (int c = 0; c < rows.replicas(); ++c) ctx.ledger->core(c).record_flops(flops_per_row * rows.rows(c), recomputing());
}

}  // namespace keel::ops::detail
