// kernels::unary_f32's exp-based activations (exp, sigmoid, silu,
// gelu-sigmoid run on exp_poly, vectorized and threaded over large arrays)
// against fp64 libm written here: arguments across fp32's range, the
// overflow and underflow edges, infinities and NaN, and arrays large enough
// to split over threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/generic/elementwise.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

double reference(Unary op, double v) {
  switch (op) {
    case Unary::Exp: return std::exp(v);
    case Unary::Sigmoid: return 1.0 / (1.0 + std::exp(-v));
    case Unary::Silu: return v / (1.0 + std::exp(-v));
    // The op scales its argument in fp32: that rounding is part of it.
    case Unary::GeluSigmoid: return v / (1.0 + std::exp(double(-1.702f * float(v))));
    default: return NAN;
  }
}

const char* name(Unary op) {
  switch (op) {
    case Unary::Exp: return "exp";
    case Unary::Sigmoid: return "sigmoid";
    case Unary::Silu: return "silu";
    case Unary::GeluSigmoid: return "gelu_sigmoid";
    default: return "?";
  }
}

// Within a few fp32 ulps of the fp64 value (relative), or absolutely tiny.
void expect_close(Unary op, float x, float got) {
  const double want = reference(op, double(x));
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << name(op) << "(" << x << ") = " << got << ", want NaN";
    return;
  }
  if (std::isinf(want) || std::fabs(want) > double(std::numeric_limits<float>::max())) {
    EXPECT_EQ(double(got), want > 0 ? INFINITY : -INFINITY) << name(op) << "(" << x << ")";
    return;
  }
  const double tol = 8 * 0x1p-24 * std::fabs(want) + 1e-37;
  EXPECT_NEAR(double(got), want, tol) << name(op) << "(" << x << ")";
}

constexpr Unary kOps[] = {Unary::Exp, Unary::Sigmoid, Unary::Silu, Unary::GeluSigmoid};

TEST(UnaryKernel, ExpFamilyMatchesFp64AtTheEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,   -0.0f,   1.0f,   -1.0f,  0.5f,    -0.5f,  10.0f, -10.0f, 20.0f, -20.0f,
                          80.0f,  88.7f,   88.72f, 88.8f,  89.0f,   100.0f, -87.0f, -88.0f, -100.0f,
                          -103.9f, -104.0f, -110.0f, 1e-7f, -1e-7f, 1e-30f, 3.0e38f, -3.0e38f, inf, -inf};
  for (Unary op : kOps) {
    std::vector<float> y(x.size());
    unary_f32(op, x.data(), y.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) expect_close(op, x[i], y[i]);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    float ny = 0;
    unary_f32(op, &nan, &ny, 1);
    EXPECT_TRUE(std::isnan(ny)) << name(op) << "(NaN)";
  }
}

TEST(UnaryKernel, LargeArraysSplitOverThreadsGiveTheSameValues) {
  // 300,001 values: over the threading threshold, and not a multiple of any
  // vector width or thread count.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  std::vector<float> x(300001);
  for (float& v : x) v = u(rng);
  for (Unary op : kOps) {
    std::vector<float> one(x.size()), two(x.size());
    set_num_threads(1);
    unary_f32(op, x.data(), one.data(), int64_t(x.size()));
    set_num_threads(2);
    unary_f32(op, x.data(), two.data(), int64_t(x.size()));
    set_num_threads(0);
    EXPECT_EQ(one, two) << name(op);
    for (size_t i = 0; i < x.size(); i += 997) expect_close(op, x[i], two[i]);
    expect_close(op, x.back(), two.back());
  }
}

}  // namespace
}  // namespace milrt::kernels
