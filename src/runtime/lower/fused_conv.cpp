// Lowering of milrt_conv: conv's lowering with the activation in the kernel's epilogue.
#include "runtime/lower/conv_lowering.h"

namespace milrt::rt {
namespace {

std::unique_ptr<Step> lower_fused_conv(const Op& op, LowerCtx& ctx) {
  const std::string a = ctx.const_str(op, "activation", "none");
  kernels::ConvAct act = kernels::ConvAct::none;
  float alpha = 0, beta = 0;
  if (a == "relu") act = kernels::ConvAct::relu;
  else if (a == "sigmoid") act = kernels::ConvAct::sigmoid;
  else if (a == "silu") act = kernels::ConvAct::silu;
  else if (a == "clip") {
    act = kernels::ConvAct::clip;
    alpha = float(ctx.const_float(op, "alpha"));
    beta = float(ctx.const_float(op, "beta"));
  } else if (a != "none") {
    throw_op_error(op, "unsupported activation '" + a + "'");
  }
  return lower_conv_with(op, ctx, act, alpha, beta);
}

}  // namespace

void register_fused_conv_lowerings() { register_lowering("milrt_conv", lower_fused_conv); }

}  // namespace milrt::rt
