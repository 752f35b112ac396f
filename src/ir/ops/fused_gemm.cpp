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
#include "ir/op_registry.h"

namespace milrt {
namespace {

bool is_float(DType d) { return d == DType::FP16 || d == DType::FP32; }

void infer_gemm(InferCtx& c) {
  const OpSchema* mm = find_schema("matmul");
  if (!mm) c.fail("internal: matmul is not registered");
  mm->infer(c);
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
