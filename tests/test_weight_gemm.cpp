// kernels::weight_gemm (fp32 / fp16 / bf16 / block-int8 weights) against a
// plain fp64 product written here (weights decoded by hand in fp64), on every
// usable ISA path, both the streaming path (M <= 4) and the panel path; the
// fused epilogue against its unfused composition; the same bits for 1, 2 and
// 3 threads; NaN padding (past k in W and A) never read; q8 blocks a path's
// vector width does not divide falling back to the portable loop; no
// allocation on a repeated call; bad arguments -> milrt::Error.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/threads.h"
#include "kernels/weight_gemm.h"
#include "milrt/dtype.h"
#include "milrt/error.h"
#include "support/activation_fp64.h"
#include "support/half_fp64.h"

// Counts heap allocations while armed (the repeated-call test).
namespace {
std::atomic<bool> g_count{false};
std::atomic<long> g_allocs{0};
void* counted(size_t n, size_t align) {
  if (g_count.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (std::max<size_t>(n, 1) + align - 1) / align * align)
                                              : std::malloc(std::max<size_t>(n, 1));
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace
void* operator new(size_t n) { return counted(n, 0); }
void* operator new[](size_t n) { return counted(n, 0); }
void* operator new(size_t n, std::align_val_t a) { return counted(n, size_t(a)); }
void* operator new[](size_t n, std::align_val_t a) { return counted(n, size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace milrt::kernels {
namespace {

using test::act64;
using test::half64;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff
const WeightFormat kFormats[] = {WeightFormat::f32, WeightFormat::f16, WeightFormat::bf16, WeightFormat::q8};

double bf16_64(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A weight in one storage format, with its fp64 values.
struct Weight {
  WeightFormat format;
  int64_t n, k, ld, block;
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  std::vector<int8_t> q;
  std::vector<float> scales;
  WeightRef ref() const {
    const void* d = format == WeightFormat::f32 ? static_cast<const void*>(f32.data())
                    : format == WeightFormat::q8 ? static_cast<const void*>(q.data())
                                                 : static_cast<const void*>(u16.data());
    return WeightRef{format, d, n, k, ld, format == WeightFormat::q8 ? scales.data() : nullptr,
                     format == WeightFormat::q8 ? block : 0};
  }
  double at(int64_t j, int64_t i) const {
    switch (format) {
      case WeightFormat::f32: return f32[size_t(j * ld + i)];
      case WeightFormat::f16: return half64(u16[size_t(j * ld + i)]);
      case WeightFormat::bf16: return bf16_64(u16[size_t(j * ld + i)]);
      case WeightFormat::q8: return double(scales[size_t(j * (k / block) + i / block)]) * q[size_t(j * ld + i)];
    }
    return 0;
  }
};

// Values in [-range, range]; q8: random q and scales in [0, range/127]. The
// padding between k and ld holds garbage that must never be read into a sum.
Weight make_weight(WeightFormat f, int64_t n, int64_t k, int64_t ld, int64_t block, float range, std::mt19937& rng) {
  Weight w{f, n, k, ld, block, {}, {}, {}, {}};
  std::uniform_real_distribution<float> u(-range, range);
  const size_t total = size_t(n * ld);
  switch (f) {
    case WeightFormat::f32: w.f32.resize(total); for (auto& v : w.f32) v = u(rng); break;
    case WeightFormat::f16: w.u16.resize(total); for (auto& v : w.u16) v = f32_to_f16(u(rng)); break;
    case WeightFormat::bf16: w.u16.resize(total); for (auto& v : w.u16) v = f32_to_bf16(u(rng)); break;
    case WeightFormat::q8: {
      std::uniform_int_distribution<int> qd(-127, 127);
      std::uniform_real_distribution<float> sd(0, range / 127);
      w.q.resize(total);
      for (auto& v : w.q) v = int8_t(qd(rng));
      w.scales.resize(size_t(n * (block > 0 && k % block == 0 ? k / block : 0)));
      for (auto& v : w.scales) v = sd(rng);
      break;
    }
  }
  return w;
}

std::vector<float> randv(size_t n, float range, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Runs weight_gemm with alpha, a bias, an activation and C += ... (residual
// = C), and checks every element against fp64. Tolerance: a recursive fp32
// sum of K products errs by at most K·u·Σ|a·w| (u = 2^-24), whatever the
// summation order; q8 adds one rounding per block scale (panels: per element),
// alpha and bias a few more: (K + 8)·u·(|α|·Σ|a·w| + |bias|), doubled for the
// activation's slope (<= 1.1 for silu), plus 8u of the result for the
// activation's own rounding and the residual add.
// poison: W's padding (f32/f16/bf16) and A's hold NaN instead, which a
// masked-off lane multiplied by zero would still carry into a sum.
// bf16 math (panels only): the reference multiplies A and the weight's fp32
// values each rounded to bf16 here (nearest, ties to even); their products
// are exact in fp32, so the same bound holds.
double bf16_round(double x) {
  const float f = float(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

void check_case(Isa isa, WeightFormat f, int64_t M, int64_t N, int64_t K, int64_t block, Activation act,
                std::mt19937& rng, float wrange = 1, float arange = 1, bool poison = false,
                GemmMath math = GemmMath::fp32) {
  const int64_t ld = K + 3, lda = K + 2, ldc = N + 1;
  Weight w = make_weight(f, N, K, ld, block, wrange, rng);
  std::vector<float> a = randv(size_t(M * lda), arange, rng);
  const std::vector<float> bias = randv(size_t(N), 1, rng);
  if (poison) {
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = K; i < ld; ++i) {
        if (f == WeightFormat::f32) w.f32[size_t(j * ld + i)] = NAN;
        if (f == WeightFormat::f16) w.u16[size_t(j * ld + i)] = 0x7E00;
        if (f == WeightFormat::bf16) w.u16[size_t(j * ld + i)] = 0x7FC0;
      }
    for (int64_t r = 0; r < M; ++r)
      for (int64_t i = K; i < lda; ++i) a[size_t(r * lda + i)] = NAN;
  }
  std::vector<float> c = randv(size_t(M * ldc), 1, rng);
  const std::vector<float> c0 = c;
  Epilogue ep;
  ep.alpha = 0.75f;
  ep.bias = bias.data();
  ep.act = act;
  ep.residual = c.data();
  ep.residual_ld = ldc;
  WeightRef ref = w.ref();
  ref.math = math;
  weight_gemm(M, a.data(), lda, ref, c.data(), ldc, ep, isa);
  const bool bf16 = math == GemmMath::bf16;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double d = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = a[size_t(i * lda + k)], wv = float(w.at(j, k));  // the widened fp32 value
        const double p = bf16 ? bf16_round(av) * bf16_round(wv) : av * w.at(j, k);
        d += p;
        mag += std::fabs(p);
      }
      const double pre = 0.75 * d + bias[size_t(j)];
      const double want = act64(act, pre) + c0[size_t(i * ldc + j)];
      const double tol = 2 * double(K + 8) * kU * (0.75 * mag + std::fabs(bias[size_t(j)])) +
                         8 * kU * (std::fabs(want) + std::fabs(c0[size_t(i * ldc + j)])) + 1e-30;
      ASSERT_NEAR(c[size_t(i * ldc + j)], want, tol)
          << isa_name(isa) << " " << weight_format_name(f) << " M " << M << " N " << N << " K " << K << " block " << block
          << " at (" << i << ", " << j << ")";
    }
  // C's padding column is untouched.
  for (int64_t i = 0; i < M; ++i) ASSERT_EQ(c[size_t(i * ldc + N)], c0[size_t(i * ldc + N)]);
}

struct NK {
  int64_t n, k, block;  // block: q8 only
};

// Awkward N and K for f32/f16/bf16 (N around the 8-row groups of the
// streaming loops, K around 8- and 16-lane vectors); for q8 the K values each
// block divides, blocks that the AVX2 (8) and AVX-512 (16) loops take and
// ones they leave to the portable loop (1, 4, 12, 24 for AVX-512).
const NK kPlain[] = {{1, 1, 0},  {15, 17, 0}, {17, 33, 0}, {33, 100, 0}, {100, 15, 0},
                     {65, 64, 0}, {9, 7, 0},  {8, 9, 0},   {23, 1, 0},   {7, 40, 0}};
const NK kQ8[] = {{1, 1, 1},    {15, 17, 1},  {17, 33, 1},  {33, 100, 1}, {100, 8, 8},   {17, 40, 8},
                  {15, 104, 8}, {9, 16, 16},  {23, 48, 16}, {7, 24, 24},  {17, 36, 12},  {9, 20, 4},
                  {33, 32, 32}, {100, 96, 32}, {17, 64, 64}, {1, 192, 64}};

TEST(WeightGemm, MatchesFp64EveryFormatShapeAndIsa) {
  std::mt19937 rng(11);
  for (Isa isa : usable_isas())
    for (WeightFormat f : kFormats)
      for (int64_t M : {1, 2, 3, 4, 5, 17, 64}) {
        if (f == WeightFormat::q8)
          for (NK s : kQ8) check_case(isa, f, M, s.n, s.k, s.block, Activation::silu, rng);
        else
          for (NK s : kPlain) check_case(isa, f, M, s.n, s.k, 0, Activation::silu, rng);
      }
}

// Prefill under bf16 math: the panels run gemm's bf16 kernels (AMX tiles,
// vdpbf16ps, or bf16-rounded operands on fp32 FMAs elsewhere), a bf16 weight
// read as stored.
TEST(WeightGemm, Bf16MathPanelsMatchFp64OfBf16Operands) {
  std::mt19937 rng(13);
  for (Isa isa : usable_isas())
    for (WeightFormat f : kFormats)
      for (int64_t M : {5, 17, 64}) {
        if (f == WeightFormat::q8)
          for (NK s : kQ8) check_case(isa, f, M, s.n, s.k, s.block, Activation::silu, rng, 1, 1, true, GemmMath::bf16);
        else
          for (NK s : kPlain) check_case(isa, f, M, s.n, s.k, 0, Activation::silu, rng, 1, 1, true, GemmMath::bf16);
        check_case(isa, f, M, 300, 768, 32, Activation::none, rng, 1, 1, false, GemmMath::bf16);
      }
}

TEST(WeightGemm, MatchesFp64AtStoriesSize) {
  // K 768, N 2048 (a feed-forward matrix of Stories110M): decode and prefill.
  std::mt19937 rng(12);
  for (Isa isa : usable_isas())
    for (WeightFormat f : kFormats)
      for (int64_t M : {1, 4, 17}) check_case(isa, f, M, 2048, 768, 32, Activation::none, rng);
}

TEST(WeightGemm, EdgeValues) {
  std::mt19937 rng(13);
  for (Isa isa : usable_isas())
    for (int64_t M : {1, 3, 17}) {
      // Large finite values: fp16 near its range, the others far beyond it;
      // A small enough that no sum overflows.
      check_case(isa, WeightFormat::f16, M, 17, 64, 0, Activation::none, rng, 6e4f, 1e-3f);
      check_case(isa, WeightFormat::bf16, M, 17, 64, 0, Activation::none, rng, 1e30f, 1e5f);
      check_case(isa, WeightFormat::f32, M, 17, 64, 0, Activation::none, rng, 1e30f, 1e5f);
      check_case(isa, WeightFormat::q8, M, 17, 64, 32, Activation::none, rng, 1e30f, 1e5f);
      // Zeros, q = ±127 and zero scales: exact sums.
      const int64_t N = 33, K = 96;
      Weight w = make_weight(WeightFormat::q8, N, K, K, 32, 1, rng);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t i = 0; i < K; ++i) w.q[size_t(j * K + i)] = int8_t(j % 3 == 0 ? 0 : (i % 2 ? 127 : -127));
      for (int64_t j = 0; j < N; ++j) {
        w.scales[size_t(j * 3 + 0)] = 0.5f;
        w.scales[size_t(j * 3 + 1)] = 0.0f;
        w.scales[size_t(j * 3 + 2)] = j % 2 ? 0.25f : 0.0f;
      }
      std::vector<float> a(size_t(M * K), 1.0f), c(size_t(M * N), -1.0f);
      weight_gemm(M, a.data(), K, w.ref(), c.data(), N, {}, isa);
      // Σ over a block of alternating ±127 (32 elements) is 0: all results are exactly 0.
      for (float v : c) ASSERT_EQ(v, 0.0f) << isa_name(isa);
      for (int64_t i = 0; i < K; ++i) a[size_t(i)] = i % 2 ? 1.0f : 0.0f;  // row 0 picks the +127s
      weight_gemm(M, a.data(), K, w.ref(), c.data(), N, {}, isa);
      for (int64_t j = 0; j < N; ++j) {
        const float want = j % 3 == 0 ? 0.0f : 16 * 127 * (0.5f + (j % 2 ? 0.25f : 0.0f));
        ASSERT_EQ(c[size_t(j)], want) << isa_name(isa) << " row " << j;
      }
      // All-zero fp16 and bf16 weights give exactly the epilogue of 0.
      Weight z = make_weight(WeightFormat::bf16, N, K, K, 0, 1, rng);
      std::fill(z.u16.begin(), z.u16.end(), uint16_t(0));
      std::vector<float> bias(size_t(N), 2.0f);
      Epilogue ep;
      ep.bias = bias.data();
      weight_gemm(M, a.data(), K, z.ref(), c.data(), N, ep, isa);
      for (float v : c) ASSERT_EQ(v, 2.0f);
    }
}

TEST(WeightGemm, NaNPaddingIsNeverRead) {
  std::mt19937 rng(17);
  for (Isa isa : usable_isas())
    for (WeightFormat f : {WeightFormat::f32, WeightFormat::f16, WeightFormat::bf16})
      for (int64_t M : {1, 2, 3, 4, 5})
        for (int64_t K : {1, 7, 9, 15, 17, 33})
          check_case(isa, f, M, 19, K, 0, Activation::none, rng, 1, 1, /*poison=*/true);
}

// A q8 block no vector width divides streams through the portable loop on
// every path: the same bits as generic (the panel path's gemm differs by ISA).
TEST(WeightGemm, Q8OddBlocksStreamLikeGeneric) {
  std::mt19937 rng(18);
  for (NK s : {NK{17, 36, 12}, NK{9, 20, 4}, NK{15, 17, 1}, NK{8, 60, 20}})
    for (int64_t M : {1, 2, 3, 4}) {
      const Weight w = make_weight(WeightFormat::q8, s.n, s.k, s.k, s.block, 1, rng);
      const std::vector<float> a = randv(size_t(M * s.k), 1, rng);
      std::vector<float> want(size_t(M * s.n));
      weight_gemm(M, a.data(), s.k, w.ref(), want.data(), s.n, {}, Isa::generic);
      for (Isa isa : usable_isas()) {
        std::vector<float> c(size_t(M * s.n));
        weight_gemm(M, a.data(), s.k, w.ref(), c.data(), s.n, {}, isa);
        ASSERT_EQ(std::memcmp(c.data(), want.data(), c.size() * 4), 0)
            << isa_name(isa) << " block " << s.block << " M " << M;
      }
    }
}

// The fused epilogue against weight_gemm without one followed by the same
// steps in fp32 here: the accumulators are the same, so only the epilogue's
// rounding may differ (SIMD activations: a few ulps).
TEST(WeightGemm, EpilogueMatchesUnfusedComposition) {
  std::mt19937 rng(14);
  const int64_t N = 100, K = 64;
  for (Isa isa : usable_isas())
    for (WeightFormat f : kFormats)
      for (int64_t M : {1, 3, 17})
        for (Activation act : {Activation::none, Activation::silu, Activation::relu})
          for (bool f16_res : {false, true}) {
            const Weight w = make_weight(f, N, K, K, 32, 1, rng);
            const std::vector<float> a = randv(size_t(M * K), 1, rng), bias = randv(size_t(N), 1, rng);
            const std::vector<float> res = randv(size_t(M * N), 1, rng);
            std::vector<uint16_t> res16(res.size());
            for (size_t i = 0; i < res.size(); ++i) res16[i] = f32_to_f16(res[i]);
            std::vector<float> plain(size_t(M * N)), fused(size_t(M * N));
            weight_gemm(M, a.data(), K, w.ref(), plain.data(), N, {}, isa);
            Epilogue ep;
            ep.alpha = -1.5f;
            ep.bias = bias.data();
            ep.act = act;
            ep.residual = f16_res ? static_cast<const void*>(res16.data()) : res.data();
            ep.residual_type = f16_res ? ElemType::f16 : ElemType::f32;
            ep.residual_ld = N;
            weight_gemm(M, a.data(), K, w.ref(), fused.data(), N, ep, isa);
            for (int64_t i = 0; i < M * N; ++i) {
              float v = -1.5f * plain[size_t(i)] + bias[size_t(i % N)];
              if (act == Activation::silu) v = v / (1.0f + std::exp(-v));
              if (act == Activation::relu) v = v > 0 ? v : 0.0f;
              const float r = f16_res ? float(half64(res16[size_t(i)])) : res[size_t(i)];
              const float want = v + r;
              ASSERT_NEAR(fused[size_t(i)], want, 8 * kU * (std::fabs(v) + std::fabs(r)) + 1e-30)
                  << isa_name(isa) << " " << weight_format_name(f) << " M " << M << " act " << int(act) << " at " << i;
            }
          }
}

TEST(WeightGemm, BitsDoNotDependOnThreads) {
  std::mt19937 rng(15);
  const int64_t N = 2048 + 17, K = 768;
  for (Isa isa : usable_isas())
    for (WeightFormat f : kFormats) {
      const Weight w = make_weight(f, N, K, K, 64, 1, rng);
      for (int64_t M : {1, 3, 5, 64}) {
        const std::vector<float> a = randv(size_t(M * K), 1, rng), bias = randv(size_t(N), 1, rng);
        std::vector<std::vector<float>> outs;
        for (int t : {1, 2, 3}) {
          set_num_threads(t);
          std::vector<float> c(size_t(M * N));
          Epilogue ep;
          ep.bias = bias.data();
          ep.act = Activation::silu;
          weight_gemm(M, a.data(), K, w.ref(), c.data(), N, ep, isa);
          outs.push_back(c);
        }
        set_num_threads(0);
        for (size_t t = 1; t < outs.size(); ++t)
          ASSERT_EQ(std::memcmp(outs[0].data(), outs[t].data(), outs[0].size() * 4), 0)
              << isa_name(isa) << " " << weight_format_name(f) << " M " << M << " threads " << t + 1;
      }
    }
}

TEST(WeightGemm, RepeatedCallDoesNotAllocate) {
  std::mt19937 rng(16);
  const int64_t N = 1000, K = 256;
  for (int t : {1, 2})
    for (WeightFormat f : kFormats)
      for (int64_t M : {1, 32}) {
        set_num_threads(t);
        const Weight w = make_weight(f, N, K, K, 32, 1, rng);
        const std::vector<float> a = randv(size_t(M * K), 1, rng);
        std::vector<float> c(size_t(M * N));
        weight_gemm(M, a.data(), K, w.ref(), c.data(), N);
        weight_gemm(M, a.data(), K, w.ref(), c.data(), N);  // every worker thread has seen the shape
        g_allocs = 0;
        g_count = true;
        weight_gemm(M, a.data(), K, w.ref(), c.data(), N);
        g_count = false;
        EXPECT_EQ(g_allocs.load(), 0) << weight_format_name(f) << " M " << M << " threads " << t;
      }
  set_num_threads(0);
}

TEST(WeightGemm, ZeroSizes) {
  std::vector<float> c(6, 7.0f), bias{1, 2, 3};
  Epilogue ep;
  ep.bias = bias.data();
  // K = 0: epilogue(0) = bias, for streaming and panel-sized M alike.
  for (int64_t M : {1, 2}) {
    weight_gemm(M, nullptr, 0, WeightRef{WeightFormat::q8, nullptr, 3, 0, 0, nullptr, 32}, c.data(), 3, ep);
    for (int64_t i = 0; i < M * 3; ++i) EXPECT_EQ(c[size_t(i)], bias[size_t(i % 3)]);
  }
  std::vector<float> big(size_t(9 * 3), 7.0f);
  weight_gemm(9, nullptr, 0, WeightRef{WeightFormat::f16, nullptr, 3, 0, 0}, big.data(), 3, ep);
  for (size_t i = 0; i < big.size(); ++i) EXPECT_EQ(big[i], bias[i % 3]);
  // M = 0 or N = 0: nothing is touched.
  const std::vector<float> w(12, 1.0f);
  weight_gemm(0, nullptr, 4, WeightRef{WeightFormat::f32, w.data(), 3, 4, 4}, nullptr, 3);
  weight_gemm(2, c.data(), 4, WeightRef{WeightFormat::f32, nullptr, 0, 4, 4}, nullptr, 0);
}

TEST(WeightGemm, BadArgumentsThrow) {
  std::vector<float> a(64, 1.0f), c(64), s(16, 1.0f);
  std::vector<int8_t> q(64, 1);
  auto q8 = [&](int64_t n, int64_t k, int64_t ld, int64_t block, const float* sc) {
    return WeightRef{WeightFormat::q8, q.data(), n, k, ld, sc, block};
  };
  auto call = [&](int64_t M, int64_t lda, const WeightRef& w, int64_t ldc) {
    weight_gemm(M, a.data(), lda, w, c.data(), ldc);
  };
  EXPECT_THROW(call(-1, 8, q8(2, 8, 8, 8, s.data()), 2), Error);
  EXPECT_THROW(call(1, 8, q8(-2, 8, 8, 8, s.data()), 2), Error);
  EXPECT_THROW(call(1, 8, q8(2, -8, 8, 8, s.data()), 2), Error);
  EXPECT_THROW(call(1, 8, q8(2, 8, 7, 8, s.data()), 2), Error);    // ld < k
  EXPECT_THROW(call(1, 7, q8(2, 8, 8, 8, s.data()), 2), Error);    // lda < k
  EXPECT_THROW(call(1, 8, q8(2, 8, 8, 8, s.data()), 1), Error);    // ldc < n
  EXPECT_THROW(call(1, 8, q8(2, 8, 8, 3, s.data()), 2), Error);    // block does not divide k
  EXPECT_THROW(call(1, 8, q8(2, 8, 8, 0, s.data()), 2), Error);    // block 0
  EXPECT_THROW(call(1, 8, q8(2, 8, 8, -4, s.data()), 2), Error);   // negative block
  EXPECT_THROW(call(1, 8, q8(2, 8, 8, 8, nullptr), 2), Error);     // no scales
  EXPECT_THROW(call(1, 8, (WeightRef{WeightFormat::f16, nullptr, 2, 8, 8}), 2), Error);
  EXPECT_THROW(call(1, 8, (WeightRef{WeightFormat(9), q.data(), 2, 8, 8}), 2), Error);
  EXPECT_THROW(weight_gemm(1, nullptr, 8, q8(2, 8, 8, 8, s.data()), c.data(), 2), Error);
  EXPECT_THROW(weight_gemm(1, a.data(), 8, q8(2, 8, 8, 8, s.data()), nullptr, 2), Error);
  Epilogue ep;
  ep.residual = c.data();
  ep.residual_ld = 1;
  EXPECT_THROW(weight_gemm(1, a.data(), 8, q8(2, 8, 8, 8, s.data()), c.data(), 2, ep), Error);
  try {
    call(1, 8, q8(2, 8, 8, 3, s.data()), 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block 3 does not divide K = 8"), std::string::npos) << e.what();
  }
  // The non-q8 formats ignore block and scales.
  EXPECT_NO_THROW(call(1, 8, (WeightRef{WeightFormat::f32, a.data(), 2, 8, 8, nullptr, 3}), 2));
}

}  // namespace
}  // namespace milrt::kernels
