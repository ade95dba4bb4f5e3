// A named, mutable tensor: a layer weight, an optimizer slot, a BatchNorm moving statistic.
#pragma once

#include <string>

#include "framework/core/tensor.h"

namespace keel {

class Variable {
 public:
  // `value` must already be charged where the variable lives (mirrored inside a strategy scope).
  Variable(std::string name, Tensor value, bool trainable)
      : name_(std::move(name)), value_(std::move(value)), trainable_(trainable) {
    value_.mark_trainable_variable(trainable_);
  }
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;

  const std::string& name() const { return name_; }  // "dense/kernel"
  const Shape& shape() const { return value_.shape(); }
  bool trainable() const { return trainable_; }
  // Freezing (Layer::set_trainable): a non-trainable variable gets no gradient and no optimizer slot.
  void set_trainable(bool trainable) {
    trainable_ = trainable;
    value_.mark_trainable_variable(trainable_);
  }
  // Reading a trainable variable inside a GradientTape makes the tape watch it.
  const Tensor& value() const { return value_; }
  Tensor& mutable_value() { return value_; }
  void assign(const Tensor& source) { value_.copy_from(source); }
  // The axis a LayoutMap splits across the cores (framework/device/layout.h), -1 for none: each core
  // holds, updates and keeps optimizer state for its block of that axis only.
  int sharded_axis() const { return sharded_axis_; }
  void set_sharded_axis(int axis) { sharded_axis_ = axis; }

 private:
  std::string name_;
  Tensor value_;
  bool trainable_;
  int sharded_axis_ = -1;
};

}  // namespace keel
