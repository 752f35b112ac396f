// Gradient rules of the elementwise ops, each checked against central
// differences of the forward program (tests/support/grad_check.h) on the
// reference executor, and its derived program against the compiled plan.
// Every loss is reduce_sum(z * w) with random weights w, so each element's
// gradient is O(1) and distinct (a rule that mixes up elements fails).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "autodiff/grad_rule.h"
#include "milrt/autodiff.h"
#include "support/grad_check.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

// Values in [lo, hi] whose magnitude is at least `gap`: keeps a kink at 0
// more than the finite-difference step away.
Tensor away_from_zero(const Shape& s, uint64_t seed, double gap = 0.1, double hi = 1.0) {
  Tensor t = random_tensor(DType::FP32, s, seed, gap, hi);
  std::mt19937_64 rng(seed + 99);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (rng() & 1) t.set(size_t(i), -t.at(size_t(i)));
  return t;
}

// A random shape of rank 1..4 with dims 1..4 (at most 64 elements).
Shape random_shape(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Shape s(1 + rng() % 4);
  for (auto& d : s) d = int64_t(1 + rng() % 4);
  return s;
}

struct UnaryCase {
  const char* name;
  std::string expr;              // in terms of x
  double lo = -1, hi = 1;        // input range
  bool kink_at_zero = false;
};

class UnaryGrad : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryGrad, MatchesFiniteDifferences) {
  const UnaryCase& u = GetParam();
  for (uint64_t seed : {1, 2, 3}) {
    Shape s = random_shape(seed * 31 + std::hash<std::string>{}(u.name) % 1000);
    SCOPED_TRACE(std::string(u.name) + " on " + shape_str(s));
    std::string text = weighted_sum_loss_program(mil_type(s) + " x", u.expr, s);
    TensorMap in;
    in["x"] = u.kink_at_zero ? away_from_zero(s, seed) : random_tensor(DType::FP32, s, seed, u.lo, u.hi);
    GradCheckOptions o;
    o.seed = seed;
    auto r = expect_gradients_match(text, "loss", {"x"}, in, o);
    if (HasFailure()) return;
    RecordProperty(std::string(u.name) + "_" + std::to_string(seed), std::to_string(r.max_err["x"]));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Elementwise, UnaryGrad,
    ::testing::Values(
        UnaryCase{"exp", "exp(x = x)"}, UnaryCase{"log", "log(x = x)", 0.5, 2},
        UnaryCase{"log_eps", "log(x = x, epsilon = fp32(0.25))", 0.5, 2}, UnaryCase{"sqrt", "sqrt(x = x)", 0.5, 2},
        UnaryCase{"rsqrt", "rsqrt(x = x)", 0.5, 2}, UnaryCase{"rsqrt_eps", "rsqrt(x = x, epsilon = fp32(0.5))", 0.5, 2},
        UnaryCase{"inverse", "inverse(x = x)", 0.5, 2},
        UnaryCase{"inverse_eps", "inverse(x = x, epsilon = fp32(0.25))", 0.5, 2},
        UnaryCase{"square", "square(x = x)"}, UnaryCase{"abs", "abs(x = x)", -1, 1, true},
        UnaryCase{"neg", "mul(x = x, y = fp32(-1))"}, UnaryCase{"tanh", "tanh(x = x)", -2, 2},
        UnaryCase{"sigmoid", "sigmoid(x = x)", -3, 3}, UnaryCase{"relu", "relu(x = x)", -1, 1, true},
        UnaryCase{"silu", "silu(x = x)", -3, 3}, UnaryCase{"gelu_exact", "gelu(x = x)", -3, 3},
        UnaryCase{"gelu_exact_named", "gelu(x = x, mode = string(\"EXACT\"))", -3, 3},
        UnaryCase{"gelu_tanh", "gelu(x = x, mode = string(\"TANH_APPROXIMATION\"))", -3, 3},
        UnaryCase{"gelu_sigmoid", "gelu(x = x, mode = string(\"SIGMOID_APPROXIMATION\"))", -3, 3},
        UnaryCase{"softplus", "softplus(x = x)", -3, 3}, UnaryCase{"erf", "erf(x = x)", -2, 2},
        UnaryCase{"sin", "sin(x = x)", -3, 3}, UnaryCase{"cos", "cos(x = x)", -3, 3},
        UnaryCase{"leaky_relu", "leaky_relu(x = x, alpha = fp32(0.2))", -1, 1, true},
        UnaryCase{"elu", "elu(x = x, alpha = fp32(0.7))", -1, 1, true},
        UnaryCase{"identity", "identity(x = x)"}, UnaryCase{"pow_const", "pow(x = x, y = fp32(3))", -1.5, 1.5},
        UnaryCase{"pow_frac", "pow(x = x, y = fp32(1.5))", 0.5, 2},
        UnaryCase{"pow_tensor_exponent", "pow(x = x, y = fp32(-0.5))", 0.5, 2},
        UnaryCase{"x_minus_const", "sub(x = fp32(2), y = x)"}, UnaryCase{"const_over_x", "real_div(x = fp32(2), y = x)", 0.8, 2}),
    [](const ::testing::TestParamInfo<UnaryCase>& i) { return std::string(i.param.name); });

// clip: bounds at +-0.5; inputs kept 0.1 away from them.
TEST(ElementwiseGrad, Clip) {
  Shape s{3, 5};
  Tensor x(DType::FP32, s);
  const double vals[] = {-0.9, -0.6, -0.4, -0.1, 0.1, 0.3, 0.45, 0.6, 0.8, 1.2, -1.3, 0.0, 0.2, -0.3, 0.7};
  for (size_t i = 0; i < 15; ++i) x.set(i, vals[i] == 0.45 ? 0.38 : vals[i]);
  auto r = expect_gradients_match(
      weighted_sum_loss_program(mil_type(s) + " x", "clip(x = x, alpha = fp32(-0.5), beta = fp32(0.5))", s), "loss", {"x"},
      {{"x", x}});
  // Elements outside the bounds get exactly zero.
  const Tensor& g = r.grads.at("x_grad");
  for (size_t i = 0; i < 15; ++i)
    if (std::fabs(x.at(i)) > 0.5) {
      EXPECT_EQ(g.at(i), 0.0) << i;
    }
}

// cast to fp16 and back: the gradient passes through (rounded to fp16).
TEST(ElementwiseGrad, CastRoundTrip) {
  Shape s{2, 3};
  std::string body = stmt(mil_type(s, "fp16"), "h", "cast(x = x, dtype = string(\"fp16\"))") +
                     stmt(mil_type(s, "fp16"), "h2", "mul(x = h, y = h)") +
                     stmt(mil_type(s), "z", "cast(x = h2, dtype = string(\"fp32\"))") + stmt(mil_type(s), "p", "mul(x = z, y = w)") +
                     stmt("fp32", "loss", "reduce_sum(x = p)");
  std::string text = program_text(mil_type(s) + " x, " + mil_type(s) + " w", body, "loss");
  GradCheckOptions o;
  o.tol = 2e-2;   // the forward rounds x and x^2 to fp16 (2^-11 relative), so the FD moves in fp16 steps
  o.step = 5e-2;
  o.compile_tol = 5e-3;   // plans keep fp16 values in fp32 (plan.h): they differ from the reference by fp16 roundings
  auto r = expect_gradients_match(text, "loss", {"x"}, {}, o);
  // The derived function casts the gradient back through fp16.
  bool has_cast = false;
  for (const Op& op : r.derived.function("main_grad")->ops)
    has_cast = has_cast || (op.type == "cast" && op.outputs[0].type.dtype == DType::FP32 &&
                            op.outputs[0].name.find("_grad") != std::string::npos);
  EXPECT_TRUE(has_cast);
}

struct BinaryCase {
  const char* op;
  Shape xs, ys;
  double lo = -1, hi = 1;
};

class BinaryGrad : public ::testing::TestWithParam<BinaryCase> {};

// Both operands differentiated, with NumPy broadcasting either way.
TEST_P(BinaryGrad, MatchesFiniteDifferences) {
  const BinaryCase& b = GetParam();
  Shape zs;
  {
    size_t r = std::max(b.xs.size(), b.ys.size());
    for (size_t i = 0; i < r; ++i) {
      int64_t a = i + b.xs.size() >= r ? b.xs[i + b.xs.size() - r] : 1;
      int64_t c = i + b.ys.size() >= r ? b.ys[i + b.ys.size() - r] : 1;
      zs.push_back(std::max(a, c));
    }
  }
  SCOPED_TRACE(std::string(b.op) + " " + shape_str(b.xs) + " with " + shape_str(b.ys));
  std::string text = weighted_sum_loss_program(mil_type(b.xs) + " x, " + mil_type(b.ys) + " y",
                                           std::string(b.op) + "(x = x, y = y)", zs);
  GradCheckOptions o;
  o.lo = b.lo;
  o.hi = b.hi;
  o.ranges["w"] = {-1, 1};
  TensorMap in;
  if (std::string(b.op) == "maximum" || std::string(b.op) == "minimum") {
    // Ties between x and y are kinks: keep every pair 0.1 apart
    // (x in +-[0.1, 1], y in +-[0.3, 0.45] never meet within the step).
    in["x"] = away_from_zero(b.xs, 5, 0.6, 1.0);
    in["y"] = away_from_zero(b.ys, 6, 0.1, 0.45);
  }
  expect_gradients_match(text, "loss", {"x", "y"}, in, o);
}

INSTANTIATE_TEST_SUITE_P(
    Elementwise, BinaryGrad,
    ::testing::Values(BinaryCase{"add", {2, 3}, {2, 3}}, BinaryCase{"add", {2, 3, 4}, {3, 1}},
                      BinaryCase{"add", {1, 3}, {2, 1}}, BinaryCase{"sub", {4}, {2, 3, 4}},
                      BinaryCase{"sub", {2, 1, 4}, {1, 3, 1}}, BinaryCase{"mul", {2, 3}, {2, 3}},
                      BinaryCase{"mul", {3, 1, 2}, {4, 1}}, BinaryCase{"mul", {1}, {2, 2}},
                      BinaryCase{"real_div", {2, 3}, {2, 3}, 0.5, 2}, BinaryCase{"real_div", {2, 3, 2}, {3, 1}, 0.5, 2},
                      BinaryCase{"maximum", {2, 3}, {2, 3}}, BinaryCase{"maximum", {2, 3}, {3}},
                      BinaryCase{"minimum", {3, 1}, {1, 4}}, BinaryCase{"pow", {2, 3}, {2, 3}, 0.5, 2},
                      BinaryCase{"pow", {2, 3}, {1}, 0.5, 2}),
    [](const ::testing::TestParamInfo<BinaryCase>& i) {
      return std::string(i.param.op) + "_" + std::to_string(i.index);
    });

// select: the gradient follows the branch taken; cond is a fixed input.
TEST(ElementwiseGrad, SelectBroadcast) {
  Shape zs{2, 3, 4};
  std::string params = mil_type({3, 4}, "bool") + " c, " + mil_type(zs) + " a, " + mil_type({4}) + " b";
  std::string text = weighted_sum_loss_program(params, "select(cond = c, a = a, b = b)", zs);
  Tensor c(DType::Bool, {3, 4});
  for (size_t i = 0; i < 12; ++i) c.set(i, (i * 5) % 3 == 0);
  expect_gradients_match(text, "loss", {"a", "b"}, {{"c", c}});
}

// A literal operand on either side: only the variable gets a gradient.
TEST(ElementwiseGrad, LiteralOperands) {
  Shape s{2, 2};
  std::string lit = "tensor<fp32, [2]>([0.5, -2])";
  for (std::string expr : {"mul(x = x, y = " + lit + ")", "mul(x = " + lit + ", y = x)",
                           "sub(x = " + lit + ", y = x)", "real_div(x = x, y = " + lit + ")",
                           std::string("maximum(x = x, y = fp32(0.05))")}) {
    SCOPED_TRACE(expr);
    TensorMap in{{"x", away_from_zero(s, 3, 0.2)}};
    expect_gradients_match(weighted_sum_loss_program(mil_type(s) + " x", expr, s), "loss", {"x"}, in);
  }
}

// fp16 programs get fp16 gradients: compared with the same program in fp32
// (its gradients checked above), to fp16's precision.
TEST(ElementwiseGrad, Fp16ProgramFollowsFp32) {
  Shape s{3, 4};
  auto text = [&](const std::string& dt) {
    std::string body = stmt(mil_type(s, dt), "a", "mul(x = x, y = y)") + stmt(mil_type(s, dt), "t", "tanh(x = a)") +
                       stmt(mil_type(s, dt), "e", "silu(x = t)") + stmt(mil_type(s, dt), "z", "add(x = e, y = x)") +
                       stmt(mil_type(s, dt), "p", "mul(x = z, y = w)") + stmt(dt, "loss", "reduce_sum(x = p)");
    return program_text(mil_type(s, dt) + " x, " + mil_type(s, dt) + " y, " + mil_type(s, dt) + " w", body, "loss");
  };
  TensorMap in32, in16;
  for (auto [k, seed] : {std::pair{"x", 1}, {"y", 2}, {"w", 3}}) {
    in16[k] = random_tensor(DType::FP16, s, uint64_t(seed));
    in32[k] = in16[k].cast(DType::FP32);
  }
  GradOptions go;
  go.loss = "loss";
  go.wrt = {"x", "y"};
  Program p16 = parse_mil(text("fp16"), "<fp16>", "."), p32 = parse_mil(text("fp32"), "<fp32>", ".");
  verify(p16);
  verify(p32);
  TensorMap g16 = run_reference(differentiate(p16, go), "main_grad", in16);
  TensorMap g32 = run_reference(differentiate(p32, go), "main_grad", in32);
  for (const char* k : {"x_grad", "y_grad"}) {
    ASSERT_EQ(g16.at(k).dtype(), DType::FP16);
    double worst = 0;
    for (int64_t i = 0; i < 12; ++i)
      worst = std::max(worst, std::fabs(g16.at(k).at(size_t(i)) - g32.at(k).at(size_t(i))) /
                                  (1 + std::fabs(g32.at(k).at(size_t(i)))));
    // About ten fp16 ops deep, each rounding by 2^-11 relative.
    EXPECT_LT(worst, 1e-2) << k;
  }
}

}  // namespace
}  // namespace milrt::test
