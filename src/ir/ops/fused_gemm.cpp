// Schema of milrt_gemm, made by the fuse-gemm-epilogue pass:
//
//   milrt_gemm(x, y, transpose_x, transpose_y, bias?, residual?, alpha?, activation?)[fused_from = "..."]
//     = residual + act(alpha · matmul(x, y) + bias)
//
// The matmul part is MIL's matmul (batch broadcasting, rank-1 rules, a
// constant operand of another dtype); its shape and dtype rules are matmul's
// own schema, run on the same inputs. bias is [N] (the result's last dim),
// residual has the result's shape and dtype, alpha is a float scalar,
// activation one of none, relu, gelu_tanh, silu, sigmoid.
//
// A block-quantized weight (made by fuse-quantized-weights):
//
//   milrt_gemm(x, y = int8 | int4 [N, K], y_scale = [N, K/b], transpose_y = true, ...)
//
// multiplies x by the dequantized weight W[j, i] = y_scale[j, i / b] · y[j, i]
// (constexpr_blockwise_shift_scale without offset, blocks along K only):
// x · Wᵀ, with x's batch dims and rank-1 rule; the result has x's dtype.
#include "ir/op_registry.h"

namespace milrt {
namespace {

bool is_float(DType d) { return d == DType::FP16 || d == DType::FP32; }

std::string str(int64_t v) { return std::to_string(v); }

// The matmul part with a block-quantized y: its shape rules, x · Wᵀ.
void infer_quantized_product(InferCtx& c) {
  const Type& x = c.type("x");
  const Type& y = c.type("y");
  const Type& s = c.type("y_scale");
  if (!x.is_tensor() || !is_float(x.dtype)) c.fail("x must be an fp16 or fp32 tensor, got " + x.str());
  if (!y.is_tensor() || (y.dtype != DType::Int8 && y.dtype != DType::Int4) || y.shape.size() != 2)
    c.fail("with y_scale, y must be an int8 [N, K] tensor (or int4), got " + y.str());
  if (!s.is_tensor() || !is_float(s.dtype) || s.shape.size() != 2)
    c.fail("y_scale must be an fp16 or fp32 [N, K / block] tensor, got " + s.str());
  const auto ty = c.const_bool("transpose_y");
  if (!ty || !*ty) c.fail("with y_scale, transpose_y must be the constant true (y is stored [N, K])");
  const auto tx = c.has("transpose_x") ? c.const_bool("transpose_x") : std::optional<bool>(false);
  if (!tx || *tx) c.fail("with y_scale, transpose_x must be the constant false");
  const int64_t n = y.shape[0], k = y.shape[1];
  if (s.shape[0] >= 0 && n >= 0 && s.shape[0] != n)
    c.fail("y_scale " + s.str() + " must have one row per row of y " + y.str());
  if (s.shape[1] == 0 || (s.shape[1] > 0 && k >= 0 && k % s.shape[1] != 0))
    c.fail("y_scale " + s.str() + " must cut the rows of y " + y.str() + " into equal blocks (K / block columns)");
  if (x.shape.empty()) c.fail("x must have rank >= 1");
  const int64_t kx = x.shape.back();
  if (kx >= 0 && k >= 0 && kx != k)
    c.fail("inner dimensions do not match: x " + x.str() + ", y " + y.str() + " (transposed) give K = " + str(kx) +
           " vs " + str(k));
  Shape out = x.shape;
  out.back() = n;
  c.set_out(Type::tensor(x.dtype, out));
}

void infer_gemm(InferCtx& c) {
  if (c.has("y_scale")) {
    infer_quantized_product(c);
  } else {
    const OpSchema* mm = find_schema("matmul");
    if (!mm) c.fail("internal: matmul is not registered");
    mm->infer(c);
  }
  const Type out = c.out.at(0);
  if (!is_float(out.dtype)) c.fail("only float operands are supported, got " + out.str());
  const int64_t n = out.shape.empty() ? -1 : out.shape.back();
  if (c.has("bias")) {
    const Type& b = c.type("bias");
    if (b.dtype != out.dtype) c.fail("bias " + b.str() + " must have the result's dtype " + out.str());
    if (b.shape.size() != 1 || (b.shape[0] >= 0 && n >= 0 && b.shape[0] != n))
      c.fail("bias " + b.str() + " must be [N] for the result " + out.str());
  }
  if (c.has("residual")) {
    const Type& r = c.type("residual");
    bool ok = r.dtype == out.dtype && r.shape.size() == out.shape.size();
    for (size_t i = 0; ok && i < r.shape.size(); ++i)
      ok = r.shape[i] < 0 || out.shape[i] < 0 || r.shape[i] == out.shape[i];
    if (!ok) c.fail("residual " + r.str() + " must have the result's type " + out.str());
  }
  if (c.has("alpha")) {
    const Type& a = c.type("alpha");
    if (!a.is_scalar() || !is_float(a.dtype)) c.fail("alpha must be a float scalar, got " + a.str());
    if (!c.const_float("alpha")) c.fail("alpha must be a compile-time constant");
  }
  if (c.has("activation")) {
    auto act = c.const_str("activation");
    if (!act) c.fail("activation must be a constant string");
    if (*act != "none" && *act != "relu" && *act != "gelu_tanh" && *act != "silu" && *act != "sigmoid")
      c.fail("unknown activation '" + *act + "' (none, relu, gelu_tanh, silu, sigmoid)");
  }
  if (c.has("fused_from") && !c.const_str("fused_from")) c.fail("fused_from must be a constant string");
}

}  // namespace

void register_fused_gemm_ops() {
  register_op({"milrt_gemm",
               {{"x"},
                {"y"},
                {"transpose_x", false},
                {"transpose_y", false},
                {"y_scale", false},
                {"bias", false},
                {"residual", false},
                {"alpha", false},
                {"activation", false},
                {"fused_from", false}},
               1,
               1,
               infer_gemm});
}

}  // namespace milrt
