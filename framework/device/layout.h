// Explicit placement of variables, Keras 3's keras.distribution: a LayoutMap from variable paths
// ("dense_1/kernel") to a TensorLayout, on keel's one-axis device mesh — the device's cores.
//
// keel's strategy splits every global batch across the cores (TPUStrategy's data parallelism); a
// layout can additionally split one axis of a variable across the same cores. The axis names a
// layout uses are "model" (that tensor axis is split across the cores, core r holding the block
// shard_range(dim, cores, r) of it) and None (whole on every core), as in Keras:
//
//   keel::distribution::LayoutMap layout_map;
//   layout_map["dense.*kernel"] = {"None", "model"};  // column-parallel: each core its output columns
//   layout_map["dense.*bias"] = {"model"};
//   ReplicatedStrategy strategy(DeviceSpec::preset("v3-8"), {.layout_map = ...});
//
// Lookup is Keras's LayoutMap.__getitem__: a pattern equal to the path wins; otherwise the one
// pattern that ECMAScript regex-searches the path; several such patterns are an error.
//
// What keel lays out today (a variable matched otherwise is refused when the layer builds it): a Dense
// kernel along its output axis (None, "model") — the layer then computes column-parallel, each core
// its own columns of every replica's rows (framework/ops/column_parallel.cc) — and the Dense bias
// beside it ("model",), in either precision policy. Layouts run in one process, with --shard none.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace keel::distribution {

// Keras's TensorLayout on keel's mesh: per tensor axis, "model" or "None".
struct TensorLayout {
  std::vector<std::string> axes;

  TensorLayout() = default;
  TensorLayout(std::initializer_list<std::string> names) : axes(names) {}
  explicit TensorLayout(std::vector<std::string> names) : axes(std::move(names)) {}
  // The tensor axis split across the cores, -1 for none. std::invalid_argument for an axis name
  // other than "model" or "None", or "model" on two axes.
  int sharded_axis() const;
  // "(None, model)".
  std::string to_string() const;
};

class LayoutMap {
 public:
  // Keras's layout_map[pattern] = layout; a new pattern goes last. std::invalid_argument for an
  // empty or overlong pattern or one that is not an ECMAScript regex keel accepts (no
  // back-references: patterns are untrusted, matched in polynomial time).
  TensorLayout& operator[](const std::string& pattern);
  // Keras's layout_map[path]: the layout for the variable `path`, if a pattern matches it.
  std::optional<TensorLayout> find(const std::string& path) const;
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }

  // The CLI's form, "PATTERN=AXES" (AXES: comma-separated "None" or "model", optionally in
  // parentheses): "dense.*kernel=None,model". std::invalid_argument naming what is wrong.
  void add_spec(const std::string& spec);
  static LayoutMap from_specs(const std::vector<std::string>& specs);
  // Each entry in the CLI's form, in order ("dense.*kernel=None,model").
  std::vector<std::string> specs() const;

  // The patterns that match none of `paths` (a --layout entry that would change nothing).
  std::vector<std::string> unmatched(const std::vector<std::string>& paths) const;

 private:
  struct Compiled;  // a pattern's regex, compiled once (framework/core/untrusted_regex.h)
  struct Entry {
    std::string pattern;
    TensorLayout layout;
    std::shared_ptr<const Compiled> regex;
  };
  std::vector<Entry> entries_;
};

}  // namespace keel::distribution
