// Tests of the reductions, run through MIL text on the reference executor.
// Expected values come from plain fp64 loops here (grouping each element
// under its output position) or are written out by hand.
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

using Group = std::vector<double>;

std::string ttype(DType dt, const Shape& s) {
  if (s.empty()) return std::string(dtype_name(dt));
  return "tensor<" + std::string(dtype_name(dt)) + ", " + shape_str(s) + ">";
}

std::string i32s(const std::vector<int64_t>& v) {
  std::string r = "tensor<int32, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return r + "])";
}


double sum(const Group& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}

// ---------------------------------------------------------------- axes reductions

struct ReduceOp {
  const char* name;
  double (*f)(const Group&);
};

const ReduceOp kOps[] = {
    {"reduce_sum", sum},
    {"reduce_mean", [](const Group& g) { return sum(g) / double(g.size()); }},
    {"reduce_max", [](const Group& g) { double m = -INFINITY; for (double v : g) m = std::max(m, v); return m; }},
    {"reduce_min", [](const Group& g) { double m = INFINITY; for (double v : g) m = std::min(m, v); return m; }},
    {"reduce_prod", [](const Group& g) { double p = 1; for (double v : g) p *= v; return p; }},
    {"reduce_l1_norm", [](const Group& g) { double s = 0; for (double v : g) s += std::fabs(v); return s; }},
    {"reduce_l2_norm", [](const Group& g) { double s = 0; for (double v : g) s += v * v; return std::sqrt(s); }},
    {"reduce_sum_square", [](const Group& g) { double s = 0; for (double v : g) s += v * v; return s; }},
    {"reduce_log_sum", [](const Group& g) { return std::log(sum(g)); }},
    {"reduce_log_sum_exp", [](const Group& g) { double s = 0; for (double v : g) s += std::exp(v); return std::log(s); }},
};

struct ReduceCase {
  ReduceOp op;
  std::vector<int64_t> axes;  // empty: the input is absent (all axes)
  bool has_axes;
  bool keep_dims;
};

void PrintTo(const ReduceCase& c, std::ostream* os) {
  *os << c.op.name << (c.has_axes ? " axes " + shape_str(c.axes) : " all") << (c.keep_dims ? " keep" : "");
}

// x of shape [2, 3, 4]: positive (log_sum needs it), mixed magnitudes, exact in fp32.
const Shape kShape = {2, 3, 4};
std::vector<double> test_values() {
  std::vector<double> v;
  for (int i = 0; i < 24; ++i) v.push_back(0.25 * double((i * 7) % 11) + 0.5);
  return v;
}

class Reduce : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(Reduce, MatchesLoop) {
  const ReduceCase& c = GetParam();
  std::vector<bool> reduced(kShape.size(), !c.has_axes);
  for (int64_t a : c.axes) reduced[size_t(a < 0 ? a + 3 : a)] = true;
  Shape kept = kShape, out;
  for (size_t d = 0; d < 3; ++d) {
    if (reduced[d]) kept[d] = 1;
    if (!reduced[d] || c.keep_dims) out.push_back(kept[d]);
  }
  // Each element goes to the group of its position with reduced dims zeroed.
  std::vector<double> x = test_values();
  std::vector<Group> groups(size_t(shape_numel(kept)));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t d = 0; d < 4; ++d) {
        int64_t ka = reduced[0] ? 0 : a, kb = reduced[1] ? 0 : b, kd = reduced[2] ? 0 : d;
        groups[size_t((ka * kept[1] + kb) * kept[2] + kd)].push_back(x[size_t((a * 3 + b) * 4 + d)]);
      }
  std::string args = "x = x";
  if (c.has_axes) args += ", axes = " + i32s(c.axes);
  if (c.keep_dims) args += ", keep_dims = bool(true)";
  Tensor z = run_op(ttype(DType::FP32, kShape) + " x", ttype(DType::FP32, out), std::string(c.op.name) + "(" + args + ")",
                    {{"x", make(DType::FP32, kShape, x)}});
  ASSERT_EQ(z.shape(), out);
  std::vector<double> got = values(z);
  for (size_t i = 0; i < groups.size(); ++i) {
    double want = double(float(c.op.f(groups[i])));
    EXPECT_NEAR(got[i], want, std::fabs(want) * 2e-7) << "output " << i;
  }
}

std::vector<ReduceCase> reduce_cases() {
  std::vector<ReduceCase> r;
  const std::vector<std::vector<int64_t>> axes_sets = {{1}, {-1}, {0, -1}, {-3, 1}, {0, 1, 2}};
  for (const ReduceOp& op : kOps)
    for (bool keep : {false, true}) {
      r.push_back({op, {}, false, keep});
      for (auto& axes : axes_sets) r.push_back({op, axes, true, keep});
    }
  return r;
}

INSTANTIATE_TEST_SUITE_P(Ops, Reduce, ::testing::ValuesIn(reduce_cases()),
                         [](const ::testing::TestParamInfo<ReduceCase>& i) {
                           std::string n = i.param.op.name;
                           if (!i.param.has_axes) n += "_all";
                           for (int64_t a : i.param.axes) n += a < 0 ? "_m" + std::to_string(-a) : "_" + std::to_string(a);
                           return n + (i.param.keep_dims ? "_keep" : "");
                         });

TEST(Reductions, HandComputed) {
  std::string params = "tensor<fp32, [2, 3]> x";
  TensorMap in = {{"x", make(DType::FP32, {2, 3}, {1, -2, 3, 4, 5, -6})}};
  auto reduce = [&](const std::string& op, const std::string& type, const std::string& args) {
    return values(run_op(params, type, op + "(x = x" + args + ")", in));
  };
  EXPECT_EQ(reduce("reduce_sum", "tensor<fp32, [2]>", ", axes = " + i32s({1})), (Group{2, 3}));
  EXPECT_EQ(reduce("reduce_sum", "tensor<fp32, [1, 3]>", ", axes = " + i32s({-2}) + ", keep_dims = bool(true)"),
            (Group{5, 3, -3}));
  EXPECT_EQ(reduce("reduce_max", "fp32", ""), (Group{5}));
  EXPECT_EQ(reduce("reduce_min", "tensor<fp32, [3]>", ", axes = " + i32s({0})), (Group{1, -2, -6}));
  EXPECT_EQ(reduce("reduce_prod", "tensor<fp32, [2, 1]>", ", axes = " + i32s({1}) + ", keep_dims = bool(true)"),
            (Group{-6, -120}));
  EXPECT_EQ(reduce("reduce_l1_norm", "fp32", ""), (Group{21}));
  EXPECT_EQ(reduce("reduce_sum_square", "tensor<fp32, [3]>", ", axes = " + i32s({0})), (Group{17, 29, 45}));
  EXPECT_EQ(reduce("reduce_mean", "tensor<fp32, [2]>", ", axes = " + i32s({-1})), (Group{double(float(2.0 / 3.0)), 1}));
}

TEST(Reductions, Int32TruncatesAndStaysExact) {
  std::string params = "tensor<int32, [2, 2]> x";
  TensorMap in = {{"x", make(DType::Int32, {2, 2}, {1, 2, -1, -2})}};
  // Means 1.5 and -1.5 truncate toward zero, as coremltools' astype(int32) does.
  EXPECT_EQ(values(run_op(params, "tensor<int32, [2]>", "reduce_mean(x = x, axes = " + i32s({1}) + ")", in)),
            (Group{1, -1}));
  Tensor big = make(DType::Int32, {2}, {2147483000, 600});
  EXPECT_EQ(values(run_op("tensor<int32, [2]> x", "int32", "reduce_sum(x = x)", {{"x", big}})), (Group{2147483600}));
  EXPECT_EQ(values(run_op("tensor<int32, [2]> x", "int32", "reduce_max(x = x)", {{"x", big}})), (Group{2147483000}));
}

TEST(Reductions, Fp16RoundsTheResultOnce) {
  Tensor x = make(DType::FP16, {3}, {0.1, 0.2, 0.3});
  std::vector<double> xv = values(x);
  Tensor z = run_op("tensor<fp16, [3]> x", "fp16", "reduce_sum(x = x)", {{"x", x}});
  ASSERT_EQ(z.dtype(), DType::FP16);
  EXPECT_EQ(values(z)[0], double(f16_to_f32(f32_to_f16(float(xv[0] + xv[1] + xv[2])))));
}

TEST(Reductions, LogSumExpIsStableAndMaxPropagatesNaN) {
  Tensor x = make(DType::FP32, {2}, {1000, 1000});
  EXPECT_EQ(values(run_op("tensor<fp32, [2]> x", "fp32", "reduce_log_sum_exp(x = x)", {{"x", x}}))[0],
            double(float(1000 + std::log(2.0))));
  Tensor n = make(DType::FP32, {3}, {1, std::numeric_limits<double>::quiet_NaN(), 2});
  EXPECT_TRUE(std::isnan(values(run_op("tensor<fp32, [3]> x", "fp32", "reduce_max(x = x)", {{"x", n}}))[0]));
}

TEST(Reductions, UnknownDimsPropagate) {
  Tensor z = run_op("tensor<fp32, [?, 3]> x", "tensor<fp32, [?]>", "reduce_sum(x = x, axes = " + i32s({1}) + ")",
                    {{"x", make(DType::FP32, {2, 3}, {1, 2, 3, 4, 5, 6})}});
  EXPECT_EQ(values(z), (Group{6, 15}));
}

TEST(Reductions, Errors) {
  std::string params = "tensor<fp32, [2, 3]> x";
  TensorMap in = {{"x", make(DType::FP32, {2, 3}, {1, 2, 3, 4, 5, 6})}};
  expect_error(params, "tensor<fp32, [2]>", "reduce_sum(x = x, axes = " + i32s({2}) + ")", in, "reduce_sum",
               "out of range");
  expect_error(params, "tensor<fp32, [2]>", "reduce_mean(x = x, axes = " + i32s({-3}) + ")", in, "reduce_mean",
               "out of range");
  expect_error(params, "fp32", "reduce_max(x = x, axes = " + i32s({1, -1}) + ")", in, "reduce_max", "repeated");
  expect_error(params, "tensor<fp32, [2]>", "reduce_sum(x = x, axes = " + i32s({0}) + ")", in, "reduce_sum",
               "declared");
  expect_error(params, "tensor<fp32, [1, 2]>", "reduce_sum(x = x, axes = " + i32s({1}) + ", keep_dims = bool(true))",
               in, "reduce_sum", "declared");
  expect_error(params + ", tensor<int32, [1]> a", "tensor<fp32, [2]>", "reduce_sum(x = x, axes = a)", in,
               "reduce_sum", "constant");
  expect_error("tensor<bool, [2]> x", "bool", "reduce_sum(x = x)", {}, "reduce_sum", "x");
}

// ---------------------------------------------------------------- argmax / argmin

TEST(ReduceArg, FirstIndexOnTies) {
  std::string params = "tensor<fp32, [2, 4]> x";
  TensorMap in = {{"x", make(DType::FP32, {2, 4}, {1, 3, 3, 2, 5, 3, 5, -1})}};
  auto arg = [&](const std::string& op, const std::string& type, const std::string& args) {
    Tensor z = run_op(params, type, op + "(x = x" + args + ")", in);
    EXPECT_EQ(z.dtype(), type.find("uint16") != std::string::npos ? DType::UInt16 : DType::Int32);
    return values(z);
  };
  EXPECT_EQ(arg("reduce_argmax", "tensor<int32, [2]>", ""), (Group{1, 0}));
  EXPECT_EQ(arg("reduce_argmax", "tensor<int32, [2, 1]>", ", keep_dims = bool(true)"), (Group{1, 0}));
  EXPECT_EQ(arg("reduce_argmax", "tensor<int32, [4]>", ", axis = int32(0)"), (Group{1, 0, 1, 0}));
  EXPECT_EQ(arg("reduce_argmax", "tensor<int32, [1, 4]>", ", axis = int32(-2), keep_dims = bool(true)"),
            (Group{1, 0, 1, 0}));
  EXPECT_EQ(arg("reduce_argmin", "tensor<int32, [2]>", ", axis = int32(1)"), (Group{0, 3}));
  EXPECT_EQ(arg("reduce_argmin", "tensor<uint16, [4]>", ", axis = int32(0), output_dtype = string(\"uint16\")"),
            (Group{0, 0, 0, 1}));
  Tensor ties = make(DType::Int32, {5}, {2, 1, 1, 3, 3});
  EXPECT_EQ(values(run_op("tensor<int32, [5]> x", "int32", "reduce_argmin(x = x)", {{"x", ties}})), (Group{1}));
  EXPECT_EQ(values(run_op("tensor<int32, [5]> x", "int32", "reduce_argmax(x = x)", {{"x", ties}})), (Group{3}));
}

TEST(ReduceArg, Errors) {
  std::string params = "tensor<fp32, [2, 4]> x";
  TensorMap in = {{"x", make(DType::FP32, {2, 4}, {1, 3, 3, 2, 5, 3, 5, -1})}};
  expect_error(params, "tensor<int32, [2]>", "reduce_argmax(x = x, axis = int32(2))", in, "reduce_argmax",
               "out of range");
  expect_error(params, "tensor<int32, [2]>", "reduce_argmin(x = x, output_dtype = string(\"int8\"))", in,
               "reduce_argmin", "output_dtype");
  expect_error(params, "tensor<fp32, [2]>", "reduce_argmax(x = x)", in, "reduce_argmax", "declared");
  expect_error(params, "tensor<int32, [4]>", "reduce_argmax(x = x)", in, "reduce_argmax", "declared");
  // output_dtype arrived in iOS17.
  try {
    verify(parse_mil(program_text(params,
                                  "    tensor<int32, [2]> z = reduce_argmax(x = x, output_dtype = string(\"int32\"))"
                                  "[name = string(\"z\")];",
                                  "z", "ios16"),
                     "<test>", "."));
    ADD_FAILURE() << "output_dtype accepted in ios16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output_dtype"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace milrt::test
