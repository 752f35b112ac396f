// Lowering of milrt_gemm: matmul's lowering with the epilogue filled in.
#include "runtime/lower/gemm_step.h"

namespace milrt::rt {
namespace {

std::unique_ptr<Step> lower_fused_gemm(const Op& op, LowerCtx& ctx) {
  GemmLowering g;
  g.transpose_x = ctx.const_bool(op, "transpose_x", false);
  g.transpose_y = ctx.const_bool(op, "transpose_y", false);
  if (op.has("bias")) g.bias_key = "bias";
  if (op.has("residual")) g.residual_key = "residual";
  g.alpha = float(ctx.const_float(op, "alpha", 1.0));
  g.act = activation_named(op, ctx.const_str(op, "activation", std::string("none")));
  if (!kernels::gemm_supports(g.act)) throw_op_error(op, "a GEMM epilogue cannot apply " + std::string(kernels::activation_name(g.act)));
  return lower_gemm(op, ctx, g);
}

}  // namespace

void register_fused_gemm_lowerings() { register_lowering("milrt_gemm", lower_fused_gemm); }

}  // namespace milrt::rt
