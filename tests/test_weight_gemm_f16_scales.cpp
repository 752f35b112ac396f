// kernels::weight_gemm with fp16 block scales (WeightRef::scale_type f16,
// llama.cpp's Q8_0/Q4_0 form) against a plain fp64 product written here: each
// weight is half64(scale) · q, the scale decoded from its bits by this file's
// support code. q8 and q4, fp32 and int8 activations, on every ISA path this
// CPU has (the others are named on stdout as skipped): N and K that are not
// multiples of the vector widths, M = 1..5 (4 streams, 5 takes the panels),
// blocks 16, 32 and 64 (and ones the vector loops leave to the portable
// loop); also that fp16 scales give the same bits as the same values held as
// fp32 scales (the widening is exact), so fp16 changes only the bytes read;
// and a bf16 scale type refused in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/weight_gemm.h"
#include "milrt/dtype.h"
#include "milrt/error.h"
#include "support/half_fp64.h"
#include "support/int8_activation_model.h"
#include "support/isa_paths.h"
#include "support/test_util.h"

namespace milrt::kernels {
namespace {

using test::half64;
using test::QuantRow;
using test::quantize_row;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

// A q8 or q4 weight [n, ld] (q4: packed two a byte, ld even) with fp16 block
// scales, and the same scales widened to fp32 for the same-bits comparison.
struct Weight {
  WeightFormat format;
  int64_t n, k, ld, block;
  std::vector<int> q;            // the values, [n, ld]
  std::vector<int8_t> q8;        // q8's storage
  std::vector<uint8_t> packed;   // q4's storage
  std::vector<uint16_t> s16;     // [n, k / block]
  std::vector<float> s32;        // the same values as fp32
  WeightRef ref(ElemType st, ActivationQuant aq) const {
    const void* d = format == WeightFormat::q8 ? static_cast<const void*>(q8.data()) : packed.data();
    const void* s = st == ElemType::f16 ? static_cast<const void*>(s16.data()) : s32.data();
    WeightRef r{format, d, n, k, ld, s, block, st};
    r.activations = aq;
    return r;
  }
  double scale(int64_t j, int64_t i) const { return half64(s16[size_t(j * (k / block) + i / block)]); }
};

// q uniform over the format's range (q8 -128..127, q4 -8..7), scales fp16 in
// [0, range/127] (normal and, with tiny_scales, subnormal halves).
Weight make_weight(WeightFormat f, int64_t n, int64_t k, int64_t block, std::mt19937& rng, bool tiny_scales = false) {
  const int64_t ld = k + 2;
  Weight w{f, n, k, ld, block, std::vector<int>(size_t(n * ld)), {}, {}, {}, {}};
  const int lo = f == WeightFormat::q8 ? -128 : -8, hi = f == WeightFormat::q8 ? 127 : 7;
  std::uniform_int_distribution<int> qd(lo, hi);
  for (auto& v : w.q) v = qd(rng);
  if (f == WeightFormat::q8) {
    for (int v : w.q) w.q8.push_back(int8_t(v));
  } else {
    for (size_t i = 0; i < w.q.size(); i += 2) w.packed.push_back(uint8_t((w.q[i] & 15) | ((w.q[i + 1] & 15) << 4)));
  }
  std::uniform_real_distribution<float> sd(0, tiny_scales ? 1e-6f : 1.0f / 127);
  for (int64_t i = 0; i < n * (k / block); ++i) {
    const uint16_t h = f32_to_f16(sd(rng));
    w.s16.push_back(h);
    w.s32.push_back(float(half64(h)));
  }
  return w;
}

std::vector<float> randv(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// C = A·Wᵀ (fp16 scales) against fp64. fp32 activations: Σ a·half(s)·q with
// the tolerance test_weight_gemm.cpp allows a K-term fp32 sum, 2·(K + 8)·u·Σ|a·w|.
// int8 activations: Σ_b (exact Σ qa·q) · half(s) · s_a. The kernel rounds the
// product of the scales once, and converts to fp32 and scales either each
// block's sum (VNNI, portable) or up to 8 exact integer partial sums of it
// (the AVX2 lanes, added in fp32 at the end), so at most 8·nb terms, each at
// most half(s)·s_a·Σ|qa·q| over its block: 2·(8·nb + 8)·u·Σ_b half(s)·s_a·Σ|qa·q|.
void check_case(Isa isa, WeightFormat f, bool int8, int64_t M, int64_t N, int64_t K, int64_t block,
                std::mt19937& rng, bool tiny_scales = false) {
  const Weight w = make_weight(f, N, K, block, rng, tiny_scales);
  const int64_t lda = K + 3, ldc = N + 1, nb = K / block;
  const std::vector<float> a = randv(size_t(M * lda), rng);
  std::vector<float> c(size_t(M * ldc), -7.0f);
  weight_gemm(M, a.data(), lda, w.ref(ElemType::f16, int8 ? ActivationQuant::int8 : ActivationQuant::none), c.data(),
              ldc, {}, isa);
  // Panels (M > 4) ignore int8 activations: their products are exact.
  const bool quantized = int8 && M <= kWeightStreamMaxRows;
  for (int64_t i = 0; i < M; ++i) {
    const float* x = a.data() + i * lda;
    const QuantRow qx = quantize_row(x, K, block);
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      if (quantized) {
        for (int64_t b = 0; b < nb; ++b) {
          long sum = 0, abs_sum = 0;
          for (int64_t t = b * block; t < (b + 1) * block; ++t) {
            const long p = long(w.q[size_t(j * w.ld + t)]) * qx.q[size_t(t)];
            sum += p;
            abs_sum += std::labs(p);
          }
          const double scale = w.scale(j, b * block) * double(qx.s[size_t(b)]);
          want += scale * double(sum);
          mag += scale * double(abs_sum);
        }
      } else {
        for (int64_t t = 0; t < K; ++t) {
          const double p = double(x[t]) * w.scale(j, t) * w.q[size_t(j * w.ld + t)];
          want += p;
          mag += std::fabs(p);
        }
      }
      const double tol = 2 * double((quantized ? 8 * nb : K) + 8) * kU * mag + 1e-30;
      ASSERT_NEAR(c[size_t(i * ldc + j)], want, tol)
          << isa_name(isa) << " " << weight_format_name(f) << (int8 ? " int8 activations" : "") << " M " << M
          << " N " << N << " K " << K << " block " << block << " at (" << i << ", " << j << ")";
    }
    ASSERT_EQ(c[size_t(i * ldc + N)], -7.0f) << "C's padding column is untouched";
  }
}

struct Shape3 {
  int64_t n, k, block;
};
// N around the row groups (8, 4, 2) and the 64-row stream blocks; K around
// the 8/16-lane vectors and the 32/64-byte int8 chunks; blocks 16, 32, 64, and
// 8 (AVX2's width), 4 and 12 (left to other loops or the portable one).
const Shape3 kShapes[] = {{1, 16, 16},  {7, 48, 16},  {17, 80, 16},  {9, 32, 32},   {33, 96, 32},
                          {65, 160, 32}, {15, 64, 64}, {23, 192, 64}, {100, 320, 64}, {17, 40, 8},
                          {9, 20, 4},    {17, 36, 12}};

TEST(WeightGemmF16Scales, MatchesFp64EveryFormatShapeAndIsa) {
  std::mt19937 rng(31);
  for (Isa isa : test::tested_paths())
    for (WeightFormat f : {WeightFormat::q8, WeightFormat::q4})
      for (bool int8 : {false, true})
        for (int64_t M = 1; M <= 5; ++M)
          for (const Shape3& s : kShapes) check_case(isa, f, int8, M, s.n, s.k, s.block, rng);
}

TEST(WeightGemmF16Scales, MatchesFp64AtStoriesSize) {
  // Stories110M's w1 (N 2048, K 768, blocks of 32): decode's shape.
  std::mt19937 rng(32);
  for (Isa isa : test::tested_paths())
    for (WeightFormat f : {WeightFormat::q8, WeightFormat::q4})
      for (bool int8 : {false, true}) check_case(isa, f, int8, 1, 2048, 768, 32, rng);
}

TEST(WeightGemmF16Scales, SubnormalScales) {
  // Scales under fp16's smallest normal (6.1e-5) are subnormal halves: still exact once widened.
  std::mt19937 rng(33);
  for (Isa isa : test::tested_paths())
    for (WeightFormat f : {WeightFormat::q8, WeightFormat::q4})
      for (bool int8 : {false, true}) check_case(isa, f, int8, 2, 33, 96, 32, rng, /*tiny_scales=*/true);
}

// The widening is exact: fp16 scales give the bits of the same values held as
// fp32, on every path, format, activation mode and row count.
TEST(WeightGemmF16Scales, SameBitsAsTheSameScalesInFp32) {
  std::mt19937 rng(34);
  for (Isa isa : test::tested_paths())
    for (WeightFormat f : {WeightFormat::q8, WeightFormat::q4})
      for (ActivationQuant aq : {ActivationQuant::none, ActivationQuant::int8})
        for (int64_t M : {1, 2, 3, 4, 5, 17})
          for (const Shape3& s : kShapes) {
            const Weight w = make_weight(f, s.n, s.k, s.block, rng);
            const std::vector<float> a = randv(size_t(M * s.k), rng);
            std::vector<float> c16(size_t(M * s.n)), c32(size_t(M * s.n));
            weight_gemm(M, a.data(), s.k, w.ref(ElemType::f16, aq), c16.data(), s.n, {}, isa);
            weight_gemm(M, a.data(), s.k, w.ref(ElemType::f32, aq), c32.data(), s.n, {}, isa);
            for (size_t i = 0; i < c16.size(); ++i)
              ASSERT_EQ(c16[i], c32[i]) << isa_name(isa) << " " << weight_format_name(f) << " M " << M << " N " << s.n
                                        << " K " << s.k << " block " << s.block << " at " << i;
          }
}

TEST(WeightGemmF16Scales, Bf16ScalesAreRefused) {
  std::mt19937 rng(35);
  const Weight w = make_weight(WeightFormat::q8, 2, 32, 32, rng);
  const std::vector<float> a(32, 1.0f);
  std::vector<float> c(2);
  WeightRef r = w.ref(ElemType::f16, ActivationQuant::none);
  r.scale_type = ElemType::bf16;
  test::expect_error_containing([&] { weight_gemm(1, a.data(), 32, r, c.data(), 2); },
                                "q8 scales must be f32 or f16, got bf16");
}

}  // namespace
}  // namespace milrt::kernels
