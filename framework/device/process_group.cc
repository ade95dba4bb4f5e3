#include "framework/device/process_group.h"

// MPI's C interface only: no deprecated C++ bindings to link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include <sys/statvfs.h>

namespace keel {
namespace {

constexpr int64_t kFloat = static_cast<int64_t>(sizeof(float));
// The most elements one MPI call moves (counts and displacements are ints); all_reduce_tree splits
// longer buffers, which changes no bits (the sum is elementwise).
constexpr int64_t kMaxElementsPerCall = int64_t{1} << 28;

std::vector<int> counts_of(std::span<const ShardRange> ranges) {
  std::vector<int> out;
  for (const ShardRange& r : ranges) out.push_back(static_cast<int>(r.size()));
  return out;
}

std::vector<int> begins_of(std::span<const ShardRange> ranges) {
  std::vector<int> out;
  for (const ShardRange& r : ranges) out.push_back(static_cast<int>(r.begin));
  return out;
}

}  // namespace

// MPI-3 shared memory on one machine: each process's segment holds two halves of `capacity` floats,
// used by alternate sums, each followed by kVoteFloats for the process's vote on that sum (its first
// non-finite element); `segments[p]` is process p's segment as mapped here.
struct ProcessGroup::SharedWindow {
  static constexpr int64_t kVoteFloats = 16;  // 64 bytes: the next half starts on a cache line too
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Win window = MPI_WIN_NULL;
  int64_t capacity = 0;
  std::vector<float*> segments;
  int half = 0;  // the half the current sum uses

  int64_t stride() const { return capacity + kVoteFloats; }
  float* current(int process) const { return segments[static_cast<size_t>(process)] + half * stride(); }
  float* vote(int process) const { return current(process) + capacity; }

  void release() {
    if (window != MPI_WIN_NULL) {
      MPI_Win_unlock_all(window);
      MPI_Win_free(&window);
    }
    segments.clear();
    capacity = 0;
  }
};

// place_in_shared_memory's window: process 0's segment holds every placed storage, each at a
// 64-byte boundary; the other processes' segments are empty.
struct ProcessGroup::ParameterWindow {
  MPI_Win window = MPI_WIN_NULL;
  char* base = nullptr;  // process 0's segment, as mapped here
  int64_t bytes = 0;
  // Held weakly: a variable destroyed meanwhile releases its ledger charges as usual (its buffer
  // here is not its own to free), and only the living move back.
  std::vector<std::weak_ptr<Storage>> placed;
};

// allocate_gradient_arena's window: each process's segment holds two halves of `capacity` floats
// (a multiple of 16: each half starts on a cache line).
struct ProcessGroup::GradientArena {
  MPI_Win window = MPI_WIN_NULL;
  int64_t capacity = 0;
  std::vector<float*> segments;  // process p's, as mapped here
  float* half(int process, int h) const { return segments[static_cast<size_t>(process)] + h * capacity; }
};

ProcessGroup::~ProcessGroup() = default;

// Whether the file system that backs Open MPI's shared windows (osc/sm: /dev/shm unless
// osc_sm_backing_directory says otherwise) has `bytes` free. A window it cannot hold is not refused
// cleanly: the process that creates the file fails alone and the others wait for it for ever, and
// a container's /dev/shm is often 64 MiB. So the processes ask first.
namespace {

bool backing_has_room(int64_t bytes) {
  const char* dir = std::getenv("OMPI_MCA_osc_sm_backing_directory");
  struct statvfs fs {};
  if (statvfs(dir != nullptr && *dir != '\0' ? dir : "/dev/shm", &fs) != 0) return false;
  const long double free_bytes = static_cast<long double>(fs.f_bavail) * static_cast<long double>(fs.f_frsize);
  return free_bytes >= static_cast<long double>(bytes) + static_cast<long double>(int64_t{64} << 20);  // and a margin
}

// A window of `bytes` per process of `node` (collective; `processes` of them), in a passive epoch
// (MPI_Win_sync orders the loads and stores), with every process's segment as mapped here in
// `segments`; MPI_WIN_NULL, with nothing allocated, where some process's backing has no room for all.
MPI_Win allocate_window(MPI_Comm node, int processes, MPI_Aint bytes, std::vector<float*>& segments) {
  int room = backing_has_room(static_cast<int64_t>(bytes) * processes) ? 1 : 0, all_room = 0;
  MPI_Allreduce(&room, &all_room, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);  // every process decides alike
  if (!all_room) return MPI_WIN_NULL;
  float* base = nullptr;
  MPI_Win window = MPI_WIN_NULL;
  MPI_Win_allocate_shared(bytes, sizeof(float), MPI_INFO_NULL, node, &base, &window);  // fatal on error
  MPI_Win_lock_all(MPI_MODE_NOCHECK, window);
  segments.clear();
  for (int p = 0; p < processes; ++p) {
    MPI_Aint size = 0;
    int unit = 0;
    float* segment = nullptr;
    MPI_Win_shared_query(window, p, &size, &unit, &segment);
    segments.push_back(segment);
  }
  return window;
}

}  // namespace

void ProcessGroup::ensure_node() {
  if (shared_ != nullptr) return;
  shared_ = std::make_unique<SharedWindow>();
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared_->node);
}

bool ProcessGroup::allocate_shared(int64_t elements) {
  ensure_node();
  shared_->release();
  const MPI_Aint bytes = static_cast<MPI_Aint>(2 * (elements + SharedWindow::kVoteFloats)) * static_cast<MPI_Aint>(sizeof(float));
  shared_->window = allocate_window(shared_->node, size_, bytes, shared_->segments);
  if (shared_->window == MPI_WIN_NULL) return false;
  shared_->capacity = elements;
  return true;
}

bool ProcessGroup::shares_memory() {
  if (size_ == 1) return false;
  if (!shared_checked_) {  // the same answer on every process: the environment and the node's size
    shared_checked_ = true;
    const char* env = std::getenv("KEEL_MPI_SHARED_MEMORY");
    int node_size = 0;
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    int wanted = (env == nullptr || std::string(env) != "0") && node_size == size_ ? 1 : 0, all = 0;
    MPI_Allreduce(&wanted, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    shared_usable_ = all != 0;
  }
  return shared_usable_;
}

std::span<float> ProcessGroup::shared_partials(int64_t elements) {
  if (size_ == 1 || elements <= 0 || !shares_memory()) return {};
  if ((shared_ == nullptr || shared_->capacity < elements) && !allocate_shared(elements)) {
    shared_usable_ = false;
    return {};
  }
  shared_->half ^= 1;
  return {shared_->current(rank_), static_cast<size_t>(elements)};
}

// Where process p said (in its vote's slot, before the sum's first barrier) its partials are: 0 for
// its segment, 1 + h for half h of its gradient arena.
const float* ProcessGroup::partials_of(int process) const {
  int64_t where = 0;
  std::memcpy(&where, shared_->vote(process) + 2, sizeof where);
  if (where == 0) return shared_->current(process);
  if (arena_ == nullptr || where < 1 || where > 2) throw std::logic_error("sum_shared_partials: partials in no arena");
  return arena_->half(process, static_cast<int>(where - 1));
}

ProcessGroup::SharedSum ProcessGroup::sum_shared_partials(int64_t elements, int divisor, std::span<const ShardRange> mine,
                                                          bool read_whole, std::span<const float* const> own, int arena_half) {
  if (!own.empty() && own.size() != mine.size()) throw std::logic_error("sum_shared_partials: one own partial per range");
  if (arena_half >= 0 && (arena_ == nullptr || arena_half > 1 || arena_->capacity < elements)) {
    throw std::logic_error("sum_shared_partials: no such half of a gradient arena");
  }
  const int64_t where = arena_half + 1;
  std::memcpy(shared_->vote(rank_) + 2, &where, sizeof where);
  if (!read_whole) ++shared_sums_;  // the optimizer's: each process reads its ranges only
  if (arena_half >= 0) ++sums_from_arena_;
  shared_barrier();  // every process's partials are written, and where they are
  int64_t vote = elements, summed = 0;
  std::vector<const float*> partials(static_cast<size_t>(size_));
  const float* const sums = partials_of(0);  // process 0's partials, replaced by the sum
  for (size_t k = 0; k < mine.size(); ++k) {
    const ShardRange& r = mine[k];
    for (int p = 0; p < size_; ++p) partials[static_cast<size_t>(p)] = partials_of(p) + r.begin;
    if (!own.empty()) partials[static_cast<size_t>(rank_)] = own[k];
    float* sum = const_cast<float*>(sums) + r.begin;
    const int64_t bad = tree_mean_checked(partials, sum, r.size(), divisor);
    if (bad < r.size()) vote = std::min(vote, r.begin + bad);
    summed += r.size();
  }
  std::memcpy(shared_->vote(rank_), &vote, sizeof vote);
  shared_barrier();  // every range is summed and every vote cast
  SharedSum out{sums, elements};
  for (int p = 0; p < size_; ++p) {
    int64_t theirs = 0;
    std::memcpy(&theirs, shared_->vote(p), sizeof theirs);
    out.first_non_finite = std::min(out.first_non_finite, theirs);
  }
  // What a reduce-scatter (and for the whole sum an all-gather) moves, read in place here: the
  // others' partials of this process's ranges, and its partials of theirs.
  sent_bytes_ += (elements - summed) * kFloat;
  received_bytes_ += summed * (size_ - 1) * kFloat;
  if (read_whole) {
    sent_bytes_ += summed * (size_ - 1) * kFloat;
    received_bytes_ += (elements - summed) * kFloat;
  }
  return out;
}

void ProcessGroup::shared_barrier() {
  const auto sync = [this] {
    MPI_Win_sync(shared_->window);
    if (arena_ != nullptr) MPI_Win_sync(arena_->window);
  };
  sync();
  MPI_Barrier(shared_->node);
  sync();
}

bool ProcessGroup::allocate_gradient_arena(int64_t elements) {
  if (size_ == 1 || elements <= 0 || !shares_memory()) return false;
  ensure_node();
  release_gradient_arena();
  auto arena = std::make_unique<GradientArena>();
  arena->capacity = (elements + 15) / 16 * 16;
  const MPI_Aint bytes = static_cast<MPI_Aint>(2 * arena->capacity) * static_cast<MPI_Aint>(sizeof(float));
  arena->window = allocate_window(shared_->node, size_, bytes, arena->segments);
  if (arena->window == MPI_WIN_NULL) return false;
  arena_ = std::move(arena);
  return true;
}

std::span<float> ProcessGroup::gradient_arena(int half) const {
  if (arena_ == nullptr || half < 0 || half > 1) return {};
  return {arena_->half(rank_, half), static_cast<size_t>(arena_->capacity)};
}

void ProcessGroup::release_gradient_arena() {
  if (arena_ == nullptr) return;
  MPI_Win_unlock_all(arena_->window);
  MPI_Win_free(&arena_->window);  // collective
  arena_.reset();
}

bool ProcessGroup::shared_barrier_any(bool flag) {
  const auto sync = [this] {
    if (shared_ != nullptr && shared_->window != MPI_WIN_NULL) MPI_Win_sync(shared_->window);
    if (parameters_ != nullptr) MPI_Win_sync(parameters_->window);
  };
  sync();
  int mine = flag ? 1 : 0, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  sync();
  return any != 0;
}

bool ProcessGroup::in_shared_memory(const Tensor& t) const {
  if (parameters_ == nullptr || !t.defined() || t.is_abstract()) return false;
  const char* data = static_cast<const char*>(t.storage().data());
  return data != nullptr && data >= parameters_->base && data < parameters_->base + parameters_->bytes;
}

void ProcessGroup::release_parameters() {
  if (parameters_ == nullptr) return;
  for (const std::weak_ptr<Storage>& placed : parameters_->placed) {
    if (const std::shared_ptr<Storage> storage = placed.lock()) storage->relocate(nullptr, /*copy=*/true);
  }
  parameters_->placed.clear();
  MPI_Win_unlock_all(parameters_->window);
  MPI_Win_free(&parameters_->window);  // collective: every process has moved its values out
  parameters_.reset();
}

bool ProcessGroup::place_in_shared_memory(std::span<const Tensor> values) {
  if (size_ == 1 || !shares_memory()) return false;
  ensure_node();
  release_parameters();
  std::vector<Tensor> placed;
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
  for (const Tensor& t : values) {
    if (!t.defined() || t.is_abstract() || t.storage().bytes() == 0) continue;
    bool seen = false;  // two values may share a buffer
    for (const Tensor& p : placed) seen = seen || p.storage().id() == t.storage().id();
    if (seen) continue;
    placed.push_back(t);
    offsets.push_back(bytes);
    bytes += (t.storage().bytes() + 63) / 64 * 64;
  }
  int room = backing_has_room(bytes) ? 1 : 0, all_room = 0;
  MPI_Allreduce(&room, &all_room, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);  // every process decides alike
  if (!all_room || bytes == 0) return false;
  auto window = std::make_unique<ParameterWindow>();
  char* mine = nullptr;
  MPI_Win_allocate_shared(rank_ == 0 ? static_cast<MPI_Aint>(bytes) : 0, 1, MPI_INFO_NULL, shared_->node, &mine,
                          &window->window);  // fatal on error
  MPI_Win_lock_all(MPI_MODE_NOCHECK, window->window);
  MPI_Aint size = 0;
  int unit = 0;
  MPI_Win_shared_query(window->window, 0, &size, &unit, &window->base);
  window->bytes = bytes;
  for (size_t k = 0; k < placed.size(); ++k) {  // process 0 writes the contents, the others only point there
    if (rank_ == 0) std::memcpy(window->base + offsets[k], placed[k].storage().data(), static_cast<size_t>(placed[k].storage().bytes()));
  }
  MPI_Win_sync(window->window);
  MPI_Barrier(shared_->node);
  MPI_Win_sync(window->window);
  for (size_t k = 0; k < placed.size(); ++k) {
    placed[k].storage().relocate(window->base + offsets[k], /*copy=*/false);
    window->placed.push_back(placed[k].weak_storage());
  }
  parameters_ = std::move(window);
  // No process may write its shards into the window before every process has left its own copy.
  MPI_Barrier(shared_->node);
  return true;
}

const float* ProcessGroup::shared_segment(int process) const {
  return shared_->current(process);
}

void ProcessGroup::count_shared_exchange(int64_t sent, int64_t received) {
  sent_bytes_ += sent;
  received_bytes_ += received;
}

bool ProcessGroup::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

ProcessGroup& ProcessGroup::world() {
  static ProcessGroup group;
  return group;
}

ProcessGroup::ProcessGroup() {
  if (!launched_by_mpirun()) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  mpi_ = true;
  if (provided < MPI_THREAD_SERIALIZED) {
    throw std::runtime_error("this MPI does not let a process call it from more than its main thread "
                             "(MPI_THREAD_SERIALIZED); keel needs Open MPI as Debian ships it");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

void ProcessGroup::check_count(int64_t elements, const char* op) const {
  if (elements > kMaxElementsPerCall) {
    throw std::length_error(std::string(op) + ": " + std::to_string(elements) + " elements is more than one MPI call moves (" +
                            std::to_string(kMaxElementsPerCall) + ")");
  }
}

void ProcessGroup::all_reduce_tree(std::span<float> values) {
  if (size_ == 1) return;
  for (size_t at = 0; at < values.size(); at += static_cast<size_t>(kMaxElementsPerCall)) {
    std::span<float> chunk = values.subspan(at, std::min(values.size() - at, static_cast<size_t>(kMaxElementsPerCall)));
    std::vector<ShardRange> ranges;
    for (int p = 0; p < size_; ++p) ranges.push_back(shard_range(static_cast<int64_t>(chunk.size()), size_, p));
    const ShardRange mine = ranges[static_cast<size_t>(rank_)];
    reduce_scatter_tree(chunk, ranges, chunk.subspan(static_cast<size_t>(mine.begin), static_cast<size_t>(mine.size())));
    all_gather_ranges(chunk, ranges);
  }
}

void ProcessGroup::reduce_scatter_tree(std::span<const float> values, std::span<const ShardRange> ranges, std::span<float> out) {
  if (static_cast<int>(ranges.size()) != size_) throw std::logic_error("reduce_scatter_tree: one range per process");
  const ShardRange mine = ranges[static_cast<size_t>(rank_)];
  if (static_cast<int64_t>(out.size()) != mine.size()) throw std::logic_error("reduce_scatter_tree: out is not this process's range");
  if (size_ == 1) {
    std::copy(values.begin() + mine.begin, values.begin() + mine.end, out.begin());
    return;
  }
  check_count(static_cast<int64_t>(values.size()), "reduce_scatter_tree");
  check_count(mine.size() * size_, "reduce_scatter_tree");
  // Every process sends each other process that process's range of its partial sum, and receives
  // every process's partial of its own range, in rank order; then sums them in tree order.
  staging_.resize(static_cast<size_t>(mine.size() * size_));
  const std::vector<int> send_counts = counts_of(ranges), send_displs = begins_of(ranges);
  std::vector<int> recv_counts(static_cast<size_t>(size_), static_cast<int>(mine.size())), recv_displs;
  for (int p = 0; p < size_; ++p) recv_displs.push_back(static_cast<int>(p * mine.size()));
  MPI_Alltoallv(values.data(), send_counts.data(), send_displs.data(), MPI_FLOAT, staging_.data(), recv_counts.data(),
                recv_displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  std::vector<const float*> partials;
  for (int p = 0; p < size_; ++p) partials.push_back(staging_.data() + p * mine.size());
  tree_sum(partials, out.data(), mine.size());
  sent_bytes_ += (static_cast<int64_t>(values.size()) - mine.size()) * kFloat;
  received_bytes_ += mine.size() * (size_ - 1) * kFloat;
}

void ProcessGroup::all_gather_ranges(std::span<float> values, std::span<const ShardRange> ranges) {
  if (size_ == 1) return;
  if (static_cast<int>(ranges.size()) != size_) throw std::logic_error("all_gather_ranges: one range per process");
  check_count(static_cast<int64_t>(values.size()), "all_gather_ranges");
  const std::vector<int> counts = counts_of(ranges), displs = begins_of(ranges);
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, values.data(), counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  const int64_t mine = ranges[static_cast<size_t>(rank_)].size();
  sent_bytes_ += mine * (size_ - 1) * kFloat;
  received_bytes_ += (static_cast<int64_t>(values.size()) - mine) * kFloat;
}

void ProcessGroup::broadcast(std::span<float> values, int root) {
  if (size_ == 1) return;
  for (size_t at = 0; at < values.size(); at += static_cast<size_t>(kMaxElementsPerCall)) {
    const size_t n = std::min(values.size() - at, static_cast<size_t>(kMaxElementsPerCall));
    MPI_Bcast(values.data() + at, static_cast<int>(n), MPI_FLOAT, root, MPI_COMM_WORLD);
  }
  (rank_ == root ? sent_bytes_ : received_bytes_) += static_cast<int64_t>(values.size()) * kFloat;
}

void ProcessGroup::all_gather_bytes(const void* mine, int64_t bytes_per_process, void* all) {
  if (size_ == 1) {
    if (bytes_per_process > 0) std::memcpy(all, mine, static_cast<size_t>(bytes_per_process));
    return;
  }
  if (bytes_per_process * size_ > INT_MAX) throw std::length_error("all_gather_bytes: too many bytes for one MPI call");
  MPI_Allgather(mine, static_cast<int>(bytes_per_process), MPI_BYTE, all, static_cast<int>(bytes_per_process), MPI_BYTE,
                MPI_COMM_WORLD);
  sent_bytes_ += bytes_per_process * (size_ - 1);
  received_bytes_ += bytes_per_process * (size_ - 1);
}

std::string ProcessGroup::broadcast_string(const std::string& value, int root) {
  if (size_ == 1) return value;
  int64_t length = static_cast<int64_t>(value.size());
  MPI_Bcast(&length, 1, MPI_INT64_T, root, MPI_COMM_WORLD);
  if (length < 0 || length > INT_MAX) throw std::length_error("broadcast_string: bad length");
  std::string out = rank_ == root ? value : std::string(static_cast<size_t>(length), '\0');
  MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, MPI_COMM_WORLD);
  return out;
}

int64_t ProcessGroup::min(int64_t value) {
  if (size_ == 1) return value;
  int64_t result = 0;
  MPI_Allreduce(&value, &result, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  return result;
}

bool ProcessGroup::any(bool flag) {
  if (size_ == 1) return flag;
  int mine = flag ? 1 : 0, result = 0;
  MPI_Allreduce(&mine, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return result != 0;
}

void ProcessGroup::barrier() {
  if (size_ > 1) MPI_Barrier(MPI_COMM_WORLD);
}

void ProcessGroup::abort(int code) {
  if (mpi_ && !finalized_) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void ProcessGroup::finalize() {
  if (!mpi_ || finalized_) return;
  finalized_ = true;
  release_parameters();
  release_gradient_arena();
  if (shared_ != nullptr) {
    shared_->release();
    if (shared_->node != MPI_COMM_NULL) MPI_Comm_free(&shared_->node);
  }
  MPI_Finalize();
}

}  // namespace keel
