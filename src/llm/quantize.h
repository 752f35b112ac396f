// Symmetric block-wise int8 quantization of a weight matrix, the form
// Core ML's constexpr_blockwise_shift_scale describes (no offset): each row of
// W [N, K] is cut into blocks of `block` consecutive elements that share one
// fp32 scale, s = max|w| / 127 over the block, and q = round(w / s) (half to
// even) in [-127, 127], so that w ≈ s · q. A block of zeros gets s = 0.
#pragma once
#include <cstdint>

#include "milrt/tensor.h"

namespace milrt::llm {

struct BlockQuantized {
  Tensor data;    // int8 [N, K] (int4 from quantize_int4_blockwise)
  Tensor scale;   // fp32 [N, K / block]
};

// Throws Error unless `w` is an fp32 matrix whose row length `block` divides.
BlockQuantized quantize_int8_blockwise(const Tensor& w, int64_t block);

// The same in 4 bits: s = max|w| / 7 over the block, q = round(w / s) (half to
// even) clamped to [-8, 7], held as an Int4 tensor (one value a byte). The
// block must also be even: kernels::weight_gemm packs two values a byte.
BlockQuantized quantize_int4_blockwise(const Tensor& w, int64_t block);

}  // namespace milrt::llm
