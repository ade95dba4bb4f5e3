// Keras's functional API: symbolic tensors, Input, calling layers on them, and a Model built from
// its inputs and outputs.
//
//   KerasTensor inputs = Input({224, 224, 3});
//   KerasTensor x = (*Conv2D(64, 7, {.strides = 2}))(inputs);
//   x = (*Add())({x, shortcut});
//   Functional model(inputs, x, "resnet50");
//
// The graph is a list of nodes (one per layer call) in creation order, which is a topological order;
// the model keeps those reachable from its outputs and runs them in that order, without recursion,
// releasing each intermediate tensor after its last consumer.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/layers/layer.h"
#include "framework/model/model.h"

namespace keel {

struct GraphNode;

// A symbolic tensor: the output of one layer call, with its shape (without the batch dimension).
class KerasTensor {
 public:
  KerasTensor() = default;
  const Shape& shape() const;
  const std::shared_ptr<GraphNode>& node() const { return node_; }
  bool defined() const { return node_ != nullptr; }

 private:
  friend class Layer;
  friend struct GraphNode;
  friend KerasTensor Input(const Shape& shape, const std::string& name);
  explicit KerasTensor(std::shared_ptr<GraphNode> node) : node_(std::move(node)) {}
  std::shared_ptr<GraphNode> node_;
};

struct GraphNode {
  LayerPtr layer;
  std::vector<KerasTensor> inputs;  // empty for an InputLayer
  Shape output_shape;               // without batch
  uint64_t id = 0;                  // creation order
  int node_index = 0;               // which call of `layer` this is (Keras's node index)

  GraphNode() = default;
  GraphNode(const GraphNode&) = delete;
  GraphNode& operator=(const GraphNode&) = delete;
  // Iterative: a chain of 20,000 layers would otherwise be destroyed one nested call per node.
  ~GraphNode();
};

// Keras's InputLayer: names the model's input and its shape.
class InputLayer : public Layer {
 public:
  InputLayer(Shape shape, std::string name);
  std::string class_name() const override { return "InputLayer"; }
  Tensor call(const Tensor& x, bool training) override { return x; }
  nlohmann::json get_config() const override;
  const Shape& shape() const { return shape_; }

 private:
  Shape shape_;
};

// A symbolic input of the given shape (without batch). Default names: "input_1", "input_2", ...
KerasTensor Input(const Shape& shape, const std::string& name = "");

class Functional : public Model {
 public:
  Functional(const KerasTensor& input, const KerasTensor& output, std::string name = "");
  Functional(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, std::string name = "");

  std::string class_name() const override { return "Functional"; }
  std::vector<Layer*> layers() const override;  // in execution order, input layers first
  Shape input_shape() const override { return inputs_.front().shape(); }
  Shape output_shape() const override { return outputs_.front().shape(); }
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& x, bool training) override;
  // Every output, for several inputs.
  std::vector<Tensor> call_all(const std::vector<Tensor>& inputs, bool training);
  nlohmann::json to_config() const override;
  std::string summary() const override;
  std::vector<SummaryRow> summary_rows() const override;  // one row per call, in execution order
  // A BatchNormalization whose output only an Activation("relu") reads runs with it as one op
  // (BatchNormalization::apply_with_relu: the same bits, one pass fewer over the activations each
  // way, and no buffer for the normalised values), and one that only an Add read by a ReLU alone
  // reads runs with both (apply_with_add_relu, at the Add's turn), unless remat computes layer by
  // layer. On by default; off runs every layer on its own.
  void set_fuse_batch_norm_relu(bool fuse) { fuse_batch_norm_relu_ = fuse; }

 private:
  // Remat's segments (framework/model/remat.h): runs of nodes [begin, end) in execution order that
  // read nothing computed before them but `input`'s output, and after which nothing but node
  // end - 1's output is still needed (the graph's articulation points; chains merged, see
  // merge_chains).
  struct Segment {
    size_t begin = 0, end = 0;
    const GraphNode* input = nullptr;
  };
  std::vector<Segment> find_segments() const;  // none unless one input and one output
  std::vector<Segment> merge_chains(const std::vector<Segment>& segments) const;
  Tensor run_segment(const Segment& segment, const Tensor& x, bool training) const;
  std::vector<Variable*> segment_variables(const Segment& segment) const;  // trainable, each once
  bool is_output(const GraphNode* node) const;
  // Runs nodes [begin, end) on `values`, dropping each value after its last use as `uses` counts.
  void run_nodes(size_t begin, size_t end, std::unordered_map<const GraphNode*, Tensor>& values,
                 std::unordered_map<const GraphNode*, int>& uses, bool training) const;

  std::vector<KerasTensor> inputs_, outputs_;
  std::vector<std::shared_ptr<GraphNode>> nodes_;  // execution order
  std::vector<Layer*> layers_;                     // unique, first-use order
  std::vector<Segment> segments_;
  // For each BatchNormalization node fused with the ReLU after it, that ReLU node's position; for
  // each fused with the Add and ReLU after it (a ResNet block's end), the Add's and the ReLU's, and
  // for that Add, the BatchNormalization's.
  struct AddRelu {
    size_t add = 0, relu = 0;
  };
  std::unordered_map<const GraphNode*, size_t> relu_after_;
  std::unordered_map<const GraphNode*, AddRelu> add_relu_after_;
  std::unordered_map<const GraphNode*, size_t> batch_norm_before_;
  bool fuse_batch_norm_relu_ = true;
  void find_batch_norm_relu_pairs();
  bool fusing() const;
  // Runs nodes_[i], a BatchNormalization fused with the ReLU at relu_after_; false where it is not.
  bool run_fused(size_t i, size_t end, std::vector<Tensor>& args, std::unordered_map<const GraphNode*, Tensor>& values,
                 bool training) const;
  // Runs nodes_[i], an Add whose BatchNormalization input was left for it, with that layer and the
  // ReLU after it; false where it is not one.
  bool run_fused_add(size_t i, size_t begin, std::unordered_map<const GraphNode*, Tensor>& values,
                     std::unordered_map<const GraphNode*, int>& uses, bool training) const;
};

}  // namespace keel
