#include "framework/model/functional.h"

#include <algorithm>
#include <atomic>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "framework/autodiff/recompute.h"
#include "framework/device/context.h"
#include "framework/layers/conv_layers.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/normalization.h"
#include "framework/ops/precision.h"

namespace keel {

GraphNode::~GraphNode() {
  // Each input node this one alone keeps alive gives its own inputs up before it dies, so no
  // destructor runs inside another: the stack stays flat however deep the graph.
  std::vector<std::shared_ptr<GraphNode>> pending;
  for (KerasTensor& t : inputs) pending.push_back(std::move(t.node_));
  inputs.clear();
  while (!pending.empty()) {
    std::shared_ptr<GraphNode> node = std::move(pending.back());
    pending.pop_back();
    if (node && node.use_count() == 1) {
      for (KerasTensor& t : node->inputs) pending.push_back(std::move(t.node_));
      node->inputs.clear();
    }
  }
}
namespace {

std::atomic<uint64_t> g_node_ids{1};

// Keras's "Connected to" cell: ['a[0][0]', 'b[0][0]'].
std::string connections_string(const std::vector<std::string>& calls) {
  if (calls.empty()) return "[]";
  std::string s = "[";
  for (size_t i = 0; i < calls.size(); ++i) s += (i ? ", '" : "'") + calls[i] + "'";
  return s + "]";
}

}  // namespace

const Shape& KerasTensor::shape() const {
  if (!node_) throw std::logic_error("an undefined KerasTensor has no shape");
  return node_->output_shape;
}

InputLayer::InputLayer(Shape shape, std::string name) : Layer("input", name), shape_(std::move(shape)) {
  for (int64_t d : shape_) {
    if (d <= 0) throw std::invalid_argument("Input shape " + shape_string(shape_) + " must be positive");
  }
}

nlohmann::json InputLayer::get_config() const {
  nlohmann::json batch_shape = nlohmann::json::array({nullptr});
  for (int64_t d : shape_) batch_shape.push_back(d);
  return {{"batch_input_shape", batch_shape}, {"dtype", "float32"}, {"sparse", false}, {"ragged", false}, {"name", name()}};
}

KerasTensor Input(const Shape& shape, const std::string& name) {
  // Keras numbers inputs from 1: input_1, input_2, ...
  std::string n = name;
  if (n.empty()) {
    n = unique_layer_name("input");
    n = n == "input" ? "input_1" : "input_" + std::to_string(std::stoi(n.substr(6)) + 1);
  }
  auto layer = std::make_shared<InputLayer>(shape, n);
  layer->build(shape);
  auto node = std::make_shared<GraphNode>();
  node->layer = layer;
  node->output_shape = shape;
  node->id = g_node_ids++;
  return KerasTensor(std::move(node));
}

KerasTensor Layer::operator()(const KerasTensor& x) { return (*this)(std::vector<KerasTensor>{x}); }

KerasTensor Layer::operator()(const std::vector<KerasTensor>& xs) {
  std::vector<Shape> shapes;
  for (const KerasTensor& x : xs) {
    if (!x.defined()) throw std::invalid_argument("layer '" + name_ + "' called on an undefined tensor");
    shapes.push_back(x.shape());
  }
  if (built_ && shapes != input_shapes_) {
    throw std::invalid_argument("layer '" + name_ + "' was built for inputs " + shape_string(input_shapes_.front()) +
                                " and is now called on " + shape_string(shapes.front()));
  }
  // Weights are created in whatever scope the graph is built in (mirrored under a strategy).
  build_multi(shapes);
  auto node = std::make_shared<GraphNode>();
  node->layer = shared_from_this();
  node->inputs = xs;
  node->output_shape = compute_output_shape_multi(shapes);
  node->id = g_node_ids++;
  node->node_index = inbound_nodes_++;
  return KerasTensor(std::move(node));
}

Functional::Functional(const KerasTensor& input, const KerasTensor& output, std::string name)
    : Functional(std::vector<KerasTensor>{input}, std::vector<KerasTensor>{output}, std::move(name)) {}

Functional::Functional(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, std::string name)
    : Model(name.empty() ? unique_layer_name("model") : std::move(name)), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  if (inputs_.empty() || outputs_.empty()) throw std::invalid_argument("a functional model needs inputs and outputs");
  for (const KerasTensor& t : inputs_) {
    if (!t.defined() || !dynamic_cast<InputLayer*>(t.node()->layer.get())) {
      throw std::invalid_argument("functional model inputs must come from keel::Input()");
    }
  }
  // Keras's order (functional.py, _map_graph_network): a post-order walk from the outputs, visiting
  // each node's inputs in order, gives every node an index; a node's depth is its longest distance to
  // an output; nodes and layers run and are listed by decreasing depth, ties by walk index. Keras's
  // legacy load_weights matches layers by this order, so a checkpoint must follow it. Iterative.
  std::unordered_map<const GraphNode*, size_t> walk_index;
  std::vector<std::shared_ptr<GraphNode>> post_order;
  for (const KerasTensor& t : outputs_) {
    if (!t.defined()) throw std::invalid_argument("functional model output is undefined");
    std::vector<std::pair<std::shared_ptr<GraphNode>, size_t>> stack = {{t.node(), 0}};
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (walk_index.count(n.get())) {
        stack.pop_back();
        continue;
      }
      if (next < n->inputs.size()) {
        std::shared_ptr<GraphNode> in = n->inputs[next++].node();
        if (!walk_index.count(in.get())) stack.push_back({in, 0});
        continue;
      }
      walk_index[n.get()] = post_order.size();
      post_order.push_back(n);
      stack.pop_back();
    }
  }
  std::unordered_map<const GraphNode*, int64_t> depth;
  std::unordered_map<const Layer*, int64_t> layer_depth;
  for (auto it = post_order.rbegin(); it != post_order.rend(); ++it) {
    const GraphNode* n = it->get();
    int64_t d = std::max(depth[n], layer_depth[n->layer.get()]);  // a shared layer sits at its deepest use
    depth[n] = d;
    layer_depth[n->layer.get()] = d;
    for (const KerasTensor& in : n->inputs) depth[in.node().get()] = std::max(depth[in.node().get()], d + 1);
  }
  nodes_ = post_order;
  std::stable_sort(nodes_.begin(), nodes_.end(), [&](const auto& a, const auto& b) {
    if (depth[a.get()] != depth[b.get()]) return depth[a.get()] > depth[b.get()];
    return walk_index[a.get()] < walk_index[b.get()];
  });
  for (const auto& n : nodes_) {
    if (n->inputs.empty()) {
      const bool is_model_input = std::any_of(inputs_.begin(), inputs_.end(), [&](const KerasTensor& t) { return t.node() == n; });
      if (!is_model_input) {
        throw std::invalid_argument("graph disconnected: output depends on input '" + n->layer->name() +
                                    "', which is not among the model's inputs");
      }
    }
    if (std::find(layers_.begin(), layers_.end(), n->layer.get()) == layers_.end()) layers_.push_back(n->layer.get());
  }
  segments_ = find_segments();
  find_batch_norm_relu_pairs();
  capture_strategy();
}

void Functional::find_batch_norm_relu_pairs() {
  std::unordered_map<const GraphNode*, std::vector<size_t>> readers;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (const KerasTensor& in : nodes_[i]->inputs) readers[in.node().get()].push_back(i);
  }
  // The node that alone reads node n's output, if any (n not an output).
  auto only_reader = [&](const GraphNode* n) -> const GraphNode* {
    const auto it = readers.find(n);
    return is_output(n) || it == readers.end() || it->second.size() != 1 ? nullptr : nodes_[it->second.front()].get();
  };
  auto is_relu = [](const GraphNode* n, DType dt) {
    const auto* a = n == nullptr ? nullptr : dynamic_cast<const layers::Activation*>(n->layer.get());
    return a != nullptr && a->activation() == "relu" && n->inputs.size() == 1 && a->dtype_policy().compute_dtype() == dt;
  };
  std::unordered_map<const GraphNode*, size_t> index;
  for (size_t i = 0; i < nodes_.size(); ++i) index[nodes_[i].get()] = i;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const GraphNode* n = nodes_[i].get();
    const auto* bn = dynamic_cast<const layers::BatchNormalization*>(n->layer.get());
    if (bn == nullptr || n->inputs.size() != 1) continue;
    const DType dt = bn->dtype_policy().compute_dtype();
    const GraphNode* next = only_reader(n);
    if (is_relu(next, dt)) {
      relu_after_[n] = index.at(next);
      continue;
    }
    const auto* add = next == nullptr ? nullptr : dynamic_cast<const layers::Add*>(next->layer.get());
    if (add == nullptr || next->inputs.size() != 2 || add->dtype_policy().compute_dtype() != dt ||
        next->inputs[0].node() == next->inputs[1].node() || !is_relu(only_reader(next), dt)) {
      continue;
    }
    // Where both of an Add's inputs are such layers (a projection shortcut), the main path's (the
    // second input, as Keras's ResNets add [shortcut, x]) fuses; the other runs on its own.
    const auto taken = batch_norm_before_.find(next);
    if (taken != batch_norm_before_.end()) {
      if (next->inputs[1].node().get() != n) continue;
      add_relu_after_.erase(nodes_[taken->second].get());
    }
    add_relu_after_[n] = {index.at(next), index.at(only_reader(next))};
    batch_norm_before_[next] = i;
  }
}

bool Functional::fusing() const {
  const Remat::Mode remat_mode = remat().mode();
  return fuse_batch_norm_relu_ && (remat_mode == Remat::Mode::none || remat_mode == Remat::Mode::segments);
}

bool Functional::run_fused_add(size_t i, size_t begin, std::unordered_map<const GraphNode*, Tensor>& values,
                               std::unordered_map<const GraphNode*, int>& uses, bool training) const {
  const GraphNode* add = nodes_[i].get();
  const auto it = batch_norm_before_.find(add);
  if (!fusing() || it == batch_norm_before_.end() || it->second < begin) return false;
  const GraphNode* bn_node = nodes_[it->second].get();
  const GraphNode* bn_input = bn_node->inputs.front().node().get();
  const bool bn_first = add->inputs[0].node().get() == bn_node;
  const GraphNode* other = add->inputs[bn_first ? 1 : 0].node().get();
  const Tensor& x = values.at(bn_input);
  const Tensor& residual = values.at(other);
  auto& bn = static_cast<layers::BatchNormalization&>(*bn_node->layer);
  const GraphNode* relu = nodes_[add_relu_after_.at(bn_node).relu].get();
  if (residual.dtype() == bn.dtype_policy().compute_dtype() && residual.shape() == x.shape()) {
    values[relu] = bn.apply_with_add_relu(x, residual, training, relu->layer->name());
  } else {  // not the op's case: the two layers, one after the other
    const Tensor y = bn.apply({x}, training);
    values[add] = add->layer->apply(bn_first ? std::vector<Tensor>{y, residual} : std::vector<Tensor>{residual, y}, training);
  }
  for (const GraphNode* g : std::initializer_list<const GraphNode*>{bn_input, add->inputs[0].node().get(), add->inputs[1].node().get()}) {
    if (--uses[g] == 0) values.erase(g);
  }
  return true;
}

bool Functional::run_fused(size_t i, size_t end, std::vector<Tensor>& args, std::unordered_map<const GraphNode*, Tensor>& values,
                           bool training) const {
  const GraphNode* n = nodes_[i].get();
  const auto pair = relu_after_.find(n);
  if (!fusing() || pair == relu_after_.end() || pair->second >= end) return false;
  // The ReLU's output, computed here; its own turn finds it there. The normalised values never exist.
  const GraphNode* relu = nodes_[pair->second].get();
  auto& bn = static_cast<layers::BatchNormalization&>(*n->layer);
  values[relu] = bn.apply_with_relu(args.front(), training, relu->layer->name());
  return true;
}

std::vector<Layer*> Functional::layers() const { return layers_; }

void Functional::build(const Shape& input_shape) {
  if (input_shape != inputs_.front().shape()) {
    throw std::invalid_argument("model '" + name() + "' expects inputs " + shape_string(inputs_.front().shape()) +
                                ", got " + shape_string(input_shape));
  }
}

Tensor Functional::call(const Tensor& x, bool training) { return call_all({x}, training).front(); }

std::vector<Tensor> Functional::call_all(const std::vector<Tensor>& inputs, bool training) {
  if (inputs.size() != inputs_.size()) {
    throw std::invalid_argument("model '" + name() + "' takes " + std::to_string(inputs_.size()) + " inputs, got " +
                                std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Shape& expected = inputs_[i].shape();
    if (inputs[i].rank() != static_cast<int>(expected.size()) + 1 ||
        !std::equal(expected.begin(), expected.end(), inputs[i].shape().begin() + 1)) {
      throw std::invalid_argument("model '" + name() + "' expects inputs (None" +
                                  shape_string(expected).substr(1) + ", got " + shape_string(inputs[i].shape()));
    }
  }
  if (remat() == Remat::segments && training && !segments_.empty()) {
    // Every segment but the head saves only its input; backward recomputes it.
    Tensor current = inputs.front();
    for (size_t k = 0; k + 1 < segments_.size(); ++k) {
      const Segment* s = &segments_[k];
      current = recompute_in_backward([this, s, training](const Tensor& in) { return run_segment(*s, in, training); },
                                      current, segment_variables(*s));
    }
    return {ops::cast(run_segment(segments_.back(), current, training), DType::float32)};
  }
  // Remaining consumers of each node's output: a tensor is dropped after its last use.
  std::unordered_map<const GraphNode*, int> uses;
  for (const auto& n : nodes_) {
    for (const KerasTensor& in : n->inputs) ++uses[in.node().get()];
  }
  for (const KerasTensor& out : outputs_) ++uses[out.node().get()];
  std::unordered_map<const GraphNode*, Tensor> values;
  for (size_t i = 0; i < inputs_.size(); ++i) values[inputs_[i].node().get()] = inputs[i];
  run_nodes(0, nodes_.size(), values, uses, training);
  std::vector<Tensor> outs;
  // A model's outputs are float32 whatever its layers compute in (mixed precision's advice).
  for (const KerasTensor& out : outputs_) outs.push_back(ops::cast(values.at(out.node().get()), DType::float32));
  return outs;
}

bool Functional::is_output(const GraphNode* node) const {
  for (const KerasTensor& out : outputs_) {
    if (out.node().get() == node) return true;
  }
  return false;
}

void Functional::run_nodes(size_t begin, size_t end, std::unordered_map<const GraphNode*, Tensor>& values,
                           std::unordered_map<const GraphNode*, int>& uses, bool training) const {
  std::vector<Tensor> args;
  for (size_t i = begin; i < end; ++i) {
    const GraphNode* n = nodes_[i].get();
    if (n->inputs.empty()) continue;
    if (values.count(n) != 0) {  // a fused ReLU, run with its BatchNormalization
      if (--uses[n->inputs.front().node().get()] == 0) values.erase(n->inputs.front().node().get());
      continue;
    }
    const auto deferred = add_relu_after_.find(n);
    if (deferred != add_relu_after_.end() && deferred->second.add < end && fusing()) continue;  // runs at the Add's turn
    if (run_fused_add(i, begin, values, uses, training)) continue;
    args.clear();
    for (const KerasTensor& in : n->inputs) args.push_back(values.at(in.node().get()));
    const bool fused = run_fused(i, end, args, values, training);
    // Remat's per-layer modes: a single-input layer that is not an output may be rematerialised.
    const bool per_layer = training && args.size() == 1 && !is_output(n);
    Tensor y;
    if (!fused) y = per_layer ? call_layer(*n->layer, args.front(), training) : n->layer->apply(args, training);
    args.clear();
    for (const KerasTensor& in : n->inputs) {
      if (--uses[in.node().get()] == 0) values.erase(in.node().get());
    }
    if (!fused) values[n] = std::move(y);
  }
}

std::vector<Functional::Segment> Functional::find_segments() const {
  if (inputs_.size() != 1 || outputs_.size() != 1) return {};
  std::unordered_map<const GraphNode*, int> uses;
  for (const auto& n : nodes_) {
    for (const KerasTensor& in : n->inputs) ++uses[in.node().get()];
  }
  ++uses[outputs_.front().node().get()];
  // Simulates which outputs are still needed after each node; a segment ends where only the node's
  // own output is.
  std::unordered_set<const GraphNode*> live = {inputs_.front().node().get()};
  std::vector<Segment> out;
  Segment current{0, 0, inputs_.front().node().get()};
  bool open = false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const GraphNode* n = nodes_[i].get();
    if (n->inputs.empty()) continue;
    if (!open) current.begin = i;
    open = true;
    for (const KerasTensor& in : n->inputs) {
      if (--uses[in.node().get()] == 0) live.erase(in.node().get());
    }
    if (uses[n] > 0) live.insert(n);
    if (live.size() == 1 && live.count(n)) {
      current.end = i + 1;
      out.push_back(current);
      current = Segment{0, 0, n};
      open = false;
    }
  }
  return merge_chains(out);
}

// In a chain every node is an articulation point, and a segment per node would save each node's
// input, often more than the ops themselves keep. Segments therefore end where an output is read
// by two or more nodes — a residual block's input — or at the model's output; a graph with no such
// point (a plain chain) keeps a segment per node.
std::vector<Functional::Segment> Functional::merge_chains(const std::vector<Segment>& segments) const {
  std::unordered_map<const GraphNode*, int> readers;
  for (const auto& n : nodes_) {
    for (const KerasTensor& in : n->inputs) ++readers[in.node().get()];
  }
  std::vector<Segment> merged;
  bool open = false;
  for (size_t k = 0; k < segments.size(); ++k) {
    if (!open) merged.push_back(segments[k]);
    merged.back().end = segments[k].end;
    open = readers[nodes_[segments[k].end - 1].get()] < 2 && k + 1 < segments.size();
  }
  return merged.size() > 1 ? merged : segments;
}

Tensor Functional::run_segment(const Segment& segment, const Tensor& x, bool training) const {
  std::unordered_map<const GraphNode*, Tensor> values = {{segment.input, x}};
  std::unordered_map<const GraphNode*, int> uses;
  for (size_t i = segment.begin; i < segment.end; ++i) {
    for (const KerasTensor& in : nodes_[i]->inputs) ++uses[in.node().get()];
  }
  const GraphNode* last = nodes_[segment.end - 1].get();
  ++uses[last];
  run_nodes(segment.begin, segment.end, values, uses, training);
  return values.at(last);
}

std::vector<Variable*> Functional::segment_variables(const Segment& segment) const {
  std::vector<Variable*> out;
  for (size_t i = segment.begin; i < segment.end; ++i) {
    for (Variable* v : nodes_[i]->layer->trainable_weights()) {
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
  }
  return out;
}

nlohmann::json Functional::to_config() const {
  nlohmann::json layers = nlohmann::json::array();
  for (Layer* layer : layers_) {
    nlohmann::json inbound = nlohmann::json::array();
    for (const auto& n : nodes_) {
      if (n->layer.get() != layer || n->inputs.empty()) continue;
      nlohmann::json call = nlohmann::json::array();
      for (const KerasTensor& in : n->inputs) {
        call.push_back({in.node()->layer->name(), in.node()->node_index, 0, nlohmann::json::object()});
      }
      inbound.push_back(call);
    }
    layers.push_back({{"class_name", layer->class_name()},
                      {"config", layer->get_config()},
                      {"name", layer->name()},
                      {"inbound_nodes", inbound}});
  }
  auto refs = [](const std::vector<KerasTensor>& ts) {
    nlohmann::json out = nlohmann::json::array();
    for (const KerasTensor& t : ts) out.push_back({t.node()->layer->name(), t.node()->node_index, 0});
    return out;
  };
  return {{"class_name", "Functional"},
          {"config", {{"name", name()}, {"layers", layers}, {"input_layers", refs(inputs_)}, {"output_layers", refs(outputs_)}}}};
}

std::vector<SummaryRow> Functional::summary_rows() const {
  std::vector<SummaryRow> rows;
  for (const auto& node : nodes_) {
    const GraphNode& n = *node;
    SummaryRow r{n.layer->name(), n.layer->class_name(), n.output_shape, 0, {}};
    r.output_shape.insert(r.output_shape.begin(), -1);
    r.params = n.node_index == 0 ? n.layer->count_params() : 0;  // counted at a layer's first call only
    for (const KerasTensor& in : n.inputs) {
      r.connected_to.push_back(in.node()->layer->name() + "[" + std::to_string(in.node()->node_index) + "][0]");
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string Functional::summary() const {
  // Keras's functional summary: 98 columns ending at 33/59/71/98, two spaces between columns; a
  // cell too long for its column continues on the next line, broken after "'," where possible
  // (layer_utils.print_row).
  const size_t ends[] = {33, 59, 71, 98};
  auto row = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& d) {
    std::string left[] = {a, b, c, d};
    std::string out;
    while (!left[0].empty() || !left[1].empty() || !left[2].empty() || !left[3].empty()) {
      std::string line;
      for (int col = 0; col < 4; ++col) {
        const size_t start = col == 0 ? 0 : ends[col - 1];
        const size_t space = col == 3 ? 0 : 2;
        size_t cutoff = ends[col] - start - space - (col == 0 ? 1 : 0);
        std::string fit = left[col].substr(0, cutoff);
        for (const char* brk : {"),", "},", "],", "',"}) {
          const size_t at = fit.find(brk);
          if (at != std::string::npos && at + 2 < cutoff) cutoff = at + 2;
        }
        fit = left[col].substr(0, cutoff);
        if (col == 0) line += " ";
        line += fit;
        left[col] = cutoff < left[col].size() ? left[col].substr(cutoff) : "";
        if (!left[col].empty() && left[col][0] == ' ') left[col].erase(0, 1);
        if (line.size() < ends[col]) line.resize(ends[col], ' ');
      }
      out += line + "\n";
    }
    out.pop_back();
    return out;
  };
  std::ostringstream os;
  os << "Model: \"" << name() << "\"\n" << std::string(98, '_') << "\n";
  os << row("Layer (type)", "Output Shape", "Param #", "Connected to") << "\n" << std::string(98, '=') << "\n";
  const std::vector<SummaryRow> rows = summary_rows();
  for (size_t k = 0; k < rows.size(); ++k) {
    const SummaryRow& r = rows[k];
    os << row(r.name + " (" + r.class_name + ")", shape_string(r.output_shape), std::to_string(r.params),
              connections_string(r.connected_to))
       << "\n";
    if (k + 1 < rows.size()) os << "\n";
  }
  int64_t trainable = 0, non_trainable = 0;
  for (Variable* v : variables()) (v->trainable() ? trainable : non_trainable) += num_elements(v->shape());
  auto commas = [](int64_t v) {
    std::string d = std::to_string(v), o;
    for (size_t i = 0; i < d.size(); ++i) {
      if (i > 0 && (d.size() - i) % 3 == 0) o += ',';
      o += d[i];
    }
    return o;
  };
  auto mem = [](int64_t params) {
    double b = static_cast<double>(params) * 4.0;
    const char* units[] = {"Byte", "KB", "MB", "GB"};
    int u = 0;
    while (b >= 1024.0 && u < 3) {
      b /= 1024.0;
      ++u;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
    return std::string(buf);
  };
  os << std::string(98, '=') << "\n";
  os << "Total params: " << commas(trainable + non_trainable) << " (" << mem(trainable + non_trainable) << ")\n";
  os << "Trainable params: " << commas(trainable) << " (" << mem(trainable) << ")\n";
  os << "Non-trainable params: " << commas(non_trainable) << " (" << mem(non_trainable) << ")\n";
  os << std::string(98, '_') << "\n";
  return os.str();
}

}  // namespace keel
