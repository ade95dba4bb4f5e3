// InProcessCollectives::all_to_all: the exchange of a column-parallel layer (framework/device/layout.h),
// between the replicas of one process.
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

#include "framework/device/collectives.h"
#include "framework/device/ledger.h"

namespace keel {

namespace {

// Piece `i` of a (rows x cols) matrix cut along `axis` at `begin` (splits[i] rows or columns) into
// `out`, whose rows are `out_ld` floats apart, at row/column `at` of the other axis.
void copy_piece(const Tensor& value, int axis, int64_t begin, int64_t size, float* out, int64_t out_ld, int64_t at) {
  const int64_t cols = value.dim(1);
  const float* in = value.data();
  if (axis == 0) {  // rows [begin, begin + size), every column: into out's columns [at, at + cols)
    for (int64_t r = 0; r < size; ++r) {
      std::memcpy(out + r * out_ld + at, in + (begin + r) * cols, static_cast<size_t>(cols) * sizeof(float));
    }
  } else {  // every row, columns [begin, begin + size): into out's rows [at, at + rows)
    for (int64_t r = 0; r < value.dim(0); ++r) {
      std::memcpy(out + (at + r) * out_ld, in + r * cols + begin, static_cast<size_t>(size) * sizeof(float));
    }
  }
}

}  // namespace

Tensor InProcessCollectives::all_to_all(int replica, const Tensor& value, int split_axis, std::span<const int64_t> splits) {
  if (value.rank() != 2 || (split_axis != 0 && split_axis != 1) || static_cast<int>(splits.size()) != num_replicas_ ||
      std::accumulate(splits.begin(), splits.end(), int64_t{0}) != value.dim(split_axis)) {
    throw std::logic_error("all_to_all: a " + shape_string(value.shape()) + " matrix cannot be cut along axis " +
                           std::to_string(split_axis) + " into " + std::to_string(splits.size()) + " pieces");
  }
  if (several_processes()) throw std::logic_error("all_to_all: keel's exchange does not cross processes yet");
  const int other = 1 - split_axis;
  const int64_t mine = splits[static_cast<size_t>(replica)];
  const int64_t begin = std::accumulate(splits.begin(), splits.begin() + replica, int64_t{0});
  posted(replica) = Posted{{}, &value};
  if (num_replicas_ > 1) barrier_(replica);
  int64_t along = 0;  // the other axis of the result: every replica's piece side by side
  for (int r = 0; r < num_replicas_; ++r) along += posted(r).tensor->dim(other);
  Tensor out = Tensor::empty(split_axis == 0 ? Shape{mine, along} : Shape{along, mine});
  int64_t received = 0, at = 0;
  for (int r = 0; r < num_replicas_; ++r) {
    const Tensor& theirs = *posted(r).tensor;
    if (theirs.dim(other) > 0 && !out.is_abstract() && mine > 0) {
      copy_piece(theirs, split_axis, begin, mine, out.data(), out.dim(1), at);
    }
    if (r != replica) received += mine * theirs.dim(other);
    at += theirs.dim(other);
  }
  if (num_replicas_ > 1) barrier_(replica);  // every piece is copied; the published values may go
  const int64_t sent = (value.dim(split_axis) - mine) * value.dim(other);
  ledger_.core(replica).record_collective(sent * static_cast<int64_t>(sizeof(float)), received * static_cast<int64_t>(sizeof(float)));
  return out;
}

}  // namespace keel
