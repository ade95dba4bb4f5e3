#include "framework/model/model.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "framework/autodiff/recompute.h"
#include "framework/autodiff/tape.h"
#include "framework/device/context.h"
#include "framework/device/gradient_placement.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/normalization.h"
#include "framework/ops/precision.h"

namespace keel {
namespace {

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string keras_bytes(int64_t params) {
  // Keras prints parameter memory at 4 bytes each, in KB/MB of 1024.
  double b = static_cast<double>(params) * 4.0;
  const char* units[] = {"Byte", "KB", "MB", "GB"};
  int u = 0;
  while (b >= 1024.0 && u < 3) {
    b /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

// Keras pads each column to its end position; a cell longer than its column is cut.
void cell(std::string& line, const std::string& text, size_t end) {
  line += text;
  if (line.size() > end - 1) line.resize(end - 1);
  line.resize(end, ' ');
}

std::string row(const std::string& a, const std::string& b, const std::string& c) {
  std::string line = " ";
  cell(line, a, 29);  // Keras's Sequential columns end at 45% / 85% / 100% of 65
  cell(line, b, 55);
  cell(line, c, 65);
  return line;
}

}  // namespace

std::string NonFiniteStep::describe() const {
  char loss_text[32];
  std::snprintf(loss_text, sizeof loss_text, "%g", std::isnan(loss) ? std::fabs(loss) : loss);  // "nan", never "-nan"
  std::string text = "step " + std::to_string(step) + ": ";
  const bool bad_loss = !std::isfinite(loss);
  if (bad_loss) text += std::string("the loss is ") + loss_text;
  if (!variable.empty()) text += std::string(bad_loss ? " and " : "") + "the gradient of " + variable + " is not finite";
  if (update_skipped) text += std::string(" (the update was not applied") + (bad_loss ? ")" : std::string("; loss ") + loss_text + ")");
  return text;
}

Model::Model(std::string name) : name_(std::move(name)) {}

void Model::capture_strategy() {
  strategy_ = device_context().strategy;
  if (strategy_ == nullptr) {
    own_strategy_ = std::make_unique<ReplicatedStrategy>(DeviceSpec::preset("cpu"));
    strategy_ = own_strategy_.get();
  }
}

std::vector<Variable*> Model::variables() const {
  std::vector<Variable*> out;
  for (Layer* l : layers()) {
    for (Variable* v : l->weights()) out.push_back(v);
  }
  return out;
}

std::vector<Variable*> Model::trainable_variables() const {
  std::vector<Variable*> out;
  for (Layer* l : layers()) {
    for (Variable* v : l->trainable_weights()) out.push_back(v);
  }
  return out;
}

std::vector<Variable*> Model::non_trainable_variables() const {
  std::vector<Variable*> out;
  for (Layer* l : layers()) {
    for (Variable* v : l->non_trainable_weights()) out.push_back(v);
  }
  return out;
}

int64_t Model::count_params() const {
  int64_t n = 0;
  for (Layer* l : layers()) n += l->count_params();
  return n;
}

std::vector<SummaryRow> Model::summary_rows() const {
  std::vector<SummaryRow> rows;
  for (Layer* l : layers()) {
    Shape out = l->compute_output_shape(l->input_shape());
    out.insert(out.begin(), -1);
    rows.push_back({l->name(), l->class_name(), out, l->count_params(), {}});
  }
  return rows;
}

std::string Model::summary() const {
  const std::string rule(65, '_'), double_rule(65, '=');
  std::ostringstream os;
  os << "Model: \"" << name_ << "\"\n" << rule << "\n";
  os << row("Layer (type)", "Output Shape", "Param #") << "\n";
  os << double_rule << "\n";
  for (const SummaryRow& r : summary_rows()) {
    os << row(r.name + " (" + r.class_name + ")", shape_string(r.output_shape), std::to_string(r.params)) << "\n"
       << std::string(65, ' ') << "\n";
  }
  int64_t trainable = 0, non_trainable = 0;
  for (Variable* v : variables()) (v->trainable() ? trainable : non_trainable) += num_elements(v->shape());
  os << double_rule << "\n";
  os << "Total params: " << with_commas(trainable + non_trainable) << " (" << keras_bytes(trainable + non_trainable) << ")\n";
  os << "Trainable params: " << with_commas(trainable) << " (" << keras_bytes(trainable) << ")\n";
  os << "Non-trainable params: " << with_commas(non_trainable) << " (" << keras_bytes(non_trainable) << ")\n";
  os << rule << "\n";
  return os.str();
}

void Model::compile(std::shared_ptr<Optimizer> optimizer, std::shared_ptr<Loss> loss, std::vector<std::string> metrics) {
  if (!optimizer || !loss) throw std::invalid_argument("compile: an optimizer and a loss are required");
  check_metrics(metrics, loss->sparse_labels());
  optimizer_ = std::move(optimizer);
  loss_ = std::move(loss);
  metrics_ = std::move(metrics);
}

void check_metrics(const std::vector<std::string>& metrics, bool sparse_labels) {
  for (size_t i = 0; i < metrics.size(); ++i) {
    const std::string& m = metrics[i];
    const bool top_k = m == "top_k_categorical_accuracy" || m == "sparse_top_k_categorical_accuracy";
    if (m != "accuracy" && !top_k) {
      throw std::invalid_argument("unknown metric '" + m.substr(0, 100) +
                                  "' (known: accuracy, top_k_categorical_accuracy, sparse_top_k_categorical_accuracy)");
    }
    if (top_k && (m == "sparse_top_k_categorical_accuracy") != sparse_labels) {
      throw std::invalid_argument("metric " + m + " needs " + (sparse_labels ? "one-hot" : "class-id") +
                                  " labels; with this loss's labels use " +
                                  (sparse_labels ? "sparse_top_k_categorical_accuracy" : "top_k_categorical_accuracy"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (metrics[j] == m) throw std::invalid_argument("metric " + m + " is given twice");
    }
  }
}

bool has_top_k(const std::vector<std::string>& metrics) {
  for (const std::string& m : metrics) {
    if (m != "accuracy") return true;  // check_metrics: the other names are top-k
  }
  return false;
}

StepTotals Model::train_step(const Batch& global) {
  if (!compiled()) throw std::logic_error("train_step: call compile() first");
  std::vector<Batch> shards(static_cast<size_t>(strategy_->num_replicas()));
  strategy_->for_each_replica([&](int r) { shards[static_cast<size_t>(r)] = strategy_->infeed(global, r); });
  return train_step_on_cores(std::move(shards));
}

StepTotals Model::train_step_on_cores(std::vector<Batch> shards) {
  if (!compiled()) throw std::logic_error("train_step: call compile() first");
  const int n = strategy_->num_replicas();
  if (static_cast<int>(shards.size()) != n) {
    throw std::invalid_argument("train_step_on_cores: " + std::to_string(shards.size()) + " shards for " +
                                std::to_string(n) + " replicas");
  }
  const Tensor& some_images = shards[static_cast<size_t>(strategy_->first_local_replica())].images;
  build(Shape(some_images.shape().begin() + 1, some_images.shape().end()));
  if (steps_as_host_program(shards)) return train_step_as_host_program(std::move(shards));
  const std::vector<Variable*> vars = trainable_variables();
  const bool sparse = loss_->sparse_labels(), top_k = has_top_k(metrics_);
  std::vector<StepTotals> per_replica(static_cast<size_t>(n));
  GradientUpdate update;  // every replica's is the same: this process's first replica's is kept
  // The step's random streams are keyed by the optimizer's iterations, so a resumed run draws what
  // a straight one would.
  const int64_t step = optimizer_->iterations() + 1;
  strategy_->set_step(step - 1);
  const BackwardOwnerFn gather = weights_gatherer();
  strategy_->run_replicas([&](ReplicaContext& ctx) {
    const BackwardOwnerHook gather_in_backward(gather);  // ZeRO-3: a layer's weights for its backward
    const size_t r = static_cast<size_t>(ctx.replica_id());
    StepTotals& t = per_replica[r];
    std::vector<Tensor> grads;
    GradientReadyFn reduce;
    GradientCheck check(vars.size());  // one replica: each gradient checked as backward finishes it
    const bool checks_in_backward = ctx.num_replicas() == 1;
    CoreLedger& ledger = strategy_->ledger().core(ctx.replica_id());  // marks: phases in its event log
    {
      const Batch b = std::move(shards[r]);
      GradientTape tape;
      ledger.mark("forward");
      Tensor y = call(b.images, /*training=*/true);
      Tensor loss = (*loss_)(b.labels, y);
      ledger.mark("backward");
      reduce = reduce_scatter_as_ready(vars);  // ZeRO-2: each gradient reduced while backward goes on
      // and a LayoutMap's variables: each core's block of the mean, as soon as backward finished it
      const GradientReadyFn ready = reduce_laid_out_as_ready(vars, reduce);
      ctx.allow_deferred_products(!ready && defers_kernel_gradients());  // else a hook reads them
      const GradientPlacementScope placed(!ready && ctx.leads_process() ? optimizer_->gradient_placement() : nullptr);
      grads = tape.gradient(loss, vars, checks_in_backward ? check.hook(ready) : ready);
      ctx.allow_deferred_products(false);
      t.loss_sum = static_cast<double>(loss.item()) * static_cast<double>(b.size());
      t.correct = count_correct(b.labels, y, sparse);
      if (top_k) t.in_top_k = count_in_top_k(b.labels, y, sparse, kTopK);
      t.samples = b.size();
      ledger.record_core_to_host(2 * sizeof(float));
    }  // the shard and the forward pass's tensors are released before the update, as on a device
    ledger.mark("apply_gradients");
    ctx.set_update_ends_run(true);  // what it writes is read in the next step
    GradientUpdate u = optimizer_->apply_gradients(std::move(grads), vars,
                                                   reduce ? GradientForm::reduced_shards : GradientForm::local,
                                                   checks_in_backward ? &check : nullptr);
    if (ctx.leads_process()) update = std::move(u);
  });  // then BatchNormalization's moving statistics are combined (ReplicaLocalState)
  return step_totals(per_replica, update, step);
}

StepTotals Model::step_totals(std::vector<StepTotals>& per_replica, const GradientUpdate& update, int64_t step) {
  strategy_->gather_per_replica(per_replica);  // several processes: every replica's totals, in order
  StepTotals total;
  for (const StepTotals& t : per_replica) total += t;
  non_finite_.reset();
  if (!update.applied || !std::isfinite(total.loss_sum)) {
    non_finite_ = NonFiniteStep{step, total.samples ? total.loss_sum / static_cast<double>(total.samples) : total.loss_sum,
                                update.non_finite_variable, !update.applied};
  }
  return total;
}

BackwardOwnerFn Model::weights_gatherer() const {
  if (strategy_->shard() != ShardingMode::full) return nullptr;
  auto by_owner = std::make_shared<std::unordered_map<std::string, const Layer*>>();
  for (const Layer* l : layers()) (*by_owner)["activation:" + l->name()] = l;
  return [by_owner](const std::string& owner) -> std::shared_ptr<void> {
    auto it = by_owner->find(owner);
    if (it == by_owner->end()) return nullptr;
    return std::make_shared<GatheredWeights>(*it->second);
  };
}

StepTotals Model::test_step(const Batch& global) {
  if (!loss_) throw std::logic_error("test_step: call compile() first");
  build(Shape(global.images.shape().begin() + 1, global.images.shape().end()));
  const bool sparse = loss_->sparse_labels();
  const bool top_k = has_top_k(metrics_);
  std::vector<StepTotals> per_replica(static_cast<size_t>(strategy_->num_replicas()));
  strategy_->for_each_replica([&](int r) {
        const Batch b = strategy_->infeed(global, r);
        StepTotals& t = per_replica[static_cast<size_t>(r)];
        Tensor y = call(b.images, /*training=*/false);
        if (b.size() > 0) {
          Tensor loss = loss_->per_example(b.labels, y);
          if (!loss.is_abstract()) t.loss_sum = loss.array().cast<double>().sum();
          t.correct = count_correct(b.labels, y, sparse);
          if (top_k) t.in_top_k = count_in_top_k(b.labels, y, sparse, kTopK);
        }
        t.samples = b.size();
        strategy_->ledger().core(r).record_core_to_host(2 * sizeof(float));
      });
  strategy_->gather_per_replica(per_replica);
  StepTotals total;
  for (const StepTotals& t : per_replica) total += t;
  return total;
}

namespace {

int64_t infeed_bytes(const Ledger& ledger) {
  int64_t total = 0;
  for (int c = 0; c < ledger.num_cores(); ++c) total += ledger.core(c).transfers().host_to_core_bytes;
  return total;
}

int64_t collective_bytes(const Ledger& ledger) {
  int64_t total = 0;
  for (int c = 0; c < ledger.num_cores(); ++c) total += ledger.core(c).transfers().sent_bytes;
  return total;
}

Batch to_batch(Element&& e) {
  if (e.size() < 2) throw std::invalid_argument("fit/evaluate: dataset elements must be (x, y) pairs");
  return Batch{std::move(e[0]), std::move(e[1])};
}

}  // namespace

Logs Model::logs_of(const StepTotals& t) const {
  auto mean = [&](double sum) { return t.samples ? sum / static_cast<double>(t.samples) : 0.0; };
  Logs logs;
  logs["loss"] = mean(t.loss_sum);
  for (const std::string& m : metrics_) logs[m] = mean(static_cast<double>(m == "accuracy" ? t.correct : t.in_top_k));
  return logs;
}

History Model::fit(const Dataset& dataset, const FitOptions& options) {
  if (!compiled()) throw std::logic_error("fit: call compile() first");
  if (options.validation_split != 0.0) {
    throw std::invalid_argument("fit: validation_split is not supported for Dataset inputs (as in Keras); "
                                "split the data before batching and pass validation_data");
  }
  if (options.validation_freq <= 0) throw std::invalid_argument("fit: validation_freq must be positive");
  History history;
  TrainingState st;
  st.model = this;
  st.epochs = options.epochs;
  const int64_t card = dataset.cardinality();
  st.steps_per_epoch = card >= 0 ? card : -1;
  for (Callback* cb : options.callbacks) cb->on_train_begin(st);
  for (int epoch = options.initial_epoch; epoch < options.epochs && !st.stop_training; ++epoch) {
    Iterator it = dataset.make_iterator(static_cast<uint64_t>(epoch));
    st.epoch = epoch;
    st.batch = 0;
    st.epoch_totals = StepTotals{};
    if (epoch == options.initial_epoch && !options.initial_iterator_state.is_null()) {
      it.restore(options.initial_iterator_state);
      st.batch = it.produced();
      st.epoch_totals = options.initial_epoch_totals;
    }
    st.iterator = &it;
    st.input_wait_seconds = 0.0;
    st.step_seconds = 0.0;
    st.infeed_bytes = 0;
    st.collective_bytes = 0;
    for (Callback* cb : options.callbacks) cb->on_epoch_begin(st);
    if (train_epoch(it, st, options.callbacks)) {
      const Logs logs = epoch_logs(st, options);
      history.epochs.push_back(logs);
      for (Callback* cb : options.callbacks) cb->on_epoch_end(st, logs);
    }
    st.iterator = nullptr;
  }
  for (Callback* cb : options.callbacks) cb->on_train_end(st);
  return history;
}

Logs Model::epoch_logs(const TrainingState& st, const FitOptions& options) {
  Logs logs = logs_of(st.epoch_totals);
  if (options.validation_data && (st.epoch + 1) % options.validation_freq == 0) {
    for (const auto& [name, value] : evaluate(*options.validation_data)) {
      if (name != "samples") logs["val_" + name] = value;
    }
  }
  return logs;
}

bool Model::train_epoch(Iterator& it, TrainingState& st, const std::vector<Callback*>& callbacks) {
  using Clock = std::chrono::steady_clock;
  // The cores' prefetch slot (TPU infeed): the batch of the next step is moved to the cores, where
  // it is charged as `inputs`, before the current step runs, so during a step each core holds two
  // batches. `position` is the iterator's position right after a batch was pulled.
  struct Pulled {
    std::vector<Batch> shards;
    Iterator::Snapshot position;
  };
  auto pull = [&]() -> std::optional<Pulled> {
    const Clock::time_point start = Clock::now();
    std::optional<Element> element = it.next();
    st.input_wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    if (!element) return std::nullopt;
    const int64_t before = infeed_bytes(strategy_->ledger());
    Pulled p{strategy_->distribute(to_batch(std::move(*element))), it.snapshot()};
    st.infeed_bytes += infeed_bytes(strategy_->ledger()) - before;
    return p;
  };
  Clock::time_point step_start = Clock::now();
  std::optional<Pulled> current = pull();
  while (current) {
    std::optional<Pulled> next = pull();  // into the slot, while `current` is trained on
    const int64_t sent_before = collective_bytes(strategy_->ledger());
    st.epoch_totals += train_step_on_cores(std::move(current->shards));
    st.collective_bytes += collective_bytes(strategy_->ledger()) - sent_before;
    st.position = &current->position;
    st.step_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
    ++st.batch;
    st.last_batch_of_epoch = !next.has_value();
    st.non_finite = non_finite_;
    const Logs logs = logs_of(st.epoch_totals);
    for (Callback* cb : callbacks) cb->on_train_batch_end(st, logs);
    st.position = nullptr;
    step_start = Clock::now();  // callbacks (checkpoint saves) are not step time
    // Stopped: the slot's batch was never trained on; the saved position (current's) excludes it.
    if (st.stop_training) return st.last_batch_of_epoch;
    current = std::move(next);
  }
  return true;
}

Logs Model::evaluate(const Dataset& dataset, int64_t steps) {
  if (steps == 0) throw std::invalid_argument("evaluate: steps must be positive (or negative: every batch)");
  StepTotals total;
  Iterator it = dataset.make_iterator(0);
  for (int64_t done = 0; steps < 0 || done < steps; ++done) {
    std::optional<Element> element = it.next();
    if (!element) break;
    total += test_step(to_batch(std::move(*element)));
  }
  Logs logs = logs_of(total);
  logs["samples"] = static_cast<double>(total.samples);
  return logs;
}

int64_t Model::recompute_batch_statistics(const Dataset& dataset, int64_t batches) {
  if (batches <= 0) throw std::invalid_argument("recompute_batch_statistics: batches must be positive");
  std::vector<layers::BatchNormalization*> norms;
  for (Layer* layer : layers()) {
    if (auto* bn = dynamic_cast<layers::BatchNormalization*>(layer)) norms.push_back(bn);
  }
  if (norms.empty()) {
    throw std::invalid_argument("model '" + name() + "' has no BatchNormalization layer: it keeps no moving statistics");
  }
  // Back to each layer's own momentum however this ends.
  struct Restore {
    std::vector<layers::BatchNormalization*>& norms;
    ~Restore() {
      for (auto* bn : norms) bn->set_update_momentum(std::nullopt);
    }
  } restore{norms};
  Iterator it = dataset.make_iterator(0);
  int64_t used = 0;
  while (used < batches) {
    std::optional<Element> element = it.next();
    if (!element) break;
    ++used;
    for (auto* bn : norms) bn->set_update_momentum(1.0 - 1.0 / static_cast<double>(used));
    // Training-mode forward without a tape: batch statistics, no gradients, weights untouched.
    strategy_->run_distributed([&](const Batch& b) { return call(b.images, /*training=*/true).defined(); },
                               to_batch(std::move(*element)));
  }
  return used;
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  if (batch_size <= 0) throw std::invalid_argument("predict: batch_size must be positive");
  Shape out_shape = output_shape();
  out_shape.insert(out_shape.begin(), x.dim(0));
  ContextScope host(strategy_->host_context());
  Tensor out = Tensor::empty(out_shape);
  for (int64_t begin = 0; begin < x.dim(0); begin += batch_size) {
    const int64_t end = std::min(x.dim(0), begin + batch_size);
    std::vector<Batch> shards = strategy_->distribute(Batch{x.slice_rows(begin, end), Tensor()});
    std::vector<Tensor> ys = strategy_->run([&](const Batch& b) { return call(b.images, false); }, shards);
    int64_t row = begin;
    for (size_t r = 0; r < ys.size(); ++r) {
      const int64_t rows = ys[r].dim(0);
      out.slice_rows(row, row + rows).copy_from(ys[r]);
      strategy_->ledger().core(static_cast<int>(r)).record_core_to_host(ys[r].bytes());
      row += rows;
    }
  }
  return out;
}

Sequential::Sequential(std::vector<LayerPtr> layers, std::string name)
    : Model(name.empty() ? unique_layer_name("sequential") : std::move(name)), layers_(std::move(layers)) {
  if (layers_.empty()) throw std::invalid_argument("Sequential needs at least one layer");
  for (const LayerPtr& l : layers_) {
    if (!l) throw std::invalid_argument("Sequential: null layer");
  }
  capture_strategy();
  if (layers_.front()->declared_input_shape()) build(*layers_.front()->declared_input_shape());
}

std::vector<Layer*> Sequential::layers() const {
  std::vector<Layer*> out;
  for (const LayerPtr& l : layers_) out.push_back(l.get());
  return out;
}

void Sequential::build(const Shape& input_shape) {
  if (built_) return;
  // Weights are created mirrored under the model's strategy, whichever thread builds them.
  std::lock_guard<std::mutex> lock(build_mu_);
  if (built_) return;
  input_shape_ = input_shape;
  ContextScope scope(strategy().mirrored_context());
  Shape shape = input_shape;
  for (const LayerPtr& l : layers_) {
    l->build(shape);
    shape = l->compute_output_shape(shape);
  }
  built_ = true;
}

Shape Sequential::output_shape() const {
  Shape shape = input_shape_;
  for (const LayerPtr& l : layers_) shape = l->compute_output_shape(shape);
  return shape;
}

Tensor Model::call_layer(Layer& layer, const Tensor& x, bool training) const {
  const Remat::Mode mode = remat_.mode();
  if (mode == Remat::Mode::none || mode == Remat::Mode::segments) return layer(x, training);
  Shape out = layer.compute_output_shape(Shape(x.shape().begin() + 1, x.shape().end()));
  out.insert(out.begin(), x.dim(0));
  const int64_t bytes = num_bytes(out, dtype_size(layer.dtype_policy().compute_dtype()));
  if (!remat_.remats_layer(layer.name(), bytes)) return layer(x, training);
  Layer* l = &layer;
  return recompute_in_backward([l, training](const Tensor& in) { return (*l)(in, training); }, x, l->trainable_weights());
}

Tensor Sequential::call(const Tensor& x, bool training) {
  if (!built_) build(Shape(x.shape().begin() + 1, x.shape().end()));
  Tensor y = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer* l = layers_[i].get();
    // Remat: every layer but the head is a segment of its own (or, for the per-layer modes, those
    // the mode names).
    if (remat() == Remat::segments && training && i + 1 < layers_.size()) {
      y = recompute_in_backward([l, training](const Tensor& in) { return (*l)(in, training); }, y, l->trainable_weights());
    } else if (training && i + 1 < layers_.size()) {
      y = call_layer(*l, y, training);
    } else {
      y = (*l)(y, training);
    }
  }
  return ops::cast(y, DType::float32);  // float32 outputs whatever the layers compute in
}

nlohmann::json Sequential::to_config() const {
  nlohmann::json layers = nlohmann::json::array();
  nlohmann::json batch_shape = nlohmann::json::array({nullptr});
  for (int64_t d : input_shape_) batch_shape.push_back(d);
  layers.push_back({{"class_name", "InputLayer"},
                    {"config",
                     {{"batch_input_shape", batch_shape},
                      {"dtype", "float32"},
                      {"sparse", false},
                      {"ragged", false},
                      {"name", layers_.front()->name() + "_input"}}}});
  for (const LayerPtr& l : layers_) layers.push_back({{"class_name", l->class_name()}, {"config", l->get_config()}});
  return {{"class_name", "Sequential"}, {"config", {{"name", name()}, {"layers", layers}}}};
}

}  // namespace keel
