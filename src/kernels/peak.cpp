#include "kernels/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>

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

// AMX: four independent 16x16 fp32 accumulator tiles, each fed by two of
// four bf16 operand tiles (the GEMM kernel's 32x32 register tile), so
// consecutive tdpbf16ps never wait on each other. Tiles hold zeros: the
// instruction's speed does not depend on the data. 16·16·32 multiply-adds
// per instruction. cpu_features() has asked Linux for tile permission.
__attribute__((target("amx-tile,amx-bf16"))) double loop_amx_bf16(long calls) {
  // LDTILECFG's operand, static: GCC does not see the instruction read a
  // local array and drops the stores that fill one.
  alignas(64) static const unsigned char cfg[64] = {
      1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,       // palette 1
      64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,  // tiles 0-7: 64 bytes per row
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0};  // 16 rows each
  _tile_loadconfig(cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  constexpr int kTileRepeats = kRepeats / 4;
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kTileRepeats; ++r) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  _tile_release();
  return 2.0 * 16 * 16 * 32 * 4 * kTileRepeats * double(calls);
}

// 12 chains, not kChains: AVX2 has 16 ymm registers, and 16 accumulators
// plus the two operands would spill, halving the measured peak. 12 still
// covers two FMA pipes of latency 4-5.
constexpr int kChainsAvx2 = 12;

__attribute__((target("avx2,fma"))) double loop_avx2_fma(long calls) {
  __m256 acc[kChainsAvx2];
  for (int i = 0; i < kChainsAvx2; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 12
      for (int i = 0; i < kChainsAvx2; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
  float out[8];
  for (int i = 1; i < kChainsAvx2; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  _mm256_storeu_ps(out, acc[0]);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 8 * kChainsAvx2 * kRepeats * double(calls);
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
  if (kind == PeakKind::amx_bf16 && isa_usable(Isa::amx)) return loop_amx_bf16;
  if ((kind == PeakKind::bf16_dot || kind == PeakKind::amx_bf16) && f.avx512_bf16) return loop_avx512_bf16;
  if (f.avx512f) return loop_avx512_fma;
  if (f.avx2 && f.fma) return loop_avx2_fma;
#endif
  return loop_scalar;
}

// Streaming loops of the bandwidth measurements: n is a multiple of 64.
// Four accumulators keep the adds off the critical path.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float sum_avx512(const float* x, size_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + i + 48));
  }
  float out[16];
  _mm512_storeu_ps(out, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  return out[0];
}

__attribute__((target("avx2"))) float sum_avx2(const float* x, size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  return out[0];
}

__attribute__((target("avx512f"))) void update_avx512(float* x, const float* y, size_t n) {
  const __m512 a = _mm512_set1_ps(0.5f);
  for (size_t i = 0; i < n; i += 16)
    _mm512_storeu_ps(x + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), a, _mm512_loadu_ps(y + i)));
}

__attribute__((target("avx2,fma"))) void update_avx2(float* x, const float* y, size_t n) {
  const __m256 a = _mm256_set1_ps(0.5f);
  for (size_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), a, _mm256_loadu_ps(y + i)));
}
#endif

float sum_scalar(const float* x, size_t n) {
  float s[8] = {};
  for (size_t i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += x[i + size_t(j)];
  return s[0] + s[7];
}

void update_scalar(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * 0.5f + y[i];
}

float read_pass(const float* x, size_t n) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (f.avx512f) return sum_avx512(x, n);
  if (f.avx2) return sum_avx2(x, n);
#endif
  return sum_scalar(x, n);
}

void update_pass(float* x, const float* y, size_t n) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (f.avx512f) return update_avx512(x, y, n);
  if (f.avx2 && f.fma) return update_avx2(x, y, n);
#endif
  update_scalar(x, y, n);
}

// Runs pass(slice, slice_len) on `threads` threads over `arrays` float arrays
// of n elements each (n a multiple of 64·threads), first touched by the thread
// that streams them, and returns the best GB/s counting bytes_per_elem.
template <class Pass>
double best_bandwidth(int threads, size_t n, int arrays, double bytes_per_elem, double seconds, Pass pass) {
  std::unique_ptr<float[]> x(new float[n]), y(new float[arrays > 1 ? n : 64]);
  const size_t slice = n / size_t(threads);
#pragma omp parallel num_threads(threads)
  {
    const size_t b = size_t(omp_get_thread_num()) * slice;
    std::fill(x.get() + b, x.get() + b + slice, 1.0f);
    if (arrays > 1) std::fill(y.get() + b, y.get() + b + slice, 0.5f);
  }
  double best = 0, total = 0;
  float sink = 0;
  for (int p = 0; p < 3 || total < seconds; ++p) {
    auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const size_t b = size_t(omp_get_thread_num()) * slice;
      sink += pass(x.get() + b, y.get() + (arrays > 1 ? b : 0), slice);
    }
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    total += s;
    best = std::max(best, bytes_per_elem * double(n) / s * 1e-9);
    if (p > 1000) break;
  }
  volatile float keep = sink;
  (void)keep;
  return best;
}

// Elements per array: `bytes` split over `arrays`, a multiple of 64 per thread.
size_t elements(size_t bytes, int arrays, int threads) {
  const size_t unit = 64 * size_t(threads);
  return std::max(unit, bytes / sizeof(float) / size_t(arrays) / unit * unit);
}

}  // namespace

double measure_read_bandwidth_gbs(int threads, size_t bytes, double seconds) {
  threads = std::max(1, threads);
  return best_bandwidth(threads, elements(bytes, 1, threads), 1, 4.0, seconds,
                        [](const float* x, const float*, size_t n) { return read_pass(x, n); });
}

double measure_update_bandwidth_gbs(int threads, size_t bytes, double seconds) {
  threads = std::max(1, threads);
  return best_bandwidth(threads, elements(bytes, 2, threads), 2, 12.0, seconds,
                        [](float* x, const float* y, size_t n) {
                          update_pass(x, y, n);
                          return x[0];
                        });
}

PeakKind bf16_peak_kind() { return current_isa() == Isa::amx ? PeakKind::amx_bf16 : PeakKind::bf16_dot; }

const char* peak_kind_name(PeakKind kind) {
  switch (kind) {
    case PeakKind::fp32_fma: return "fp32 FMA";
    case PeakKind::bf16_dot: return "bf16 dot";
    case PeakKind::amx_bf16: return "AMX bf16";
  }
  return "?";
}

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
