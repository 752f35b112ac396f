// The engine's supported op set and the checks behind every host step.
#include "ane/validate.h"

#include <vector>

#include "passes/rewriter.h"

namespace milrt::ane {
namespace {

// Chosen from the engine notes, the seeds' programs (conv, matmul, softmax,
// elementwise and activation ops, reshape/transpose/concat/slice_by_size)
// and the real bundles' float ops (pad, slice_by_index, squeeze, expand_dims,
// cast between float types). Composite ops that milrt adds (rms_norm, the
// milrt_* fused ops) are absent: lowering decomposes them first. Absent on
// purpose: lstm/gru/rnn, gather and other index ops, non_zero, argmax/argsort
// (integer results), select and comparisons (bool), random ops, and anything
// not listed; those go to the host.
const std::set<std::string>& supported() {
  static const std::set<std::string> ops = {
      // elementwise binary
      "add", "sub", "mul", "real_div", "maximum", "minimum", "pow",
      // elementwise unary and activations
      "abs", "exp", "log", "sqrt", "rsqrt", "inverse", "square", "tanh", "sigmoid", "relu", "silu", "gelu", "erf",
      "softplus", "clip", "leaky_relu", "elu", "relu6", "sigmoid_hard",
      // linear algebra and normalization
      "conv", "linear", "matmul", "softmax", "layer_norm", "scaled_dot_product_attention",
      // reductions with float results
      "reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
      // data movement
      "reshape", "transpose", "concat", "split", "slice_by_size", "slice_by_index", "squeeze", "expand_dims", "pad",
      "cast"};
  return ops;
}

bool is_float(DType t) { return t == DType::FP16 || t == DType::FP32; }

std::string check_type(const std::string& op_type, const std::string& role, const std::string& name, const Type& t,
                       int64_t max_dim) {
  if (t.kind == Type::Kind::State) return op_type + ": reads state '" + name + "' (stateful ops stay on the host)";
  if (!t.is_tensor()) return op_type + ": " + role + " '" + name + "' is " + t.str() + ", not a tensor";
  if (!is_float(t.dtype))
    return op_type + ": " + role + " '" + name + "' is " + std::string(dtype_name(t.dtype)) +
           " (the engine computes in fp16; integer and bool values stay on the host)";
  for (int64_t d : t.shape) {
    if (d < 0) return op_type + ": " + role + " '" + name + "' has an unknown dim";
    if (d > max_dim)
      return op_type + ": " + role + " '" + name + "' " + t.str() + " has a dim above " + std::to_string(max_dim);
  }
  if (t.shape.empty()) return op_type + ": " + role + " '" + name + "' is a scalar (operands cross as [1, C, 1, S])";
  return "";
}

bool is_constant_arg(const Op& op, const std::string& key, const std::set<std::string>& constants) {
  const Arg* a = op.arg(key);
  return a && (a->kind == Arg::Kind::Const || (a->kind == Arg::Kind::Var && constants.count(a->var)));
}

}  // namespace

TypeTable value_types(const Function& f) {
  TypeTable t;
  for (auto& p : f.params) t[p.name] = p.type;
  for (auto& op : f.ops)
    for (auto& o : op.outputs) t[o.name] = o.type;
  return t;
}

std::set<std::string> constant_values(const Function& f) {
  std::set<std::string> c;
  for (auto& op : f.ops)
    if (op.type == "const")
      for (auto& o : op.outputs) c.insert(o.name);
  return c;
}

bool engine_has_op(const std::string& op_type) { return supported().count(op_type) > 0; }

std::string host_reason(const Op& op, const TypeTable& types, const std::set<std::string>& constants,
                        int64_t max_dim) {
  if (op.type == "read_state" || op.type == "coreml_update_state")
    return op.type + ": a state op (the partition makes it a view of, or a write into, the state's buffer)";
  if (!engine_has_op(op.type)) return op.type + ": no engine route (not in the backend's supported op set)";
  if (op.type == "scaled_dot_product_attention" && op.has("attn_mask"))
    return op.type + ": has attn_mask, which the engine's fused attention ignores (docs); write it as "
                     "matmul + add + softmax";
  if ((op.type == "conv" || op.type == "linear") && !is_constant_arg(op, "weight", constants))
    return op.type + ": weight is not a constant (the engine fixes weights at compile time)";
  for (auto& in : op.inputs) {
    std::vector<std::string> vars;
    passes::for_each_var(in.arg, [&](const std::string& name) { vars.push_back(name); });
    for (auto& v : vars) {
      if (constants.count(v)) continue;  // attributes (shapes, axes) may be integer constants
      auto it = types.find(v);
      if (it == types.end()) return op.type + ": operand '" + v + "' has no known type";
      std::string r = check_type(op.type, "operand", v, it->second, max_dim);
      if (!r.empty()) return r;
    }
  }
  for (auto& o : op.outputs) {
    std::string r = check_type(op.type, "result", o.name, o.type, max_dim);
    if (!r.empty()) return r;
  }
  return "";
}

}  // namespace milrt::ane
