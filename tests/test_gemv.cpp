// kernels::gemv_rows_f32 and gemv_cols_f32 (B stored [N, K] and [K, N]) and
// gemm()'s one-row paths onto them, against fp64
// dot products written here: every usable ISA, tails of K and N, the
// epilogue (alpha, bias, activation, a residual that is C itself), and the
// same bits for any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string_view>
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

// y = act(0.5 · x·B + bias) + y (C itself as the residual) through
// `product(x, B, bias-and-epilogue, y)` on random values, against fp64; B
// holds `b_size` floats and b_at(j, k) is its element for output j, input k.
template <class Product, class At>
void expect_epilogue_product(std::mt19937& rng, Case c, Activation act, size_t b_size, const Product& product,
                             const At& b_at, std::string_view what) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(size_t(c.K)), b(b_size), bias(size_t(c.N)), y(size_t(c.N));
  for (auto* v : {&x, &b, &bias, &y})
    for (float& f : *v) f = u(rng);
  const std::vector<float> y0 = y;
  Epilogue ep;
  ep.alpha = 0.5f;
  ep.bias = bias.data();
  ep.act = act;
  ep.residual = y.data();  // C += ...
  ep.residual_ld = c.N;
  product(x.data(), b.data(), ep, y.data());
  for (int64_t j = 0; j < c.N; ++j) {
    double d = 0;
    for (int64_t k = 0; k < c.K; ++k) d += double(x[size_t(k)]) * double(b[size_t(b_at(j, k))]);
    const double want = act64(act, 0.5 * d + bias[size_t(j)]) + y0[size_t(j)];
    // fp32 sums of K products of size <= 1: error ~ K * 2^-24 * sqrt-ish growth.
    ASSERT_NEAR(y[size_t(j)], want, 1e-6 * double(c.K) + 1e-5) << what << " N " << c.N << " K " << c.K << " output " << j;
  }
}

TEST(Gemv, MatchesFp64OnEveryIsaWithEpilogues) {
  std::mt19937 rng(3);
  for (Isa isa : usable_isas())
    for (Case c : {Case{1, 1}, Case{3, 15}, Case{5, 17}, Case{64, 33}, Case{65, 288}, Case{130, 100}, Case{7, 768}})
      for (Activation act : {Activation::none, Activation::silu, Activation::gelu_tanh}) {
        const int64_t ldw = c.K + 3;  // rows not packed tightly
        expect_epilogue_product(
            rng, c, act, size_t(c.N * ldw),
            [&](const float* x, const float* w, const Epilogue& ep, float* y) { gemv_rows_f32(c.N, c.K, x, w, ldw, y, ep, isa); },
            [&](int64_t j, int64_t k) { return j * ldw + k; }, isa_name(isa));
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
  struct RestoreIsa {
    ~RestoreIsa() { set_isa(std::nullopt); }
  } restore;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Isa isa : usable_isas()) {
    set_isa(isa);
    for (Case c : {Case{1, 1}, Case{7, 3}, Case{64, 128}, Case{300, 17}, Case{513, 256}})
      for (Activation act : {Activation::none, Activation::silu}) {
        const int64_t ldb = c.N + 5;
        expect_epilogue_product(
            rng, c, act, size_t(c.K * ldb),
            [&](const float* x, const float* b, const Epilogue& ep, float* y) { gemv_cols_f32(c.N, c.K, x, b, ldb, y, ep); },
            [&](int64_t j, int64_t k) { return k * ldb + j; }, isa_name(isa));
      }
    const int64_t N = 1000, K = 300;
    std::vector<float> x(K), b(size_t(K * N));
    for (auto& v : x) v = u(rng);
    for (auto& v : b) v = u(rng);
    expect_one_row_gemm_paths(x, MatrixRef{b.data(), ElemType::f32, N, false}, N, K, isa);
  }
}

}  // namespace
}  // namespace milrt::kernels
