#include "kernels/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "kernels/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace milrt::kernels {
namespace {

constexpr int kChains = 16;     // independent accumulators: hides the FMA latency
constexpr int kRepeats = 4096;  // iterations between clock reads

using Clock = std::chrono::steady_clock;

// FLOPs done by one call of each loop body below.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) double loop_avx512_fma(long calls) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_storeu_ps(out, acc[0]);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 16 * kChains * kRepeats * double(calls);
}

__attribute__((target("avx512f,avx512bf16"))) double loop_avx512_bf16(long calls) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512i x = _mm512_set1_epi16(0x3f80), y = _mm512_set1_epi16(0x3380);  // 1.0, ~6e-8
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)x, (__m512bh)y);
    }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_storeu_ps(out, acc[0]);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 32 * kChains * kRepeats * double(calls);
}

__attribute__((target("avx2,fma"))) double loop_avx2_fma(long calls) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
  float out[8];
  for (int i = 1; i < kChains; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  _mm256_storeu_ps(out, acc[0]);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 8 * kChains * kRepeats * double(calls);
}
#endif

double loop_scalar(long calls) {
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = float(i);
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kRepeats; ++r)
      for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * 0.999999f + 1e-6f;
  volatile float sink = acc[0];
  (void)sink;
  return 2.0 * kChains * kRepeats * double(calls);
}

using Loop = double (*)(long);

Loop pick(PeakKind kind) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (kind == PeakKind::bf16_dot && f.avx512_bf16) return loop_avx512_bf16;
  if (f.avx512f) return loop_avx512_fma;
  if (f.avx2 && f.fma) return loop_avx2_fma;
#endif
  return loop_scalar;
}

}  // namespace

double measure_peak_gflops(PeakKind kind, int threads, double seconds) {
  Loop loop = pick(kind);
  threads = std::max(1, threads);
  // Calibrate a call count that lasts about a third of the budget.
  long calls = 1;
  for (;;) {
    auto t0 = Clock::now();
    loop(calls);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > seconds / 30 || calls > (1L << 30)) break;
    calls *= 2;
  }
  double best = 0;
  for (int window = 0; window < 3; ++window) {
    double flops = 0;
    auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += loop(calls * 10);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, flops / s * 1e-9);
  }
  return best;
}

}  // namespace milrt::kernels
