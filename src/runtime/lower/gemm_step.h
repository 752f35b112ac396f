// The one lowering of every GEMM-shaped op (matmul, linear, milrt_gemm) onto
// kernels::gemm / weight_gemm: MIL matmul shapes (batch broadcasting, rank-1
// operands), a constant B packed once at compile time or read in place in its
// compact storage (int8 + scales, bf16, fp16), the epilogue fused.
#pragma once
#include <memory>
#include <string>

#include "kernels/gemm.h"
#include "runtime/lowering.h"

namespace milrt::rt {

struct GemmLowering {
  std::string x_key = "x", y_key = "y";   // the op's inputs holding A and B
  // When the op has this input, y is an int8 W [N, K] with these block scales
  // (milrt_gemm from fuse-quantized-weights; transpose_y).
  std::string y_scale_key = "y_scale";
  bool transpose_x = false, transpose_y = false;
  std::string bias_key, residual_key;     // empty: none
  float alpha = 1;
  kernels::Activation act = kernels::Activation::none;
};

std::unique_ptr<Step> lower_gemm(const Op& op, LowerCtx& ctx, const GemmLowering& g);

}  // namespace milrt::rt
