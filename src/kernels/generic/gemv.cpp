#include "kernels/gemv.h"
#include "kernels/gemm_micro.h"


#include <algorithm>
#include <cmath>

#include "kernels/generic/multiversion.h"
#include "kernels/threads.h"

namespace milrt::kernels {

#if defined(__x86_64__)
// kernels/x86/gemv_avx512.cpp: four rows at a time on 16-lane FMAs.
void dots_avx512(int64_t j0, int64_t j1, int64_t K, const float* x, const float* w, int64_t ldw, float* out);
#endif

namespace {

// Dot products of rows [j0, j1) into out[0, j1 - j0): eight partial sums per
// row (element k goes to sum k % 8), added pairwise at the end. (The AVX-512
// path keeps 32: the paths agree to fp32 rounding, not bit for bit.)
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

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kMinParallelMacs = 1 << 16;

// acc[0, n) += Σ_k x[k]·b[k·ldb + 0 .. n), k ascending: rows of B scaled and
// added, the inner loop vectorized by each clone.
MILRT_CLONES(void, add_scaled_rows, (int64_t K, int64_t n, const float* x, const float* b, int64_t ldb, float* acc),
             (K, n, x, b, ldb, acc)) {
  for (int64_t k = 0; k < K; ++k) {
    const float xk = x[k];
    const float* r = b + k * ldb;
    for (int64_t j = 0; j < n; ++j) acc[j] += xk * r[j];
  }
}

// y[j] for j in [j0, j0 + n) from its dot product, through the epilogue.
inline void finish_outputs(int64_t j0, int64_t n, const float* dot, float* y, const Epilogue& ep) {
  for (int64_t j = j0; j < j0 + n; ++j) {
    float v = ep.alpha * dot[j - j0];
    if (ep.bias) v += ep.bias[j];
    v = activate(ep.act, v);
    if (ep.residual) v += static_cast<const float*>(ep.residual)[j];
    y[j] = v;
  }
}

// Threads for a product of N·K multiply-adds in `blocks` independent blocks.
int gemv_threads(int64_t N, int64_t K, int64_t blocks) {
  int threads = 1;
  if (double(N) * double(K) >= kMinParallelMacs && !in_parallel()) threads = num_threads();
  return int(std::min<int64_t>(threads, blocks));
}

}  // namespace

void gemv_rows_f32(int64_t N, int64_t K, const float* x, const float* w, int64_t ldw, float* y, const Epilogue& ep,
                   Isa isa) {
  if (N <= 0) return;
  // Blocks of 64 rows: a thread's rows stay contiguous in memory; the split
  // changes which thread computes a row, never how.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  const int threads = gemv_threads(N, K, blocks);
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
    finish_outputs(j0, j1 - j0, dot, y, ep);
  };
  if (threads <= 1) {
    for (int64_t b = 0; b < blocks; ++b) block(b);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) block(b);
}

void gemv_cols_f32(int64_t N, int64_t K, const float* x, const float* b, int64_t ldb, float* y, const Epilogue& ep) {
  if (N <= 0) return;
  // 256 columns (1 KiB of sums) per block: the sums stay in registers and
  // L1 while each row of B streams past once.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
  const int threads = gemv_threads(N, K, blocks);
  auto block = [&](int64_t bi) {
    const int64_t j0 = bi * kBlock, n = std::min(N - j0, kBlock);
    float acc[kBlock] = {};  // not y itself: the residual may be y (C += ...)
    add_scaled_rows(K, n, x, b + j0, ldb, acc);
    finish_outputs(j0, n, acc, y, ep);
  };
  if (threads <= 1) {
    for (int64_t bi = 0; bi < blocks; ++bi) block(bi);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t bi = 0; bi < blocks; ++bi) block(bi);
}

}  // namespace milrt::kernels
