// The conv lowering shared by `conv` (lower/nn.cpp) and the fused
// `milrt_conv` (lower/fused_conv.cpp): geometry, checks and kernel choice
// are the same; only the activation after the bias differs.
#pragma once
#include <memory>

#include "kernels/generic/conv.h"
#include "runtime/lowering.h"

namespace milrt::rt {

std::unique_ptr<Step> lower_conv_with(const Op& op, LowerCtx& ctx, kernels::Activation act,
                                      kernels::ActivationBounds bounds);

}  // namespace milrt::rt
