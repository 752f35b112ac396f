// Pass: keep block-quantized int8 and int4 weights compressed for the products that read them.
//
//   w = constexpr_blockwise_shift_scale(data = int8 | int4 [N, K], scale = [N, K/b])
//   z = matmul(x, w, transpose_y = true)       | linear(x, weight = w, bias?)
//     -> z = milrt_gemm(x, y = data, y_scale = scale, transpose_y = true, bias?)
//
// Also with the weight cast to fp32 in between, w32 = cast(x = w, dtype =
// "fp32"): fp16 scales give an fp16 w (the op's output takes the scale's
// dtype), which an fp32 matmul reads through that cast (matmul mixes dtypes
// only with a const operand, and w is a constexpr's output). The fused op
// reads the fp16 scales as stored (2 bytes a block: decode reads ~10% fewer
// bytes than with fp32 scales at int4/32); the cast goes with the constexpr
// op when nothing else reads it.
//
// The fused op reads the int8 data and the per-block scales directly (about
// 1 + 4/b bytes per weight instead of fp32's 4; int4, packed two a byte by
// the lowering, 0.5 + 4/b), so the plan never holds the expanded matrix. It runs before fold-constexpr, which would expand it.
//
// Only the forms the kernel reads are taken: data an int8 constant of rank 2
// (or int4 with an even block: the kernel addresses blocks by whole bytes),
// scale an fp16/fp32 constant with one row per weight row (blocks along K
// only), no offset or an all-zero one, matmul's x not transposed and its y
// transposed (y is the [N, K] weight as stored). Everything else (uint8,
// offsets, blocks along N, batched weights) is left to fold-constexpr: correct,
// just not compressed. A constexpr op whose every reader was fused is removed
// here (else fold-constexpr would expand it only for dce to drop it); one with
// other readers stays and folds as before.
//
// Numerics: the chain rounds the dequantized weights to the scale's dtype
// before the product (the cast to fp32 is then exact); the fused op
// multiplies by the exact q·s.
#include <algorithm>
#include <map>
#include <set>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

using passes::Inputs;
using passes::Replacement;

// The compile-time value of an optional argument.
const Tensor* const_of(const Arg* a, const ValueTable& values) { return a ? constant_of(*a, values) : nullptr; }

// A constexpr_blockwise_shift_scale the kernel can read as it is.
bool readable_quantized(const Op& op, const ValueTable& values) {
  if (op.type != "constexpr_blockwise_shift_scale" || op.outputs.size() != 1) return false;
  const Tensor* data = const_of(op.arg("data"), values);
  const Tensor* scale = const_of(op.arg("scale"), values);
  if (!data || !scale || (data->dtype() != DType::Int8 && data->dtype() != DType::Int4) || data->rank() != 2)
    return false;
  if ((scale->dtype() != DType::FP32 && scale->dtype() != DType::FP16) || scale->rank() != 2) return false;
  const int64_t n = data->shape()[0], k = data->shape()[1];
  if (scale->shape()[0] != n || scale->shape()[1] < 1 || k % scale->shape()[1] != 0) return false;
  if (data->dtype() == DType::Int4 && (k / scale->shape()[1]) % 2 != 0) return false;
  if (op.has("offset")) {
    const Tensor* off = const_of(op.arg("offset"), values);
    if (!off) return false;
    for (int64_t i = 0; i < off->numel(); ++i)
      if (off->at(size_t(i)) != 0) return false;
  }
  return true;
}

// A bool parameter's constant value (its default when absent); nullopt when not constant.
std::optional<bool> flag(const Op& op, const std::string& key, const Replacement& r) {
  const Arg* a = op.arg(key);
  if (!a) return false;
  const ValueInfo v = r.info(*a);
  if (!v.value || v.value->numel() != 1) return std::nullopt;
  return v.value->at(0) != 0;
}

// cast(x = a readable constexpr's fp16 output, dtype = "fp32"): the name of that constexpr's output, else "".
std::string widened_quantized(const Op& op, const std::map<std::string, Op>& quantized, const ValueTable& values) {
  if (op.type != "cast" || op.outputs.size() != 1) return "";
  const Arg* x = op.arg("x");
  const Tensor* dtype = const_of(op.arg("dtype"), values);
  if (!x || x->kind != Arg::Kind::Var || !quantized.count(x->var) || !dtype || dtype->dtype() != DType::String ||
      dtype->strings().at(0) != "fp32")
    return "";
  const Type& t = quantized.at(x->var).outputs[0].type;
  return t.is_tensor() && t.dtype == DType::FP16 ? x->var : "";
}

void fuse_function(Function& f, bool bare) {
  // The readable constexpr ops, by output name (copies: rewrite_ops rebuilds
  // f.ops), and the casts of their fp16 outputs to fp32, by output name.
  std::map<std::string, Op> quantized;
  std::map<std::string, std::string> widened;  // cast output -> constexpr output
  {
    ValueTable values = param_table(f);
    for (const Op& op : f.ops) {
      if (readable_quantized(op, values)) quantized[op.outputs[0].name] = op;
      if (std::string q = widened_quantized(op, quantized, values); !q.empty()) widened[op.outputs[0].name] = q;
      define_outputs(op, values);
    }
  }
  if (quantized.empty()) return;

  const std::set<std::string> read_before = passes::names_read(f);
  bool changed = false;
  passes::rewrite_ops(f, bare, [&](const Op& op, Replacement& r) {
    const bool linear = op.type == "linear";
    if ((op.type != "matmul" && !linear) || op.outputs.size() != 1) return false;
    const Arg* w = op.arg(linear ? "weight" : "y");
    if (!w || w->kind != Arg::Kind::Var) return false;
    auto cast = widened.find(w->var);
    auto q = quantized.find(cast == widened.end() ? w->var : cast->second);
    if (q == quantized.end()) return false;
    const Type& t = op.outputs[0].type;
    if (!t.is_tensor() || (t.dtype != DType::FP32 && t.dtype != DType::FP16) || t.shape.empty()) return false;
    if (r.info(*op.arg("x")).type.dtype != t.dtype) return false;
    if (!linear && (flag(op, "transpose_x", r) != false || flag(op, "transpose_y", r) != true)) return false;
    const Op& c = q->second;
    Inputs in = {{"x", *op.arg("x")}, {"y", *c.arg("data")}, {"y_scale", *c.arg("scale")},
                 {"transpose_y", r.boolean(true)}};
    if (linear && op.has("bias")) in.push_back({"bias", r.as_operand(*op.arg("bias"), t.dtype, {t.shape.back()}, "bias")});
    r.finish("milrt_gemm", in);
    passes::set_fused_from(r.ops().back(), {op.outputs[0].name}, r.bare());
    changed = true;
    return true;
  });
  if (!changed) return;
  // The casts, then the constexpr ops, nothing reads any more (their data and scale stay, read by the fused ops).
  auto drop_unread = [&](const auto& names) {
    const std::set<std::string> read = passes::names_read(f);
    std::erase_if(f.ops, [&](const Op& op) {
      return op.outputs.size() == 1 && names.count(op.outputs[0].name) && !read.count(op.outputs[0].name);
    });
  };
  drop_unread(widened);
  drop_unread(quantized);
  passes::drop_orphaned_consts(f, read_before);
}

}  // namespace

namespace passes {
void fuse_quantized_weights(Program& p) {
  for (Function& f : p.functions) fuse_function(f, p.version == "1.3");
}
}  // namespace passes

}  // namespace milrt
