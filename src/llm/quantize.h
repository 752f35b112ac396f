// Symmetric block-wise int8 quantization of a weight matrix, the form
// Core ML's constexpr_blockwise_shift_scale describes (no offset): each row of
// W [N, K] is cut into blocks of `block` consecutive elements that share one
// scale, s = max|w| / 127 over the block, and q = round(w / s) (half to
// even) in [-127, 127], so that w ≈ s · q. A block of zeros gets s = 0.
// Scales are fp32, or fp16 (llama.cpp's Q8_0/Q4_0 form: 2 bytes a block
// instead of 4): s rounded to fp16 (relative error <= 2^-11, far below the
// values' rounding; a scale under 2^-25 rounds to 0, zeroing its block) before q is
// computed from it, so that q is the best for the scale actually stored.
#pragma once
#include <cstdint>

#include "milrt/tensor.h"

namespace milrt::llm {

struct BlockQuantized {
  Tensor data;    // int8 [N, K] (int4 from quantize_int4_blockwise)
  Tensor scale;   // fp32 or fp16 [N, K / block]
};

// Throws Error unless `w` is an fp32 matrix whose row length `block` divides,
// for a scale_dtype neither fp32 nor fp16, or an fp16 scale that would overflow.
BlockQuantized quantize_int8_blockwise(const Tensor& w, int64_t block, DType scale_dtype = DType::FP32);

// The same in 4 bits: s = max|w| / 7 over the block, q = round(w / s) (half to
// even) clamped to [-8, 7], held as an Int4 tensor (one value a byte). The
// block must also be even: kernels::weight_gemm packs two values a byte.
BlockQuantized quantize_int4_blockwise(const Tensor& w, int64_t block, DType scale_dtype = DType::FP32);

}  // namespace milrt::llm
