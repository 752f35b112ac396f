// kernels::weight_gemm with int8 activations (WeightRef::activations =
// ActivationQuant::int8: A quantized per block, integer dot products with the
// q8 weight, llama.cpp's Q8_0 x Q8_0) against a plain fp64 implementation of
// the same scheme written here: A quantized by this file's own code, exact
// integer block sums, the two scales. On every ISA path this CPU has (the
// others are skipped with a printed line): awkward shapes and blocks (ones
// the vector loops take and ones left to the portable loop), q = -128 and
// 127, all-zero and non-finite activation blocks, the epilogue, the same
// bits for 1, 2 and 3 threads, no allocation on a repeated call, panels
// (M > 4) and other formats unaffected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/threads.h"
#include "kernels/weight_gemm.h"
#include "support/int8_activation_model.h"
#include "support/isa_paths.h"
#include "support/activation_fp64.h"

// Every operator new in this test program is counted (a repeated call must allocate nothing).
#include "support/count_allocations.h"

namespace milrt::kernels {
namespace {

using test::act64;
using test::QuantRow;
using test::quantize_row;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

// A q8 weight [n, ld] with its block scales.
struct Q8 {
  int64_t n, k, ld, block;
  std::vector<int8_t> q;
  std::vector<float> scales;
  WeightRef ref(ActivationQuant aq = ActivationQuant::int8) const {
    WeightRef r{WeightFormat::q8, q.data(), n, k, ld, scales.data(), block};
    r.activations = aq;
    return r;
  }
};

// q uniform in [-128, 127] (both extremes included), scales in [0, range/127].
Q8 make_q8(int64_t n, int64_t k, int64_t ld, int64_t block, std::mt19937& rng, float range = 1) {
  Q8 w{n, k, ld, block, std::vector<int8_t>(size_t(n * ld)), std::vector<float>(size_t(n * (k / block)))};
  std::uniform_int_distribution<int> qd(-128, 127);
  std::uniform_real_distribution<float> sd(0, range / 127);
  for (auto& v : w.q) v = int8_t(qd(rng));
  for (auto& v : w.scales) v = sd(rng);
  return w;
}

std::vector<float> randv(size_t n, float range, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Σ_b (exact Σ qa·q) · scale · activation scale in fp64, and Σ of the terms' magnitudes.
void reference_dot(const Q8& w, int64_t j, const QuantRow& x, double& dot, double& mag) {
  dot = 0, mag = 0;
  const int64_t nb = w.k / w.block;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t sum = 0;
    for (int64_t t = b * w.block; t < (b + 1) * w.block; ++t) sum += int64_t(w.q[size_t(j * w.ld + t)]) * x.q[size_t(t)];
    const double term = double(w.scales[size_t(j * nb + b)]) * double(x.s[size_t(b)]) * double(sum);
    dot += term;
    mag += std::fabs(term);
  }
}

// weight_gemm with alpha, a bias, an activation and C += ... (residual = C),
// every element against the fp64 reference. Tolerance: the kernel rounds
// scale · activation scale once (u), adds the nb = k / block exact block
// terms in fp32 in some order (<= (nb - 1)·u·Σ|term|), and alpha, bias and
// the activation round a few times more: 2·(nb + 8)·u·(|α|·Σ|term| + |bias|)
// plus 8u of the result for the activation and the residual add, as
// test_weight_gemm.cpp allows the exact path.
// zero_blocks: every third block of A's rows is all zeros.
void check_case(Isa isa, int64_t M, int64_t N, int64_t K, int64_t block, Activation act, std::mt19937& rng,
                float arange = 1, bool zero_blocks = false) {
  const int64_t ld = K + 5, lda = K + 3, ldc = N + 1;
  const Q8 w = make_q8(N, K, ld, block, rng);
  std::vector<float> a = randv(size_t(M * lda), arange, rng);
  if (zero_blocks)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t b = 0; b < K / block; b += 3) std::fill_n(a.begin() + i * lda + b * block, block, 0.0f);
  const std::vector<float> bias = randv(size_t(N), 1, rng);
  std::vector<float> c = randv(size_t(M * ldc), 1, rng);
  const std::vector<float> c0 = c;
  Epilogue ep;
  ep.alpha = 0.75f;
  ep.bias = bias.data();
  ep.act = act;
  ep.residual = c.data();
  ep.residual_ld = ldc;
  weight_gemm(M, a.data(), lda, w.ref(), c.data(), ldc, ep, isa);
  const int64_t nb = K / block;
  for (int64_t i = 0; i < M; ++i) {
    const QuantRow x = quantize_row(a.data() + i * lda, K, block);
    for (int64_t j = 0; j < N; ++j) {
      double d, mag;
      reference_dot(w, j, x, d, mag);
      const double pre = 0.75 * d + bias[size_t(j)];
      const double want = act64(act, pre) + c0[size_t(i * ldc + j)];
      const double tol = 2 * double(nb + 8) * kU * (0.75 * mag + std::fabs(bias[size_t(j)])) +
                         8 * kU * (std::fabs(want) + std::fabs(c0[size_t(i * ldc + j)])) + 1e-30;
      ASSERT_NEAR(c[size_t(i * ldc + j)], want, tol) << isa_name(isa) << " M " << M << " N " << N << " K " << K
                                                     << " block " << block << " at (" << i << ", " << j << ")";
    }
    ASSERT_EQ(c[size_t(i * ldc + N)], c0[size_t(i * ldc + N)]);  // C's padding column is untouched
  }
}

struct KB {
  int64_t k, block;
};

// Blocks the AVX-512 VNNI loops take (4, 8, 16, 32, multiples of 64), ones
// only the AVX2 loops take (96: a multiple of 32 that 64 does not divide),
// and ones left to the portable loop on every path (1, 2, 12, 20, 48); K one
// block, K not a multiple of 64 (or of 32), groups of 16 (8) blocks full and
// partial.
const KB kShapes[] = {{16, 16},  {32, 32},  {64, 64},   {48, 16},   {80, 16},  {96, 32},  {160, 32}, {544, 32},
                      {768, 32}, {12, 4},   {36, 4},    {100, 4},   {24, 8},   {72, 8},   {200, 8},  {128, 64},
                      {320, 64}, {384, 128}, {256, 256}, {192, 96},  {288, 96}, {17, 1},   {18, 2},   {36, 12},
                      {60, 20},  {96, 48},  {1088, 64}, {2048, 64}};

TEST(WeightGemmInt8, MatchesFp64EveryShapeAndIsa) {
  std::mt19937 rng(21);
  for (Isa isa : test::tested_paths())
    for (int64_t M : {1, 2, 3, 4})
      for (int64_t N : {1, 3, 65})
        for (KB s : kShapes) check_case(isa, M, N, s.k, s.block, Activation::none, rng);
}

TEST(WeightGemmInt8, EpilogueZeroBlocksAndScales) {
  std::mt19937 rng(22);
  for (Isa isa : test::tested_paths())
    for (int64_t M : {1, 3, 4})
      for (Activation act : {Activation::silu, Activation::relu}) {
        check_case(isa, M, 65, 768, 32, act, rng, 1, /*zero_blocks=*/true);
        check_case(isa, M, 33, 96, 16, act, rng, 1, /*zero_blocks=*/true);
        check_case(isa, M, 17, 256, 128, act, rng, 1, /*zero_blocks=*/true);
        // Large and tiny activations (a tiny block's scale is subnormal or underflows to 0).
        check_case(isa, M, 17, 160, 32, act, rng, 1e20f);
        check_case(isa, M, 17, 160, 32, act, rng, 1e-39f);
        check_case(isa, M, 17, 160, 32, act, rng, 1e-43f);
      }
}

// Stories110M's shapes, decode.
TEST(WeightGemmInt8, MatchesFp64AtStoriesSize) {
  std::mt19937 rng(23);
  for (Isa isa : test::tested_paths())
    for (KB s : {KB{768, 32}, KB{2048, 32}, KB{768, 64}})
      for (int64_t M : {1, 4}) check_case(isa, M, 2048, s.k, s.block, Activation::none, rng);
}

// Weights of -128 and 127 only, activations hitting ±127: block sums at
// their largest (|Σ| <= 32·128·127, exact in int32 and in fp32).
TEST(WeightGemmInt8, ExtremeValues) {
  for (Isa isa : test::tested_paths())
    for (int64_t M : {1, 2, 4}) {
      const int64_t N = 6, K = 96, block = 32;
      Q8 w{N, K, K, block, std::vector<int8_t>(size_t(N * K)), std::vector<float>(size_t(N * 3), 1.0f)};
      for (int64_t j = 0; j < N; ++j)
        for (int64_t i = 0; i < K; ++i)
          w.q[size_t(j * K + i)] =
              int8_t(j == 0 ? -128 : j == 1 ? 127 : j == 2 ? (i % 2 ? 127 : -128) : (i % 3 ? -128 : 127));
      // Row i of A: ±1 (quantized to ±127 with scale 1/127) in a sign pattern of its own.
      std::vector<float> a(size_t(M * K));
      for (int64_t r = 0; r < M; ++r)
        for (int64_t i = 0; i < K; ++i) a[size_t(r * K + i)] = ((i + r) % (r + 2)) ? 1.0f : -1.0f;
      std::vector<float> c(size_t(M * N));
      weight_gemm(M, a.data(), K, w.ref(), c.data(), N, {}, isa);
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < N; ++j) {
          int64_t sum = 0;
          for (int64_t i = 0; i < K; ++i)
            sum += int64_t(w.q[size_t(j * K + i)]) * (a[size_t(r * K + i)] > 0 ? 127 : -127);
          // Three exact block sums times fl(1/127), added: a few roundings of
          // values up to 3·32·128 in all.
          const double want = double(sum) / 127;
          ASSERT_NEAR(c[size_t(r * N + j)], want, 8 * kU * 3 * 32 * 128)
              << isa_name(isa) << " row " << r << " col " << j;
        }
    }
}

// One-hot weight rows read single quantized activations back: output j is
// fl(w · qa_j · s) exactly (one nonzero term, scales 1), so each quantized
// value and scale is checked bit for bit against this file's quantizer,
// rounding ties included (activations k/2 steps apart).
TEST(WeightGemmInt8, QuantizedActivationsAreExactlyTheScheme) {
  std::mt19937 rng(24);
  for (Isa isa : test::tested_paths())
    for (int64_t block : {4, 16, 32, 64, 12}) {
      const int64_t K = block * 4, N = K;
      for (int8_t wv : {int8_t(1), int8_t(-128), int8_t(127)}) {
        Q8 w{N, K, K, block, std::vector<int8_t>(size_t(N * K), 0), std::vector<float>(size_t(N * 4), 1.0f)};
        for (int64_t j = 0; j < N; ++j) w.q[size_t(j * K + j)] = wv;
        for (int64_t M : {1, 4}) {
          std::vector<float> a = randv(size_t(M * K), 3, rng);
          // Half-step values: a / s lands on .5 ties (to even) in the first block of row 0.
          for (int64_t t = 1; t < block; ++t) a[size_t(t)] = float(t - block / 2) * 0.5f / 64;
          a[0] = 127.0f / 64;
          std::vector<float> c(size_t(M * N));
          weight_gemm(M, a.data(), K, w.ref(), c.data(), N, {}, isa);
          for (int64_t r = 0; r < M; ++r) {
            const QuantRow x = quantize_row(a.data() + r * K, K, block);
            for (int64_t j = 0; j < N; ++j) {
              const float want = float(double(wv) * x.q[size_t(j)] * double(x.s[size_t(j / block)]));
              ASSERT_EQ(c[size_t(r * N + j)], want) << isa_name(isa) << " block " << block << " w " << int(wv)
                                                    << " row " << r << " col " << j;
            }
          }
        }
      }
    }
}

// A block holding inf or NaN makes its A row's results NaN (as the exact
// product would be); the other rows are untouched by it.
TEST(WeightGemmInt8, NonFiniteActivationsGiveNaN) {
  std::mt19937 rng(25);
  for (Isa isa : test::tested_paths())
    for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      const int64_t M = 3, N = 19, K = 128;
      const Q8 w = make_q8(N, K, K, 32, rng);
      std::vector<float> a = randv(size_t(M * K), 1, rng);
      a[size_t(1 * K + 70)] = bad;
      std::vector<float> c(size_t(M * N));
      weight_gemm(M, a.data(), K, w.ref(), c.data(), N, {}, isa);
      for (int64_t j = 0; j < N; ++j) {
        EXPECT_TRUE(std::isfinite(c[size_t(j)])) << isa_name(isa);
        EXPECT_TRUE(std::isnan(c[size_t(N + j)])) << isa_name(isa) << " col " << j;
        EXPECT_TRUE(std::isfinite(c[size_t(2 * N + j)])) << isa_name(isa);
      }
    }
}

TEST(WeightGemmInt8, BitsDoNotDependOnThreads) {
  std::mt19937 rng(26);
  const int64_t N = 2048 + 17, K = 768;
  for (Isa isa : test::tested_paths())
    for (int64_t block : {32, 64, 48}) {
      const Q8 w = make_q8(N, K, K, block, rng);
      for (int64_t M : {1, 2, 3, 4}) {
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
              << isa_name(isa) << " block " << block << " M " << M << " threads " << t + 1;
      }
    }
}

TEST(WeightGemmInt8, RepeatedCallDoesNotAllocate) {
  std::mt19937 rng(27);
  const int64_t N = 1000, K = 256;
  for (Isa isa : test::tested_paths())
    for (int t : {1, 2})
      for (int64_t M : {1, 4}) {
        set_num_threads(t);
        const Q8 w = make_q8(N, K, K, 32, rng);
        const std::vector<float> a = randv(size_t(M * K), 1, rng);
        std::vector<float> c(size_t(M * N));
        weight_gemm(M, a.data(), K, w.ref(), c.data(), N, {}, isa);  // the quantized A's buffer grows once
        EXPECT_EQ(allocations_during([&] { weight_gemm(M, a.data(), K, w.ref(), c.data(), N, {}, isa); }), 0)
            << isa_name(isa) << " M " << M << " threads " << t;
      }
  set_num_threads(0);
}

// Panels (M > 4) and the other formats ignore the option: the same bits as without it.
TEST(WeightGemmInt8, PanelsAndOtherFormatsUnaffected) {
  std::mt19937 rng(28);
  const int64_t N = 70, K = 96;
  const Q8 w = make_q8(N, K, K, 32, rng);
  for (Isa isa : test::tested_paths()) {
    for (int64_t M : {5, 17}) {
      const std::vector<float> a = randv(size_t(M * K), 1, rng);
      std::vector<float> exact(size_t(M * N)), opt(size_t(M * N));
      weight_gemm(M, a.data(), K, w.ref(ActivationQuant::none), exact.data(), N, {}, isa);
      weight_gemm(M, a.data(), K, w.ref(ActivationQuant::int8), opt.data(), N, {}, isa);
      ASSERT_EQ(std::memcmp(exact.data(), opt.data(), exact.size() * 4), 0) << isa_name(isa) << " M " << M;
    }
    const std::vector<float> f = randv(size_t(N * K), 1, rng), a = randv(size_t(K), 1, rng);
    std::vector<float> exact(static_cast<size_t>(N)), opt(static_cast<size_t>(N));
    WeightRef r{WeightFormat::f32, f.data(), N, K, K};
    weight_gemm(1, a.data(), K, r, exact.data(), N, {}, isa);
    r.activations = ActivationQuant::int8;
    weight_gemm(1, a.data(), K, r, opt.data(), N, {}, isa);
    ASSERT_EQ(std::memcmp(exact.data(), opt.data(), exact.size() * 4), 0) << isa_name(isa) << " f32";
  }
}

// The int8 scheme is close to the exact product on Gaussian-like data: a
// sanity bound on what the option costs (each activation moves by at most
// half a step, max|a| / 254 of its block).
TEST(WeightGemmInt8, CloseToTheExactProduct) {
  std::mt19937 rng(29);
  const int64_t N = 512, K = 768;
  const Q8 w = make_q8(N, K, K, 32, rng);
  const std::vector<float> a = randv(size_t(K), 1, rng);
  std::vector<float> exact(static_cast<size_t>(N)), approx(static_cast<size_t>(N));
  weight_gemm(1, a.data(), K, w.ref(ActivationQuant::none), exact.data(), N);
  weight_gemm(1, a.data(), K, w.ref(ActivationQuant::int8), approx.data(), N);
  double worst = 0, scale = 0;
  for (int64_t j = 0; j < N; ++j) {
    worst = std::max(worst, std::fabs(double(approx[size_t(j)]) - exact[size_t(j)]));
    scale = std::max(scale, std::fabs(double(exact[size_t(j)])));
  }
  std::printf("[ info ] int8 vs exact activations, K 768, block 32: max |diff| %.3g of max |y| %.3g\n", worst, scale);
  EXPECT_LT(worst, 0.02 * scale);
}

}  // namespace
}  // namespace milrt::kernels
