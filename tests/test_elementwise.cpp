// Tests of the elementwise op family (binary, comparison, logical, select,
// unary, cast, activations, softmax), run through MIL text on the reference
// executor. Expected values come from formulas written here in fp64, rounded
// to the output dtype.
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "milrt/dtype.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPi = 3.14159265358979323846;

// A value as the dtype holds it (fp16 via the library's fp16 conversion).
double round_to(DType t, double v) {
  if (t == DType::FP16) return f16_to_f32(f32_to_f16(float(v)));
  if (t == DType::FP32) return float(v);
  return v;
}

// The spacing of dtype t's values just above |v|.
double ulp(DType t, double v) {
  float a = float(std::fabs(round_to(t, v)));
  if (t == DType::FP16) {
    uint16_t h = f32_to_f16(a);
    return double(f16_to_f32(uint16_t(h + 1))) - double(f16_to_f32(h));
  }
  return double(std::nextafter(a, INFINITY)) - double(a);
}

// t has dtype dt, shape s and holds `want` rounded to dt, within `ulps` units
// in the last place for floats (NaN matches NaN, infinities must be equal).
void expect_tensor(const Tensor& t, DType dt, const Shape& s, const std::vector<double>& want, int ulps = 0) {
  ASSERT_EQ(t.dtype(), dt) << dtype_name(t.dtype());
  ASSERT_EQ(t.shape(), s) << shape_str(t.shape());
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    double e = round_to(dt, want[i]);
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << ": got " << got[i];
    } else if (std::isinf(e) || ulps == 0 || !dtype_is_float(dt)) {
      EXPECT_EQ(got[i], e) << "element " << i << " (from " << want[i] << ")";
    } else {
      EXPECT_LE(std::fabs(got[i] - e), ulps * ulp(dt, e)) << "element " << i << ": got " << got[i] << ", want " << e;
    }
  }
}

std::string tensor_type(DType dt, const Shape& s) {
  std::string r = "tensor<" + std::string(dtype_name(dt)) + ", [";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]>";
}

std::vector<double> map_values(const std::vector<double>& xs, double (*f)(double)) {
  std::vector<double> r;
  for (double x : xs) r.push_back(f(x));
  return r;
}

// ---------------------------------------------------------------------------
// Binary arithmetic and comparisons, same shapes, every admitted dtype.

struct BinaryCase {
  const char* op;
  DType dtype;
  double (*f)(double, double);
  bool bool_out = false;
};

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.op << " " << dtype_name(c.dtype); }

double py_floor_div(double a, double b) { return std::floor(a / b); }
double py_mod(double a, double b) { return a - b * std::floor(a / b); }

std::vector<double> binary_x(DType t) {
  return t == DType::Int32 ? std::vector<double>{-7, 7, -7, 7, 0, 9} : std::vector<double>{-7.5, -2, 0, 3, 5.5, 9};
}
std::vector<double> binary_y(DType t) {
  return t == DType::Int32 ? std::vector<double>{2, -2, -2, 2, 5, 3} : std::vector<double>{2, -3, 4, 1.5, -2, 0.5};
}

class Binary : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(Binary, MatchesFormula) {
  const BinaryCase& c = GetParam();
  Tensor x = make(c.dtype, {2, 3}, binary_x(c.dtype)), y = make(c.dtype, {2, 3}, binary_y(c.dtype));
  DType out = c.bool_out ? DType::Bool : c.dtype;
  std::string ty = tensor_type(c.dtype, {2, 3});
  Tensor z = run_op(ty + " x, " + ty + " y", tensor_type(out, {2, 3}), std::string(c.op) + "(x = x, y = y)",
                    {{"x", x}, {"y", y}});
  std::vector<double> want, xv = values(x), yv = values(y);
  for (size_t i = 0; i < xv.size(); ++i) want.push_back(c.f(xv[i], yv[i]));
  // pow goes through a transcendental in fp64; everything else is exact before rounding.
  expect_tensor(z, out, {2, 3}, want, std::string(c.op) == "pow" ? 1 : 0);
}

std::vector<BinaryCase> binary_cases() {
  std::vector<BinaryCase> r;
  for (DType t : {DType::FP32, DType::FP16, DType::Int32}) {
    bool i = t == DType::Int32;
    r.push_back({"add", t, [](double a, double b) { return a + b; }});
    r.push_back({"sub", t, [](double a, double b) { return a - b; }});
    r.push_back({"mul", t, [](double a, double b) { return a * b; }});
    r.push_back({"real_div", t, i ? +[](double a, double b) { return std::trunc(a / b); }
                                  : +[](double a, double b) { return a / b; }});
    // Integer pow with a negative exponent truncates: 7^-2 -> 0.
    r.push_back({"pow", t, i ? +[](double a, double b) { return std::trunc(std::pow(a, b)); }
                             : +[](double a, double b) { return std::pow(a, b); }});
    r.push_back({"maximum", t, [](double a, double b) { return a > b ? a : b; }});
    r.push_back({"minimum", t, [](double a, double b) { return a < b ? a : b; }});
    r.push_back({"floor_div", t, py_floor_div});
    r.push_back({"mod", t, py_mod});
    r.push_back({"equal", t, [](double a, double b) { return double(a == b); }, true});
    r.push_back({"not_equal", t, [](double a, double b) { return double(a != b); }, true});
    r.push_back({"less", t, [](double a, double b) { return double(a < b); }, true});
    r.push_back({"less_equal", t, [](double a, double b) { return double(a <= b); }, true});
    r.push_back({"greater", t, [](double a, double b) { return double(a > b); }, true});
    r.push_back({"greater_equal", t, [](double a, double b) { return double(a >= b); }, true});
  }
  return r;
}

INSTANTIATE_TEST_SUITE_P(Ops, Binary, ::testing::ValuesIn(binary_cases()),
                         [](const ::testing::TestParamInfo<BinaryCase>& i) {
                           return std::string(i.param.op) + "_" + std::string(dtype_name(i.param.dtype));
                         });

TEST(Elementwise, BroadcastsRank3WithRank2) {
  // [2, 1, 3] + [4, 1] -> [2, 4, 3]: z[a, b, c] = x[a, 0, c] + y[b, 0].
  std::vector<double> xv = {1, 2, 3, 4, 5, 6}, yv = {10, 20, 30, 40};
  Tensor z = run_op("tensor<fp32, [2, 1, 3]> x, tensor<fp32, [4, 1]> y", "tensor<fp32, [2, 4, 3]>",
                    "add(x = x, y = y)", {{"x", make(DType::FP32, {2, 1, 3}, xv)}, {"y", make(DType::FP32, {4, 1}, yv)}});
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 3; ++c) want.push_back(xv[size_t(a * 3 + c)] + yv[size_t(b)]);
  expect_tensor(z, DType::FP32, {2, 4, 3}, want);
}

TEST(Elementwise, ScalarWithTensor) {
  Tensor x = make(DType::FP32, {3}, {1, 2, 4});
  expect_tensor(run_op("tensor<fp32, [3]> x", "tensor<fp32, [3]>", "sub(x = fp32(10), y = x)", {{"x", x}}),
                DType::FP32, {3}, {9, 8, 6});
  expect_tensor(run_op("tensor<fp32, [3]> x", "tensor<fp32, [3]>", "real_div(x = x, y = fp32(4))", {{"x", x}}),
                DType::FP32, {3}, {0.25, 0.5, 1});
  expect_tensor(run_op("tensor<fp32, [3]> x", "tensor<bool, [3]>", "greater(x = x, y = fp32(1.5))", {{"x", x}}),
                DType::Bool, {3}, {0, 1, 1});
  // Two scalars give a scalar.
  expect_tensor(run_op("tensor<fp32, [3]> x", "fp32", "mul(x = fp32(1.5), y = fp32(-2))", {{"x", x}}), DType::FP32,
                {}, {-3});
}

TEST(Elementwise, Fp16ResultsRoundToNearestEven) {
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: even mantissa (1) wins;
  // 1 + 3*2^-11 ties between mantissas 1 and 2: 2 wins.
  Tensor x = make(DType::FP16, {3}, {1, 1, 0.1});
  Tensor y = make(DType::FP16, {3}, {std::ldexp(1.0, -11), 3 * std::ldexp(1.0, -11), 0.1});
  Tensor z = run_op("tensor<fp16, [3]> x, tensor<fp16, [3]> y", "tensor<fp16, [3]>", "add(x = x, y = y)",
                    {{"x", x}, {"y", y}});
  std::vector<double> got = values(z);
  EXPECT_EQ(got[0], 1.0);
  EXPECT_EQ(got[1], 1.0 + std::ldexp(1.0, -9));
  EXPECT_EQ(got[2], round_to(DType::FP16, 2 * round_to(DType::FP16, 0.1)));
  // A product that needs rounding: 0.1h * 0.1h computed exactly, then rounded once.
  Tensor p = run_op("tensor<fp16, [3]> x, tensor<fp16, [3]> y", "tensor<fp16, [3]>", "mul(x = y, y = y)",
                    {{"x", x}, {"y", y}});
  double h = round_to(DType::FP16, 0.1);
  EXPECT_EQ(values(p)[2], round_to(DType::FP16, h * h));
}

TEST(Elementwise, IntegerFloorDivAndModWithNegativeOperands) {
  Tensor x = make(DType::Int32, {8}, {-7, 7, -7, 7, 6, -1, 5, -5});
  Tensor y = make(DType::Int32, {8}, {2, -2, -2, 2, 3, 4, 0, 0});
  std::string p = "tensor<int32, [8]> x, tensor<int32, [8]> y";
  // Floors toward -inf; the remainder takes the divisor's sign; integer
  // division by zero gives 0 (NumPy's behaviour, which coremltools folds with).
  expect_tensor(run_op(p, "tensor<int32, [8]>", "floor_div(x = x, y = y)", {{"x", x}, {"y", y}}), DType::Int32, {8},
                {-4, -4, 3, 3, 2, -1, 0, 0});
  expect_tensor(run_op(p, "tensor<int32, [8]>", "mod(x = x, y = y)", {{"x", x}, {"y", y}}), DType::Int32, {8},
                {1, -1, -1, 1, 0, 3, 0, 0});
}

TEST(Elementwise, FloatModAndFloorDivFollowNumPy) {
  Tensor x = make(DType::FP32, {4}, {-7.5, 7.5, 1, 1});
  Tensor y = make(DType::FP32, {4}, {2, -2, 0.1f, 0});
  std::string p = "tensor<fp32, [4]> x, tensor<fp32, [4]> y";
  // 1 / 0.1f is just below 10 (0.1f > 0.1), so it floors to 9.
  expect_tensor(run_op(p, "tensor<fp32, [4]>", "floor_div(x = x, y = y)", {{"x", x}, {"y", y}}), DType::FP32, {4},
                {-4, -4, 9, kInf});
  double r = 1.0 - 9.0 * double(0.1f);
  expect_tensor(run_op(p, "tensor<fp32, [4]>", "mod(x = x, y = y)", {{"x", x}, {"y", y}}), DType::FP32, {4},
                {0.5, -0.5, r, kNaN});
}

TEST(Elementwise, IntegerArithmeticSaturatesAndDivisionTruncates) {
  Tensor x = make(DType::Int32, {3}, {2147483647, -2147483647, -7});
  Tensor y = make(DType::Int32, {3}, {1, -2, 2});
  std::string p = "tensor<int32, [3]> x, tensor<int32, [3]> y";
  expect_tensor(run_op(p, "tensor<int32, [3]>", "add(x = x, y = y)", {{"x", x}, {"y", y}}), DType::Int32, {3},
                {2147483647, -2147483648.0, -5});
  expect_tensor(run_op(p, "tensor<int32, [3]>", "real_div(x = x, y = y)", {{"x", x}, {"y", y}}), DType::Int32, {3},
                {2147483647, 1073741823, -3});
}

TEST(Elementwise, MaximumMinimumPropagateNaN) {
  Tensor x = make(DType::FP32, {2}, {kNaN, 1});
  Tensor y = make(DType::FP32, {2}, {1, kNaN});
  std::string p = "tensor<fp32, [2]> x, tensor<fp32, [2]> y";
  expect_tensor(run_op(p, "tensor<fp32, [2]>", "maximum(x = x, y = y)", {{"x", x}, {"y", y}}), DType::FP32, {2},
                {kNaN, kNaN});
  expect_tensor(run_op(p, "tensor<fp32, [2]>", "minimum(x = x, y = y)", {{"x", x}, {"y", y}}), DType::FP32, {2},
                {kNaN, kNaN});
}

// ---------------------------------------------------------------------------
// Logical ops and select.

TEST(Elementwise, LogicalOpsBroadcastTruthTables) {
  Tensor x = make(DType::Bool, {2, 1}, {0, 1}), y = make(DType::Bool, {2}, {0, 1});
  std::string p = "tensor<bool, [2, 1]> x, tensor<bool, [2]> y";
  TensorMap in = {{"x", x}, {"y", y}};
  expect_tensor(run_op(p, "tensor<bool, [2, 2]>", "logical_and(x = x, y = y)", in), DType::Bool, {2, 2}, {0, 0, 0, 1});
  expect_tensor(run_op(p, "tensor<bool, [2, 2]>", "logical_or(x = x, y = y)", in), DType::Bool, {2, 2}, {0, 1, 1, 1});
  expect_tensor(run_op(p, "tensor<bool, [2, 2]>", "logical_xor(x = x, y = y)", in), DType::Bool, {2, 2}, {0, 1, 1, 0});
  expect_tensor(run_op(p, "tensor<bool, [2]>", "logical_not(x = y)", in), DType::Bool, {2}, {1, 0});
}

TEST(Elementwise, SelectBroadcastsAllThreeOperands) {
  // cond [2, 1, 1], a [3, 1], b [4] -> [2, 3, 4].
  Tensor cond = make(DType::Bool, {2, 1, 1}, {1, 0});
  Tensor a = make(DType::FP32, {3, 1}, {1, 2, 3});
  Tensor b = make(DType::FP32, {4}, {-1, -2, -3, -4});
  Tensor z = run_op("tensor<bool, [2, 1, 1]> c, tensor<fp32, [3, 1]> a, tensor<fp32, [4]> b", "tensor<fp32, [2, 3, 4]>",
                    "select(cond = c, a = a, b = b)", {{"c", cond}, {"a", a}, {"b", b}});
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(i == 0 ? j + 1.0 : -(k + 1.0));
  expect_tensor(z, DType::FP32, {2, 3, 4}, want);
}

TEST(Elementwise, SelectWithCondLargerThanValues) {
  Tensor cond = make(DType::Bool, {2, 2}, {1, 0, 0, 1});
  Tensor z = run_op("tensor<bool, [2, 2]> c", "tensor<int32, [2, 2]>", "select(cond = c, a = int32(7), b = int32(-1))",
                    {{"c", cond}});
  expect_tensor(z, DType::Int32, {2, 2}, {7, -1, -1, 7});
}

// ---------------------------------------------------------------------------
// Unary math and parameterless activations, fp32 and fp16.

struct UnaryCase {
  const char* op;
  double (*f)(double);
  std::vector<double> xs;
  int ulps;  // 0 where the result is exact before rounding
};

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.op; }

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<UnaryCase> unary_cases() {
  return {
      {"abs", [](double x) { return std::fabs(x); }, {-2.5, 0, 3.25}, 0},
      {"exp", [](double x) { return std::exp(x); }, {-1, 0, 0.5, 2}, 1},
      {"exp2", [](double x) { return std::pow(2.0, x); }, {-1.5, 0, 3}, 1},
      {"sqrt", [](double x) { return std::sqrt(x); }, {0, 0.25, 2, 9}, 0},
      {"sin", [](double x) { return std::sin(x); }, {-1, 0, 0.5, 1.2}, 1},
      {"cos", [](double x) { return std::cos(x); }, {-1, 0, 0.5, 1.2}, 1},
      {"tan", [](double x) { return std::tan(x); }, {-1, 0, 0.5, 1.2}, 1},
      {"asin", [](double x) { return std::asin(x); }, {-0.9, 0, 0.5, 1}, 1},
      {"acos", [](double x) { return std::acos(x); }, {-0.9, 0, 0.5, 1}, 1},
      {"atan", [](double x) { return std::atan(x); }, {-3, 0, 0.5, 10}, 1},
      {"atanh", [](double x) { return 0.5 * std::log((1 + x) / (1 - x)); }, {-0.5, 0, 0.9}, 1},
      {"sinh", [](double x) { return (std::exp(x) - std::exp(-x)) / 2; }, {-2, 0, 0.5, 3}, 1},
      {"cosh", [](double x) { return (std::exp(x) + std::exp(-x)) / 2; }, {-2, 0, 0.5, 3}, 1},
      {"tanh", [](double x) { return std::tanh(x); }, {-2, 0, 0.5, 3}, 1},
      {"erf", [](double x) { return std::erf(x); }, {-1.5, 0, 0.3, 2}, 1},
      {"floor", [](double x) { return std::floor(x); }, {-1.5, -0.2, 0, 0.7, 2}, 0},
      {"ceil", [](double x) { return std::ceil(x); }, {-1.5, -0.2, 0, 0.7, 2}, 0},
      // Ties to even.
      {"round", [](double x) { return x - std::floor(x) == 0.5 ? 2 * std::round(x / 2) : std::round(x); },
       {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.6, -2.6}, 0},
      {"sign", [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }, {-3, 0, 0.1}, 0},
      {"square", [](double x) { return x * x; }, {-3, 0.5, 2}, 0},
      {"relu", [](double x) { return x > 0 ? x : 0; }, {-1, 0, 2}, 0},
      {"relu6", [](double x) { return x < 0 ? 0 : x > 6 ? 6 : x; }, {-1, 3, 7}, 0},
      {"sigmoid", sigmoid, {-5, 0, 1, 20}, 1},
      {"silu", [](double x) { return x * sigmoid(x); }, {-2, 0, 1.5}, 1},
      {"softplus", [](double x) { return std::log1p(std::exp(x)); }, {-30, -1, 0, 2, 50}, 1},
      {"softsign", [](double x) { return x / (1 + std::fabs(x)); }, {-3, 0, 1}, 1},
  };
}

class Unary : public ::testing::TestWithParam<std::tuple<UnaryCase, DType>> {};

TEST_P(Unary, MatchesFormula) {
  const auto& [c, dt] = GetParam();
  Shape s = {int64_t(c.xs.size())};
  Tensor x = make(dt, s, c.xs);
  Tensor z = run_op(tensor_type(dt, s) + " x", tensor_type(dt, s), std::string(c.op) + "(x = x)", {{"x", x}});
  expect_tensor(z, dt, s, map_values(values(x), c.f), c.ulps);
}

INSTANTIATE_TEST_SUITE_P(Ops, Unary,
                         ::testing::Combine(::testing::ValuesIn(unary_cases()),
                                            ::testing::Values(DType::FP32, DType::FP16)),
                         [](const ::testing::TestParamInfo<std::tuple<UnaryCase, DType>>& i) {
                           return std::string(std::get<0>(i.param).op) + "_" +
                                  std::string(dtype_name(std::get<1>(i.param)));
                         });

TEST(Elementwise, IntegerUnaryOps) {
  Tensor x = make(DType::Int32, {4}, {-3, 0, 2, 5});
  std::string p = "tensor<int32, [4]> x", ty = "tensor<int32, [4]>";
  expect_tensor(run_op(p, ty, "abs(x = x)", {{"x", x}}), DType::Int32, {4}, {3, 0, 2, 5});
  expect_tensor(run_op(p, ty, "sign(x = x)", {{"x", x}}), DType::Int32, {4}, {-1, 0, 1, 1});
  expect_tensor(run_op(p, ty, "square(x = x)", {{"x", x}}), DType::Int32, {4}, {9, 0, 4, 25});
  // 2^-3 = 0.125 truncates to 0.
  expect_tensor(run_op(p, ty, "exp2(x = x)", {{"x", x}}), DType::Int32, {4}, {0, 1, 4, 32});
  expect_tensor(run_op(p, ty, "threshold(x = x, alpha = int32(1))", {{"x", x}}), DType::Int32, {4}, {1, 1, 2, 5});
}

// ---------------------------------------------------------------------------
// Unary ops with an epsilon.

TEST(Elementwise, LogEpsilonDefaultDependsOnDtype) {
  // The default 1e-45 is materialized in x's dtype: the smallest fp32
  // subnormal in fp32, zero in fp16.
  Tensor x32 = make(DType::FP32, {3}, {0, 1, 2.5});
  double eps32 = round_to(DType::FP32, 1e-45);
  ASSERT_GT(eps32, 0);
  expect_tensor(run_op("tensor<fp32, [3]> x", "tensor<fp32, [3]>", "log(x = x)", {{"x", x32}}), DType::FP32, {3},
                {std::log(eps32), std::log(1 + eps32), std::log(2.5)}, 1);
  Tensor x16 = make(DType::FP16, {2}, {0, 2.5});
  expect_tensor(run_op("tensor<fp16, [2]> x", "tensor<fp16, [2]>", "log(x = x)", {{"x", x16}}), DType::FP16, {2},
                {-kInf, std::log(2.5)}, 1);
  // An explicit epsilon, of another float dtype than x (iOS17 allows it).
  expect_tensor(run_op("tensor<fp32, [3]> x", "tensor<fp32, [3]>", "log(x = x, epsilon = fp16(0.5))", {{"x", x32}}),
                DType::FP32, {3}, {std::log(0.5), std::log(1.5), std::log(3.0)}, 1);
}

TEST(Elementwise, RsqrtAndInverseEpsilon) {
  Tensor x = make(DType::FP32, {3}, {0.25, 1, 4});
  std::string p = "tensor<fp32, [3]> x", ty = "tensor<fp32, [3]>";
  std::vector<double> want_rsqrt, want_inv, want_inv_eps;
  for (double v : values(x)) {
    want_rsqrt.push_back(1 / std::sqrt(v + round_to(DType::FP32, 1e-12)));
    want_inv.push_back(1 / (v + round_to(DType::FP32, 1e-4)));
    want_inv_eps.push_back(1 / (v + 1));
  }
  expect_tensor(run_op(p, ty, "rsqrt(x = x)", {{"x", x}}), DType::FP32, {3}, want_rsqrt, 1);
  expect_tensor(run_op(p, ty, "inverse(x = x)", {{"x", x}}), DType::FP32, {3}, want_inv, 1);
  expect_tensor(run_op(p, ty, "inverse(x = x, epsilon = fp32(1))", {{"x", x}}), DType::FP32, {3}, want_inv_eps, 1);
  expect_tensor(run_op(p, ty, "rsqrt(x = x, epsilon = fp32(5))", {{"x", x}}), DType::FP32, {3},
                {1 / std::sqrt(5.25), 1 / std::sqrt(6.0), 1 / 3.0}, 1);
  // fp16: the inverse default 1e-4 is rounded to fp16 first.
  Tensor h = make(DType::FP16, {1}, {1});
  expect_tensor(run_op("tensor<fp16, [1]> x", "tensor<fp16, [1]>", "inverse(x = x)", {{"x", h}}), DType::FP16, {1},
                {1 / (1 + round_to(DType::FP16, 1e-4))}, 1);
}

TEST(Elementwise, ClipAndThreshold) {
  Tensor x = make(DType::FP32, {5}, {-2, 0.5, 3, kNaN, 1});
  std::string p = "tensor<fp32, [5]> x", ty = "tensor<fp32, [5]>";
  expect_tensor(run_op(p, ty, "clip(x = x, alpha = fp32(0), beta = fp32(1))", {{"x", x}}), DType::FP32, {5},
                {0, 0.5, 1, kNaN, 1});
  expect_tensor(run_op(p, ty, "threshold(x = x, alpha = fp32(0.75))", {{"x", x}}), DType::FP32, {5},
                {0.75, 0.75, 3, kNaN, 1});
}

// ---------------------------------------------------------------------------
// cast.

TEST(Elementwise, CastFloatToIntTruncatesAndSaturates) {
  Tensor x = make(DType::FP32, {6}, {-2.7, 2.7, 3e10, -3e10, kNaN, -0.5});
  std::string p = "tensor<fp32, [6]> x";
  expect_tensor(run_op(p, "tensor<int32, [6]>", "cast(x = x, dtype = string(\"int32\"))", {{"x", x}}), DType::Int32,
                {6}, {-2, 2, 2147483647, -2147483648.0, 0, 0});
  expect_tensor(run_op(p, "tensor<uint8, [6]>", "cast(x = x, dtype = string(\"uint8\"))", {{"x", x}}), DType::UInt8,
                {6}, {0, 2, 255, 0, 0, 0});
  expect_tensor(run_op(p, "tensor<int8, [6]>", "cast(x = x, dtype = string(\"int8\"))", {{"x", x}}), DType::Int8, {6},
                {-2, 2, 127, -128, 0, 0});
  expect_tensor(run_op(p, "tensor<int16, [6]>", "cast(x = x, dtype = string(\"int16\"))", {{"x", x}}), DType::Int16,
                {6}, {-2, 2, 32767, -32768, 0, 0});
  expect_tensor(run_op(p, "tensor<uint16, [6]>", "cast(x = x, dtype = string(\"uint16\"))", {{"x", x}}),
                DType::UInt16, {6}, {0, 2, 65535, 0, 0, 0});
}

TEST(Elementwise, CastToAndFromBool) {
  Tensor x = make(DType::FP32, {5}, {0, -0.0, 0.5, -3, kNaN});
  // Non-zero (NaN included, as NumPy's astype(bool)) is true.
  expect_tensor(run_op("tensor<fp32, [5]> x", "tensor<bool, [5]>", "cast(x = x, dtype = string(\"bool\"))", {{"x", x}}),
                DType::Bool, {5}, {0, 0, 1, 1, 1});
  Tensor b = make(DType::Bool, {2}, {1, 0});
  expect_tensor(run_op("tensor<bool, [2]> x", "tensor<fp16, [2]>", "cast(x = x, dtype = string(\"fp16\"))", {{"x", b}}),
                DType::FP16, {2}, {1, 0});
  Tensor i = make(DType::Int32, {2}, {-4, 9});
  expect_tensor(run_op("tensor<int32, [2]> x", "tensor<bool, [2]>", "cast(x = x, dtype = string(\"bool\"))", {{"x", i}}),
                DType::Bool, {2}, {1, 1});
}

TEST(Elementwise, CastToFp16Rounds) {
  Tensor x = make(DType::FP32, {4}, {1.0 / 3, 65519, 65520, -1e-8});
  // 65519 rounds down to the largest fp16 (65504), 65520 rounds up to inf.
  expect_tensor(run_op("tensor<fp32, [4]> x", "tensor<fp16, [4]>", "cast(x = x, dtype = string(\"fp16\"))", {{"x", x}}),
                DType::FP16, {4}, {round_to(DType::FP16, float(1.0 / 3)), 65504, kInf, -0.0});
  Tensor h = make(DType::FP16, {1}, {0.1});
  expect_tensor(run_op("tensor<fp16, [1]> x", "tensor<fp32, [1]>", "cast(x = x, dtype = string(\"fp32\"))", {{"x", h}}),
                DType::FP32, {1}, {round_to(DType::FP16, 0.1)});
}

// ---------------------------------------------------------------------------
// Activations with parameters.

TEST(Elementwise, LeakyReluTakesAnFp16AlphaWithFp32X) {
  Tensor x = make(DType::FP32, {3}, {-2, 0, 3});
  double a = round_to(DType::FP16, 0.1);
  expect_tensor(run_op("tensor<fp32, [3]> x", "tensor<fp32, [3]>", "leaky_relu(x = x, alpha = fp16(0.1))", {{"x", x}}),
                DType::FP32, {3}, {-2 * a, 0, 3});
}

TEST(Elementwise, Elu) {
  Tensor x = make(DType::FP32, {3}, {-2, 0, 3});
  expect_tensor(run_op("tensor<fp32, [3]> x", "tensor<fp32, [3]>", "elu(x = x, alpha = fp32(1.5))", {{"x", x}}),
                DType::FP32, {3}, {1.5 * (std::exp(-2.0) - 1), 0, 3}, 1);
}

TEST(Elementwise, SigmoidHard) {
  Tensor x = make(DType::FP32, {5}, {-5, -1, 0, 1, 5});
  std::vector<double> want;
  for (double v : values(x)) want.push_back(std::min(std::max(0.2 * v + 0.5, 0.0), 1.0));
  expect_tensor(run_op("tensor<fp32, [5]> x", "tensor<fp32, [5]>", "sigmoid_hard(x = x, alpha = fp32(0.2), beta = fp32(0.5))",
                       {{"x", x}}),
                DType::FP32, {5}, want, 1);
}

TEST(Elementwise, ScaledTanhAndLinearActivation) {
  Tensor x = make(DType::FP32, {3}, {-2, 0, 1.5});
  std::string p = "tensor<fp32, [3]> x", ty = "tensor<fp32, [3]>";
  expect_tensor(run_op(p, ty, "scaled_tanh(x = x, alpha = fp32(2), beta = fp32(0.5))", {{"x", x}}), DType::FP32, {3},
                {2 * std::tanh(-1.0), 0, 2 * std::tanh(0.75)}, 1);
  expect_tensor(run_op(p, ty, "linear_activation(x = x, alpha = fp32(2), beta = fp32(-1))", {{"x", x}}), DType::FP32,
                {3}, {-5, -1, 2});
}

TEST(Elementwise, ClampedReluAndThresholdedRelu) {
  Tensor x = make(DType::FP32, {6}, {-10, -1, 0, 1, 3, 10});
  std::string p = "tensor<fp32, [6]> x", ty = "tensor<fp32, [6]>";
  double a = round_to(DType::FP32, 0.1);
  expect_tensor(run_op(p, ty, "clamped_relu(x = x, alpha = fp32(0.1), beta = fp32(6))", {{"x", x}}), DType::FP32, {6},
                {-10 * a, -a, 0, 1, 3, 6});
  expect_tensor(run_op(p, ty, "thresholded_relu(x = x, alpha = fp32(1))", {{"x", x}}), DType::FP32, {6},
                {0, 0, 0, 1, 3, 10});
}

TEST(Elementwise, PreluScalesNegativesPerChannel) {
  // x [1, 2, 1, 2], alpha per channel (dim 1).
  Tensor x = make(DType::FP32, {1, 2, 1, 2}, {-1, 2, -3, 4});
  Tensor z = run_op("tensor<fp32, [1, 2, 1, 2]> x", "tensor<fp32, [1, 2, 1, 2]>",
                    "prelu(x = x, alpha = tensor<fp32, [2]>([0.5, 0.25]))", {{"x", x}});
  expect_tensor(z, DType::FP32, {1, 2, 1, 2}, {-0.5, 2, -0.75, 4});
  // Rank 3 needs one shared slope.
  Tensor x3 = make(DType::FP32, {1, 2, 2}, {-1, 2, -3, 4});
  expect_tensor(run_op("tensor<fp32, [1, 2, 2]> x", "tensor<fp32, [1, 2, 2]>",
                       "prelu(x = x, alpha = tensor<fp32, [2]>([0.5, 0.5]))", {{"x", x3}}),
                DType::FP32, {1, 2, 2}, {-0.5, 2, -1.5, 4});
  expect_error("tensor<fp32, [1, 2, 2]> x", "tensor<fp32, [1, 2, 2]>",
               "prelu(x = x, alpha = tensor<fp32, [2]>([0.5, 0.25]))", {{"x", x3}}, "prelu", "alpha");
}

TEST(Elementwise, SoftplusParametricPerChannel) {
  Tensor x = make(DType::FP32, {1, 2, 2}, {-1, 0, 2, 40});
  Tensor z = run_op("tensor<fp32, [1, 2, 2]> x", "tensor<fp32, [1, 2, 2]>",
                    "softplus_parametric(x = x, alpha = tensor<fp32, [2]>([1, 2]), beta = tensor<fp32, [2]>([1, 0.5]))",
                    {{"x", x}});
  auto f = [](double a, double b, double v) { return a * std::log1p(std::exp(b * v)); };
  expect_tensor(z, DType::FP32, {1, 2, 2}, {f(1, 1, -1), f(1, 1, 0), f(2, 0.5, 2), f(2, 0.5, 40)}, 1);
}

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * std::pow(x, 3)))); }
double gelu_sigmoid(double x) { return x / (1 + std::exp(-1.702 * x)); }

TEST(Elementwise, GeluModes) {
  std::vector<double> xs = {-3, -1, -0.5, 0, 0.5, 1, 2.5};
  for (DType dt : {DType::FP32, DType::FP16}) {
    Tensor x = make(dt, {7}, xs);
    std::string p = tensor_type(dt, {7}) + " x";
    std::vector<double> xv = values(x);
    expect_tensor(run_op(p, tensor_type(dt, {7}), "gelu(x = x)", {{"x", x}}), dt, {7}, map_values(xv, gelu_exact), 1);
    expect_tensor(run_op(p, tensor_type(dt, {7}), "gelu(x = x, mode = string(\"EXACT\"))", {{"x", x}}), dt, {7},
                  map_values(xv, gelu_exact), 1);
    expect_tensor(run_op(p, tensor_type(dt, {7}), "gelu(x = x, mode = string(\"TANH_APPROXIMATION\"))", {{"x", x}}),
                  dt, {7}, map_values(xv, gelu_tanh), 1);
    expect_tensor(run_op(p, tensor_type(dt, {7}), "gelu(x = x, mode = string(\"SIGMOID_APPROXIMATION\"))", {{"x", x}}),
                  dt, {7}, map_values(xv, gelu_sigmoid), 1);
  }
  // The modes really differ at x = 1.
  EXPECT_NE(round_to(DType::FP32, gelu_exact(1)), round_to(DType::FP32, gelu_tanh(1)));
  EXPECT_NE(round_to(DType::FP32, gelu_exact(1)), round_to(DType::FP32, gelu_sigmoid(1)));
}

// ---------------------------------------------------------------------------
// softmax.

// Softmax of xs along `axis` of `shape`, written out for ranks up to 3.
std::vector<double> softmax_ref(const std::vector<double>& xs, const Shape& shape, int axis) {
  Shape s = shape;
  while (s.size() < 3) {  // pad to rank 3 with leading 1s
    s.insert(s.begin(), 1);
    ++axis;
  }
  std::vector<double> out(xs.size());
  auto at = [&](int64_t i, int64_t j, int64_t k) { return size_t((i * s[1] + j) * s[2] + k); };
  for (int64_t i = 0; i < s[0]; ++i)
    for (int64_t j = 0; j < s[1]; ++j)
      for (int64_t k = 0; k < s[2]; ++k) {
        double sum = 0;
        for (int64_t t = 0; t < s[size_t(axis)]; ++t) {
          int64_t ii = axis == 0 ? t : i, jj = axis == 1 ? t : j, kk = axis == 2 ? t : k;
          sum += std::exp(xs[at(ii, jj, kk)] - xs[at(i, j, k)]);
        }
        out[at(i, j, k)] = 1 / sum;
      }
  return out;
}

TEST(Elementwise, SoftmaxDefaultAxisIsLast) {
  std::vector<double> xs = {1, 2, 3, -1, 0, 1};
  Tensor z = run_op("tensor<fp32, [2, 3]> x", "tensor<fp32, [2, 3]>", "softmax(x = x)",
                    {{"x", make(DType::FP32, {2, 3}, xs)}});
  expect_tensor(z, DType::FP32, {2, 3}, softmax_ref(xs, {2, 3}, 1), 1);
}

TEST(Elementwise, SoftmaxExplicitAndNegativeAxes) {
  std::vector<double> xs = {1, 2, 3, 4, 5, 6, -1, 0, 0.5, 7, 2, -3};
  Tensor x = make(DType::FP32, {2, 3, 2}, xs);
  std::string p = "tensor<fp32, [2, 3, 2]> x", ty = "tensor<fp32, [2, 3, 2]>";
  expect_tensor(run_op(p, ty, "softmax(x = x, axis = int32(0))", {{"x", x}}), DType::FP32, {2, 3, 2},
                softmax_ref(xs, {2, 3, 2}, 0), 1);
  expect_tensor(run_op(p, ty, "softmax(x = x, axis = int32(-2))", {{"x", x}}), DType::FP32, {2, 3, 2},
                softmax_ref(xs, {2, 3, 2}, 1), 1);
  expect_tensor(run_op(p, ty, "softmax(x = x, axis = int32(-1))", {{"x", x}}), DType::FP32, {2, 3, 2},
                softmax_ref(xs, {2, 3, 2}, 2), 1);
}

TEST(Elementwise, SoftmaxIsStableForLargeInputs) {
  // exp(1000) overflows; subtracting the max keeps the result finite.
  std::vector<double> xs = {1000, 1001, 1002};
  Tensor z = run_op("tensor<fp32, [3]> x", "tensor<fp32, [3]>", "softmax(x = x)", {{"x", make(DType::FP32, {3}, xs)}});
  expect_tensor(z, DType::FP32, {3}, softmax_ref({0, 1, 2}, {3}, 0), 1);
}

TEST(Elementwise, SoftmaxFp16) {
  std::vector<double> xs = {0.5, -1, 2, 3};
  Tensor x = make(DType::FP16, {4}, xs);
  Tensor z = run_op("tensor<fp16, [4]> x", "tensor<fp16, [4]>", "softmax(x = x, axis = int32(0))", {{"x", x}});
  expect_tensor(z, DType::FP16, {4}, softmax_ref(values(x), {4}, 0), 1);
}

// ---------------------------------------------------------------------------
// The program(1.0) dialect (tensor-typed scalar literals) and unknown dims.

TEST(Elementwise, RunsInTheIos15Dialect) {
  std::string text = R"(program(1.0)
{
  func main<ios15>(tensor<fp16, [1, 4]> x) {
    tensor<fp16, [1, 4]> c = clip(alpha = tensor<fp16, []>(0), beta = tensor<fp16, []>(6), x = x)[name = tensor<string, []>("c")];
    tensor<fp32, [1, 4]> z = cast(dtype = tensor<string, []>("fp32"), x = c)[name = tensor<string, []>("z")];
  } -> (z);
}
)";
  Tensor x = make(DType::FP16, {1, 4}, {-1, 0.1, 5, 9});
  expect_tensor(run_program(text, {{"x", x}}).at("z"), DType::FP32, {1, 4}, {0, round_to(DType::FP16, 0.1), 5, 6});
}

TEST(Elementwise, UnknownDimsBroadcastAtRunTime) {
  std::string p = "tensor<fp32, [?, 1]> x, tensor<fp32, [?]> y";
  Tensor z = run_op(p, "tensor<fp32, [?, ?]>", "mul(x = x, y = y)",
                    {{"x", make(DType::FP32, {2, 1}, {1, 2})}, {"y", make(DType::FP32, {3}, {1, 10, 100})}});
  expect_tensor(z, DType::FP32, {2, 3}, {1, 10, 100, 2, 20, 200});
  // Sizes that turn out not to broadcast fail in the reference, naming the op.
  expect_error("tensor<fp32, [?]> x, tensor<fp32, [?]> y", "tensor<fp32, [?]>", "mul(x = x, y = y)",
               {{"x", make(DType::FP32, {2}, {1, 2})}, {"y", make(DType::FP32, {3}, {1, 2, 3})}}, "mul", "broadcast");
}

// ---------------------------------------------------------------------------
// Errors: each names the op.

TEST(ElementwiseErrors, MismatchedDtypes) {
  expect_error("tensor<fp32, [2]> x, tensor<fp16, [2]> y", "tensor<fp32, [2]>", "add(x = x, y = y)",
               {{"x", make(DType::FP32, {2}, {1, 2})}, {"y", make(DType::FP16, {2}, {1, 2})}}, "add", "same dtype");
  expect_error("tensor<bool, [2]> c, tensor<fp32, [2]> x", "tensor<fp32, [2]>", "select(cond = c, a = x, b = int32(1))",
               {{"c", make(DType::Bool, {2}, {1, 0})}, {"x", make(DType::FP32, {2}, {1, 2})}}, "select", "same dtype");
  // clip's bounds share x's dtype in every opset.
  expect_error("tensor<fp32, [2]> x", "tensor<fp32, [2]>", "clip(x = x, alpha = fp16(0), beta = fp32(1))",
               {{"x", make(DType::FP32, {2}, {1, 2})}}, "clip", "alpha");
}

TEST(ElementwiseErrors, DtypesOutsideTheOpsDomain) {
  TensorMap i = {{"x", make(DType::Int32, {2}, {1, 2})}};
  expect_error("tensor<int32, [2]> x", "tensor<int32, [2]>", "relu(x = x)", i, "relu", "fp16, fp32");
  expect_error("tensor<int32, [2]> x", "tensor<int32, [2]>", "sqrt(x = x)", i, "sqrt", "fp16, fp32");
  expect_error("tensor<int32, [2]> x", "tensor<bool, [2]>", "logical_and(x = x, y = x)", i, "logical_and", "bool");
  expect_error("tensor<int32, [2]> x", "tensor<int32, [2]>", "logical_not(x = x)", i, "logical_not", "bool");
  expect_error("tensor<int32, [2]> x", "tensor<int32, [2]>", "select(cond = x, a = x, b = x)", i, "select", "cond");
  TensorMap b = {{"x", make(DType::Bool, {2}, {1, 0})}};
  expect_error("tensor<bool, [2]> x", "tensor<bool, [2]>", "add(x = x, y = x)", b, "add", "int32");
}

TEST(ElementwiseErrors, ShapesThatDoNotBroadcast) {
  expect_error("tensor<fp32, [2, 3]> x, tensor<fp32, [4]> y", "tensor<fp32, [2, 3]>", "add(x = x, y = y)",
               {{"x", make(DType::FP32, {2, 3}, {1, 2, 3, 4, 5, 6})}, {"y", make(DType::FP32, {4}, {1, 2, 3, 4})}}, "add",
               "broadcast");
  expect_error("tensor<bool, [3]> c, tensor<fp32, [2]> x", "tensor<fp32, [2]>", "select(cond = c, a = x, b = x)",
               {{"c", make(DType::Bool, {3}, {1, 0, 1})}, {"x", make(DType::FP32, {2}, {1, 2})}}, "select", "broadcast");
}

TEST(ElementwiseErrors, WrongDeclaredOutputType) {
  TensorMap in = {{"x", make(DType::FP32, {2, 3}, {1, 2, 3, 4, 5, 6})}};
  expect_error("tensor<fp32, [2, 3]> x", "tensor<fp32, [3, 2]>", "add(x = x, y = fp32(1))", in, "add", "declared");
  expect_error("tensor<fp32, [2, 3]> x", "tensor<fp32, [2, 3]>", "less(x = x, y = fp32(1))", in, "less", "declared");
  expect_error("tensor<fp32, [2, 3]> x", "tensor<fp32, [2, 3]>", "cast(x = x, dtype = string(\"int32\"))", in, "cast",
               "declared");
  expect_error("tensor<fp32, [2, 3]> x", "tensor<fp32, [2]>", "softmax(x = x)", in, "softmax", "declared");
}

TEST(ElementwiseErrors, BadParameters) {
  TensorMap in = {{"x", make(DType::FP32, {2, 3}, {1, 2, 3, 4, 5, 6})}};
  std::string p = "tensor<fp32, [2, 3]> x", ty = "tensor<fp32, [2, 3]>";
  expect_error(p, ty, "softmax(x = x, axis = int32(2))", in, "softmax", "axis");
  expect_error(p, ty, "softmax(x = x, axis = int32(-3))", in, "softmax", "axis");
  expect_error(p, ty, "gelu(x = x, mode = string(\"FAST\"))", in, "gelu", "FAST");
  expect_error(p, "tensor<int64, [2, 3]>", "cast(x = x, dtype = string(\"int64\"))", in, "cast", "int64");
  expect_error(p, ty, "leaky_relu(x = x)", in, "leaky_relu", "alpha");
  expect_error(p, ty, "elu(x = x, alpha = tensor<fp32, [2]>([1, 2]))", in, "elu", "scalar");
  expect_error(p, ty, "prelu(x = x, alpha = tensor<fp32, [3]>([1, 2, 3]))", in, "prelu", "rank");
  Tensor x4 = make(DType::FP32, {1, 2, 1, 1}, {1, 2});
  expect_error("tensor<fp32, [1, 2, 1, 1]> x", "tensor<fp32, [1, 2, 1, 1]>",
               "prelu(x = x, alpha = tensor<fp32, [3]>([1, 2, 3]))", {{"x", x4}}, "prelu", "channels");
  expect_error("tensor<fp32, [1, 2, 1, 1]> x", "tensor<fp32, [1, 2, 1, 1]>",
               "softplus_parametric(x = x, alpha = tensor<fp32, [2]>([1, 2]), beta = tensor<fp32, [1]>([1]))",
               {{"x", x4}}, "softplus_parametric", "beta");
}

}  // namespace
}  // namespace milrt::test
