// GEMM throughput per kernel path against the core's own peak.
//
//   ./bench_gemm --benchmark_filter='Peak|M:256' --benchmark_min_time=0.1
//
// BM_Gemm/<path>/<f32|bf16B>/M:../N:../K:..  C[M,N] = A[M,K]·B[K,N], B pre-packed
//   (as a plan packs weights), fp32 A and C; bf16B: B stored as bf16 and
//   GemmMath::bf16 (A rounded to bf16 while packed, vdpbf16ps where available).
//   .../T:<n>: n threads (kernels::set_num_threads); wall-clock time.
// BM_FfnPlan/<fused|unfused>/T:<n>  a compiled SwiGLU FFN (S 64, D 768, H 2048).
// BM_PeakFmaF32/<path>   register-only FMA loop: the fp32 peak of one core.
// BM_PeakBf16Dot         register-only vdpbf16ps loop: the bf16 peak.
// The GFLOPS counter is 2·M·N·K (useful FLOPs) per second, in units of 1e9.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/threads.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "milrt/dtype.h"
#include "milrt/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

namespace k = milrt::kernels;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void BM_Gemm(benchmark::State& state, k::Isa isa, bool bf16_b, int64_t M, int64_t N, int64_t K, int threads) {
  k::set_num_threads(threads);
  const std::vector<float> a = random_floats(size_t(M) * K, 1);
  const std::vector<float> b = random_floats(size_t(K) * N, 2);
  std::vector<uint16_t> b16;
  k::MatrixRef bref{b.data(), k::ElemType::f32, N};
  if (bf16_b) {
    for (float x : b) b16.push_back(milrt::f32_to_bf16(x));
    bref = k::MatrixRef{b16.data(), k::ElemType::bf16, N};
  }
  const k::PackedB packed(bref, K, N, bf16_b ? k::GemmMath::bf16 : k::GemmMath::fp32, isa);
  std::vector<float> c(size_t(M) * N);
  for (auto _ : state) {
    k::gemm(M, k::MatrixRef{a.data(), k::ElemType::f32, K}, packed, k::OutputRef{c.data(), k::ElemType::f32, N});
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2e-9 * double(M) * double(N) * double(K), benchmark::Counter::kIsIterationInvariantRate);
  k::set_num_threads(0);
}

// A SwiGLU FFN block in linear form, [S, D] -> [S, D] with a residual:
//   out = x + W2·(silu(W1·x) ⊙ W3·x)
// compiled with the default pipeline (fused: W1 with its silu, W2 with the
// residual) or without fuse-gemm-epilogue. GFLOPS counts the three GEMMs.
std::string ffn_mil(int64_t S, int64_t D, int64_t H) {
  const std::string sd = "[" + std::to_string(S) + ", " + std::to_string(D) + "]";
  const std::string sh = "[" + std::to_string(S) + ", " + std::to_string(H) + "]";
  const std::string hd = "[" + std::to_string(H) + ", " + std::to_string(D) + "]";
  const std::string dh = "[" + std::to_string(D) + ", " + std::to_string(H) + "]";
  auto w = [](const std::string& name, const std::string& shape, uint64_t off) {
    return "    tensor<fp32, " + shape + "> " + name + " = const()[name = string(\"" + name +
           "\"), val = tensor<fp32, " + shape + ">(BLOBFILE(path = string(\"@model_path/w.bin\"), offset = uint64(" +
           std::to_string(off) + ")))];\n";
  };
  const uint64_t hdb = uint64_t(H * D * 4);
  return "program(1.3)\n{\n  func main<ios18>(tensor<fp32, " + sd + "> x) {\n" + w("w1", hd, 0) +
         w("w3", hd, hdb) + w("w2", dh, 2 * hdb) +
         "    tensor<fp32, " + sh + "> h1 = linear(x = x, weight = w1)[name = string(\"h1\")];\n"
         "    tensor<fp32, " + sh + "> h3 = linear(x = x, weight = w3)[name = string(\"h3\")];\n"
         "    tensor<fp32, " + sh + "> s = silu(x = h1)[name = string(\"s\")];\n"
         "    tensor<fp32, " + sh + "> g = mul(x = s, y = h3)[name = string(\"g\")];\n"
         "    tensor<fp32, " + sd + "> o = linear(x = g, weight = w2)[name = string(\"o\")];\n"
         "    tensor<fp32, " + sd + "> y = add(x = o, y = x)[name = string(\"y\")];\n"
         "  } -> (y);\n}\n";
}

void BM_FfnPlan(benchmark::State& state, bool fuse, int threads) {
  const int64_t S = 64, D = 768, H = 2048;
  const std::string dir = "/tmp/milrt_bench_ffn";
  std::filesystem::create_directories(dir);
  {
    // A raw (headerless) weight file: the three weights back to back.
    std::ofstream out(dir + "/w.bin", std::ios::binary);
    for (uint32_t i = 0; i < 3; ++i) {
      std::vector<float> v = random_floats(size_t(H * D), 3 + i);
      for (float& x : v) x *= 0.05f;
      out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * 4));
    }
  }
  milrt::Program p = milrt::parse_mil(ffn_mil(S, D, H), dir + "/ffn.mil", dir);
  milrt::load_blobs(p);
  milrt::CompileOptions opt;
  if (!fuse) std::erase(opt.passes, "fuse-gemm-epilogue");
  milrt::Plan plan = milrt::compile(p, opt);
  milrt::Tensor x(milrt::DType::FP32, {S, D});
  const std::vector<float> xv = random_floats(size_t(S * D), 4);
  std::memcpy(x.mutable_data(), xv.data(), xv.size() * 4);
  k::set_num_threads(threads);
  for (auto _ : state) benchmark::DoNotOptimize(plan.run({{"x", x}}));
  k::set_num_threads(0);
  state.counters["GFLOPS"] =
      benchmark::Counter(2e-9 * 3 * double(S) * double(D) * double(H), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["steps"] = double(plan.steps().size());
}

#if defined(__x86_64__)
// Independent accumulators: more than FMA latency × ports, fewer than the registers.
constexpr int kChains = 16;     // of 32 zmm
constexpr int kChainsYmm = 12;  // of 16 ymm
constexpr int kRepeats = 1024;

__attribute__((target("avx2,fma"))) void BM_PeakFmaF32_avx2(benchmark::State& state) {
  __m256 acc[kChainsYmm];
  for (int i = 0; i < kChainsYmm; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
  for (auto _ : state) {
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 12
      for (int i = 0; i < kChainsYmm; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
  }
  for (int i = 1; i < kChainsYmm; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  benchmark::DoNotOptimize(acc[0]);
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * 8 * kChainsYmm * kRepeats, benchmark::Counter::kIsIterationInvariantRate);
}

__attribute__((target("avx512f"))) void BM_PeakFmaF32_avx512(benchmark::State& state) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
  for (auto _ : state) {
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  benchmark::DoNotOptimize(acc[0]);
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * 16 * kChains * kRepeats, benchmark::Counter::kIsIterationInvariantRate);
}

// One vdpbf16ps = 16 lanes × 2 products × 2 FLOPs.
__attribute__((target("avx512f,avx512bf16"))) void BM_PeakBf16Dot(benchmark::State& state) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512i x = _mm512_set1_epi16(0x3f80), y = _mm512_set1_epi16(0x3380);  // 1.0, ~6e-8 in bf16
  for (auto _ : state) {
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)x, (__m512bh)y);
    }
  }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  benchmark::DoNotOptimize(acc[0]);
  state.counters["GFLOPS"] = benchmark::Counter(2e-9 * 32 * kChains * kRepeats, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

void register_all() {
#if defined(__x86_64__)
  const k::CpuFeatures& f = k::cpu_features();
  if (k::isa_usable(k::Isa::avx2)) benchmark::RegisterBenchmark("BM_PeakFmaF32/avx2", BM_PeakFmaF32_avx2);
  if (f.avx512f) benchmark::RegisterBenchmark("BM_PeakFmaF32/avx512", BM_PeakFmaF32_avx512);
  if (f.avx512_bf16) benchmark::RegisterBenchmark("BM_PeakBf16Dot", BM_PeakBf16Dot);
#endif
  const int64_t ms[] = {1, 256, 512};
  const std::pair<int64_t, int64_t> nks[] = {{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}};
  for (k::Isa isa : k::usable_isas())
    for (bool bf16_b : {false, true})
      for (int64_t m : ms)
        for (const auto& [n, kk] : nks) {
          if (m == 512 && n == 32000) continue;  // 25 GFLOP per call: too slow to repeat on a shared machine
          for (int t : {1, 2}) {
            const std::string name = "BM_Gemm/" + std::string(k::isa_name(isa)) + (bf16_b ? "/bf16B" : "/f32") +
                                     "/M:" + std::to_string(m) + "/N:" + std::to_string(n) + "/K:" + std::to_string(kk) +
                                     "/T:" + std::to_string(t);
            benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, isa, bf16_b, m, n, kk, t)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
          }
        }
  for (bool fuse : {false, true})
    for (int t : {1, 2})
      benchmark::RegisterBenchmark(("BM_FfnPlan/" + std::string(fuse ? "fused" : "unfused") + "/T:" + std::to_string(t)).c_str(),
                                   BM_FfnPlan, fuse, t)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    benchmark::AddCustomContext("milrt_isa", std::string(k::isa_name(k::current_isa())));
  } catch (const milrt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  benchmark::AddCustomContext("cpu_features", k::cpu_features_string());
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
