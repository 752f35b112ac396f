// Schemas and type inference of the reductions (coremltools
// ops/defs/iOS15/reduction.py; iOS17 adds output_dtype to reduce_arg*).
// Registered from register_tensor_ops().
#include <algorithm>

#include "ir/op_registry.h"

namespace milrt {

void register_reduction_ops();

namespace {

const std::vector<DType> kReducible = {DType::FP16, DType::FP32, DType::Int32};

void require_reducible(const InferCtx& ctx) {
  const Type& t = ctx.type("x");
  if (!t.is_tensor() || std::find(kReducible.begin(), kReducible.end(), t.dtype) == kReducible.end())
    ctx.fail("input 'x' must be a tensor of fp16, fp32, int32, got " + t.str());
}

bool keep_dims(const InferCtx& ctx) {
  if (!ctx.has("keep_dims")) return false;
  auto v = ctx.const_bool("keep_dims");
  if (!v) ctx.fail("input 'keep_dims' must be a compile-time constant bool");
  return *v;
}

// x's shape with the `reduced` dims set to 1 or removed.
Shape reduced_shape(const Shape& xs, const std::vector<bool>& reduced, bool keep) {
  Shape out;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!reduced[i]) out.push_back(xs[i]);
    else if (keep) out.push_back(1);
  }
  return out;
}

// reduce_sum & co: axes (constant, default all), keep_dims (default false).
void infer_reduce(InferCtx& ctx) {
  require_reducible(ctx);
  const Shape& xs = ctx.shape("x");
  std::vector<bool> reduced(xs.size(), !ctx.has("axes"));
  if (ctx.has("axes")) {
    auto axes = ctx.const_ints("axes");
    if (!axes) ctx.fail("input 'axes' must be a compile-time constant");
    for (int64_t a : *axes) {
      size_t n = size_t(normalize_axis(ctx, a, int64_t(xs.size())));
      if (reduced[n]) ctx.fail("axis " + std::to_string(a) + " is repeated");
      reduced[n] = true;
    }
  }
  ctx.set_out(Type::tensor(ctx.dtype("x"), reduced_shape(xs, reduced, keep_dims(ctx))));
}

// reduce_argmax / reduce_argmin: axis (default -1), keep_dims, output_dtype.
void infer_reduce_arg(InferCtx& ctx) {
  require_reducible(ctx);
  const Shape& xs = ctx.shape("x");
  int64_t axis = -1;
  if (ctx.has("axis")) {
    auto a = ctx.const_int("axis");
    if (!a) ctx.fail("input 'axis' must be a compile-time constant scalar");
    axis = *a;
  }
  std::vector<bool> reduced(xs.size(), false);
  reduced[size_t(normalize_axis(ctx, axis, int64_t(xs.size())))] = true;
  std::string out_name = "int32";
  if (ctx.has("output_dtype")) {
    if (!ctx.opset_at_least("ios17"))
      ctx.fail("input 'output_dtype' needs opset ios17 or later (the function is " + ctx.opset() + ")");
    auto s = ctx.const_str("output_dtype");
    if (!s) ctx.fail("input 'output_dtype' must be a compile-time constant string");
    out_name = *s;
  }
  if (out_name != "int32" && out_name != "uint16")
    ctx.fail("'output_dtype' must be int32 or uint16, got '" + out_name + "'");
  ctx.set_out(Type::tensor(*dtype_from_name(out_name), reduced_shape(xs, reduced, keep_dims(ctx))));
}

}  // namespace

void register_reduction_ops() {
  for (const char* name : {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
                           "reduce_l1_norm", "reduce_l2_norm", "reduce_sum_square", "reduce_log_sum",
                           "reduce_log_sum_exp"})
    register_op({name, {{"x"}, {"axes", false}, {"keep_dims", false}}, 1, 1, infer_reduce});
  for (const char* name : {"reduce_argmax", "reduce_argmin"})
    register_op({name, {{"x"}, {"axis", false}, {"keep_dims", false}, {"output_dtype", false}}, 1, 1,
                 infer_reduce_arg});
}

}  // namespace milrt
