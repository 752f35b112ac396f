// The registry of lowerings (op type -> the function making its Step), the
// ops whose kernels may write over an input, what a step reports as its MIL
// ops, and LowerCtx's readers of constant operands.
#include <map>
#include <mutex>
#include <set>

#include "milrt/error.h"
#include "runtime/lowering.h"

namespace milrt {
namespace rt {

DType storage_dtype(DType d) {
  if (dtype_is_float(d)) return DType::FP32;
  if (d == DType::Bool) return DType::Bool;
  if (d == DType::String) throw Error("error: string values cannot be compiled");
  return DType::Int32;
}

namespace {
std::map<std::string, LowerFn>& lowering_table() {
  static std::map<std::string, LowerFn> t;
  return t;
}
}  // namespace

void register_lowering(const std::string& type, LowerFn fn) { lowering_table()[type] = fn; }

LowerFn find_lowering(const std::string& type) {
  ensure_lowerings_registered();
  auto it = lowering_table().find(type);
  return it == lowering_table().end() ? nullptr : it->second;
}

std::vector<std::string> lowered_ops() {
  ensure_lowerings_registered();
  std::vector<std::string> r;
  for (auto& [k, v] : lowering_table()) r.push_back(k);
  return r;
}

void register_elementwise_in_place();  // below

void ensure_lowerings_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_lowerings();
    register_linalg_lowerings();
    register_tensor_lowerings();
    register_slicing_lowerings();
    register_nn_lowerings();
    register_softmax_lowerings();
    register_reduce_lowerings();
    register_fused_elementwise_lowerings();
    register_fused_gemm_lowerings();
    register_fused_attention_lowerings();
    register_fused_norm_lowerings();
    register_rope_lowerings();
    register_swiglu_lowerings();
    register_fused_conv_lowerings();
    register_conv_chain_lowerings();
    register_pool_lowerings();
    register_state_lowerings();
    register_gather_lowerings();
    register_scatter_gather_lowerings();
    register_elementwise_in_place();
  });
}

namespace {
std::set<std::string>& in_place_table() {
  static std::set<std::string> t;
  return t;
}
}  // namespace

void allow_in_place(const std::string& type) { in_place_table().insert(type); }

bool in_place_allowed(const std::string& type) {
  ensure_lowerings_registered();
  return in_place_table().count(type) > 0;
}

// Ops of lower/elementwise.cpp whose kernels compute out[i] from the inputs'
// element i alone, reading it before writing out[i] (kernels/generic/
// elementwise.h: unary "x and y may alias"; binary and cast loop per element).
void register_elementwise_in_place() {
  for (const char* t : {"add", "sub", "mul", "real_div", "maximum", "minimum", "pow", "floor_div", "mod", "equal",
                        "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
                        "logical_xor", "logical_not", "cast", "abs", "exp", "exp2", "log", "sqrt", "rsqrt",
                        "inverse", "sin", "cos", "tan", "asin", "acos", "atan", "atanh", "sinh", "cosh", "tanh", "erf",
                        "floor", "ceil", "round", "sign", "square", "relu", "relu6", "sigmoid", "silu", "softplus",
                        "softsign", "clip", "leaky_relu", "elu", "threshold", "sigmoid_hard", "scaled_tanh",
                        "linear_activation", "thresholded_relu", "clamped_relu", "gelu", "milrt_elementwise"})
    allow_in_place(t);
}

std::vector<std::string> implemented_ops(const Op& op) {
  std::vector<std::string> r;
  if (const Arg* a = op.arg("fused_from"); a && a->kind == Arg::Kind::Const && a->lit->value.dtype() == DType::String &&
                                            a->lit->value.numel() == 1) {
    std::string s = a->lit->value.strings()[0], cur;
    for (char c : s + " ") {
      if (c != ' ') { cur += c; continue; }
      if (!cur.empty()) r.push_back(cur);
      cur.clear();
    }
  }
  if (r.empty())
    for (auto& o : op.outputs) r.push_back(o.name);
  return r;
}

int64_t LowerCtx::const_int(const Op& op, const std::string& key, std::optional<int64_t> def) {
  if (!op.has(key)) { if (def) return *def; throw_op_error(op, "missing input '" + key + "'"); }
  const Tensor* t = const_value(op, key);
  if (!t || t->numel() != 1) throw_op_error(op, "input '" + key + "' must be a constant scalar to compile");
  return int64_t(t->at(0));
}
double LowerCtx::const_float(const Op& op, const std::string& key, std::optional<double> def) {
  if (!op.has(key)) { if (def) return *def; throw_op_error(op, "missing input '" + key + "'"); }
  const Tensor* t = const_value(op, key);
  if (!t || t->numel() != 1) throw_op_error(op, "input '" + key + "' must be a constant scalar to compile");
  return t->at(0);
}
bool LowerCtx::const_bool(const Op& op, const std::string& key, std::optional<bool> def) {
  return const_int(op, key, def ? std::optional<int64_t>(*def) : std::nullopt) != 0;
}
kernels::Activation activation_named(const Op& op, const std::string& name) {
  if (auto a = kernels::activation_from_name(name)) return *a;
  throw_op_error(op, "unknown activation '" + name + "'");
}

std::string LowerCtx::const_str(const Op& op, const std::string& key, std::optional<std::string> def) {
  if (!op.has(key)) { if (def) return *def; throw_op_error(op, "missing input '" + key + "'"); }
  const Tensor* t = const_value(op, key);
  if (!t || t->dtype() != DType::String || t->strings().size() != 1)
    throw_op_error(op, "input '" + key + "' must be a constant string to compile");
  return t->strings()[0];
}
std::vector<int64_t> LowerCtx::const_ints(const Op& op, const std::string& key,
                                          std::optional<std::vector<int64_t>> def) {
  if (!op.has(key)) { if (def) return *def; throw_op_error(op, "missing input '" + key + "'"); }
  const Tensor* t = const_value(op, key);
  if (!t) throw_op_error(op, "input '" + key + "' must be constant to compile");
  std::vector<int64_t> r;
  for (int64_t i = 0; i < t->numel(); ++i) r.push_back(int64_t(t->at(size_t(i))));
  return r;
}

}  // namespace rt

}  // namespace milrt
