// The one lowering of every GEMM-shaped op (matmul, linear, milrt_gemm) onto
// kernels::gemm: MIL matmul shapes (batch broadcasting, rank-1 operands),
// a constant B packed once at compile time, the epilogue fused.
#pragma once
#include <memory>
#include <string>

#include "kernels/gemm.h"
#include "runtime/lowering.h"

namespace milrt::rt {

struct GemmLowering {
  std::string x_key = "x", y_key = "y";   // the op's inputs holding A and B
  bool transpose_x = false, transpose_y = false;
  std::string bias_key, residual_key;     // empty: none
  float alpha = 1;
  kernels::Activation act = kernels::Activation::none;
};

std::unique_ptr<Step> lower_gemm(const Op& op, LowerCtx& ctx, const GemmLowering& g);

}  // namespace milrt::rt
