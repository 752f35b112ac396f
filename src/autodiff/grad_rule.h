// Gradient rules: one per differentiable op type, registered by name.
//
// A rule sees the forward op (already in the function, its inputs and outputs
// defined) and the gradient flowing into each of its outputs, and emits, with
// the builder, ops computing the gradient for each differentiable input key.
// It returns those gradients by input key ("x", "y", "weight", ...); keys it
// leaves out get none (integer inputs, shapes, axes). Every returned gradient
// must have exactly the shape and dtype of its input: rules for broadcasting
// ops call sum_to_shape().
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "milrt/builder.h"

namespace milrt::autodiff {

struct RuleContext {
  FunctionBuilder& b;
  const Op& op;
  // Gradient of each output of `op`, in output order; nullopt where no
  // gradient flows (the output does not reach the loss).
  const std::vector<std::optional<Value>>& dout;

  // The forward value bound to input `key` (a variable; throws for literals).
  Value in(const std::string& key) const;
  // The forward value of output i.
  Value out(size_t i = 0) const;
  // A fresh value name derived from the op's output name and `what`
  // ("z1_grad_x"), so derived programs stay readable.
  std::string name(const std::string& what) const;
  // Emits one op with a fresh name (see name()).
  Value emit(const std::string& type, const std::string& what,
             const std::vector<std::pair<std::string, Operand>>& inputs) const;
};

using GradRule = std::function<std::map<std::string, Value>(const RuleContext&)>;

void register_grad_rule(const std::string& op_type, GradRule rule);
const GradRule* find_grad_rule(const std::string& op_type);
std::vector<std::string> registered_grad_rules();

// Helpers every rule family shares.
// Sums `g` over the axes broadcasting added or stretched so it has `shape`
// (reduce_sum with keep_dims, then reshape); returns g unchanged when equal.
Value sum_to_shape(const RuleContext& c, const Value& g, const Shape& shape);
// A scalar literal of `dt` (fp16/fp32) with value v, as an operand.
Arg scalar_of(DType dt, double v);

// Registration of each rule family (called once by the registry).
void register_elementwise_grad_rules();   // src/autodiff/rules_elementwise.cpp
void register_linalg_grad_rules();        // src/autodiff/rules_linalg.cpp (matmul, linear, reductions)
void register_tensor_grad_rules();        // src/autodiff/rules_tensor.cpp (reshape, transpose, slice, concat, gather, ...)
void register_nn_grad_rules();            // src/autodiff/rules_nn.cpp (softmax, norms, attention, conv)

}  // namespace milrt::autodiff
