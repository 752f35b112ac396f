// AVX-512 pieces shared by the bf16 fused attention kernels on AMX
// (attention_amx.cpp) and on vdpbf16ps (attention_avx512_bf16.cpp), in
// kernels/x86/ only: fp32 -> bf16 rounding of operands, the vector exp, the
// row pieces of the online softmax, and the operand layouts both build once
// per call.
//
// Every function carries MILRT_ATTN_AVX512_TARGET (the target attribute, not
// per-file flags: see attention_amx.cpp), so a caller compiled for a wider
// target (AMX) may inline them; they run only where the including kernel's
// *_usable() said AVX-512 (and avx512_bf16) can execute.
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/x86/amx_bf16_common.h"

#define MILRT_ATTN_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace milrt::kernels::x86::attn {

// bf16 bits (nearest-even, NaN kept quiet: f32_to_bf16_bits) in the low half
// of each 32-bit lane.
MILRT_ATTN_AVX512_TARGET inline __m512i bf16_lanes(__m512 xf) { return x86::bf16_lanes(_mm512_castps_si512(xf)); }

MILRT_ATTN_AVX512_TARGET inline void store_bf16(uint16_t* dst, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(bf16_lanes(x)));
}

// P and dS to bf16 by VCVTNEPS2BF16: nearest-even as f32_to_bf16_bits, but
// subnormal values (below 2^-126, far below anything the fp32 sums can
// notice) flush to zero. Q, K, V, dO go through bf16_lanes, exactly as
// f32_to_bf16.
MILRT_ATTN_AVX512_TARGET inline __m256i cvt_bf16(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }
MILRT_ATTN_AVX512_TARGET inline void store_bf16_fast(uint16_t* dst, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), cvt_bf16(x));
}
// Two rows' bf16 interleaved: word c = (lo[c], hi[c]).
MILRT_ATTN_AVX512_TARGET inline __m512i pair_words(__m512 lo, __m512 hi) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(cvt_bf16(lo)), _mm512_slli_epi32(_mm512_cvtepu16_epi32(cvt_bf16(hi)), 16));
}

// Lanes c + [0, 16) below n.
MILRT_ATTN_AVX512_TARGET inline __mmask16 lanes_below(int64_t c, int64_t n) {
  const int64_t k = n - c;
  return k >= 16 ? __mmask16(0xffff) : k <= 0 ? __mmask16(0) : __mmask16((1u << k) - 1);
}

// Two rows' 16 bf16 (words [0, 16) and [16, 32) of x) into pair words:
// word 2c ← word c, word 2c + 1 ← word 16 + c.
MILRT_ATTN_AVX512_TARGET inline __m512i interleave_halves(__m512i x) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                       20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, x);
}

// bf16 of a (words [0, 16)) and b (words [16, 32)), exactly as bf16_lanes
// (f32_to_bf16): VCVTNE2PS2BF16 rounds alike (nearest-even, NaN made quiet
// keeping its upper bits) except for subnormal inputs, which it flushes;
// vectors holding one take the integer rounding.
MILRT_ATTN_AVX512_TARGET inline __m512i bf16x32(__m512 a, __m512 b) {
  const __mmask16 sub = _mm512_fpclass_ps_mask(a, 0x20) | _mm512_fpclass_ps_mask(b, 0x20);
  if (__builtin_expect(sub == 0, 1)) return (__m512i)_mm512_cvtne2ps_pbh(b, a);
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16_lanes(a))),
                            _mm512_cvtepi32_epi16(bf16_lanes(b)), 1);
}

// dst [rows_pad × cols] bf16 from src [rows × cols] fp32 (cols % 16 == 0);
// rows past `rows` zero.
MILRT_ATTN_AVX512_TARGET inline void rows_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst,
                                               int64_t rows_pad) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * cols;
    uint16_t* d = dst + r * cols;
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32)
      _mm512_storeu_si512(d + c, bf16x32(_mm512_loadu_ps(s + c), _mm512_loadu_ps(s + c + 16)));
    if (c < cols) store_bf16(d + c, _mm512_loadu_ps(s + c));
  }
  std::memset(dst + rows * cols, 0, size_t((rows_pad - rows) * cols) * 2);
}

using x86::transpose16;  // amx_bf16_common.h

// dst [rows_pad/2 × cols] words from fp32 src [rows × cols]: word c of pair
// row p = (bf16 src[2p][c], bf16 src[2p+1][c]); rows past `rows` read as zero.
MILRT_ATTN_AVX512_TARGET inline void pairs_of_rows(const float* src, int64_t rows, int64_t cols, uint32_t* dst,
                                                   int64_t rows_pad) {
  for (int64_t p = 0; p < rows_pad / 2; ++p) {
    const int64_t r0 = 2 * p, r1 = 2 * p + 1;
    for (int64_t c = 0; c < cols; c += 16) {
      const __m512 lo = r0 < rows ? _mm512_loadu_ps(src + r0 * cols + c) : _mm512_setzero_ps();
      const __m512 hi = r1 < rows ? _mm512_loadu_ps(src + r1 * cols + c) : _mm512_setzero_ps();
      _mm512_storeu_si512(dst + p * cols + c, interleave_halves(bf16x32(lo, hi)));
    }
  }
}

inline constexpr float kAttnNegInf = -std::numeric_limits<float>::infinity();

// s[r][c] *= scale for rows [0, rows) and columns [0, cols).
MILRT_ATTN_AVX512_TARGET inline void scale_tile(float* s, int64_t ld, int64_t rows, int64_t cols, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 k = lanes_below(c, cols);
      _mm512_mask_storeu_ps(s + r * ld + c, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + r * ld + c), vs));
    }
}

// 2^t for t <= 0 (and -inf, NaN), 16 lanes: n = round(t), 2^(t − n) by the
// degree-6 Taylor polynomial of e^(r·ln 2) on [-1/2, 1/2] (relative error
// below 2e-7), 2^n by VSCALEFPS. t is clamped at -160, whose 2^-160 rounds
// to 0 (so -inf gives 0); NaN goes through. Ten operations against the
// sixteen of a Cody-Waite e^x (exp_poly, kernels/generic/vec_math.h): the
// exp of both kernels' softmax, whose argument (scale·s − m)·log2 e is one
// FMA of the scores. (On AMX the softmax's vector work outweighs the tile
// products: e^x -> 2^t took one causal head at T = 512, D = 64 from 242 to
// 213 µs forward and 441 to 411 µs backward on one Sapphire Rapids core.)
MILRT_ATTN_AVX512_TARGET inline __m512 exp2_nonpos16(__m512 t) {
  t = _mm512_max_ps(_mm512_set1_ps(-160.0f), t);  // VMAXPS returns its second operand when one is NaN
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(t, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.5403530393381606e-4f), r, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline constexpr float kLog2e = 1.44269504088896341f;

// One row of a score tile into the online softmax: scale·s[0, n) are the
// row's scores, columns [n, width) masked; p[0, width) receives bf16
// exp(scale·s − m_new) (0 where masked). Updates m, l; returns the factor the
// row's O accumulator is to be multiplied by (1: unchanged). exp by
// exp2_nonpos16 of (scale·log2 e)·s − m_new·log2 e.
MILRT_ATTN_AVX512_TARGET inline float softmax_row(float* s, int64_t n, int64_t width, float scale, float& m, float& l,
                                                  uint16_t* p) {
  if (!(scale > 0)) {  // the maximum of scale·s is not scale·max(s): scale first
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t c = 0; c < n; c += 16) {
      const __mmask16 k = lanes_below(c, n);
      _mm512_mask_storeu_ps(s + c, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + c), vs));
    }
    scale = 1.0f;
  }
  const __m512 ninf = _mm512_set1_ps(kAttnNegInf);
  __m512 vmax = ninf;
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 k = lanes_below(c, n);
    vmax = _mm512_mask_max_ps(vmax, k, vmax, _mm512_maskz_loadu_ps(k, s + c));
  }
  const float m_new = std::max(m, scale * _mm512_reduce_max_ps(vmax));
  if (m_new == kAttnNegInf) {  // nothing seen yet: the tile adds nothing
    std::memset(p, 0, size_t(width) * 2);
    return 1.0f;
  }
  const __m512 vm = _mm512_set1_ps(m_new * kLog2e), vs = _mm512_set1_ps(scale * kLog2e);
  __m512 sum = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= n; c += 32) {  // two vectors, one VCVTNE2PS2BF16
    const __m512 e0 = exp2_nonpos16(_mm512_fmsub_ps(_mm512_loadu_ps(s + c), vs, vm));
    const __m512 e1 = exp2_nonpos16(_mm512_fmsub_ps(_mm512_loadu_ps(s + c + 16), vs, vm));
    sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
    _mm512_storeu_si512(p + c, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
  }
  for (; c < n; c += 16) {
    const __mmask16 k = lanes_below(c, n);
    const __m512 x = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + c), vs, vm);
    const __m512 e = _mm512_maskz_mov_ps(k, exp2_nonpos16(x));
    sum = _mm512_add_ps(sum, e);
    store_bf16_fast(p + c, e);
  }
  if (c < width) std::memset(p + c, 0, size_t(width - c) * 2);  // wholly masked 16-key groups
  const float corr = m == kAttnNegInf ? 0.0f : __builtin_expf(m - m_new);
  l = l * corr + _mm512_reduce_add_ps(sum);
  m = m_new;
  return corr;
}

MILRT_ATTN_AVX512_TARGET inline void scale_row(float* x, int64_t n, float f) {
  const __m512 vf = _mm512_set1_ps(f);
  for (int64_t c = 0; c < n; c += 16) _mm512_storeu_ps(x + c, _mm512_mul_ps(_mm512_loadu_ps(x + c), vf));
}

MILRT_ATTN_AVX512_TARGET inline float dot_row(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + c), _mm512_loadu_ps(b + c), acc);
  return _mm512_reduce_add_ps(acc);
}

}  // namespace milrt::kernels::x86::attn
#endif  // __x86_64__
