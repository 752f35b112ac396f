// The GEMM epilogue's activations written once for AVX2 (8 fp32 lanes) and
// AVX-512 (16 lanes): a traits struct per register type wraps the few
// intrinsics the algorithms use, and e^x, x·sigmoid(z) and activate() are
// templates over it. Each specialization is declared only where its
// intrinsics compile, so include this from a translation unit built with
// the ISA's flags (gemm_avx2.cpp: -mavx2 -mfma; gemm_avx512.cpp:
// -mavx512f ...), never from generic code.
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/activation.h"

namespace milrt::kernels::detail {
// Internal linkage: each ISA's translation unit keeps its own copies, so that
// the linker never merges code compiled for AVX-512 into the AVX2 path.
namespace {

template <class V> struct Simd;

// __m256 and __m512 carry attributes (vector size, may_alias) that a template
// argument drops; GCC warns (-Wignored-attributes), but the specializations
// only need the types to be distinct, which they stay.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"

#if defined(__AVX2__) && defined(__FMA__)
template <> struct Simd<__m256> {
  using V = __m256;
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V zero() { return _mm256_setzero_ps(); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // e^x's range: AVX2 builds 2^n in the exponent bits, which must stay a
  // normal number, so results below e^-87.3 (~1e-38) come out as ~1e-38 and
  // above e^88 as e^88 — both only feed sigmoid denominators, where that is
  // invisible.
  static constexpr float kExpLo = -87.3f, kExpHi = 88.0f;
  static V times_pow2(V y, V n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  }
};
#endif

#if defined(__AVX512F__)
template <> struct Simd<__m512> {
  using V = __m512;
  static V set1(float a) { return _mm512_set1_ps(a); }
  static V zero() { return _mm512_setzero_ps(); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // vscalefps overflows to inf and underflows through the subnormals.
  static constexpr float kExpLo = -104.0f, kExpHi = 89.0f;
  static V times_pow2(V y, V n) { return _mm512_scalef_ps(y, n); }
};
#endif
#pragma GCC diagnostic pop

// e^x to ~1 ulp (Cephes expf polynomial, as exp_poly in
// kernels/generic/vec_math.h), within Simd<V>'s range. NaN propagates
// (max/min return their second operand when one is NaN).
template <class V> inline V exp_ps(V x) {
  using S = Simd<V>;
  x = S::min(S::set1(S::kExpHi), S::max(S::set1(S::kExpLo), x));
  const V n = S::round(S::mul(x, S::set1(1.44269504088896341f)));
  V r = S::fnmadd(n, S::set1(0.693359375f), x);
  r = S::fnmadd(n, S::set1(-2.12194440e-4f), r);
  V y = S::set1(1.9875691500e-4f);
  y = S::fmadd(y, r, S::set1(1.3981999507e-3f));
  y = S::fmadd(y, r, S::set1(8.3334519073e-3f));
  y = S::fmadd(y, r, S::set1(4.1665795894e-2f));
  y = S::fmadd(y, r, S::set1(1.6666665459e-1f));
  y = S::fmadd(y, r, S::set1(5.0000001201e-1f));
  y = S::add(S::fmadd(y, S::mul(r, r), r), S::set1(1.0f));
  return S::times_pow2(y, n);
}

// x / (1 + e^-z): sigmoid (x = 1, z = x), silu (z = x), gelu_tanh (z = 2u).
template <class V> inline V times_sigmoid(V x, V z) {
  using S = Simd<V>;
  return S::div(x, S::add(S::set1(1.0f), exp_ps(S::sub(S::zero(), z))));
}

template <class V> inline V activate(V x, Activation act) {
  using S = Simd<V>;
  switch (act) {
    case Activation::none: return x;
    case Activation::relu: return S::max(x, S::zero());
    case Activation::sigmoid: return times_sigmoid(S::set1(1.0f), x);
    case Activation::silu: return times_sigmoid(x, x);
    case Activation::gelu_tanh: {
      // 0.5·(1 + tanh(u)) = sigmoid(2u), u = √(2/π)·(x + 0.044715·x³).
      const V x3 = S::mul(S::mul(x, x), x);
      const V u2 = S::mul(S::set1(1.5957691216f), S::fmadd(S::set1(0.044715f), x3, x));
      return times_sigmoid(x, u2);
    }
    default: return x;  // refused before any kernel runs (gemm_supports)
  }
  return x;
}

}  // namespace
}  // namespace milrt::kernels::detail
#endif  // __x86_64__
