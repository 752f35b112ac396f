// Lowering of milrt_conv: conv's lowering with the activation in the kernel's epilogue.
#include "runtime/lower/conv_lowering.h"

namespace milrt::rt {
namespace {

std::unique_ptr<Step> lower_fused_conv(const Op& op, LowerCtx& ctx) {
  const std::string a = ctx.const_str(op, "activation", "none");
  const kernels::Activation act = activation_named(op, a);
  kernels::ActivationBounds bounds;
  if (act == kernels::Activation::clip)
    bounds = {float(ctx.const_float(op, "alpha")), float(ctx.const_float(op, "beta"))};
  return lower_conv_with(op, ctx, act, bounds);
}

}  // namespace

void register_fused_conv_lowerings() { register_lowering("milrt_conv", lower_fused_conv); }

}  // namespace milrt::rt
