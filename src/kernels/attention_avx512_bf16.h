// Fused attention forward and backward on AVX-512 with vdpbf16ps (Zen 4,
// Cooper Lake and later without AMX), for CompileOptions::matmul_precision ==
// bf16.
//
// The contracts and numerics of the AMX kernels (kernels/attention_amx.h):
// shapes, masks, the causal convention (query i sees keys j <= i + Tk − Tq),
// lse out of the forward and into the backward, NaN output rows for queries
// that see no key (and zero dQ rows for them), fp32 inputs and outputs. Every
// matrix product takes bf16 operands (Q, K, V, dO rounded to nearest-even as
// milrt::f32_to_bf16; P and dS by VCVTNEPS2BF16, nearest-even with
// subnormals flushed) and accumulates in fp32 (vdpbf16ps). Q, K, V (and dO)
// are converted once per call into per-thread scratch in the layouts the
// products read; scores, masks, the online softmax and dS = P∘(dP − D) stay
// fp32, and P and dS are rounded to bf16 only as operands of the next
// product. The row sums l (and lse) are of the fp32 P. exp is 2^(x·log2 e)
// by a short polynomial (exp2_nonpos16 in
// kernels/x86/attention_avx512_common.h, relative error below 3e-7, as the
// AMX kernels), far inside the fp32 share of the error bound. Results differ
// from the fp32 kernels by bf16-level errors (tests/test_attention_bf16.cpp
// states the bound).
//
// Only run these when attention_avx512_bf16_usable() and
// attention_avx512_bf16_supports(shape, mask).
#pragma once
#include <cstddef>

#include "kernels/generic/attention.h"

namespace milrt::kernels {

// AVX-512 (f, bw, vl, dq) with avx512_bf16 can run here (cpu_features()).
bool attention_avx512_bf16_usable();

// The shapes these kernels take: D and Dv multiples of 16 in [16, 256] (whole
// 16-lane vectors of the head dims; no padding of them). Every mask kind and
// the causal flag are supported.
bool attention_avx512_bf16_supports(const AttentionShape& s, const AttentionMask& mask);

// fp32 elements of scratch attention_bf16_avx512 needs for `s` (O(T·D): the
// converted Q, K, V and one block of scores).
size_t attention_avx512_bf16_scratch_floats(const AttentionShape& s);

// As attention_f32, with bf16 products on vdpbf16ps. `scratch` holds at
// least attention_avx512_bf16_scratch_floats(s) floats. Throws milrt::Error
// for negative sizes, for shapes attention_avx512_bf16_supports() refuses and
// where the CPU cannot run it.
void attention_bf16_avx512(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
                           const AttentionMask& mask, float* scratch, float* lse = nullptr);

// As attention_backward_f32, with bf16 products on vdpbf16ps. Uses the
// per-thread buffer of attention_thread_scratch(); serial.
void attention_backward_bf16_avx512(const float* q, const float* k, const float* v, const float* o,
                                    const float* dout, const float* lse, float* dq, float* dk, float* dv,
                                    const AttentionShape& s, const AttentionMask& mask);

}  // namespace milrt::kernels
