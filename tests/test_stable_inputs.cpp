// CompileOptions::stable_inputs: a GEMM whose B operand is a stable input
// keeps it packed between runs and packs it again only after
// Plan::inputs_changed(), a new binding or run(inputs). Checked against an
// fp64 product written here, on both GEMM backends, fp32 and bf16, with B
// used as stored (matmul) and transposed (linear), as a training step uses a
// weight forward and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include "kernels/gemm_backend.h"
#include "kernels/onednn/onednn_gemm.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt {
namespace {

constexpr int64_t M = 33, K = 40, N = 24;

// y = x·wᵀ (linear: w as stored [N, K], read transposed), z = y·w (matmul: w read as stored).
Program two_uses_of_w() {
  Program p = parse_mil(test::program_text("tensor<fp32, [33, 40]> x, tensor<fp32, [24, 40]> w",
                                           "tensor<fp32, [33, 24]> y = linear(x = x, weight = w)[name = string(\"y\")];\n"
                                           "tensor<fp32, [33, 40]> z = matmul(x = y, y = w)[name = string(\"z\")];",
                                           "y, z"),
                        "stable.mil", ".");
  verify(p);
  return p;
}

Tensor random_matrix(std::mt19937& rng, int64_t rows, int64_t cols) {
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor t(DType::FP32, {rows, cols});
  for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), u(rng));
  return t;
}

// The expected y and z in fp64 (operands rounded to bf16 first for bf16 math,
// y rounded to fp32 as the plan stores it).
struct Expected {
  std::vector<double> y, z;
};
Expected expected(const Tensor& x, const Tensor& w, bool bf16) {
  auto op = [&](double v) { return bf16 ? test::bf16_round(v) : v; };
  Expected e;
  e.y.assign(size_t(M * N), 0);
  e.z.assign(size_t(M * K), 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += op(x.at(size_t(i * K + k))) * op(w.at(size_t(j * K + k)));
      e.y[size_t(i * N + j)] = double(float(s));
    }
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t j = 0; j < N; ++j) s += op(e.y[size_t(i * N + j)]) * op(w.at(size_t(j * K + k)));
      e.z[size_t(i * K + k)] = s;
    }
  return e;
}

// Whether y and z (as computed) match the product with weight `w`.
::testing::AssertionResult matches(const Tensor& y, const Tensor& z, const Tensor& x, const Tensor& w, bool bf16) {
  const Expected e = expected(x, w, bf16);
  // fp32 sums of K terms of size <= 1 (bf16: the same, on rounded operands).
  const double tol = 1e-4 * K;
  for (int64_t i = 0; i < M * N; ++i)
    if (std::fabs(y.at(size_t(i)) - e.y[size_t(i)]) > tol)
      return ::testing::AssertionFailure() << "y[" << i << "] = " << y.at(size_t(i)) << ", expected " << e.y[size_t(i)];
  for (int64_t i = 0; i < M * K; ++i)
    if (std::fabs(z.at(size_t(i)) - e.z[size_t(i)]) > tol * N)
      return ::testing::AssertionFailure() << "z[" << i << "] = " << z.at(size_t(i)) << ", expected " << e.z[size_t(i)];
  return ::testing::AssertionSuccess();
}

class StableInputs : public ::testing::TestWithParam<std::tuple<kernels::GemmBackendMode, bool>> {
 protected:
  void SetUp() override {
    if (std::get<0>(GetParam()) == kernels::GemmBackendMode::onednn && !kernels::onednn_available())
      GTEST_SKIP() << "this build has no oneDNN";
    kernels::set_gemm_backend_mode(std::get<0>(GetParam()));
  }
  void TearDown() override { kernels::set_gemm_backend_mode(std::nullopt); }
};

TEST_P(StableInputs, PackedOnceAndAgainOnlyAfterAChange) {
  const bool bf16 = std::get<1>(GetParam());
  CompileOptions co;
  co.tune = CompileOptions::Tune::off;
  co.stable_inputs = {"w"};
  if (bf16) co.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  Plan plan = compile(two_uses_of_w(), co);
  int cached = 0;
  for (const auto& s : plan.steps()) cached += s.kernel.find("B packed per change") != std::string::npos;
  EXPECT_EQ(cached, 2) << "both uses of w keep it packed";

  std::mt19937 rng(7);
  Tensor x = random_matrix(rng, M, K), w = random_matrix(rng, N, K);
  Tensor w0(DType::FP32, {N, K});  // a copy of its own: w is about to be overwritten
  std::memcpy(w0.mutable_data(), w.data(), w.nbytes());
  Tensor y(DType::FP32, {M, N}), z(DType::FP32, {M, K});
  plan.bind("x", x);
  plan.bind("w", w);
  plan.bind("y", y);
  plan.bind("z", z);
  plan.run();
  EXPECT_TRUE(matches(y, z, x, w0, bf16));

  // New values in the bound memory, not announced: the plan keeps the packed
  // copy (the contract the training loop relies on to skip repacking)...
  const Tensor w1 = random_matrix(rng, N, K);
  std::memcpy(w.mutable_data(), w1.data(), w.nbytes());
  plan.run();
  EXPECT_TRUE(matches(y, z, x, w0, bf16)) << "without inputs_changed() the packed weights stay";
  // ...until told.
  plan.inputs_changed();
  plan.run();
  EXPECT_TRUE(matches(y, z, x, w1, bf16));

  // A new binding repacks.
  Tensor w2 = random_matrix(rng, N, K);
  plan.bind("w", w2);
  plan.run();
  EXPECT_TRUE(matches(y, z, x, w2, bf16));

  // run(inputs) copies its inputs into the plan: always repacked.
  const Tensor w3 = random_matrix(rng, N, K);
  TensorMap out = plan.run({{"x", x}, {"w", w3}});
  EXPECT_TRUE(matches(out.at("y"), out.at("z"), x, w3, bf16));
  // And a bound run afterwards reads the bound weights again.
  plan.run();
  EXPECT_TRUE(matches(y, z, x, w2, bf16));
}

INSTANTIATE_TEST_SUITE_P(BackendsAndPrecisions, StableInputs,
                         ::testing::Combine(::testing::Values(kernels::GemmBackendMode::own,
                                                              kernels::GemmBackendMode::onednn),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == kernels::GemmBackendMode::own ? "own"
                                                                                                      : "onednn") +
                                  (std::get<1>(info.param) ? "_bf16" : "_fp32");
                         });

TEST(StableInputsErrors, UnknownNameIsRefused) {
  CompileOptions co;
  co.stable_inputs = {"nope"};
  try {
    compile(two_uses_of_w(), co);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stable input 'nope' is not an input"), std::string::npos) << e.what();
  }
}

TEST(StableInputsErrors, PlansWithoutThemAreUnchanged) {
  CompileOptions co;
  co.tune = CompileOptions::Tune::off;
  Plan plan = compile(two_uses_of_w(), co);
  for (const auto& s : plan.steps()) EXPECT_EQ(s.kernel.find("per change"), std::string::npos) << s.kernel;
}

}  // namespace
}  // namespace milrt
