// Fused attention forward and backward on AMX tiles (Sapphire Rapids and
// later), for CompileOptions::matmul_precision == bf16.
//
// Same contracts as attention_f32 and attention_backward_f32
// (kernels/generic/attention.h, attention_backward.h): shapes, masks, the
// causal convention (query i sees keys j <= i + Tk − Tq), lse out of the
// forward and into the backward, NaN output rows for queries that see no key
// (and zero dQ rows for them), fp32 inputs and outputs. What differs is the
// arithmetic of the products: every matrix product takes bf16 operands
// (rounded to nearest-even, as milrt::f32_to_bf16) and accumulates in fp32 on
// the tiles (tdpbf16ps). Q, K, V (and dO) are converted once per call into
// per-thread scratch in the layouts the products read; scores, masks, the
// online softmax and dS = P∘(dP − D) stay fp32 (AVX-512), and P and dS are
// rounded to bf16 only as operands of the next product (O += P·V, dV = Pᵀ·dO,
// dQ = scale·dS·K, dK = scale·dSᵀ·Q), by VCVTNEPS2BF16 (nearest-even too;
// values below 2^-126 flush to zero). The row sums l (and lse) are of the
// fp32 P; exp is 2^(x·log2 e) by a short polynomial (relative error below
// 3e-7, kernels/x86/attention_avx512_common.h). Results therefore differ
// from the fp32 kernels by bf16-level errors: at most 2^-8 (bf16's unit
// roundoff) of the magnitudes summed into each output (tests/test_attention_amx.cpp states the bound used).
//
// Only run these when attention_amx_usable() (this CPU and OS can execute
// AMX bf16) and attention_amx_supports(shape, mask).
#pragma once
#include <cstddef>

#include "kernels/generic/attention.h"

namespace milrt::kernels {

// AMX tiles and bf16 products can run here (x86-64 with amx_tile, amx_bf16
// and the OS permission to use tile data; cpu_features()).
bool attention_amx_usable();

// The shapes the AMX kernels take: D and Dv multiples of 32 in [32, 256]
// (whole 32-element k steps of the tiles; no padding of the head dims).
// Every mask kind and the causal flag are supported.
bool attention_amx_supports(const AttentionShape& s, const AttentionMask& mask);

// fp32 elements of scratch attention_bf16_amx needs for `s` (O(T·D): the
// converted Q, K, V and one block of scores).
size_t attention_amx_scratch_floats(const AttentionShape& s);

// As attention_f32, with bf16 products on AMX. `scratch` holds at least
// attention_amx_scratch_floats(s) floats. Throws milrt::Error for negative
// sizes and for shapes attention_amx_supports() refuses.
void attention_bf16_amx(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
                        const AttentionMask& mask, float* scratch, float* lse = nullptr);

// As attention_backward_f32, with bf16 products on AMX. Uses the per-thread
// buffer of attention_thread_scratch(); serial.
void attention_backward_bf16_amx(const float* q, const float* k, const float* v, const float* o, const float* dout,
                                 const float* lse, float* dq, float* dk, float* dv, const AttentionShape& s,
                                 const AttentionMask& mask);

}  // namespace milrt::kernels
