// keel's side of the ResNet50 benchmark (bench/run_resnet_bench.sh runs it beside PyTorch).
//
//   build/bench/resnet_bench train  --device cpu|custom:N --image 32  --batch 32 [--steps 5]
//   build/bench/resnet_bench infer  --device cpu|custom:N --image 224 --batch 8  [--steps 3]
//   build/bench/resnet_bench memory [--image 224] [--batch 8]
//   ... train|infer [--threads N] (default: every hardware thread; `cpu`'s one replica uses them in its kernels)
//   ... train|infer [--shard none|optimizer|gradients|full] [--remat none|segments]
//       [--precision float32|mixed_bfloat16]   (memory savers)
//   ... train [--optimizer sgd|adam]
//   ... train|infer --against DEVICE [--round-steps K]   (both devices in one process, a step of each in turn: the
//                                      ratio of their speeds where a 2-core virtual machine drifts
//                                      10-30% between minutes, which separate runs cannot resolve)
//   ... train|infer [--fuse on|off]   (BatchNormalization + ReLU (+ Add) as one op and the convolutions'
//                                      bias in oneDNN's kernel, the default, or every layer's ops on their own)
//
// The model is zoo "resnet50" (keras.applications.ResNet50 v1) with 10 classes, SGD(0.01, momentum
// 0.9) or Adam (Keras's defaults) and sparse categorical cross-entropy on synthetic images and labels; --batch is the global
// batch, split over the replicas (`cpu`: one replica; `custom:N`: N replicas, one per host thread).
//
// train: one warm-up step, then --steps timed calls of Model::train_step on one resident batch.
// infer: one warm-up, then --steps timed calls of Model::predict on the batch (inference mode).
// With --against, each of --steps rounds runs one untimed step of --device, times --round-steps
// steps (1) of it, then does the same on DEVICE; the JSON line adds DEVICE's figures (against_*),
// each round's DEVICE step time / --device's (round_ratios: --device's speed relative to DEVICE's)
// and their median and quartiles.
// Both print one JSON line with images_per_sec and the achieved GFLOP/s, counted analytically: the
// multiply-adds of every Conv2D and Dense layer, x2 for FLOPs, x3 for a training step (forward,
// input gradient, weight gradient; the first convolution's input gradient, which keel skips, is
// counted too, as is usual).
//
// memory: on an abstract one-core strategy (shapes and ledger charges only, identical to a real
// step's by construction), runs forward and loss under a GradientTape and reads core 0's
// `activations` bytes just before tape.gradient(): what the tape holds for backward, plus the live
// output and loss (a few bytes). Also prints the planner's activation peak for a whole step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/core/host_threads.h"
#include "framework/autodiff/tape.h"
#include "framework/device/context.h"
#include "framework/device/strategy.h"
#include "framework/layers/initializers.h"
#include "framework/model/functional.h"
#include "framework/ops/conv.h"
#include "framework/model/model.h"
#include "framework/model/planner.h"
#include "models/zoo.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode;
  std::string device = "cpu";
  std::string against;  // empty: --device alone
  int round_steps = 1;   // --against: steps of each side a round
  int64_t image = 224;
  int64_t batch = 8;
  int steps = 3;
  keel::ShardingMode shard = keel::ShardingMode::none;
  keel::Remat remat = keel::Remat::none;
  std::string precision = "float32";
  std::string optimizer = "sgd";
  bool fuse = true;
};

constexpr int64_t kClasses = 10;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "resnet_bench: %s\nusage: resnet_bench train|infer|memory [--device cpu|custom:N] [--image 224] "
               "[--batch 8] [--steps 3] [--against DEVICE [--round-steps K]]\n",
               why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  if (argc < 2) usage("missing mode");
  Args a;
  a.mode = argv[1];
  if (a.mode != "train" && a.mode != "infer" && a.mode != "memory") usage("unknown mode '" + a.mode + "'");
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) usage(std::string("missing value for ") + argv[i]);
    if (!std::strcmp(argv[i], "--device")) a.device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--against")) a.against = argv[i + 1];
    else if (!std::strcmp(argv[i], "--round-steps")) a.round_steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--image")) a.image = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch")) a.batch = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) a.steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--shard")) a.shard = keel::parse_sharding_mode(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--remat")) a.remat = keel::parse_remat(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) keel::set_host_threads(keel::parse_thread_count(argv[i + 1], "--threads"));
    else if (!std::strcmp(argv[i], "--precision")) a.precision = keel::mixed_precision::Policy(argv[i + 1]).name();
    else if (!std::strcmp(argv[i], "--optimizer")) a.optimizer = argv[i + 1];
    else if (!std::strcmp(argv[i], "--fuse") && (!std::strcmp(argv[i + 1], "on") || !std::strcmp(argv[i + 1], "off")))
      a.fuse = !std::strcmp(argv[i + 1], "on"), keel::ops::set_conv_bias_fusion(a.fuse);
    else usage(std::string("unknown option ") + argv[i]);
  }
  if (a.image < 32 || a.batch < 1 || a.steps < 1) usage("--image >= 32, --batch >= 1, --steps >= 1");
  if (a.round_steps < 1 || a.round_steps > 1000) usage("--round-steps 1-1000");
  if (a.mode == "memory" && !a.against.empty()) usage("--against times train or infer steps; memory plans one device");
  if (a.optimizer != "sgd" && a.optimizer != "adam") usage("--optimizer sgd|adam");
  return a;
}

// "cpu" (the preset: one replica) or "custom:N" (N replicas, no HBM budget).
keel::DeviceSpec device_spec(const std::string& name) {
  if (name.rfind("custom:", 0) == 0) return keel::DeviceSpec::custom(std::atoi(name.c_str() + 7), 0);
  return keel::DeviceSpec::preset(name);
}

std::unique_ptr<keel::Model> build_resnet50(int64_t image, const std::string& optimizer = "sgd", bool fuse = true) {
  keel::zoo::ModelOptions options;
  options.input_shape = {image, image, 3};
  options.classes = kClasses;
  std::unique_ptr<keel::Model> model = keel::zoo::build("resnet50", options);
  dynamic_cast<keel::Functional&>(*model).set_fuse_batch_norm_relu(fuse);
  keel::SGD::Options sgd;
  sgd.learning_rate = 0.01f;
  sgd.momentum = 0.9f;
  std::shared_ptr<keel::Optimizer> opt = std::make_shared<keel::SGD>(sgd);
  if (optimizer == "adam") opt = std::make_shared<keel::Adam>();  // Keras's defaults: 1e-3, eps 1e-7
  model->compile(opt, std::make_shared<keel::SparseCategoricalCrossentropy>());
  return model;
}

// Forward FLOPs for one image: 2 x the multiply-adds of every Conv2D and Dense layer (bias adds,
// batch norm, activations and pooling are left out, as is usual).
double forward_flops_per_image(const keel::Model& model) {
  double macs = 0;
  for (keel::Layer* layer : model.layers()) {
    if (layer->class_name() == "Conv2D") {
      const keel::Shape& k = layer->weights().at(0)->shape();  // (KH, KW, Cin, Cout)
      const keel::Shape out = layer->compute_output_shape(layer->input_shape());  // (H, W, Cout)
      macs += static_cast<double>(out[0] * out[1]) * static_cast<double>(k[0] * k[1] * k[2] * k[3]);
    } else if (layer->class_name() == "Dense") {
      const keel::Shape& k = layer->weights().at(0)->shape();  // (in, units)
      macs += static_cast<double>(k[0] * k[1]);
    }
  }
  return 2 * macs;
}

// Synthetic data in host memory: images uniform in [0, 1), labels class ids (as floats).
keel::Batch synthetic_batch(const keel::ReplicatedStrategy& strategy, int64_t batch, int64_t image) {
  keel::ContextScope host(strategy.host_context());
  keel::Batch b{keel::Tensor::empty({batch, image, image, 3}), keel::Tensor::empty({batch})};
  if (!strategy.abstract()) {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    float* x = b.images.data();
    for (int64_t i = 0; i < b.images.size(); ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      x[i] = static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
    }
    for (int64_t i = 0; i < batch; ++i) b.labels.data()[i] = static_cast<float>(i % kClasses);
  }
  return b;
}

// One device's model and batch, and its steps' times.
struct Side {
  std::unique_ptr<keel::ReplicatedStrategy> strategy;
  std::unique_ptr<keel::Model> model;
  keel::Batch batch;
  std::vector<double> seconds;
};

Side make_side(const Args& a, const std::string& device) {
  keel::set_random_seed(0);
  Side s;
  s.strategy = std::make_unique<keel::ReplicatedStrategy>(device_spec(device), keel::ReplicatedStrategy::Options{.shard = a.shard});
  {
    auto scope = s.strategy->scope();
    const keel::mixed_precision::GlobalPolicyScope policy(keel::mixed_precision::Policy(a.precision));
    s.model = build_resnet50(a.image, a.optimizer, a.fuse);
    s.model->set_remat(a.remat);
  }
  s.batch = synthetic_batch(*s.strategy, a.batch, a.image);
  return s;
}

// Seconds a step of the side, over `steps` steps.
double step(const Args& a, Side& s, int steps = 1) {
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) {
    if (a.mode == "train") {
      s.model->train_step(s.batch);
    } else {
      s.model->predict(s.batch.images, a.batch);
    }
  }
  return std::chrono::duration<double>(Clock::now() - start).count() / steps;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

void print_side(const Args& a, const std::string& device, const Side& s, const char* prefix) {
  double total = 0;
  for (double t : s.seconds) total += t;
  const double images_per_sec = static_cast<double>(a.batch) * static_cast<double>(s.seconds.size()) / total;
  const double flops_per_image = forward_flops_per_image(*s.model) * (a.mode == "train" ? 3 : 1);
  std::printf("\"%sdevice\": \"%s\", \"%sreplicas\": %d, \"%simages_per_sec\": %.3f, \"%smean_step_seconds\": %.4f, "
              "\"%sbest_step_seconds\": %.4f, \"%sgflop_per_image\": %.4f, \"%sgflops\": %.2f",
              prefix, device.c_str(), prefix, s.strategy->num_replicas(), prefix, images_per_sec, prefix,
              total / static_cast<double>(s.seconds.size()), prefix, *std::min_element(s.seconds.begin(), s.seconds.end()),
              prefix, flops_per_image * 1e-9, prefix, flops_per_image * images_per_sec * 1e-9);
}

int run_timed(const Args& a) {
  Side main_side = make_side(a, a.device);
  Side other = a.against.empty() ? Side{} : make_side(a, a.against);
  // Warm-up: first-touch of the weights, the optimizer's slots, the allocator's cache.
  step(a, main_side);
  if (other.model) step(a, other);
  std::vector<double> ratio;
  for (int i = 0; i < a.steps; ++i) {
    if (!other.model) {
      main_side.seconds.push_back(step(a, main_side));
      continue;
    }
    // After the other side's steps a side's first step is slower (not page faults: it is once
    // neither side's steps fault; without it run_all's 32x32 rounds' ratios went low and high by
    // turns, 0.57-1.66, by which side ran just before): untimed, as the warm-up.
    for (Side* side : {&main_side, &other}) {
      step(a, *side);
      side->seconds.push_back(step(a, *side, a.round_steps));
    }
    ratio.push_back(other.seconds.back() / main_side.seconds.back());
  }
  std::printf("{\"framework\": \"keel\", \"mode\": \"%s\", \"shard\": \"%s\", \"remat\": \"%s\", "
              "\"precision\": \"%s\", \"optimizer\": \"%s\", \"image\": %lld, \"batch\": %lld, \"steps\": %d, ",
              a.mode.c_str(), keel::sharding_mode_name(a.shard), keel::remat_name(a.remat).c_str(), a.precision.c_str(),
              a.optimizer.c_str(), static_cast<long long>(a.image), static_cast<long long>(a.batch), a.steps);
  print_side(a, a.device, main_side, "");
  if (other.model) {
    std::printf(", ");
    print_side(a, a.against, other, "against_");
    std::printf(", \"speed_over_against\": %.3f, \"p25\": %.3f, \"p75\": %.3f, \"round_ratios\": [", quantile(ratio, 0.5),
                quantile(ratio, 0.25), quantile(ratio, 0.75));
    for (size_t i = 0; i < ratio.size(); ++i) std::printf("%s%.4f", i ? ", " : "", ratio[i]);
    std::printf("]");
  }
  std::printf("}\n");
  return 0;
}

int run_memory(const Args& a) {
  keel::ReplicatedStrategy strategy(keel::DeviceSpec::preset("cpu"), keel::ReplicatedStrategy::Options{.abstract = true});
  std::unique_ptr<keel::Model> model;
  {
    auto scope = strategy.scope();
    model = build_resnet50(a.image, "sgd", a.fuse);
  }
  const keel::Batch global = synthetic_batch(strategy, a.batch, a.image);
  const std::vector<keel::Variable*> vars = model->trainable_variables();
  int64_t saved_bytes = 0, saved_tensors = 0;
  std::map<std::string, int64_t> by_layer_class;  // saved bytes per layer class, for the report
  std::map<std::string, std::string> class_of;
  for (keel::Layer* l : model->layers()) class_of["activation:" + l->name()] = l->class_name();
  strategy.run_replicas([&](keel::ReplicaContext& ctx) {
    const int r = ctx.replica_id();
    const keel::Batch b = strategy.infeed(global, r);
    keel::GradientTape tape;
    keel::Tensor y = model->call(b.images, /*training=*/true);
    keel::Tensor loss = model->loss()(b.labels, y);
    const keel::CoreLedger& core = strategy.ledger().core(r);
    saved_bytes = core.stat(keel::Category::activations).current;
    for (const keel::LiveAllocation& l : core.live_allocations()) {
      if (l.category != keel::Category::activations) continue;
      ++saved_tensors;
      auto it = class_of.find(l.owner);
      const std::string cls = it != class_of.end() ? it->second : l.owner.empty() ? "(no layer: the loss)" : l.owner;
      by_layer_class[cls] += l.bytes;
    }
    tape.gradient(loss, vars);
  });
  const keel::MemoryPlan plan = keel::plan_training_step([&] { return build_resnet50(a.image); },
                                                         keel::DeviceSpec::preset("cpu"), a.batch, {});
  const keel::CoreMemory& m = plan.per_core.at(0);
  std::printf("{\"framework\": \"keel\", \"mode\": \"memory\", \"image\": %lld, \"batch\": %lld, "
              "\"saved_activation_bytes\": %lld, \"saved_activation_tensors\": %lld, "
              "\"planner_activation_peak_bytes\": %lld, \"planner_peak_bytes\": %lld, \"parameter_bytes\": %lld, "
              "\"saved_by_layer_class\": {",
              static_cast<long long>(a.image), static_cast<long long>(a.batch), static_cast<long long>(saved_bytes),
              static_cast<long long>(saved_tensors),
              static_cast<long long>(m.category_peak[static_cast<size_t>(keel::Category::activations)]),
              static_cast<long long>(m.peak),
              static_cast<long long>(m.category_peak[static_cast<size_t>(keel::Category::parameters)]));
  const char* sep = "";
  for (const auto& [cls, bytes] : by_layer_class) {
    std::printf("%s\"%s\": %lld", sep, cls.c_str(), static_cast<long long>(bytes));
    sep = ", ";
  }
  std::printf("}}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    return a.mode == "memory" ? run_memory(a) : run_timed(a);
  } catch (const std::invalid_argument& e) {  // a device neither preset nor custom:N, a bad shape
    std::fprintf(stderr, "resnet_bench: %s\n", e.what());
    return 2;
  }
}
