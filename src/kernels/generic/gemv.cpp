#include "kernels/gemv.h"
#include "kernels/gemm_micro.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

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
