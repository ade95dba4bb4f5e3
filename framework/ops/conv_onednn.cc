// oneDNN's convolutions for conv2d: primitives cached per shape and dtype; tasks of whole images, of
// bands of an image's rows, or (kernel gradients) of blocks of output channels (conv_tasks.h).
#include "framework/ops/conv_onednn.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>
#include <oneapi/dnnl/dnnl.hpp>

#include "framework/core/dtype.h"
#include "framework/core/tensor.h"
#include "framework/core/thread_pool.h"
#include "framework/device/context.h"
#include "framework/ops/conv_tasks.h"
#include "framework/ops/sgemm.h"

namespace keel::ops::detail {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// This thread's stream, and oneDNN's OpenMP threads held at 1 here: parallelism is keel's tasks.
dnnl::stream& thread_stream() {
  hold_onednn_to_this_thread();
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

enum class Pass { forward, backward_data, backward_weights, forward_bias };

// A kernel's reorder cut into slices of its output channels (oneDNN submemories of both layouts):
// data movement, so each slice's bytes are the whole reorder's; the threads copy slices side by side.
struct ReorderParts {
  std::vector<dnnl::primitive> parts;
  std::vector<memory::desc> from, to;  // each part's slice of the whole (offsets into the whole buffers)
};

// One cached primitive: what it computes on `images` images of a geometry, and the kernel layout it
// reads (forward, backward_data) or writes (backward_weights), with the reorder from or to HWIO.
struct ConvPrimitive {
  dnnl::primitive conv;
  memory::desc kernel_layout;
  bool reorder_needed = false;
  dnnl::primitive reorder;  // HWIO -> kernel_layout, or kernel_layout -> HWIO for backward_weights
  ReorderParts reorder_parts;  // the same reorder in slices of output channels, for the threads
  memory::desc scratch;          // oneDNN's scratchpad for one execution
  memory::desc reorder_scratch;
  memory::desc bias;             // forward_bias: the (Cout,) float32 bias
  std::string impl;              // oneDNN's implementation (impl_info_str)
};

using Key = std::array<int64_t, 17>;

Key key_of(const ConvGeometry& g, int64_t images, Pass pass, DataType dt) {
  return {images, g.h.input, g.w.input, g.in_channels, g.out_channels, g.h.kernel, g.w.kernel, g.h.stride,
          g.w.stride, g.h.dilation, g.w.dilation, g.h.pad_before, g.h.pad_after, g.w.pad_before, g.w.pad_after,
          static_cast<int64_t>(pass), static_cast<int64_t>(dt)};
}

memory::desc images_desc(int64_t n, int64_t h, int64_t w, int64_t c, DataType dt = DataType::f32) {
  return memory::desc({n, c, h, w}, dt, Tag::nhwc);
}
memory::desc kernel_desc(const ConvGeometry& g, Tag tag, DataType dt = DataType::f32) {
  return memory::desc({g.out_channels, g.in_channels, g.h.kernel, g.w.kernel}, dt, tag);
}
size_t element_bytes(DataType dt) { return dt == DataType::bf16 ? sizeof(uint16_t) : sizeof(float); }

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The window of every pass, as oneDNN spells it (dilation 0 is none).
struct Window {
  memory::dims strides, dilates, pad_l, pad_r;
  explicit Window(const ConvGeometry& g)
      : strides{g.h.stride, g.w.stride},
        dilates{g.h.dilation - 1, g.w.dilation - 1},
        pad_l{g.h.pad_before, g.w.pad_before},
        pad_r{g.h.pad_after, g.w.pad_after} {}
};

// The forward primitive descriptor of `images` images (float32 backward passes are built against
// it): activations and kernel in `dt`, accumulation in float32 either way.
dnnl::convolution_forward::primitive_desc forward_desc(const ConvGeometry& g, int64_t images, DataType dt = DataType::f32,
                                                       bool bias = false) {
  const Window w(g);
  const memory::desc x = images_desc(images, g.h.input, g.w.input, g.in_channels, dt), k = kernel_desc(g, Tag::any, dt),
                     y = images_desc(images, g.h.output, g.w.output, g.out_channels, dt);
  const auto kind = dnnl::prop_kind::forward_training;
  const auto alg = dnnl::algorithm::convolution_direct;
  if (bias) {
    const memory::desc b({g.out_channels}, DataType::f32, Tag::a);
    return {dnnl::convolution_forward::desc(kind, alg, x, k, b, y, w.strides, w.dilates, w.pad_l, w.pad_r), user_scratchpad(),
            cpu_engine()};
  }
  return {dnnl::convolution_forward::desc(kind, alg, x, k, y, w.strides, w.dilates, w.pad_l, w.pad_r), user_scratchpad(),
          cpu_engine()};
}

// The block of a layout's first (output-channel) dimension: the product of its inner blocks of it.
int64_t first_dim_block(const memory::desc& d) {
  const dnnl_blocking_desc_t& b = d.data.format_desc.blocking;
  int64_t block = 1;
  for (int i = 0; i < b.inner_nblks; ++i) block *= b.inner_idxs[i] == 0 ? b.inner_blks[i] : 1;
  return block;
}

// The reorder from -> to in slices of at least kMinReorderPartBytes, at most kMaxReorderParts of them
// (the shape decides), where neither layout pads a dimension and each slice is whole blocks; none
// (one call) where oneDNN would need a scratchpad for a slice or has no reorder for it. A training
// step of ResNet50 at 224x224 had 158 reorders, about a tenth of the step, on one of the threads
// (ONEDNN_VERBOSE=1 build/bench/resnet_bench train --image 224 --batch 8 --steps 1).
ReorderParts reorder_parts(const memory::desc& from, const memory::desc& to) {
  constexpr size_t kMinReorderPartBytes = size_t{256} << 10;
  constexpr int64_t kMaxReorderParts = 8;
  const memory::dims dims = from.dims();
  const int nd = from.data.ndims;
  for (int i = 0; i < nd; ++i) {
    if (from.data.padded_dims[i] != dims[i] || to.data.padded_dims[i] != dims[i]) return {};
  }
  const int64_t block = std::lcm(first_dim_block(from), first_dim_block(to));
  const int64_t want = std::clamp<int64_t>(static_cast<int64_t>(to.get_size() / kMinReorderPartBytes), 1, kMaxReorderParts);
  int64_t parts = 1;
  for (int64_t t = 2; t <= want; ++t) {
    if (dims[0] % (t * block) == 0) parts = t;
  }
  if (parts == 1) return {};
  ReorderParts r;
  try {
    for (int64_t t = 0; t < parts; ++t) {
      memory::dims slice = dims, offsets(dims.size(), 0);
      slice[0] = dims[0] / parts;
      offsets[0] = t * slice[0];
      r.from.push_back(from.submemory_desc(slice, offsets));
      r.to.push_back(to.submemory_desc(slice, offsets));
      const dnnl::reorder::primitive_desc pd(cpu_engine(), r.from.back(), cpu_engine(), r.to.back(), user_scratchpad());
      if (pd.scratchpad_desc().get_size() != 0) return {};
      r.parts.push_back(dnnl::reorder(pd));
    }
  } catch (const dnnl::error&) {
    return {};
  }
  return r;
}

void set_reorder(ConvPrimitive& p, const memory::desc& from, const memory::desc& to) {
  p.reorder_needed = !(from == to);
  if (!p.reorder_needed) return;
  const dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, user_scratchpad());
  p.reorder = dnnl::reorder(pd);
  p.reorder_scratch = pd.scratchpad_desc();
  p.reorder_parts = reorder_parts(from, to);
}

// The backward passes' primitive descriptors in `dt` (built against forward's): x and dy in `dt`,
// what they compute (dx, the kernel's gradient) in float32, float32 sums either way.
dnnl::convolution_backward_data::primitive_desc backward_data_desc(const ConvGeometry& g, int64_t images, DataType dt,
                                                                   const dnnl::convolution_forward::primitive_desc& fwd) {
  const Window w(g);
  const dnnl::convolution_backward_data::desc d(
      dnnl::algorithm::convolution_direct, images_desc(images, g.h.input, g.w.input, g.in_channels), kernel_desc(g, Tag::any, dt),
      images_desc(images, g.h.output, g.w.output, g.out_channels, dt), w.strides, w.dilates, w.pad_l, w.pad_r);
  return dnnl::convolution_backward_data::primitive_desc(d, user_scratchpad(), cpu_engine(), fwd);
}
dnnl::convolution_backward_weights::primitive_desc backward_weights_desc(const ConvGeometry& g, int64_t images, DataType dt,
                                                                         const dnnl::convolution_forward::primitive_desc& fwd) {
  const Window w(g);
  const dnnl::convolution_backward_weights::desc d(
      dnnl::algorithm::convolution_direct, images_desc(images, g.h.input, g.w.input, g.in_channels, dt), kernel_desc(g, Tag::any),
      images_desc(images, g.h.output, g.w.output, g.out_channels, dt), w.strides, w.dilates, w.pad_l, w.pad_r);
  return dnnl::convolution_backward_weights::primitive_desc(d, user_scratchpad(), cpu_engine(), fwd);
}

// Every pass in `dt` (forward's x, y and kernel; backward's x, dy and kernel), the rest float32.
std::unique_ptr<ConvPrimitive> build(const ConvGeometry& g, int64_t images, Pass pass, DataType dt) {
  auto p = std::make_unique<ConvPrimitive>();
  const dnnl::convolution_forward::primitive_desc fwd = forward_desc(g, images, dt, pass == Pass::forward_bias);
  const memory::desc hwio = kernel_desc(g, Tag::hwio);
  if (pass == Pass::forward || pass == Pass::forward_bias) {
    p->conv = dnnl::convolution_forward(fwd);
    p->impl = fwd.impl_info_str();
    p->kernel_layout = fwd.weights_desc();
    p->scratch = fwd.scratchpad_desc();
    if (pass == Pass::forward_bias) p->bias = fwd.bias_desc();
    set_reorder(*p, hwio, p->kernel_layout);
  } else if (pass == Pass::backward_data) {
    const auto pd = backward_data_desc(g, images, dt, fwd);
    p->conv = dnnl::convolution_backward_data(pd);
    p->impl = pd.impl_info_str();
    p->kernel_layout = pd.weights_desc();
    p->scratch = pd.scratchpad_desc();
    set_reorder(*p, hwio, p->kernel_layout);
  } else {
    const auto pd = backward_weights_desc(g, images, dt, fwd);
    p->conv = dnnl::convolution_backward_weights(pd);
    p->impl = pd.impl_info_str();
    p->kernel_layout = pd.diff_weights_desc();
    p->scratch = pd.scratchpad_desc();
    set_reorder(*p, p->kernel_layout, hwio);
  }
  return p;
}

// The primitive for (geometry, images, pass), built once per process (JIT-compiled by oneDNN) and
// shared by every replica and thread: executing one is thread-safe with a scratchpad per call.
const ConvPrimitive& primitive(const ConvGeometry& g, int64_t images, Pass pass, DataType dt = DataType::f32) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<ConvPrimitive>> cache;
  const Key key = key_of(g, images, pass, dt);
  (void)thread_stream();  // building runs oneDNN code too: on one thread, as executing does
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<ConvPrimitive>& slot = cache[key];
  if (!slot) slot = build(g, images, pass, dt);
  return *slot;
}

// A workspace buffer of at least `bytes`, on the current core (float32 elements; none for 0 bytes).
Tensor workspace_bytes(size_t bytes) {
  if (bytes == 0) return Tensor();
  CategoryScope workspace(Category::workspace);
  return Tensor::empty({static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))});
}

float* address(Tensor& t) { return t.defined() ? t.data() : nullptr; }

memory wrap(const memory::desc& d, const void* p) { return memory(d, cpu_engine(), const_cast<void*>(p)); }

// Per-task scratchpads start at multiples of this (oneDNN aligns inside a scratchpad from its start).
constexpr size_t kScratchAlign = 4096;
size_t scratch_stride(const ConvPrimitive& p) { return (p.scratch.get_size() + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// The workspace of one pass: the kernel in the primitive's layout (when it is not HWIO), the
// reorder's scratchpad, and one scratchpad per task.
// `stride`: each task's scratchpad (scratch_stride of the largest of the pass's primitives);
// `kernel`: false where the pass reorders no kernel through it (the scratchpads alone).
struct PassWorkspace {
  Tensor layout, reorder_scratch, scratch;
  size_t stride;
  PassWorkspace(const ConvPrimitive& p, int64_t tasks) : PassWorkspace(p, tasks, scratch_stride(p)) {}
  PassWorkspace(const ConvPrimitive& p, int64_t tasks, size_t stride, bool kernel = true)
      : layout(kernel && p.reorder_needed ? workspace_bytes(p.kernel_layout.get_size()) : Tensor()),
        reorder_scratch(kernel && p.reorder_needed ? workspace_bytes(p.reorder_scratch.get_size()) : Tensor()),
        scratch(workspace_bytes(stride * static_cast<size_t>(tasks) + (stride > 0 ? kScratchAlign : 0))),
        stride(stride) {}
  // Task t's scratchpad, aligned.
  void* task_scratch(const ConvPrimitive& p, int64_t t) {
    if (p.scratch.get_size() == 0) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(address(scratch));
    const uintptr_t aligned = (base + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    return reinterpret_cast<void*>(aligned + stride * static_cast<size_t>(t));
  }
};

// The primitive's reorder from `src` (in `from`) to `dst` (in `to`), its slices on the threads.
void run_reorder(const ConvPrimitive& p, const memory::desc& from, const void* src, const memory::desc& to, void* dst,
                 PassWorkspace& w) {
  const ReorderParts& r = p.reorder_parts;
  if (!r.parts.empty()) {
    parallel_for(static_cast<int64_t>(r.parts.size()), [&](int64_t t) {
      dnnl::stream& s = thread_stream();
      r.parts[t].execute(s, {{DNNL_ARG_FROM, wrap(r.from[t], src)}, {DNNL_ARG_TO, wrap(r.to[t], dst)}});
      s.wait();
    });
    return;
  }
  dnnl::stream& s = thread_stream();
  p.reorder.execute(s, {{DNNL_ARG_FROM, wrap(from, src)},
                        {DNNL_ARG_TO, wrap(to, dst)},
                        {DNNL_ARG_SCRATCHPAD, wrap(p.reorder_scratch, address(w.reorder_scratch))}});
  s.wait();
}

// The kernel as `p` reads it: the HWIO kernel itself, the replicas' shared reorder (held in `hold`
// while the pass runs), or its reorder into the workspace.
const void* kernel_for(const ConvPrimitive& p, const ConvGeometry& g, const KernelRef& kernel, PassWorkspace& w,
                       std::shared_ptr<SharedBuffer>& hold) {
  if (!p.reorder_needed) return kernel.data;
  const memory::desc hwio = kernel_desc(g, Tag::hwio);
  if (kernel.storage != 0) {
    const auto reorder = [&](void* layout) { run_reorder(p, hwio, kernel.data, p.kernel_layout, layout, w); };
    if (const void* shared = shared_derived(kernel, &p, p.kernel_layout.get_size(), reorder, hold)) return shared;
  }
  run_reorder(p, hwio, kernel.data, p.kernel_layout, address(w.layout), w);
  return address(w.layout);
}

void execute(const ConvPrimitive& p, const std::unordered_map<int, memory>& args) {
  dnnl::stream& s = thread_stream();
  p.conv.execute(s, args);
  s.wait();
}

// One task's images as oneDNN sees them (x in x_dt, y in y_dt), and the distance between two
// tasks' first elements (x_step, y_step) and bytes (x_bytes, y_bytes).
struct TaskImages {
  int64_t images;
  memory::desc x, y;
  int64_t x_step, y_step;
  int64_t x_bytes, y_bytes;
  TaskImages(const ConvGeometry& g, int64_t n, DataType x_dt, DataType y_dt)
      : images(n),
        x(images_desc(n, g.h.input, g.w.input, g.in_channels, x_dt)),
        y(images_desc(n, g.h.output, g.w.output, g.out_channels, y_dt)),
        x_step(n * g.h.input * g.w.input * g.in_channels),
        y_step(n * g.h.output * g.w.output * g.out_channels),
        x_bytes(x_step * static_cast<int64_t>(element_bytes(x_dt))),
        y_bytes(y_step * static_cast<int64_t>(element_bytes(y_dt))) {}
};

// The bands of a float32 forward or backward_data pass (conv_tasks.h): each band's geometry and
// primitive, and the largest scratchpad. False where there is one band, a band is no convolution, or
// a band's primitive is another implementation than the whole image's or reads the kernel in another
// layout (then whole images).
struct BandPlan {
  std::vector<Band> parts;
  std::vector<const ConvPrimitive*> prims;
  size_t stride = 0;
};
bool plan_bands(const ConvGeometry& g, Pass pass, BandPlan& plan) {
  const bool fwd = pass != Pass::backward_data;
  const int64_t bands = band_count(fwd ? g.h.output : g.h.input, wanted_bands(g));
  if (bands < 2) return false;
  ConvGeometry image = g;
  image.batch = 1;
  const ConvPrimitive& whole = primitive(image, 1, pass);
  plan.parts.resize(static_cast<size_t>(bands));
  for (int64_t b = 0; b < bands; ++b) {
    Band& band = plan.parts[static_cast<size_t>(b)];
    if (!band_of(g, !fwd, b, bands, band)) return false;
    const ConvPrimitive& p = primitive(band.g, 1, pass);
    if (p.impl != whole.impl || !(p.kernel_layout == whole.kernel_layout)) return false;
    plan.prims.push_back(&p);
    plan.stride = std::max(plan.stride, scratch_stride(p));
  }
  return true;
}

// A float32 forward or backward_data pass in bands of rows (plan_bands): one task per band of each
// image. False, having done nothing, where plan_bands says whole images. `in` is x or dy, `out` y or dx.
bool pass_in_bands(const ConvGeometry& g, Pass pass, const KernelRef& kernel, const void* in, void* out, bool real,
                   const float* bias) {
  const bool fwd = pass != Pass::backward_data;
  BandPlan plan;
  if (!plan_bands(g, pass, plan)) return false;
  const int64_t bands = static_cast<int64_t>(plan.parts.size()), tasks = g.batch * bands;
  PassWorkspace w(*plan.prims.front(), tasks, plan.stride);
  if (!real) return true;
  std::shared_ptr<SharedBuffer> shared;
  const void* k = kernel_for(*plan.prims.front(), g, kernel, w, shared);
  const int64_t x_row = g.w.input * g.in_channels * static_cast<int64_t>(sizeof(float));
  const int64_t y_row = g.w.output * g.out_channels * static_cast<int64_t>(sizeof(float));
  parallel_for(tasks, [&](int64_t t) {
    const int64_t image = t / bands;
    const Band& band = plan.parts[static_cast<size_t>(t % bands)];
    const ConvPrimitive& p = *plan.prims[static_cast<size_t>(t % bands)];
    const memory x = wrap(images_desc(1, band.g.h.input, g.w.input, g.in_channels),
                          (fwd ? static_cast<const char*>(in) : static_cast<char*>(out)) + (image * g.h.input + band.in_row) * x_row);
    const memory y = wrap(images_desc(1, band.g.h.output, g.w.output, g.out_channels),
                          (fwd ? static_cast<char*>(out) : static_cast<const char*>(in)) + (image * g.h.output + band.out_row) * y_row);
    std::unordered_map<int, memory> args = {{fwd ? DNNL_ARG_SRC : DNNL_ARG_DIFF_SRC, x},
                                            {DNNL_ARG_WEIGHTS, wrap(p.kernel_layout, k)},
                                            {fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST, y},
                                            {DNNL_ARG_SCRATCHPAD, wrap(p.scratch, w.task_scratch(p, t))}};
    if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, wrap(p.bias, bias));
    execute(p, args);
  });
  return true;
}

// Forward (x -> y, both in `dt`) or backward_data (dy in `dt` -> dx in float32): the kernel
// (float32 HWIO) into the primitive's layout and dtype, then one call per task. real == false
// charges the workspace only.
void kernel_pass(const ConvGeometry& g, Pass pass, const KernelRef& kernel, const void* in, void* out, bool real,
                 DataType dt = DataType::f32, const float* bias = nullptr) {
  const bool fwd = pass != Pass::backward_data;
  if (dt == DataType::f32 && pass_in_bands(g, pass, kernel, in, out, real, bias)) return;
  const int64_t tasks = data_tasks(g);
  const TaskImages ti(g, g.batch / tasks, fwd ? dt : DataType::f32, dt);
  const ConvPrimitive& p = primitive(g, ti.images, pass, dt);
  PassWorkspace w(p, tasks);
  if (!real) return;
  std::shared_ptr<SharedBuffer> shared;
  const void* k = kernel_for(p, g, kernel, w, shared);
  const memory::desc& in_desc = fwd ? ti.x : ti.y;
  const memory::desc& out_desc = fwd ? ti.y : ti.x;
  const int64_t in_step = fwd ? ti.x_bytes : ti.y_bytes, out_step = fwd ? ti.y_bytes : ti.x_bytes;
  const auto* in_bytes = static_cast<const char*>(in);
  auto* out_bytes = static_cast<char*>(out);
  parallel_for(tasks, [&](int64_t t) {
    std::unordered_map<int, memory> args = {
        {fwd ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST, wrap(in_desc, in_bytes + t * in_step)},
        {DNNL_ARG_WEIGHTS, wrap(p.kernel_layout, k)},
        {fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC, wrap(out_desc, out_bytes + t * out_step)},
        {DNNL_ARG_SCRATCHPAD, wrap(p.scratch, w.task_scratch(p, t))}};
    if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, wrap(p.bias, bias));
    execute(p, args);
  });
}

}  // namespace

int64_t onednn_row_bands(const ConvGeometry& g, bool input_gradient) {
  BandPlan plan;
  return plan_bands(g, input_gradient ? Pass::backward_data : Pass::forward, plan) ? static_cast<int64_t>(plan.parts.size()) : 1;
}
bool onednn_runs(const ConvGeometry& g) { return g.rows() >= 256 && g.single_tap() < 0 && !g.two_by_two(); }
bool onednn_runs_dx(const ConvGeometry& g) { return g.in_channels >= 16; }
bool onednn_runs_dk(const ConvGeometry& g) { return !g.pointwise(); }

void onednn_conv_forward(const ConvGeometry& g, const float* x, const KernelRef& kernel, float* y, bool with_bias,
                         const float* bias) {
  const bool biased = with_bias || bias != nullptr;  // a bias given is a bias added, whatever the flag says
  kernel_pass(g, biased ? Pass::forward_bias : Pass::forward, kernel, x, y, x != nullptr, DataType::f32, bias);
}

bool onednn_runs_bfloat16(const ConvGeometry& g) {
  // Whether this CPU has oneDNN kernels for bfloat16 convolutions (AVX512_BF16 or AMX), all three
  // passes, decided once on a small 3x3 convolution: elsewhere oneDNN has none, or only its slow
  // reference code.
  static const bool native = [] {
    try {
      ConvGeometry probe;
      probe.batch = 1, probe.in_channels = 16, probe.out_channels = 16;
      probe.h = {16, 3, 1, 1, 16, 1, 1}, probe.w = probe.h;  // 16x16, 3x3, "same"
      const auto fwd = forward_desc(probe, 1, DataType::bf16);
      for (const std::string& impl : {std::string(fwd.impl_info_str()),
                                      std::string(backward_data_desc(probe, 1, DataType::bf16, fwd).impl_info_str()),
                                      std::string(backward_weights_desc(probe, 1, DataType::bf16, fwd).impl_info_str())}) {
        if (impl.rfind("ref", 0) == 0) return false;
      }
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native && onednn_runs(g);
}

void onednn_conv_forward_bfloat16(const ConvGeometry& g, const uint16_t* x, const KernelRef& kernel, uint16_t* y) {
  kernel_pass(g, Pass::forward, kernel, x, y, x != nullptr, DataType::bf16);
}

namespace {

// The float32 kernel gradient in `blocks` blocks of output channels (kernel_gradient_channel_blocks),
// one oneDNN call each over the whole batch: dy's block of channels copied dense, the block's
// gradient in the primitive's layout, reordered to HWIO and copied into its columns of dkernel.
// False, having done nothing, where the reorder would need a scratchpad (then tasks of images).
bool backward_weights_in_channel_blocks(const ConvGeometry& g, int64_t blocks, const float* x, const float* dy,
                                        float* dkernel, bool real) {
  ConvGeometry gb = g;
  gb.out_channels = g.out_channels / blocks;
  const ConvPrimitive& p = primitive(gb, g.batch, Pass::backward_weights);
  if (p.reorder_needed && p.reorder_scratch.get_size() != 0) return false;
  const int64_t width = gb.out_channels, pixels = g.rows(), taps = gb.patch();
  const size_t layout_bytes = p.kernel_layout.get_size();
  PassWorkspace w(p, blocks, scratch_stride(p), /*kernel=*/false);
  Tensor dy_blocks = workspace_bytes(sizeof(float) * static_cast<size_t>(pixels * g.out_channels));
  Tensor layouts = workspace_bytes(layout_bytes * static_cast<size_t>(blocks));
  Tensor dense = p.reorder_needed ? workspace_bytes(sizeof(float) * static_cast<size_t>(taps * g.out_channels)) : Tensor();
  if (!real) return true;
  const TaskImages ti(gb, g.batch, DataType::f32, DataType::f32);
  const memory::desc hwio = kernel_desc(gb, Tag::hwio);
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(width);
  parallel_for(blocks, [&](int64_t b) {
    float* dyb = address(dy_blocks) + b * pixels * width;
    for (int64_t r = 0; r < pixels; ++r) std::memcpy(dyb + r * width, dy + r * g.out_channels + b * width, row_bytes);
    char* layout = reinterpret_cast<char*>(address(layouts)) + static_cast<size_t>(b) * layout_bytes;
    execute(p, {{DNNL_ARG_SRC, wrap(ti.x, x)},
                {DNNL_ARG_DIFF_DST, wrap(ti.y, dyb)},
                {DNNL_ARG_DIFF_WEIGHTS, wrap(p.kernel_layout, layout)},
                {DNNL_ARG_SCRATCHPAD, wrap(p.scratch, w.task_scratch(p, b))}});
    const float* block = reinterpret_cast<const float*>(layout);
    if (p.reorder_needed) {
      float* to = address(dense) + b * taps * width;
      dnnl::stream& s = thread_stream();
      p.reorder.execute(s, {{DNNL_ARG_FROM, wrap(p.kernel_layout, layout)}, {DNNL_ARG_TO, wrap(hwio, to)}});
      s.wait();
      block = to;
    }
    for (int64_t r = 0; r < taps; ++r) std::memcpy(dkernel + r * g.out_channels + b * width, block + r * width, row_bytes);
  });
  return true;
}

// dkernel = the sum over tasks of each task's partial gradient, added in task order. On the
// bfloat16 kernels (dt bf16) x and dy are bfloat16 bits; on the float32 ones dy is float32 and a
// bfloat16 x is widened (exactly) into a float32 workspace, task by task.
void backward_weights(const ConvGeometry& g, const void* x, bool x_bfloat16, const void* dy, DataType dt, float* dkernel,
                      bool real) {
  if (dt == DataType::f32 && !x_bfloat16) {
    const int64_t blocks = kernel_gradient_channel_blocks(g);
    if (blocks > 1 && backward_weights_in_channel_blocks(g, blocks, static_cast<const float*>(x),
                                                         static_cast<const float*>(dy), dkernel, real)) {
      return;
    }
  }
  const int64_t tasks = kernel_gradient_tasks(g);
  const TaskImages ti(g, g.batch / tasks, dt, dt);
  const ConvPrimitive& p = primitive(g, ti.images, Pass::backward_weights, dt);
  PassWorkspace w(p, tasks);
  const int64_t partial_floats = static_cast<int64_t>(p.kernel_layout.get_size() / sizeof(float));
  Tensor partials = workspace_bytes(p.kernel_layout.get_size() * static_cast<size_t>(tasks));
  const bool widen = x_bfloat16 && dt == DataType::f32;
  Tensor widened = widen ? workspace_bytes(static_cast<size_t>(ti.x_bytes) * static_cast<size_t>(tasks)) : Tensor();
  if (!real) return;
  float* part = address(partials);
  parallel_for(tasks, [&](int64_t t) {
    const void* xt = nullptr;
    if (widen) {
      float* wide = address(widened) + t * ti.x_step;
      from_bfloat16(static_cast<const uint16_t*>(x) + t * ti.x_step, wide, ti.x_step);
      xt = wide;
    } else {
      xt = static_cast<const char*>(x) + t * ti.x_bytes;
    }
    execute(p, {{DNNL_ARG_SRC, wrap(ti.x, xt)},
                {DNNL_ARG_DIFF_DST, wrap(ti.y, static_cast<const char*>(dy) + t * ti.y_bytes)},
                {DNNL_ARG_DIFF_WEIGHTS, wrap(p.kernel_layout, part + t * partial_floats)},
                {DNNL_ARG_SCRATCHPAD, wrap(p.scratch, w.task_scratch(p, t))}});
  });
  if (tasks > 1) {
    constexpr int64_t kBlock = 1 << 14;
    parallel_for(
        (partial_floats + kBlock - 1) / kBlock,
        [&](int64_t b) {
          const int64_t lo = b * kBlock, hi = std::min(partial_floats, lo + kBlock);
          for (int64_t t = 1; t < tasks; ++t) {
            const float* __restrict__ src_t = part + t * partial_floats;
            float* __restrict__ sum = part;
            for (int64_t i = lo; i < hi; ++i) sum[i] += src_t[i];
          }
        },
        threads_worth(static_cast<double>(partial_floats * tasks), kMinElementsPerThread));
  }
  if (p.reorder_needed) {
    run_reorder(p, p.kernel_layout, part, kernel_desc(g, Tag::hwio), dkernel, w);
  } else {
    std::memcpy(dkernel, part, p.kernel_layout.get_size());
  }
}

}  // namespace

void onednn_conv_backward(const ConvGeometry& g, const void* x, bool x_bfloat16, const KernelRef& kernel, const float* dy,
                          float* dx, float* dkernel, bool want_dx, bool want_dk, bool real) {
  if (want_dx) kernel_pass(g, Pass::backward_data, kernel, dy, dx, real);
  if (want_dk) backward_weights(g, x, x_bfloat16, dy, DataType::f32, dkernel, real);
}

void onednn_conv_backward_bfloat16(const ConvGeometry& g, const uint16_t* x, const KernelRef& kernel, const float* dy, float* dx,
                                   float* dkernel, bool want_dx, bool want_dk, bool real) {
  if (!want_dx && !want_dk) return;
  const int64_t dy_elements = g.batch * g.h.output * g.w.output * g.out_channels;
  Tensor dy_bits = workspace_bytes(static_cast<size_t>(dy_elements) * sizeof(uint16_t));
  auto* dyb = reinterpret_cast<uint16_t*>(address(dy_bits));
  if (real && dy_elements > 0) {
    constexpr int64_t kBlock = 1 << 16;
    parallel_for(
        (dy_elements + kBlock - 1) / kBlock,
        [&](int64_t b) {
          const int64_t lo = b * kBlock;
          to_bfloat16(dy + lo, dyb + lo, std::min(kBlock, dy_elements - lo));
        },
        threads_worth(static_cast<double>(dy_elements), kMinElementsPerThread));
  }
  if (want_dx) kernel_pass(g, Pass::backward_data, kernel, dyb, dx, real, DataType::bf16);
  if (want_dk) backward_weights(g, x, true, dyb, DataType::bf16, dkernel, real);
}

}  // namespace keel::ops::detail
