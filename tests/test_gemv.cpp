// kernels::gemv_rows_f32 and gemv_cols_f32 (B stored [N, K] and [K, N]) and
// gemm()'s one-row paths onto them, against fp64
// dot products written here: every usable ISA, tails of K and N, the
// epilogue (alpha, bias, activation, a residual that is C itself), and the
// same bits for any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/threads.h"
#include "support/activation_fp64.h"

namespace milrt::kernels {
namespace {

using test::act64;

struct Case {
  int64_t N, K;
};

TEST(Gemv, MatchesFp64OnEveryIsaWithEpilogues) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Isa isa : usable_isas())
    for (Case c : {Case{1, 1}, Case{3, 15}, Case{5, 17}, Case{64, 33}, Case{65, 288}, Case{130, 100}, Case{7, 768}})
      for (Activation act : {Activation::none, Activation::silu, Activation::gelu_tanh}) {
        const int64_t ldw = c.K + 3;  // rows not packed tightly
        std::vector<float> x(size_t(c.K)), w(size_t(c.N * ldw)), bias(size_t(c.N)), y(size_t(c.N));
        for (auto& v : x) v = u(rng);
        for (auto& v : w) v = u(rng);
        for (auto& v : bias) v = u(rng);
        for (auto& v : y) v = u(rng);
        const std::vector<float> y0 = y;
        Epilogue ep;
        ep.alpha = 0.5f;
        ep.bias = bias.data();
        ep.act = act;
        ep.residual = y.data();  // C += ...
        ep.residual_ld = c.N;
        gemv_rows_f32(c.N, c.K, x.data(), w.data(), ldw, y.data(), ep, isa);
        for (int64_t j = 0; j < c.N; ++j) {
          double d = 0;
          for (int64_t k = 0; k < c.K; ++k) d += double(x[size_t(k)]) * double(w[size_t(j * ldw + k)]);
          const double want = act64(act, 0.5 * d + bias[size_t(j)]) + y0[size_t(j)];
          // fp32 sums of K products of size <= 1: error ~ K * 2^-24 * sqrt-ish growth.
          ASSERT_NEAR(y[size_t(j)], want, 1e-6 * double(c.K) + 1e-5)
              << isa_name(isa) << " N " << c.N << " K " << c.K << " row " << j;
        }
      }
}

// gemm() on one row of x against `b` (K x N as MatrixRef says): the same
// bits for 1, 2 and 3 threads, and the blocked path's values for a 2-row
// product whose first row is x.
void expect_one_row_gemm_paths(const std::vector<float>& x, const MatrixRef& b, int64_t N, int64_t K, Isa isa) {
  std::vector<std::vector<float>> outs;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    std::vector<float> y(static_cast<size_t>(N));
    gemm(1, N, K, MatrixRef{x.data(), ElemType::f32, K}, b, OutputRef{y.data(), ElemType::f32, N});
    outs.push_back(y);
  }
  set_num_threads(0);
  for (size_t t = 1; t < outs.size(); ++t)
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[t].data(), size_t(N) * sizeof(float)), 0) << isa_name(isa);
  std::vector<float> x2(size_t(2 * K), 0.0f), y2(size_t(2 * N));
  std::copy(x.begin(), x.end(), x2.begin());
  gemm(2, N, K, MatrixRef{x2.data(), ElemType::f32, K}, b, OutputRef{y2.data(), ElemType::f32, N}, {}, GemmMath::fp32, isa);
  for (int64_t j = 0; j < N; ++j) ASSERT_NEAR(outs[0][size_t(j)], y2[size_t(j)], 2e-5) << isa_name(isa) << " " << j;
}

TEST(Gemv, GemmTakesItForOneRowAndBitsDoNotDependOnThreads) {
  const int64_t N = 1000, K = 288;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(K), w(size_t(N * K));
  for (auto& v : x) v = u(rng);
  for (auto& v : w) v = u(rng);
  for (Isa isa : usable_isas()) expect_one_row_gemm_paths(x, MatrixRef{w.data(), ElemType::f32, K, true}, N, K, isa);
}

// B stored [K, N] (attention's P·V in decoding): every clone path (set_isa),
// tails of N past a block of 256, the epilogue with C itself as the residual,
// and through gemm(): the same bits for 1, 2 and 3 threads, and the blocked
// path's values for a 2-row product.
TEST(Gemv, ColumnsMatchFp64OnEveryPathAndBitsDoNotDependOnThreads) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Isa isa : usable_isas()) {
    set_isa(isa);
    for (Case c : {Case{1, 1}, Case{7, 3}, Case{64, 128}, Case{300, 17}, Case{513, 256}})
      for (Activation act : {Activation::none, Activation::silu}) {
        const int64_t ldb = c.N + 5;
        std::vector<float> x(size_t(c.K)), b(size_t(c.K * ldb)), bias(size_t(c.N)), y(size_t(c.N));
        for (auto& v : x) v = u(rng);
        for (auto& v : b) v = u(rng);
        for (auto& v : bias) v = u(rng);
        for (auto& v : y) v = u(rng);
        const std::vector<float> y0 = y;
        Epilogue ep;
        ep.alpha = 0.5f;
        ep.bias = bias.data();
        ep.act = act;
        ep.residual = y.data();
        ep.residual_ld = c.N;
        gemv_cols_f32(c.N, c.K, x.data(), b.data(), ldb, y.data(), ep);
        for (int64_t j = 0; j < c.N; ++j) {
          double d = 0;
          for (int64_t k = 0; k < c.K; ++k) d += double(x[size_t(k)]) * double(b[size_t(k * ldb + j)]);
          const double want = act64(act, 0.5 * d + bias[size_t(j)]) + y0[size_t(j)];
          ASSERT_NEAR(y[size_t(j)], want, 1e-6 * double(c.K) + 1e-5)
              << isa_name(isa) << " N " << c.N << " K " << c.K << " column " << j;
        }
      }
    const int64_t N = 1000, K = 300;
    std::vector<float> x(K), b(size_t(K * N));
    for (auto& v : x) v = u(rng);
    for (auto& v : b) v = u(rng);
    expect_one_row_gemm_paths(x, MatrixRef{b.data(), ElemType::f32, N, false}, N, K, isa);
  }
  set_isa(std::nullopt);
}

}  // namespace
}  // namespace milrt::kernels
