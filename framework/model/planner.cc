#include "framework/model/planner.h"

#include <algorithm>
#include <stdexcept>

#include "framework/core/limits.h"

namespace keel {

std::vector<CoreMemory> core_memory(const Ledger& ledger) {
  std::vector<CoreMemory> out;
  for (int c = 0; c < ledger.num_cores(); ++c) {
    CoreMemory m;
    m.core = c;
    for (int k = 0; k < kNumCategories; ++k) m.category_peak[static_cast<size_t>(k)] = ledger.core(c).stat(static_cast<Category>(k)).peak;
    m.peak = ledger.core(c).total().peak;
    out.push_back(m);
  }
  return out;
}

namespace {

// One steady-state training step of fit() on `strategy` (abstract): the model built with its
// optimizer's slots resident, as they are from the second step on, and the next step's batch waiting
// in each core's prefetch slot meanwhile. Returns each core's transfers before the step.
std::vector<TransferStat> run_steady_state_step(ReplicatedStrategy& strategy, const ModelFactory& factory,
                                                int64_t batch_per_core, const Shape& label_shape, const Savers& savers) {
  check_in_range("the per-core batch", batch_per_core, 1, kMaxBatchPerCore);
  const DeviceSpec& device = strategy.spec();
  std::unique_ptr<Model> model;
  strategy.ledger().mark("build");
  {
    auto scope = strategy.scope();
    const mixed_precision::GlobalPolicyScope policy(savers.precision);
    model = factory();
    model->set_remat(savers.remat);
    model->optimizer().build(model->trainable_variables());
  }
  const int64_t global = checked_mul(batch_per_core, device.cores, "the global batch (per-core batch x cores)");
  Batch batch;
  {
    ContextScope host(strategy.host_context());
    Shape x = model->input_shape();
    x.insert(x.begin(), global);
    Shape y = label_shape;
    y.insert(y.begin(), global);
    batch.images = Tensor::empty(x);
    batch.labels = Tensor::empty(y);
  }
  strategy.ledger().mark("prefetch");
  const std::vector<Batch> slot = strategy.distribute(batch);
  std::vector<TransferStat> before;
  for (int c = 0; c < device.cores; ++c) before.push_back(strategy.ledger().core(c).transfers());
  strategy.ledger().mark("train_step");
  model->train_step(batch);
  return before;
}

ReplicatedStrategy::Options planning_options(const Savers& savers) {
  ReplicatedStrategy::Options options;
  options.abstract = true;
  options.shard = savers.shard;
  options.layout_map = savers.layout;
  return options;
}

}  // namespace

MemoryPlan plan_training_step(const ModelFactory& factory, const DeviceSpec& device, int64_t batch_per_core,
                              const Shape& label_shape, const Savers& savers, PlanDetail detail) {
  // Planned without a budget, so every figure is known even when it does not fit; a real step runs
  // out exactly when some core's running total passes its budget, i.e. when its peak exceeds it.
  DeviceSpec unlimited = device;
  unlimited.hbm_bytes_per_core = 0;
  ReplicatedStrategy strategy(unlimited, planning_options(savers));
  if (detail == PlanDetail::timeline) strategy.ledger().record_events(true);
  const std::vector<TransferStat> before = run_steady_state_step(strategy, factory, batch_per_core, label_shape, savers);

  MemoryPlan plan;
  plan.device = device;
  plan.savers = savers;
  plan.batch_per_core = batch_per_core;
  plan.per_core = core_memory(strategy.ledger());
  for (CoreMemory& m : plan.per_core) {
    const TransferStat after = strategy.ledger().core(m.core).transfers();
    m.sent_bytes = after.sent_bytes - before[static_cast<size_t>(m.core)].sent_bytes;
    m.received_bytes = after.received_bytes - before[static_cast<size_t>(m.core)].received_bytes;
    const ComputeStat compute = strategy.ledger().core(m.core).compute();  // the step's: building computes nothing
    m.forward_flops = compute.forward_flops;
    m.recomputed_flops = compute.recomputed_flops;
  }
  if (detail == PlanDetail::timeline) {
    for (int c = 0; c < device.cores; ++c) plan.timeline.push_back(strategy.ledger().core(c).events());
  }
  plan.fits = true;
  for (const CoreMemory& m : plan.per_core) {
    if (device.has_budget() && m.peak > device.hbm_bytes_per_core) plan.fits = false;
  }
  return plan;
}

void check_training_step_fits(const ModelFactory& factory, const DeviceSpec& device, int64_t batch_per_core,
                              const Shape& label_shape, const Savers& savers) {
  // The same step against each core's budget: the ledger throws where a real one would run out.
  ReplicatedStrategy strategy(device, planning_options(savers));
  run_steady_state_step(strategy, factory, batch_per_core, label_shape, savers);
}

int64_t find_max_batch(const ModelFactory& factory, const DeviceSpec& device, const Shape& label_shape,
                       const Savers& savers) {
  if (!device.has_budget()) throw std::invalid_argument("--max-batch needs a device with an HBM budget (not 'cpu')");
  auto fits = [&](int64_t b) { return plan_training_step(factory, device, b, label_shape, savers).fits; };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 2;  // fits(lo), hi unknown
  while (fits(hi)) {
    lo = hi;
    if (hi == kMaxBatchPerCore) return lo;
    hi = std::min(hi * 2, kMaxBatchPerCore);
  }
  while (hi - lo > 1) {  // fits(lo), !fits(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::vector<SaverSuggestion> suggest_savers(const ModelFactory& factory, const DeviceSpec& device, int64_t batch_per_core,
                                            const Shape& label_shape) {
  std::vector<Savers> combinations;
  for (const char* precision : {"float32", "mixed_bfloat16"}) {
    for (Remat remat : {Remat::none, Remat::segments}) {
      for (ShardingMode shard : {ShardingMode::none, ShardingMode::optimizer, ShardingMode::gradients, ShardingMode::full}) {
        combinations.push_back(Savers{shard, remat, mixed_precision::Policy(precision), nullptr});
      }
    }
  }
  std::vector<SaverSuggestion> out;
  for (const Savers& savers : combinations) {
    SaverSuggestion s;
    s.savers = savers;
    const MemoryPlan plan = plan_training_step(factory, device, batch_per_core, label_shape, s.savers);
    s.fits = plan.fits;
    for (const CoreMemory& m : plan.per_core) {
      s.peak_bytes = std::max(s.peak_bytes, m.peak);
      s.collective_bytes += m.sent_bytes;
    }
    const CoreMemory& core0 = plan.per_core.front();
    const int64_t first_pass = core0.forward_flops - core0.recomputed_flops;
    if (first_pass > 0) s.recompute_fraction = static_cast<double>(core0.recomputed_flops) / (3.0 * static_cast<double>(first_pass));
    if (device.has_budget()) s.max_batch_per_core = find_max_batch(factory, device, label_shape, s.savers);
    out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(), [](const SaverSuggestion& a, const SaverSuggestion& b) {
    if (a.fits != b.fits) return a.fits;
    if (!a.fits) return a.peak_bytes < b.peak_bytes;
    if (a.recompute_fraction != b.recompute_fraction) return a.recompute_fraction < b.recompute_fraction;
    if (a.collective_bytes != b.collective_bytes) return a.collective_bytes < b.collective_bytes;
    const bool a_mixed = a.savers.precision.compute_dtype() != DType::float32;
    const bool b_mixed = b.savers.precision.compute_dtype() != DType::float32;
    if (a_mixed != b_mixed) return b_mixed;
    return a.peak_bytes < b.peak_bytes;
  });
  return out;
}

}  // namespace keel
