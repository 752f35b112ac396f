// Schemas and type inference of the elementwise op family: binary arithmetic,
// comparisons, logical ops, select, unary math, cast and activations.
//
// Type domains follow coremltools (ops/defs/iOS15/elementwise_*.py,
// activation.py, control_flow.py select, iOS17 overrides). Inference cannot
// see the function's opset, so where iOS17 relaxed a rule (scalar parameters
// of a dtype `U` independent of x's `T`; more cast dtypes) the relaxed rule is
// applied to every opset.
#include <cmath>

#include "ir/op_registry.h"

namespace milrt {
namespace {

using Domain = std::vector<DType>;
const Domain kFloat = {DType::FP16, DType::FP32};
const Domain kNumeric = {DType::FP16, DType::FP32, DType::Int32};
const Domain kBool = {DType::Bool};
const Domain kSelectable = {DType::FP16, DType::FP32, DType::Int32, DType::Bool};
// cast's dtypes: iOS15 allows fp16, fp32, int32, bool; iOS17 adds the small ints.
const Domain kCastable = {DType::FP16,  DType::FP32,   DType::Int8,  DType::UInt8,
                          DType::Int16, DType::UInt16, DType::Int32, DType::Bool};

std::string domain_str(const Domain& d) {
  std::string s;
  for (DType t : d) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

bool in_domain(DType t, const Domain& d) {
  for (DType u : d) if (u == t) return true;
  return false;
}

// A tensor input whose dtype lies in `d`.
void require_domain(const InferCtx& ctx, const std::string& key, const Domain& d) {
  const Type& t = ctx.type(key);
  if (!t.is_tensor() || !in_domain(t.dtype, d))
    ctx.fail("input '" + key + "' must be a tensor of " + domain_str(d) + ", got " + t.str());
}

// A scalar parameter (one element: coremltools' `const T`) of a dtype in `d`.
void require_scalar_param(const InferCtx& ctx, const std::string& key, const Domain& d) {
  require_domain(ctx, key, d);
  for (int64_t dim : ctx.shape(key))
    if (dim != 1 && dim != -1) ctx.fail("input '" + key + "' must be a scalar, got " + ctx.type(key).str());
}

// A rank-1 parameter of `channels` elements (-1: unknown), as prelu's alpha.
void require_channel_param(const InferCtx& ctx, const std::string& key, int64_t channels) {
  require_domain(ctx, key, kFloat);
  ctx.require_rank(key, 1);
  int64_t n = ctx.shape(key)[0];
  if (n != -1 && channels != -1 && n != channels)
    ctx.fail("input '" + key + "' has " + std::to_string(n) + " elements but x has " +
             std::to_string(channels) + " channels (dim 1)");
}

// `base` (an input's type) with a new dtype and shape; a scalar result keeps
// the input's spelling (`fp32` or `tensor<fp32, []>`).
Type like(const Type& base, DType dtype, Shape shape) {
  Type t = base;
  t.dtype = dtype;
  t.bare = base.bare && shape.empty();
  t.shape = std::move(shape);
  return t;
}

// x and y share a dtype from `d`, broadcast together; output dtype `out`
// (nullopt: the inputs' dtype).
void infer_binary(InferCtx& ctx, const Domain& d, std::optional<DType> out) {
  require_domain(ctx, "x", d);
  require_domain(ctx, "y", d);
  ctx.require_same_dtype("x", "y");
  Shape s = broadcast_shapes(ctx, ctx.shape("x"), ctx.shape("y"));
  ctx.set_out(like(ctx.type("x"), out.value_or(ctx.dtype("x")), s));
}

void register_binary(const std::string& name, const Domain& d, std::optional<DType> out) {
  register_op({name, {{"x"}, {"y"}}, 1, 1, [d, out](InferCtx& ctx) { infer_binary(ctx, d, out); }});
}

// y = f(x): same type as x, x's dtype from `d`; `params` are optional or
// required scalar parameters of a float dtype (coremltools iOS17's `U`).
void register_unary(const std::string& name, const Domain& d, std::vector<InputSpec> params = {}) {
  std::vector<InputSpec> inputs = {{"x"}};
  inputs.insert(inputs.end(), params.begin(), params.end());
  register_op({name, inputs, 1, 1, [d, params](InferCtx& ctx) {
                 require_domain(ctx, "x", d);
                 for (const InputSpec& p : params)
                   if (ctx.has(p.name)) require_scalar_param(ctx, p.name, kFloat);
                 ctx.set_out(ctx.type("x"));
               }});
}

// clip and threshold: parameters must share x's dtype (no iOS17 relaxation).
void register_bounded(const std::string& name, const Domain& d, std::vector<std::string> params) {
  std::vector<InputSpec> inputs = {{"x"}};
  for (const auto& p : params) inputs.push_back({p});
  register_op({name, inputs, 1, 1, [d, params](InferCtx& ctx) {
                 require_domain(ctx, "x", d);
                 for (const auto& p : params) {
                   require_scalar_param(ctx, p, d);
                   ctx.require_same_dtype("x", p);
                 }
                 ctx.set_out(ctx.type("x"));
               }});
}

void infer_select(InferCtx& ctx) {
  require_domain(ctx, "cond", kBool);
  require_domain(ctx, "a", kSelectable);
  require_domain(ctx, "b", kSelectable);
  ctx.require_same_dtype("a", "b");
  // NumPy's where: all three broadcast (coremltools' inference omits cond,
  // which would mis-type a cond larger than a and b).
  Shape s = broadcast_shapes(ctx, ctx.shape("cond"), ctx.shape("a"));
  s = broadcast_shapes(ctx, s, ctx.shape("b"));
  ctx.set_out(like(ctx.type("a"), ctx.dtype("a"), s));
}

void infer_cast(InferCtx& ctx) {
  require_domain(ctx, "x", kCastable);
  require_domain(ctx, "dtype", {DType::String});
  std::optional<std::string> name = ctx.const_str("dtype");
  if (!name) ctx.fail("input 'dtype' must be a constant string");
  std::optional<DType> to = dtype_from_name(*name);
  if (!to || !in_domain(*to, kCastable))
    ctx.fail("dtype \"" + *name + "\" is not one of " + domain_str(kCastable));
  ctx.set_out(like(ctx.type("x"), *to, ctx.shape("x")));
}

void infer_gelu(InferCtx& ctx) {
  require_domain(ctx, "x", kFloat);
  if (ctx.has("mode")) {
    std::optional<std::string> mode = ctx.const_str("mode");
    if (!mode) ctx.fail("input 'mode' must be a constant string");
    if (*mode != "EXACT" && *mode != "TANH_APPROXIMATION" && *mode != "SIGMOID_APPROXIMATION")
      ctx.fail("unknown mode \"" + *mode + "\" (EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION)");
  }
  ctx.set_out(ctx.type("x"));
}

void infer_softmax(InferCtx& ctx) {
  require_domain(ctx, "x", kFloat);
  if (ctx.has("axis")) {
    require_scalar_param(ctx, "axis", {DType::Int32});
    std::optional<int64_t> axis = ctx.const_int("axis");
    if (!axis) ctx.fail("input 'axis' must be a constant");
    normalize_axis(ctx, *axis, int64_t(ctx.shape("x").size()));
  } else {
    normalize_axis(ctx, -1, int64_t(ctx.shape("x").size()));
  }
  ctx.set_out(ctx.type("x"));
}

void infer_prelu(InferCtx& ctx) {
  require_domain(ctx, "x", kFloat);
  int rank = int(ctx.shape("x").size());
  if (rank < 3 || rank > 5) ctx.fail("x must have rank 3, 4 or 5, got " + ctx.type("x").str());
  require_channel_param(ctx, "alpha", ctx.shape("x")[1]);
  // Core ML supports per-channel slopes only for rank 4; ranks 3 and 5 need one shared slope.
  const Tensor* alpha = ctx.const_value("alpha");
  if (alpha && rank != 4)
    for (int64_t i = 0; i < alpha->numel(); ++i)
      if (std::fabs(alpha->at(size_t(i)) - alpha->at(0)) > 1e-5)
        ctx.fail("for a rank-" + std::to_string(rank) + " x all values of alpha must be equal");
  ctx.set_out(ctx.type("x"));
}

void infer_softplus_parametric(InferCtx& ctx) {
  require_domain(ctx, "x", kFloat);
  if (ctx.shape("x").size() < 3) ctx.fail("x must have rank 3 or more, got " + ctx.type("x").str());
  require_channel_param(ctx, "alpha", ctx.shape("x")[1]);
  require_channel_param(ctx, "beta", ctx.shape("x")[1]);
  ctx.set_out(ctx.type("x"));
}

void infer_logical_not(InferCtx& ctx) {
  require_domain(ctx, "x", kBool);
  ctx.set_out(ctx.type("x"));
}

}  // namespace

void register_elementwise_ops() {
  for (const char* name : {"add", "sub", "mul", "real_div", "pow", "maximum", "minimum", "floor_div", "mod"})
    register_binary(name, kNumeric, std::nullopt);
  for (const char* name : {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
    register_binary(name, kNumeric, DType::Bool);
  for (const char* name : {"logical_and", "logical_or", "logical_xor"})
    register_binary(name, kBool, DType::Bool);
  register_op({"logical_not", {{"x"}}, 1, 1, infer_logical_not});
  register_op({"select", {{"cond"}, {"a"}, {"b"}}, 1, 1, infer_select});

  for (const char* name : {"abs", "exp2", "sign", "square"}) register_unary(name, kNumeric);
  for (const char* name : {"exp", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "atanh", "sinh",
                           "cosh", "tanh", "erf", "floor", "ceil", "round", "relu", "relu6", "sigmoid",
                           "silu", "softplus", "softsign"})
    register_unary(name, kFloat);
  for (const char* name : {"log", "rsqrt", "inverse"}) register_unary(name, kFloat, {{"epsilon", false}});
  for (const char* name : {"leaky_relu", "elu", "thresholded_relu"}) register_unary(name, kFloat, {{"alpha"}});
  for (const char* name : {"sigmoid_hard", "scaled_tanh", "linear_activation", "clamped_relu"})
    register_unary(name, kFloat, {{"alpha"}, {"beta"}});
  register_bounded("clip", kFloat, {"alpha", "beta"});
  register_bounded("threshold", kNumeric, {"alpha"});

  register_op({"cast", {{"x"}, {"dtype"}}, 1, 1, infer_cast});
  register_op({"gelu", {{"x"}, {"mode", false}}, 1, 1, infer_gelu});
  register_op({"softmax", {{"x"}, {"axis", false}}, 1, 1, infer_softmax});
  register_op({"prelu", {{"x"}, {"alpha"}}, 1, 1, infer_prelu});
  register_op({"softplus_parametric", {{"x"}, {"alpha"}, {"beta"}}, 1, 1, infer_softplus_parametric});
}

}  // namespace milrt
