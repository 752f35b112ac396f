// kernels::weight_gemm throughput on Stories110M's matrix shapes (not a test).
//
//   OMP_WAIT_POLICY=passive ./bench_weight_gemm [--threads 2] [--reps 21] [--json out.json]
//                                               [--isa generic|avx2|avx512|amx] [--decode-only 1]
//
// --isa sets MILRT_ISA (default: the environment's, else the best path);
// --decode-only 1 times M=1 only (skips M=2..8 and M=256).
// For threads 1, 2, 4 .. --threads, the median of --reps runs of:
//   M=1 (decode)   y = x·Wᵀ for each weight format (f32, f16, bf16, q8 with
//                  blocks of 32, and q8 with int8 activations: "q8/int8 act")
//                  and, as the baseline, kernels::gemv_rows_f32
//                  on the fp32 matrix. GB/s = bytes of W read (elements plus
//                  q8 scales) / median time (and / best time). A 64 MB
//                  read before each run evicts W, so it comes from DRAM as in
//                  a decode step, not from the L3 that one small matrix fits in.
//   M=2..8         time per call relative to M=1 (where streaming stops paying).
//   M=256 (panels) GFLOP/s = 2·M·N·K / time for each format, against
//                  kernels::gemm on the fp32 matrix (B = Wᵀ, packed per call,
//                  as the panel path does).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/bench/timing.h"
#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/threads.h"
#include "kernels/weight_gemm.h"
#include "milrt/dtype.h"
#include "milrt/error.h"

namespace k = milrt::kernels;

namespace {

// Evicts W from the caches between runs: a decode step reads every layer's
// weights, so none is in L3 when its turn comes (one matrix here would be).
k::bench::CacheFlush flush_caches;

// One warm-up call (scratch, thread pool), then `reps` timed ones, each after
// evicting the caches when `cold`.
template <class F>
k::bench::Timing time_runs(int reps, bool cold, F f) {
  return k::bench::time_runs(reps, f, [&] {
    if (cold) flush_caches();
  });
}

// One copy of W in a format (fp32 source values in [-1, 1]).
struct Stored {
  std::vector<float> f32, scales;
  std::vector<uint16_t> u16;
  std::vector<int8_t> q;
  k::WeightRef ref;
  int64_t bytes;
};

constexpr int64_t kBlock = 32;

Stored store(k::WeightFormat f, const std::vector<float>& w, int64_t N, int64_t K) {
  Stored s;
  const void* d = nullptr;
  int64_t eb = 4;
  switch (f) {
    case k::WeightFormat::f32: s.f32 = w; d = s.f32.data(); break;
    case k::WeightFormat::f16:
      s.u16.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) s.u16[i] = milrt::f32_to_f16(w[i]);
      d = s.u16.data(), eb = 2;
      break;
    case k::WeightFormat::bf16:
      s.u16.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) s.u16[i] = milrt::f32_to_bf16(w[i]);
      d = s.u16.data(), eb = 2;
      break;
    case k::WeightFormat::q8: {
      s.q.resize(w.size());
      s.scales.resize(size_t(N * K / kBlock));
      for (int64_t b = 0; b < N * K / kBlock; ++b) {
        float m = 0;
        for (int64_t i = 0; i < kBlock; ++i) m = std::max(m, std::fabs(w[size_t(b * kBlock + i)]));
        const float sc = m / 127;
        s.scales[size_t(b)] = sc;
        for (int64_t i = 0; i < kBlock; ++i)
          s.q[size_t(b * kBlock + i)] = int8_t(sc > 0 ? std::nearbyint(w[size_t(b * kBlock + i)] / sc) : 0);
      }
      d = s.q.data(), eb = 1;
      break;
    }
    case k::WeightFormat::q4: {
      // Symmetric, scale = max|w| / 7, two values a byte (low nibble first).
      s.q.assign(w.size() / 2, 0);
      s.scales.resize(size_t(N * K / kBlock));
      for (int64_t b = 0; b < N * K / kBlock; ++b) {
        float m = 0;
        for (int64_t i = 0; i < kBlock; ++i) m = std::max(m, std::fabs(w[size_t(b * kBlock + i)]));
        const float sc = m / 7;
        s.scales[size_t(b)] = sc;
        for (int64_t i = 0; i < kBlock; ++i) {
          const int64_t e = b * kBlock + i;
          const int v = sc > 0 ? int(std::clamp(std::nearbyint(w[size_t(e)] / sc), -8.0f, 7.0f)) : 0;
          s.q[size_t(e / 2)] = int8_t(uint8_t(s.q[size_t(e / 2)]) | uint8_t((v & 15) << (e % 2 * 4)));
        }
      }
      d = s.q.data(), eb = 1;
      break;
    }
  }
  const bool quant = f == k::WeightFormat::q8 || f == k::WeightFormat::q4;
  s.ref = k::WeightRef{f, d, N, K, K, quant ? s.scales.data() : nullptr, quant ? kBlock : 0};
  s.bytes = (f == k::WeightFormat::q4 ? N * K / 2 : N * K * eb) + (quant ? N * K / kBlock * 4 : 0);
  return s;
}

struct Shape {
  int64_t n, k;
};

}  // namespace

int main(int argc, char** argv) {
  int max_threads = 2, reps = 21;
  const char* json = nullptr;
  bool decode_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) max_threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--json")) json = argv[i + 1];
    if (!std::strcmp(argv[i], "--isa")) setenv("MILRT_ISA", argv[i + 1], 1);
    if (!std::strcmp(argv[i], "--decode-only")) decode_only = std::atoi(argv[i + 1]) != 0;
  }
  try {
    k::reload_isa();
  } catch (const milrt::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::string records;
  auto record = [&](const char* kind, const char* format, int64_t M, Shape s, int threads, double sec, double rate,
                    const char* unit) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s{\"kind\":\"%s\",\"format\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"threads\":%d,"
                  "\"median_s\":%.9g,\"%s\":%.4g}",
                  records.empty() ? "" : ",\n ", kind, format, (long long)M, (long long)s.n, (long long)s.k, threads,
                  sec, unit, rate);
    records += buf;
  };
  std::printf("weight_gemm, path %s, cpu: %s; medians of %d\n", std::string(k::isa_name(k::current_isa())).c_str(),
              k::cpu_features_string().c_str(), reps);
  const Shape shapes[] = {{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}};
  const k::WeightFormat formats[] = {k::WeightFormat::f32, k::WeightFormat::f16, k::WeightFormat::bf16,
                                     k::WeightFormat::q8, k::WeightFormat::q4};
  // The decode rows: the formats, then q8 and q4 again with int8 activations.
  const k::WeightFormat decoded[] = {k::WeightFormat::f32, k::WeightFormat::f16, k::WeightFormat::bf16,
                                     k::WeightFormat::q8, k::WeightFormat::q8, k::WeightFormat::q4,
                                     k::WeightFormat::q4};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Shape s : shapes) {
    std::vector<float> w(size_t(s.n * s.k));
    for (auto& v : w) v = u(rng);
    std::vector<float> x(size_t(256 * s.k)), y(size_t(256 * s.n));
    for (auto& v : x) v = u(rng);
    for (int threads = 1; threads <= max_threads; threads *= 2) {
      k::set_num_threads(threads);
      std::printf("N %lld K %lld, threads %d\n", (long long)s.n, (long long)s.k, threads);
      // M = 1: weight bytes per second, W cold (from DRAM).
      // fi 4 and 6: q8 and q4 with int8 activations.
      for (int fi = -1; fi < 7; ++fi) {
        const k::WeightFormat f = fi < 0 ? k::WeightFormat::f32 : decoded[fi];
        Stored one = store(f, w, s.n, s.k);
        if (fi == 4 || fi == 6) one.ref.activations = k::ActivationQuant::int8;
        const k::bench::Timing t = time_runs(reps, true, [&] {
          if (fi < 0)
            k::gemv_rows_f32(s.n, s.k, x.data(), one.f32.data(), s.k, y.data(), {});
          else
            k::weight_gemm(1, x.data(), s.k, one.ref, y.data(), s.n);
        });
        const char* name = fi < 0    ? "gemv_rows_f32"
                           : fi == 4 ? "q8/int8 act"
                           : fi == 6 ? "q4/int8 act"
                                     : k::weight_format_name(f);
        std::printf("  M=1 %-14s %8.1f us %7.1f GB/s (best %7.1f GB/s)\n", name, t.median * 1e6,
                    one.bytes / t.median / 1e9, one.bytes / t.best / 1e9);
        record("decode", name, 1, s, threads, t.median, one.bytes / t.median / 1e9, "GBps");
        if (fi >= 0 && fi != 4 && fi != 6 && s.n == 2048 && !decode_only) {
          // Rows of A per call: streaming up to the threshold, panels above.
          std::printf("   M=2..8 time / M=1 time:");
          for (int64_t M = 2; M <= 8; ++M) {
            const k::bench::Timing tm =
                time_runs(reps, true, [&] { k::weight_gemm(M, x.data(), s.k, one.ref, y.data(), s.n); });
            std::printf(" %.2f", tm.median / t.median);
            record("small_m", k::weight_format_name(f), M, s, threads, tm.median, tm.median / t.median, "ratio_to_m1");
          }
          std::printf("\n");
        }
      }
      if (decode_only) continue;
      // M = 256: panels through the fp32 GEMM.
      const int64_t M = 256;
      const double flop = 2.0 * double(M) * double(s.n) * double(s.k);
      {
        const double t = time_runs(reps, false, [&] {
          k::gemm(M, s.n, s.k, k::MatrixRef{x.data(), k::ElemType::f32, s.k},
                  k::MatrixRef{w.data(), k::ElemType::f32, s.k, true}, k::OutputRef{y.data(), k::ElemType::f32, s.n});
        }).median;
        std::printf("  M=256 %-12s %8.1f us %7.1f GFLOP/s\n", "gemm_f32", t * 1e6, flop / t / 1e9);
        record("prefill", "gemm_f32", M, s, threads, t, flop / t / 1e9, "GFLOPs");
      }
      for (k::WeightFormat f : formats) {
        const Stored one = store(f, w, s.n, s.k);
        const double t =
            time_runs(reps, false, [&] { k::weight_gemm(M, x.data(), s.k, one.ref, y.data(), s.n); }).median;
        std::printf("  M=256 %-12s %8.1f us %7.1f GFLOP/s\n", k::weight_format_name(f), t * 1e6, flop / t / 1e9);
        record("prefill", k::weight_format_name(f), M, s, threads, t, flop / t / 1e9, "GFLOPs");
      }
    }
  }
  k::set_num_threads(0);
  if (json) {
    FILE* out = std::fopen(json, "w");
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", json);
      return 1;
    }
    std::fprintf(out, "[%s]\n", records.c_str());
    std::fclose(out);
  }
  return 0;
}
