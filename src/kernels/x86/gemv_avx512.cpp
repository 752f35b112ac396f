// The AVX-512 dot products of gemv_rows_f32 (kernels/gemv.h): rows of a
// weight against one fp32 vector. Compiled through the target attribute;
// called only when the kernel path is AVX-512 or AMX (gemv.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

// GCC 12 warns about its own _mm512_reduce_add_ps (an undefined passthrough operand).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace milrt::kernels {
namespace {

__attribute__((target("avx512f,avx512dq,fma"))) inline float hsum(__m512 a, __m512 b) {
  return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}

}  // namespace

// Four rows at a time, two 16-lane accumulators each (loads in flight for
// memory bandwidth); the tail of K is masked.
__attribute__((target("avx512f,avx512dq,fma"))) void dots_avx512(int64_t j0, int64_t j1, int64_t K, const float* x,
                                                                const float* w, int64_t ldw, float* out) {
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const float* r0 = w + j * ldw;
    const float* r1 = r0 + ldw;
    const float* r2 = r1 + ldw;
    const float* r3 = r2 + ldw;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
      a0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(r0 + k), a0);
      a1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(r0 + k + 16), a1);
      b0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(r1 + k), b0);
      b1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(r1 + k + 16), b1);
      c0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(r2 + k), c0);
      c1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(r2 + k + 16), c1);
      d0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(r3 + k), d0);
      d1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(r3 + k + 16), d1);
    }
    for (; k < K; k += 16) {
      const __mmask16 m = K - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (K - k)) - 1);
      const __m512 x0 = _mm512_maskz_loadu_ps(m, x + k);
      a0 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, r0 + k), a0);
      b0 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, r1 + k), b0);
      c0 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, r2 + k), c0);
      d0 = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(m, r3 + k), d0);
    }
    out[j - j0] = hsum(a0, a1), out[j - j0 + 1] = hsum(b0, b1), out[j - j0 + 2] = hsum(c0, c1), out[j - j0 + 3] = hsum(d0, d1);
  }
  for (; j < j1; ++j) {
    const float* r0 = w + j * ldw;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), _mm512_loadu_ps(r0 + k), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(r0 + k + 16), a1);
    }
    for (; k < K; k += 16) {
      const __mmask16 m = K - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (K - k)) - 1);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + k), _mm512_maskz_loadu_ps(m, r0 + k), a0);
    }
    out[j - j0] = hsum(a0, a1);
  }
}

}  // namespace milrt::kernels

#pragma GCC diagnostic pop
#endif
