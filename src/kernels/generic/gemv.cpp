#include "kernels/gemv.h"
#include "kernels/gemm_micro.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace milrt::kernels {
namespace {

// Dot products of rows [j0, j1) into out[0, j1 - j0): eight partial sums per row (element k goes
// to sum k % 8), added pairwise at the end; the same order on every path.
void dots_generic(int64_t j0, int64_t j1, int64_t K, const float* x, const float* w, int64_t ldw, float* out) {
  for (int64_t j = j0; j < j1; ++j) {
    const float* r = w + j * ldw;
    float s[8] = {};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
      for (int i = 0; i < 8; ++i) s[i] += x[k + i] * r[k + i];
    for (int i = 0; k < K; ++k, ++i) s[i] += x[k] * r[k];
    out[j - j0] = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
  }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512dq,fma"))) inline float hsum(__m512 a, __m512 b) {
  return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}

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
#endif

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kMinParallelMacs = 1 << 16;

}  // namespace

void gemv_rows_f32(int64_t N, int64_t K, const float* x, const float* w, int64_t ldw, float* y, const Epilogue& ep,
                   Isa isa) {
  if (N <= 0) return;
  // Blocks of 64 rows: a thread's rows stay contiguous in memory; the split
  // changes which thread computes a row, never how.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  int threads = 1;
  if (double(N) * double(K) >= kMinParallelMacs && !omp_in_parallel()) threads = num_threads();
  threads = int(std::min<int64_t>(threads, blocks));
  const bool wide = isa == Isa::avx512 || isa == Isa::amx;
  auto block = [&](int64_t b) {
    const int64_t j0 = b * kBlock, j1 = std::min(N, j0 + kBlock);
    float dot[kBlock];  // not y itself: the residual may be y (C += ...)
#if defined(__x86_64__)
    if (wide) dots_avx512(j0, j1, K, x, w, ldw, dot);
    else dots_generic(j0, j1, K, x, w, ldw, dot);
#else
    (void)wide;
    dots_generic(j0, j1, K, x, w, ldw, dot);
#endif
    for (int64_t j = j0; j < j1; ++j) {
      float v = ep.alpha * dot[j - j0];
      if (ep.bias) v += ep.bias[j];
      v = activate(ep.act, v);
      if (ep.residual) v += static_cast<const float*>(ep.residual)[j];
      y[j] = v;
    }
  };
  if (threads <= 1) {
    for (int64_t b = 0; b < blocks; ++b) block(b);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) block(b);
}

}  // namespace milrt::kernels
