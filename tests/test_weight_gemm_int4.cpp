// kernels::weight_gemm with q4 weights (signed 4-bit values, two a byte, one
// fp32 scale per block of a row) against plain fp64 implementations written
// here: the exact product Σ a · scale · q, and, with int8 activations, A
// quantized by this file's own code with exact integer block sums times the
// two scales. On every ISA path this CPU has (the others are skipped with a
// printed line): awkward shapes, blocks 2 to 64 (ones the vector loops take
// and ones left to the portable loops), streaming (M <= 4) and panels (M =
// 37), the epilogue with C += ..., nibbles -8 and 7, the same bits for 1, 2
// and 3 threads and as the q8 weight with the same values, and bad
// arguments as errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/threads.h"
#include "kernels/weight_gemm.h"
#include "milrt/error.h"
#include "support/int8_activation_model.h"
#include "support/isa_paths.h"
#include "support/activation_fp64.h"

namespace milrt::kernels {
namespace {

using test::act64;
using test::QuantRow;
using test::quantize_row;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

// A q4 weight [n, ld]: the values (one int a value, for the reference), the
// packed bytes and the block scales.
struct Q4 {
  int64_t n, k, ld, block;
  std::vector<int> v;
  std::vector<uint8_t> packed;
  std::vector<float> scales;
  WeightRef ref(ActivationQuant aq = ActivationQuant::none) const {
    WeightRef r{WeightFormat::q4, packed.data(), n, k, ld, scales.data(), block};
    r.activations = aq;
    return r;
  }
  double value(int64_t j, int64_t i) const {
    return double(scales[size_t(j * (k / block) + i / block)]) * v[size_t(j * ld + i)];
  }
};

// Element 2i in the low nibble of byte i, 2i + 1 in the high one.
std::vector<uint8_t> pack(const std::vector<int>& v) {
  std::vector<uint8_t> p(v.size() / 2);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t((v[2 * i] & 15) | ((v[2 * i + 1] & 15) << 4));
  return p;
}

// Values uniform in [-8, 7] (both extremes included), scales in [0, range/7].
Q4 make_q4(int64_t n, int64_t k, int64_t ld, int64_t block, std::mt19937& rng, float range = 1) {
  Q4 w{n, k, ld, block, std::vector<int>(size_t(n * ld)), {}, std::vector<float>(size_t(n * (k / block)))};
  std::uniform_int_distribution<int> qd(-8, 7);
  std::uniform_real_distribution<float> sd(0, range / 7);
  for (auto& x : w.v) x = qd(rng);
  for (auto& x : w.scales) x = sd(rng);
  w.packed = pack(w.v);
  return w;
}

std::vector<float> randv(size_t n, float range, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Row j of W against row x of A in fp64, and the sum of the terms' magnitudes:
// exact: Σ a · scale · q; int8: Σ_b (exact Σ qa · q) · scale · activation scale.
void reference_dot(const Q4& w, int64_t j, const float* x, bool int8, double& dot, double& mag) {
  dot = 0, mag = 0;
  if (!int8) {
    for (int64_t i = 0; i < w.k; ++i) {
      const double t = double(x[i]) * w.value(j, i);
      dot += t, mag += std::fabs(t);
    }
    return;
  }
  const QuantRow qx = quantize_row(x, w.k, w.block);
  const int64_t nb = w.k / w.block;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t sum = 0;
    for (int64_t t = b * w.block; t < (b + 1) * w.block; ++t) sum += int64_t(w.v[size_t(j * w.ld + t)]) * qx.q[size_t(t)];
    const double t = double(w.scales[size_t(j * nb + b)]) * double(qx.s[size_t(b)]) * double(sum);
    dot += t, mag += std::fabs(t);
  }
}

// weight_gemm with alpha, a bias, an activation and C += ... (residual = C),
// every element against the fp64 reference. Tolerance: the exact path's fp32
// sums of K products (block sums then scaled, or widened values summed by
// gemm) are within (K + 2)·u·Σ|term| on any order; the int8 path adds nb
// exact block terms after one rounding of the scale product each; alpha,
// bias and the activation round a few times more: 2·(K + 8)·u·(|α|·Σ|term| +
// |bias|) plus 8u of the result for the activation and the residual add.
// int8 activations only change the streaming rows (M <= 4).
void check_case(Isa isa, int64_t M, int64_t N, int64_t K, int64_t block, Activation act, bool int8,
                std::mt19937& rng) {
  const int64_t ld = K + 6, lda = K + 3, ldc = N + 1;
  const Q4 w = make_q4(N, K, ld, block, rng);
  const std::vector<float> a = randv(size_t(M * lda), 1, rng), bias = randv(size_t(N), 1, rng);
  std::vector<float> c = randv(size_t(M * ldc), 1, rng);
  const std::vector<float> c0 = c;
  Epilogue ep;
  ep.alpha = 0.75f;
  ep.bias = bias.data();
  ep.act = act;
  ep.residual = c.data();
  ep.residual_ld = ldc;
  weight_gemm(M, a.data(), lda, w.ref(int8 ? ActivationQuant::int8 : ActivationQuant::none), c.data(), ldc, ep, isa);
  const bool quantized = int8 && M <= 4;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double d, mag;
      reference_dot(w, j, a.data() + i * lda, quantized, d, mag);
      const double want = act64(act, 0.75 * d + bias[size_t(j)]) + c0[size_t(i * ldc + j)];
      const double tol = 2 * double(K + 8) * kU * (0.75 * mag + std::fabs(bias[size_t(j)])) +
                         8 * kU * (std::fabs(want) + std::fabs(c0[size_t(i * ldc + j)])) + 1e-30;
      ASSERT_NEAR(c[size_t(i * ldc + j)], want, tol)
          << isa_name(isa) << (int8 ? " int8 act" : "") << " M " << M << " N " << N << " K " << K << " block "
          << block << " at (" << i << ", " << j << ")";
    }
    ASSERT_EQ(c[size_t(i * ldc + N)], c0[size_t(i * ldc + N)]);  // C's padding column is untouched
  }
}

struct KB {
  int64_t k, block;
};
// Blocks 2 to 256 (ones every vector loop takes, ones left to the portable
// loops); K one block and several, K not a multiple of 64 or of 128 (the
// VNNI loops' q4 chunk: a partial last one), a whole group of 16 blocks and
// a partial one; Stories-like 768.
const KB kShapes[] = {{2, 2},     {18, 2},    {12, 4},    {100, 4},   {24, 8},    {200, 8},   {48, 16},
                      {400, 16},  {96, 32},   {544, 32},  {768, 32},  {96, 48},   {240, 48},  {128, 64},
                      {320, 64},  {1088, 64}, {384, 128}, {2304, 128}, {384, 192}, {512, 256}, {4352, 256},
                      // whole groups of 8 blocks (the AVX2 q4 loops take only these)
                      {64, 8},    {256, 32},  {512, 64},  {1024, 128}, {2048, 16}};

TEST(WeightGemmInt4, MatchesFp64EveryShapeAndIsa) {
  std::mt19937 rng(41);
  for (Isa isa : test::tested_paths())
    for (int64_t M : {1, 2, 3, 4, 37})
      for (int64_t N : {1, 3, 67})
        for (KB s : kShapes) check_case(isa, M, N, s.k, s.block, Activation::none, false, rng);
}

TEST(WeightGemmInt4, Int8ActivationsMatchFp64ModelOfTheScheme) {
  std::mt19937 rng(42);
  for (Isa isa : test::tested_paths())
    for (int64_t M : {1, 2, 3, 4, 37})
      for (int64_t N : {1, 3, 67})
        for (KB s : kShapes) check_case(isa, M, N, s.k, s.block, Activation::none, true, rng);
}

TEST(WeightGemmInt4, Epilogues) {
  std::mt19937 rng(43);
  for (Isa isa : test::tested_paths())
    for (int64_t M : {1, 4, 37})
      for (Activation act : {Activation::silu, Activation::relu})
        for (bool int8 : {false, true}) {
          check_case(isa, M, 65, 768, 32, act, int8, rng);
          check_case(isa, M, 33, 96, 48, act, int8, rng);
        }
}

// Nibbles -8 and 7 only (rows all -8, all 7, alternating, in thirds), scale
// 1, activations ±1 (int8: quantized to ±127 with scale fl(1/127)): exact
// integer sums, up to 7 · 8 · K in magnitude.
TEST(WeightGemmInt4, ExtremeNibbles) {
  const int64_t N = 5, K = 96, block = 32;
  Q4 w{N, K, K, block, std::vector<int>(size_t(N * K)), {}, std::vector<float>(size_t(N * 3), 1.0f)};
  for (int64_t j = 0; j < N; ++j)
    for (int64_t i = 0; i < K; ++i)
      w.v[size_t(j * K + i)] = j == 0 ? -8 : j == 1 ? 7 : j == 2 ? (i % 2 ? 7 : -8) : j == 3 ? (i % 2 ? -8 : 7)
                                                                                               : (i % 3 ? -8 : 7);
  w.packed = pack(w.v);
  for (Isa isa : test::tested_paths())
    for (int64_t M : {1, 2, 4, 37})
      for (bool int8 : {false, true}) {
        std::vector<float> a(size_t(M * K));
        for (int64_t r = 0; r < M; ++r)
          for (int64_t i = 0; i < K; ++i) a[size_t(r * K + i)] = ((i + r) % (r % 5 + 2)) ? 1.0f : -1.0f;
        std::vector<float> c(size_t(M * N));
        weight_gemm(M, a.data(), K, w.ref(int8 ? ActivationQuant::int8 : ActivationQuant::none), c.data(), N, {},
                    isa);
        for (int64_t r = 0; r < M; ++r)
          for (int64_t j = 0; j < N; ++j) {
            int64_t sum = 0;
            for (int64_t i = 0; i < K; ++i) sum += w.v[size_t(j * K + i)] * (a[size_t(r * K + i)] > 0 ? 1 : -1);
            // Exact: integer sums below 2^24. int8: three exact block sums
            // (of 127·q) times fl(1/127), added: a few roundings of values up to 8·K·127/127.
            const double tol = int8 && M <= 4 ? 8 * kU * 8 * K : 0;
            ASSERT_NEAR(c[size_t(r * N + j)], double(sum), tol)
                << isa_name(isa) << (int8 ? " int8 act" : "") << " M " << M << " row " << r << " col " << j;
          }
      }
}

TEST(WeightGemmInt4, BitsDoNotDependOnThreads) {
  std::mt19937 rng(44);
  const int64_t N = 2048 + 17, K = 768;
  for (Isa isa : test::tested_paths())
    for (int64_t block : {32, 64, 48}) {
      const Q4 w = make_q4(N, K, K, block, rng);
      for (int64_t M : {1, 2, 3, 4, 37})
        for (ActivationQuant aq : {ActivationQuant::none, ActivationQuant::int8}) {
          const std::vector<float> a = randv(size_t(M * K), 1, rng), bias = randv(size_t(N), 1, rng);
          std::vector<std::vector<float>> outs;
          for (int t : {1, 2, 3}) {
            set_num_threads(t);
            std::vector<float> c(size_t(M * N));
            Epilogue ep;
            ep.bias = bias.data();
            ep.act = Activation::silu;
            weight_gemm(M, a.data(), K, w.ref(aq), c.data(), N, ep, isa);
            outs.push_back(c);
          }
          set_num_threads(0);
          for (size_t t = 1; t < outs.size(); ++t)
            ASSERT_EQ(std::memcmp(outs[0].data(), outs[t].data(), outs[0].size() * 4), 0)
                << isa_name(isa) << " block " << block << " M " << M << " threads " << t + 1;
        }
    }
}

// The contract's promise that q4 is q8 with the same values, bit for bit
// (the values themselves are checked against fp64 above).
TEST(WeightGemmInt4, SameBitsAsQ8WithTheSameValues) {
  std::mt19937 rng(45);
  for (Isa isa : test::tested_paths())
    for (KB s : {KB{768, 32}, KB{96, 48}, KB{18, 2}, KB{100, 4}, KB{200, 8}, KB{400, 16}, KB{320, 64}, KB{2304, 128},
                 KB{384, 192}, KB{64, 8}, KB{512, 64}, KB{1024, 128}, KB{2048, 16}})
      for (int64_t M : {1, 3, 37})
        for (ActivationQuant aq : {ActivationQuant::none, ActivationQuant::int8}) {
          const int64_t N = 70;
          const Q4 w = make_q4(N, s.k, s.k, s.block, rng);
          const std::vector<int8_t> q8(w.v.begin(), w.v.end());
          WeightRef r8{WeightFormat::q8, q8.data(), N, s.k, s.k, w.scales.data(), s.block};
          r8.activations = aq;
          const std::vector<float> a = randv(size_t(M * s.k), 1, rng);
          std::vector<float> c4(size_t(M * N)), c8(size_t(M * N));
          weight_gemm(M, a.data(), s.k, w.ref(aq), c4.data(), N, {}, isa);
          weight_gemm(M, a.data(), s.k, r8, c8.data(), N, {}, isa);
          ASSERT_EQ(std::memcmp(c4.data(), c8.data(), c4.size() * 4), 0)
              << isa_name(isa) << " K " << s.k << " block " << s.block << " M " << M;
        }
}

TEST(WeightGemmInt4, BadArgumentsAreErrors) {
  std::mt19937 rng(46);
  const Q4 w = make_q4(4, 64, 64, 16, rng);
  std::vector<float> a(64), c(4);
  auto run = [&](int64_t k, int64_t ld, int64_t block, const float* scales) {
    WeightRef r{WeightFormat::q4, w.packed.data(), 4, k, ld, scales, block};
    weight_gemm(1, a.data(), 64, r, c.data(), 4);
  };
  EXPECT_NO_THROW(run(64, 64, 16, w.scales.data()));
  EXPECT_THROW(run(63, 63, 9, w.scales.data()), Error);    // odd block
  EXPECT_THROW(run(64, 64, 3, w.scales.data()), Error);    // odd block
  EXPECT_THROW(run(60, 60, 8, w.scales.data()), Error);    // block does not divide K
  EXPECT_THROW(run(62, 63, 2, w.scales.data()), Error);    // odd ld
  EXPECT_THROW(run(64, 64, 0, w.scales.data()), Error);    // no block
  EXPECT_THROW(run(64, 64, 16, nullptr), Error);           // no scales
  try {
    run(62, 63, 2, w.scales.data());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4 ld 63 is odd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace milrt::kernels
