// A training step as one host program for every replica of the process (framework/device/
// replica_rows.h), where the model treats each row alone.
//
// On a device of R cores the step runs R replicas, each with its forward and backward ops over its
// own rows, its tape, its ledger charges and its part of the all-reduce. Where the model is a
// Sequential of Dense, Activation and Flatten layers (no BatchNormalization, whose statistics are a
// replica's, no Dropout, whose masks are drawn per replica, no convolution), every op but the matrix
// products, the bias's gradient and the loss's mean computes each row alone, so one program over
// all R replicas' rows computes what they do: the seed MLP on `v3-8` runs 8 x 16 rows through one
// call of each op instead of eight. The ops that depend on which rows are a replica's read the rows
// (ops/host_program.h) and give each replica's own results, and the variables' gradients as the
// all-reduce's means, to the bit; the optimizer then updates from those means
// (Optimizer::apply_replica_means). Each core's ledger sees what its replica would charge: its rows
// of every batch-shaped tensor, each variable's gradient whole, the all-reduce's buffer and traffic.
// tests/model/host_step_test.cc checks weights, slots, losses and ledgers against the per-replica
// step. KEEL_HOST_PROGRAM=0 keeps the per-replica step.
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/device/context.h"
#include "framework/layers/core_layers.h"
#include "framework/model/model.h"
#include "framework/ops/ops.h"

namespace keel {
namespace {

// Rows a replica's shard must come in multiples of: each replica's rows then start 64 bytes into a
// buffer whatever the row's width, where its own tensor would start, so that every kernel's
// vectorised loops split a replica's elements as they do in its own step (Eigen and oneDNN choose by
// alignment).
constexpr int64_t kRowMultiple = 16;

bool allowed_by_environment() {
  const char* env = std::getenv("KEEL_HOST_PROGRAM");
  return env == nullptr || std::string(env) != "0";
}

// A layer whose training call computes each row alone, in float32, from mirrored weights.
bool row_separable(const Layer& layer, const Shape& input) {
  const std::string kind = layer.class_name();
  if (kind != "Dense" && kind != "Activation" && kind != "Flatten") return false;
  if (kind == "Dense" && input.size() != 1) return false;  // Dense over a rank-3 input: rows of rows
  if (layer.dtype_policy().compute_dtype() != DType::float32) return false;
  for (const Variable* v : layer.weights()) {
    if (v->sharded_axis() >= 0 || v->value().dtype() != DType::float32) return false;
  }
  return true;
}

bool rows_of_equal_shards(const std::vector<Batch>& shards) {
  const int64_t rows = shards.front().size();
  if (rows <= 0 || rows % kRowMultiple != 0) return false;
  for (const Batch& b : shards) {
    if (!b.images.defined() || !b.labels.defined() || b.images.is_abstract() || b.labels.is_abstract()) return false;
    if (b.size() != rows || b.labels.rank() < 1 || b.labels.dim(0) != rows) return false;
    if (b.images.dtype() != DType::float32 || b.labels.dtype() != DType::float32) return false;
  }
  return true;
}

// The shards' rows of one of a batch's tensors as one tensor: a view of the batch they were taken
// from (distribute(Batch&&)), or a host copy; charged nowhere either way (the shards keep the cores'
// charges).
Tensor joined(const std::vector<Batch>& shards, Tensor Batch::*member) {
  std::vector<Tensor> parts;
  for (const Batch& b : shards) parts.push_back(b.*member);
  if (Tensor view = Tensor::rows_joined(parts); view.defined()) return view;
  const HostScope host;
  Shape shape = parts.front().shape();
  shape[0] = 0;
  for (const Tensor& p : parts) shape[0] += p.dim(0);
  Tensor all = Tensor::empty(shape);
  int64_t at = 0;
  for (const Tensor& p : parts) {
    all.slice_rows(at, at + p.dim(0)).copy_from(p);
    at += p.dim(0);
  }
  return all;
}

}  // namespace

bool Model::steps_as_host_program(const std::vector<Batch>& shards) const {
  const ReplicatedStrategy& s = *strategy_;
  if (!allowed_by_environment() || s.abstract() || s.processes() != nullptr || s.num_replicas() < 2 ||
      s.local_replicas() != s.num_replicas() || s.shard() != ShardingMode::none || s.layout_map() != nullptr) {
    return false;
  }
  if (remat_.mode() != Remat::Mode::none || dynamic_cast<const Sequential*>(this) == nullptr) return false;
  if (dynamic_cast<const SparseCategoricalCrossentropy*>(loss_.get()) == nullptr &&
      dynamic_cast<const CategoricalCrossentropy*>(loss_.get()) == nullptr) {
    return false;
  }
  Shape shape = input_shape();
  for (const Layer* l : layers()) {
    if (!row_separable(*l, shape)) return false;
    shape = l->compute_output_shape(shape);
  }
  return rows_of_equal_shards(shards);
}

StepTotals Model::train_step_as_host_program(std::vector<Batch> shards) {
  const std::vector<Variable*> vars = trainable_variables();
  const bool sparse = loss_->sparse_labels(), top_k = has_top_k(metrics_);
  std::vector<int64_t> sizes;
  for (const Batch& b : shards) sizes.push_back(b.size());
  const ReplicaRows rows(sizes);
  std::vector<StepTotals> per_replica(sizes.size());
  GradientUpdate update;
  const int64_t step = optimizer_->iterations() + 1;  // random streams and run() keyed as the replicas' step
  strategy_->set_step(step - 1);
  Ledger& ledger = strategy_->ledger();
  strategy_->run_host_program(rows, [&] {
    std::vector<Tensor> grads;
    GradientCheck check(vars.size());  // each mean checked as backward finishes it, still in the caches
    {
      const std::vector<Batch> on_cores = std::move(shards);  // released last, as each replica's shard
      const Batch all{joined(on_cores, &Batch::images), joined(on_cores, &Batch::labels)};
      GradientTape tape;
      ledger.mark("forward");
      Tensor y = call(all.images, /*training=*/true);
      Tensor losses = ops::replica_means(loss_->per_example(all.labels, y));  // each replica's loss
      ledger.mark("backward");
      grads = tape.gradient(losses, vars, check.hook(nullptr));  // the replicas' means (ops/host_program.h)
      for (int r = 0; r < rows.replicas(); ++r) {
        StepTotals& t = per_replica[static_cast<size_t>(r)];
        const Tensor labels = all.labels.slice_rows(rows.begin(r), rows.end(r)), pred = y.slice_rows(rows.begin(r), rows.end(r));
        t.loss_sum = static_cast<double>(losses.data()[r]) * static_cast<double>(rows.rows(r));
        t.correct = count_correct(labels, pred, sparse);
        if (top_k) t.in_top_k = count_in_top_k(labels, pred, sparse, kTopK);
        t.samples = rows.rows(r);
        ledger.core(r).record_core_to_host(2 * sizeof(float));
      }
    }
    ledger.mark("apply_gradients");
    update = optimizer_->apply_replica_means(grads, vars, *strategy_, &check);
  });
  return step_totals(per_replica, update, step);
}

}  // namespace keel
