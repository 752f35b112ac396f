// weight_gemm's AVX-512 loops (see kernels/weight_gemm.h): weight rows
// streamed once against up to four rows of A, and panel widening. Weights are
// widened in registers right after the load: fp16 with vcvtph2ps, bf16 by a
// 16-bit shift into an fp32 word (exact), int8 with vpmovsxbd + vcvtdq2ps
// (exact). Compiled through the target attribute (no special flags), so any
// inline code from shared headers this file instantiates stays baseline x86-64;
// only called when the avx512 path is usable (generic/weight_gemm.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "kernels/weight_gemm.h"

#define MILRT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace milrt::kernels {

// GCC 12 warns about its own _mm512_reduce_add_ps (an undefined passthrough operand).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

template <WeightFormat F>
constexpr size_t kElemBytes = F == WeightFormat::f32 ? 4 : F == WeightFormat::q8 ? 1 : 2;

// Elements k..k+15 of a row as fp32; lanes outside `m` are zero (not read).
template <WeightFormat F>
MILRT_AVX512 inline __m512 load16(const void* row, int64_t k, __mmask16 m) {
  if constexpr (F == WeightFormat::f32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::f16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + k));
  } else if constexpr (F == WeightFormat::bf16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  } else {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, static_cast<const int8_t*>(row) + k)));
  }
}

template <WeightFormat F>
MILRT_AVX512 inline __m512 load16(const void* row, int64_t k) {
  if constexpr (F == WeightFormat::f32) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::f16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k)));
  } else if constexpr (F == WeightFormat::bf16) {
    const __m512i h = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  } else {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row) + k))));
  }
}

MILRT_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
}

// R weight rows from row j against M rows of A, two 16-lane accumulators per
// (row, A row): element k goes to lane k % 16 of accumulator (k / 16) % 2; the
// tail of K is masked into the first. R·M·2 accumulators stay in registers.
template <WeightFormat F, int M, int R>
MILRT_AVX512 void rows_plain(const WeightRef& w, int64_t j, const float* a, int64_t lda, float* out, int64_t ldo,
                             int64_t col) {
  const int64_t K = w.k;
  const void* row[R];
  for (int r = 0; r < R; ++r)
    row[r] = static_cast<const std::byte*>(w.data) + size_t(j + r) * size_t(w.ld) * kElemBytes<F>;
  __m512 acc0[R][M], acc1[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) acc0[r][m] = acc1[r][m] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512 x0[M], x1[M];
    for (int m = 0; m < M; ++m) {
      x0[m] = _mm512_loadu_ps(a + m * lda + k);
      x1[m] = _mm512_loadu_ps(a + m * lda + k + 16);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 w0 = load16<F>(row[r], k), w1 = load16<F>(row[r], k + 16);
      for (int m = 0; m < M; ++m) {
        acc0[r][m] = _mm512_fmadd_ps(x0[m], w0, acc0[r][m]);
        acc1[r][m] = _mm512_fmadd_ps(x1[m], w1, acc1[r][m]);
      }
    }
  }
  for (; k < K; k += 16) {
    const __mmask16 mk = tail_mask(K - k);
    __m512 x0[M];
    for (int m = 0; m < M; ++m) x0[m] = _mm512_maskz_loadu_ps(mk, a + m * lda + k);
    for (int r = 0; r < R; ++r) {
      const __m512 w0 = load16<F>(row[r], k, mk);
      for (int m = 0; m < M; ++m) acc0[r][m] = _mm512_fmadd_ps(x0[m], w0, acc0[r][m]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m)
      out[m * ldo + col + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r][m], acc1[r][m]));
}

// q8 with block % 16 == 0 (so K % 16 == 0): per block, Σ a·q in 16 lanes,
// then one multiply-add by the block's scale into the row's accumulator.
template <int M, int R>
MILRT_AVX512 void rows_q8(const WeightRef& w, int64_t j, const float* a, int64_t lda, float* out, int64_t ldo,
                          int64_t col) {
  const int64_t K = w.k, block = w.block, nb = K / block;
  const int8_t* row[R];
  const float* sc[R];
  for (int r = 0; r < R; ++r) {
    row[r] = static_cast<const int8_t*>(w.data) + (j + r) * w.ld;
    sc[r] = w.scales + (j + r) * nb;
  }
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512 bd[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) bd[r][m] = _mm512_setzero_ps();
    for (int64_t k = b * block; k < (b + 1) * block; k += 16) {
      __m512 x[M];
      for (int m = 0; m < M; ++m) x[m] = _mm512_loadu_ps(a + m * lda + k);
      for (int r = 0; r < R; ++r) {
        const __m512 q = load16<WeightFormat::q8>(row[r], k);
        for (int m = 0; m < M; ++m) bd[r][m] = _mm512_fmadd_ps(x[m], q, bd[r][m]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(sc[r][b]);
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_fmadd_ps(bd[r][m], s, acc[r][m]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) out[m * ldo + col + r] = _mm512_reduce_add_ps(acc[r][m]);
}

// Eight weight rows at a time for one row of A (decode: eight streams in
// flight and independent FMA chains, measured ~8% faster end to end than
// four), four for two rows, two for three or four (the accumulators must fit
// in 32 zmm); leftover rows one by one. A row's sums do not depend on which group it is in.
template <WeightFormat F, int M>
MILRT_AVX512 void rows_m(const WeightRef& w, int64_t j0, int64_t j1, const float* a, int64_t lda, float* out,
                         int64_t ldo) {
  constexpr int R = M == 1 ? 8 : M <= 2 ? 4 : 2;
  int64_t j = j0;
  if constexpr (F == WeightFormat::q8) {
    for (; j + R <= j1; j += R) rows_q8<M, R>(w, j, a, lda, out, ldo, j - j0);
    for (; j < j1; ++j) rows_q8<M, 1>(w, j, a, lda, out, ldo, j - j0);
  } else {
    for (; j + R <= j1; j += R) rows_plain<F, M, R>(w, j, a, lda, out, ldo, j - j0);
    for (; j < j1; ++j) rows_plain<F, M, 1>(w, j, a, lda, out, ldo, j - j0);
  }
}

template <WeightFormat F>
MILRT_AVX512 void rows_f(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda, float* out,
                         int64_t ldo) {
  // M > 4 never reaches here (the driver streams at most four rows at once).
  switch (M) {
    case 1: rows_m<F, 1>(w, j0, j1, a, lda, out, ldo); break;
    case 2: rows_m<F, 2>(w, j0, j1, a, lda, out, ldo); break;
    case 3: rows_m<F, 3>(w, j0, j1, a, lda, out, ldo); break;
    default: rows_m<F, 4>(w, j0, j1, a, lda, out, ldo); break;
  }
}

template <WeightFormat F>
MILRT_AVX512 void widen_f(const WeightRef& w, int64_t j0, int64_t j1, float* dst) {
  const int64_t K = w.k;
  for (int64_t j = j0; j < j1; ++j) {
    const void* row = static_cast<const std::byte*>(w.data) + size_t(j) * size_t(w.ld) * kElemBytes<F>;
    float* d = dst + (j - j0) * K;
    if constexpr (F == WeightFormat::q8) {
      const float* sc = w.scales + j * (K / w.block);
      if (w.block % 16 == 0) {
        for (int64_t k = 0; k < K; k += 16)
          _mm512_storeu_ps(d + k, _mm512_mul_ps(load16<F>(row, k), _mm512_set1_ps(sc[k / w.block])));
      } else {
        const int8_t* q = static_cast<const int8_t*>(row);
        for (int64_t k = 0; k < K; ++k) d[k] = sc[k / w.block] * float(q[k]);
      }
    } else {
      for (int64_t k = 0; k < K; k += 16) {
        const __mmask16 mk = tail_mask(K - k);
        _mm512_mask_storeu_ps(d + k, mk, load16<F>(row, k, mk));
      }
    }
  }
}

}  // namespace

MILRT_AVX512 void weight_rows_avx512(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda,
                                     float* out, int64_t ldo) {
  switch (w.format) {
    case WeightFormat::f32: rows_f<WeightFormat::f32>(w, j0, j1, M, a, lda, out, ldo); break;
    case WeightFormat::f16: rows_f<WeightFormat::f16>(w, j0, j1, M, a, lda, out, ldo); break;
    case WeightFormat::bf16: rows_f<WeightFormat::bf16>(w, j0, j1, M, a, lda, out, ldo); break;
    case WeightFormat::q8: rows_f<WeightFormat::q8>(w, j0, j1, M, a, lda, out, ldo); break;
  }
}

MILRT_AVX512 void widen_rows_avx512(const WeightRef& w, int64_t j0, int64_t j1, float* dst) {
  switch (w.format) {
    case WeightFormat::f32: widen_f<WeightFormat::f32>(w, j0, j1, dst); break;
    case WeightFormat::f16: widen_f<WeightFormat::f16>(w, j0, j1, dst); break;
    case WeightFormat::bf16: widen_f<WeightFormat::bf16>(w, j0, j1, dst); break;
    case WeightFormat::q8: widen_f<WeightFormat::q8>(w, j0, j1, dst); break;
  }
}

#pragma GCC diagnostic pop

}  // namespace milrt::kernels
#endif
