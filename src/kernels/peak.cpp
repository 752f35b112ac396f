#include "kernels/peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "kernels/cpu_features.h"

#include "kernels/x86/peak_loops.h"

namespace milrt::kernels {
namespace {

using x86::kChains;
using x86::kRepeats;
#if defined(__x86_64__)
using x86::loop_amx_bf16;
using x86::loop_avx2_fma;
using x86::loop_avx512_bf16;
using x86::loop_avx512_fma;
using x86::sum_avx2;
using x86::sum_avx512;
using x86::update_avx2;
using x86::update_avx512;
#endif

using Clock = std::chrono::steady_clock;

// FLOPs done by one call of each loop body: the vector loops are in
// kernels/x86/peak_loops.cpp.

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

// Streaming loops of the bandwidth measurements (n a multiple of 64): the
// vector ones are in kernels/x86/peak_loops.cpp.

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
