// weight_gemm's fp32-math loops, written once for every vector width:
// weight rows streamed once against up to four rows of A (decode), and rows
// widened to fp32 panels (prefill). A Lanes struct gives the few operations
// that differ between widths (the loads that widen each weight format in
// registers, masked tails, the final sum) and the width's tuning: how many
// accumulators a row keeps per A row. The int8-activation loops are different algorithms per ISA
// (vpdpbusd against vpmaddubsw) and stay in their ISA's file.
//
// Included by x86/weight_gemm_avx2.cpp and x86/weight_gemm_avx512.cpp, each
// defining MILRT_WEIGHT_ROWS_TARGET (its target attribute) first: every
// function here is compiled for that ISA in that file only (internal
// linkage), so the AVX2 path never holds AVX-512 code.
#pragma once
#if defined(__x86_64__)
#ifndef MILRT_WEIGHT_ROWS_TARGET
#error "define MILRT_WEIGHT_ROWS_TARGET (the including ISA's target attribute) before including weight_rows.h"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/weight_gemm.h"

namespace milrt::kernels {
namespace {

template <WeightFormat F>
constexpr size_t kElemBytes = F == WeightFormat::f32 ? 4 : F == WeightFormat::q8 ? 1 : 2;

// Scale b of a row's scales (weight_scale_row), fp16 widened by F16C.
MILRT_WEIGHT_ROWS_TARGET inline float scale_at(const void* row, bool f16, int64_t b) {
  return f16 ? _cvtsh_ss(static_cast<const uint16_t*>(row)[b]) : static_cast<const float*>(row)[b];
}

// Bytes ahead of the line being read that each row requests into L2, once
// per line: eight interleaved row streams lose the hardware prefetcher, and
// the rows are contiguous, so this runs on through the rows that follow (a
// prefetch past the matrix's end never faults). As the int8-activation loops
// do. Measured on the Zen 4 VM (bench_weight_gemm, one thread, weights from
// DRAM, Stories110M's four shapes, two rounds against no software prefetch
// on AVX-512): f16 and bf16 rows 1.0-3.2x as fast (least at K = 2048), q8
// 1.4-2.8x, f32 0.8-1.7x (near the read bandwidth already); 8 KB did worse
// on f16/bf16, 32 KB the same. On the AVX2 loops (MILRT_ISA=avx2, same VM)
// it also beat the next group's line prefetched into L1 (their scheme
// before, which had measured 25-55% faster than nothing for q8 on an AVX2
// VM): 32000 x 768 f16 4.3 -> 2.3 ms, bf16 4.9 -> 2.3 ms, q8 3.0 -> 1.5 ms
// (two rounds). Not measured on an AVX2-only CPU.
constexpr size_t kRowsAhead = 16384;

template <int R, class T>
MILRT_WEIGHT_ROWS_TARGET inline void prefetch_rows_ahead(T* const* row, size_t byte) {
  for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(row[r]) + byte + kRowsAhead, _MM_HINT_T1);
}

// R weight rows from row j against M rows of A, L::kAccs accumulators per
// (row, A row): element k goes to lane k % W of accumulator (k / W) % kAccs;
// the masked tail of K adds into the first. R·M·kAccs accumulators stay in
// registers.
template <class L, WeightFormat F, int M, int R>
MILRT_WEIGHT_ROWS_TARGET void rows_plain(const WeightRef& w, int64_t j, const float* a, int64_t lda, float* out,
                                         int64_t ldo, int64_t col) {
  using V = typename L::V;
  constexpr int W = L::kWidth, A = L::kAccs;
  const int64_t K = w.k;
  const void* row[R];
  for (int r = 0; r < R; ++r)
    row[r] = static_cast<const std::byte*>(w.data) + size_t(j + r) * size_t(w.ld) * kElemBytes<F>;
  V acc[A][R][M];
  for (int s = 0; s < A; ++s)
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) acc[s][r][m] = L::zero();
  constexpr int64_t kLine = 64 / kElemBytes<F>;  // elements per cache line
  int64_t k = 0;
  for (; k + W * A <= K; k += W * A) {
    // Every line this step starts (f32 on AVX-512 reads two lines a step).
    if constexpr (W * A >= kLine) {
      for (int64_t e = 0; e < W * A; e += kLine) prefetch_rows_ahead<R>(row, size_t(k + e) * kElemBytes<F>);
    } else if (k % kLine == 0) {
      prefetch_rows_ahead<R>(row, size_t(k) * kElemBytes<F>);
    }
    V x[A][M];
    for (int s = 0; s < A; ++s)
      for (int m = 0; m < M; ++m) x[s][m] = L::load_a(a + m * lda + k + s * W);
    for (int r = 0; r < R; ++r) {
      V wv[A];  // a row's loads first: they are independent of each other
      for (int s = 0; s < A; ++s) wv[s] = L::template load_w<F>(row[r], k + s * W);
      for (int s = 0; s < A; ++s)
        for (int m = 0; m < M; ++m) acc[s][r][m] = L::fmadd(x[s][m], wv[s], acc[s][r][m]);
    }
  }
  for (; k < K; k += W) {
    const auto mk = L::tail_mask(K - k);
    V x[M];
    for (int m = 0; m < M; ++m) x[m] = L::load_a_tail(a + m * lda + k, mk);
    for (int r = 0; r < R; ++r) {
      const V wv = L::template load_w_tail<F>(row[r], k, K - k, mk);
      for (int m = 0; m < M; ++m) acc[0][r][m] = L::fmadd(x[m], wv, acc[0][r][m]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) {
      V sum = acc[0][r][m];
      for (int s = 1; s < A; ++s) sum = L::add(sum, acc[s][r][m]);
      out[m * ldo + col + r] = L::reduce(sum);
    }
}

// q8 with a block the width divides (so K is a multiple of it): per block,
// Σ a·q in W lanes, then one multiply-add by the block's scale into the row's
// accumulator.
template <class L, int M, int R>
MILRT_WEIGHT_ROWS_TARGET void rows_q8(const WeightRef& w, int64_t j, const float* a, int64_t lda, float* out,
                                      int64_t ldo, int64_t col) {
  using V = typename L::V;
  constexpr int W = L::kWidth;
  const int64_t K = w.k, block = w.block, nb = K / block;
  const int8_t* row[R];
  const void* sc[R];
  const bool f16 = w.scale_type == ElemType::f16;
  for (int r = 0; r < R; ++r) {
    row[r] = static_cast<const int8_t*>(w.data) + (j + r) * w.ld;
    sc[r] = weight_scale_row(w, j + r);
  }
  V acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) acc[r][m] = L::zero();
  for (int64_t b = 0; b < nb; ++b) {
    V bd[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) bd[r][m] = L::zero();
    for (int64_t k = b * block; k < (b + 1) * block; k += W) {
      if (k % 64 == 0) prefetch_rows_ahead<R>(row, size_t(k));  // one byte an element
      V x[M];
      for (int m = 0; m < M; ++m) x[m] = L::load_a(a + m * lda + k);
      for (int r = 0; r < R; ++r) {
        const V q = L::template load_w<WeightFormat::q8>(row[r], k);
        for (int m = 0; m < M; ++m) bd[r][m] = L::fmadd(x[m], q, bd[r][m]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const V s = L::set1(scale_at(sc[r], f16, b));
      for (int m = 0; m < M; ++m) acc[r][m] = L::fmadd(bd[r][m], s, acc[r][m]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) out[m * ldo + col + r] = L::reduce(acc[r][m]);
}

// Weight rows per group: eight for one row of A (eight streams in flight and
// independent FMA chains; on AVX-512 ~8% faster end to end than four), four
// for two, two for three or four, so that the accumulators fit in the
// registers (32 zmm, 16 ymm). AVX2's q8 block sums take as many registers
// again: the compiler then keeps a few row accumulators on the stack,
// touched once per block, while the inner loop stays in registers (on Zen 3,
// eight q8 rows with those spills beat four without: 17 vs 14 G weights/s
// from L2). Leftover rows go one by one; a row's sums do not depend on which
// group it is in.
template <class L, WeightFormat F, int M>
MILRT_WEIGHT_ROWS_TARGET void rows_m(const WeightRef& w, int64_t j0, int64_t j1, const float* a, int64_t lda,
                                     float* out, int64_t ldo) {
  constexpr int R = M == 1 ? 8 : M == 2 ? 4 : 2;
  int64_t j = j0;
  if constexpr (F == WeightFormat::q8) {
    for (; j + R <= j1; j += R) rows_q8<L, M, R>(w, j, a, lda, out, ldo, j - j0);
    for (; j < j1; ++j) rows_q8<L, M, 1>(w, j, a, lda, out, ldo, j - j0);
  } else {
    for (; j + R <= j1; j += R) rows_plain<L, F, M, R>(w, j, a, lda, out, ldo, j - j0);
    for (; j < j1; ++j) rows_plain<L, F, M, 1>(w, j, a, lda, out, ldo, j - j0);
  }
}

template <class L, WeightFormat F>
MILRT_WEIGHT_ROWS_TARGET void rows_f(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda,
                                     float* out, int64_t ldo) {
  // M > 4 never reaches here (the driver streams at most four rows at once).
  switch (M) {
    case 1: rows_m<L, F, 1>(w, j0, j1, a, lda, out, ldo); break;
    case 2: rows_m<L, F, 2>(w, j0, j1, a, lda, out, ldo); break;
    case 3: rows_m<L, F, 3>(w, j0, j1, a, lda, out, ldo); break;
    default: rows_m<L, F, 4>(w, j0, j1, a, lda, out, ldo); break;
  }
}

template <class L, WeightFormat F>
MILRT_WEIGHT_ROWS_TARGET void widen_f(const WeightRef& w, int64_t j0, int64_t j1, float* dst) {
  constexpr int W = L::kWidth;
  const int64_t K = w.k;
  for (int64_t j = j0; j < j1; ++j) {
    const void* row = static_cast<const std::byte*>(w.data) + size_t(j) * size_t(w.ld) * kElemBytes<F>;
    float* d = dst + (j - j0) * K;
    if constexpr (F == WeightFormat::q8) {
      // scale·q rounded once, as the portable loop does: the same bits.
      const void* sc = weight_scale_row(w, j);
      const bool f16 = w.scale_type == ElemType::f16;
      if (w.block % W == 0) {
        for (int64_t k = 0; k < K; k += W)
          L::store(d + k, L::mul(L::template load_w<F>(row, k), L::set1(scale_at(sc, f16, k / w.block))));
      } else {
        const int8_t* q = static_cast<const int8_t*>(row);
        for (int64_t k = 0; k < K; ++k) d[k] = scale_at(sc, f16, k / w.block) * float(q[k]);
      }
    } else {
      int64_t k = 0;
      for (; k + W <= K; k += W) L::store(d + k, L::template load_w<F>(row, k));
      if (k < K) {
        const auto mk = L::tail_mask(K - k);
        L::store_tail(d + k, mk, L::template load_w_tail<F>(row, k, K - k, mk));
      }
    }
  }
}

// Rows [j0, j1) of w against the M <= 4 rows of A (fp32, f16, bf16 or q8
// with a block the width divides; q4 is unpacked to q8 by the caller).
template <class L>
MILRT_WEIGHT_ROWS_TARGET void weight_rows(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a,
                                          int64_t lda, float* out, int64_t ldo) {
  switch (w.format) {
    case WeightFormat::f32: rows_f<L, WeightFormat::f32>(w, j0, j1, M, a, lda, out, ldo); break;
    case WeightFormat::f16: rows_f<L, WeightFormat::f16>(w, j0, j1, M, a, lda, out, ldo); break;
    case WeightFormat::bf16: rows_f<L, WeightFormat::bf16>(w, j0, j1, M, a, lda, out, ldo); break;
    case WeightFormat::q8: rows_f<L, WeightFormat::q8>(w, j0, j1, M, a, lda, out, ldo); break;
    case WeightFormat::q4: break;  // unpacked to q8 by the caller
  }
}

// Rows [j0, j1) of w widened to fp32, K apart in dst.
template <class L>
MILRT_WEIGHT_ROWS_TARGET void widen_rows(const WeightRef& w, int64_t j0, int64_t j1, float* dst) {
  switch (w.format) {
    case WeightFormat::f32: widen_f<L, WeightFormat::f32>(w, j0, j1, dst); break;
    case WeightFormat::f16: widen_f<L, WeightFormat::f16>(w, j0, j1, dst); break;
    case WeightFormat::bf16: widen_f<L, WeightFormat::bf16>(w, j0, j1, dst); break;
    case WeightFormat::q8: widen_f<L, WeightFormat::q8>(w, j0, j1, dst); break;
    case WeightFormat::q4: break;  // unpacked to q8 by the caller
  }
}

}  // namespace
}  // namespace milrt::kernels
#endif
