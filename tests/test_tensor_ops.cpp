// Tests of the tensor op family (reshaping, slicing, gather/scatter, padding,
// sorting, generators), run through MIL text on the reference executor.
// Expected values are written out by hand or computed by plain loops here.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "milrt/dtype.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

std::string ttype(DType dt, const Shape& s) {
  return "tensor<" + std::string(dtype_name(dt)) + ", " + shape_str(s) + ">";
}

// An int32 vector literal, e.g. tensor<int32, [2]>([0, -1]).
std::string i32s(const std::vector<int64_t>& v) {
  std::string r = "tensor<int32, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return r + "])";
}

std::string bools(const std::vector<bool>& v) {
  std::string r = "tensor<bool, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) r += std::string(i ? ", " : "") + (v[i] ? "true" : "false");
  return r + "])";
}

// Expects verifying `TYPE z = EXPR` in a function of `opset` to fail naming `op` and `fragment`.
void expect_opset_error(const std::string& opset, const std::string& params, const std::string& type,
                        const std::string& expr, const std::string& op, const std::string& fragment) {
  try {
    verify(parse_mil(program_text(params, stmt(type, "z", expr), "z", opset), "<test>", "."));
    ADD_FAILURE() << "no error for " << expr << " in " << opset;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(op), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

void expect_tensor(const Tensor& t, DType dt, const Shape& s, const std::vector<double>& want) {
  ASSERT_EQ(t.dtype(), dt) << dtype_name(t.dtype());
  ASSERT_EQ(t.shape(), s) << shape_str(t.shape());
  EXPECT_EQ(values(t), want);
}

std::vector<double> iota(int64_t n, double start = 0) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(start + double(i));
  return v;
}

// x = 0, 1, 2, ... of shape s (fp32), as the only parameter "x".
struct Iota {
  Shape shape;
  DType dtype = DType::FP32;
  std::string param() const { return ttype(dtype, shape) + " x"; }
  TensorMap in() const { return {{"x", make(dtype, shape, iota(shape_numel(shape)))}}; }
};

// Elements of the row-major [rows, cols] iota at the given row and column positions.
std::vector<double> pick2(int64_t cols, const std::vector<int64_t>& r, const std::vector<int64_t>& c) {
  std::vector<double> v;
  for (int64_t i : r)
    for (int64_t j : c) v.push_back(double(i * cols + j));
  return v;
}

// ---------------------------------------------------------------- reshape family

TEST(Reshape, MinusOneAndZero) {
  Iota x{{2, 3, 4}};
  auto reshape = [&](const std::string& type, const std::vector<int64_t>& shape) {
    return run_op(x.param(), type, "reshape(x = x, shape = " + i32s(shape) + ")", x.in());
  };
  expect_tensor(reshape("tensor<fp32, [2, 6, 2]>", {0, -1, 2}), DType::FP32, {2, 6, 2}, iota(24));
  expect_tensor(reshape("tensor<fp32, [6, 4]>", {-1, 0}), DType::FP32, {6, 4}, iota(24));
  // iOS17: a 0 copies x's dim at the same position counted from the right,
  // so [0, -1] on [2, 3, 4] keeps the 3; past x's rank a 0 means 1.
  expect_tensor(reshape("tensor<fp32, [3, 8]>", {0, -1}), DType::FP32, {3, 8}, iota(24));
  expect_tensor(reshape("tensor<fp32, [1, 1, 2, 3, 4]>", {0, 0, -1, 0, 0}), DType::FP32, {1, 1, 2, 3, 4}, iota(24));
  // To a scalar.
  expect_tensor(run_op("tensor<int32, [1, 1]> x", "int32", "reshape(x = x, shape = tensor<int32, [0]>([]))",
                       {{"x", make(DType::Int32, {1, 1}, {-7})}}),
                DType::Int32, {}, {-7});
}

TEST(Reshape, ShapeFromAParameterGivesUnknownDims) {
  TensorMap in = {{"x", make(DType::FP32, {2, 3}, iota(6))}, {"s", make(DType::Int32, {2}, {3, 2})}};
  std::string params = "tensor<fp32, [2, 3]> x, tensor<int32, [2]> s";
  expect_tensor(run_op(params, "tensor<fp32, [?, ?]>", "reshape(x = x, shape = s)", in), DType::FP32, {3, 2}, iota(6));
  // The declared shape is admitted (inference gives [?, ?]) and checked at run time.
  expect_tensor(run_op(params, "tensor<fp32, [3, 2]>", "reshape(x = x, shape = s)", in), DType::FP32, {3, 2}, iota(6));
  expect_error(params, "tensor<fp32, [2, 3]>", "reshape(x = x, shape = s)", in, "reshape", "shape [3, 2]");
  // The rank is known from the length of 'shape'.
  expect_error(params, "tensor<fp32, [6]>", "reshape(x = x, shape = s)", in, "reshape", "declared");
}

TEST(Reshape, UnknownInputDimsPropagate) {
  std::string params = "tensor<fp32, [?, 2, 4]> x";
  TensorMap in = {{"x", make(DType::FP32, {3, 2, 4}, iota(24))}};
  // The unknown dim is copied by the 0, so the -1 is still 2 * 4 / 2 = 4.
  expect_tensor(run_op(params, "tensor<fp32, [?, 4, 2]>", "reshape(x = x, shape = " + i32s({0, -1, 2}) + ")", in),
                DType::FP32, {3, 4, 2}, iota(24));
  expect_error(params, "tensor<fp32, [?, 2, 4]>", "reshape(x = x, shape = " + i32s({0, -1, 2}) + ")", in, "reshape",
               "declared");
  // Without a 0 the size left for -1 is unknown.
  expect_tensor(run_op(params, "tensor<fp32, [2, ?]>", "reshape(x = x, shape = " + i32s({2, -1}) + ")", in),
                DType::FP32, {2, 12}, iota(24));
}

TEST(Reshape, Errors) {
  Iota x{{2, 3}};
  expect_error(x.param(), "tensor<fp32, [4, 2]>", "reshape(x = x, shape = " + i32s({4, 2}) + ")", x.in(), "reshape",
               "6 elements");
  expect_error(x.param(), "tensor<fp32, [4, 2]>", "reshape(x = x, shape = " + i32s({-1, 4}) + ")", x.in(), "reshape",
               "divide");
  expect_error(x.param(), "tensor<fp32, [6]>", "reshape(x = x, shape = " + i32s({-1, -1}) + ")", x.in(), "reshape",
               "at most one -1");
  expect_error("tensor<string, [1]> x", "tensor<string, [1]>", "reshape(x = x, shape = " + i32s({1}) + ")", {},
               "reshape", "x");
}

TEST(Transpose, RankFour) {
  Iota x{{2, 3, 4, 5}};
  // y[a, b, c, d] = x[a, d, b, c]
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 5; ++c)
        for (int d = 0; d < 3; ++d) want.push_back(double(((a * 3 + d) * 4 + b) * 5 + c));
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 4, 5, 3]>", "transpose(x = x, perm = " + i32s({0, 2, 3, 1}) + ")",
                       x.in()),
                DType::FP32, {2, 4, 5, 3}, want);
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 4, 5, 3]>",
                       "transpose(x = x, perm = " + i32s({-4, -2, -1, -3}) + ")", x.in()),
                DType::FP32, {2, 4, 5, 3}, want);
}

TEST(Transpose, KeepsIntegersAndHalvesExact) {
  Tensor big = make(DType::Int32, {2, 2}, {2147483647, -2147483648.0, 16777217, -3});
  expect_tensor(run_op("tensor<int32, [2, 2]> x", "tensor<int32, [2, 2]>", "transpose(x = x, perm = " + i32s({1, 0}) + ")",
                       {{"x", big}}),
                DType::Int32, {2, 2}, {2147483647, 16777217, -2147483648.0, -3});
  Tensor h = make(DType::FP16, {1, 3}, {0.1, 65504, -0.000061});
  Tensor r = run_op("tensor<fp16, [1, 3]> x", "tensor<fp16, [3, 1]>", "transpose(x = x, perm = " + i32s({1, 0}) + ")",
                    {{"x", h}});
  EXPECT_EQ(values(r), values(h));
}

TEST(Transpose, Errors) {
  Iota x{{2, 3, 4}};
  expect_error(x.param(), "tensor<fp32, [2, 3, 4]>", "transpose(x = x, perm = " + i32s({0, 0, 1}) + ")", x.in(),
               "transpose", "repeated");
  expect_error(x.param(), "tensor<fp32, [2, 3, 4]>", "transpose(x = x, perm = " + i32s({0, 1}) + ")", x.in(),
               "transpose", "rank");
  expect_error(x.param(), "tensor<fp32, [2, 3, 4]>", "transpose(x = x, perm = " + i32s({0, 1, 3}) + ")", x.in(),
               "transpose", "out of range");
  // Wrong declared output shape.
  expect_error(x.param(), "tensor<fp32, [2, 3, 4]>", "transpose(x = x, perm = " + i32s({0, 2, 1}) + ")", x.in(),
               "transpose", "declared");
}

TEST(SqueezeExpandDims, NegativeAxes) {
  Iota x{{1, 3, 1, 2}};
  expect_tensor(run_op(x.param(), "tensor<fp32, [1, 3, 2]>", "squeeze(x = x, axes = " + i32s({-2}) + ")", x.in()),
                DType::FP32, {1, 3, 2}, iota(6));
  expect_tensor(run_op(x.param(), "tensor<fp32, [3, 2]>", "squeeze(x = x)", x.in()), DType::FP32, {3, 2}, iota(6));
  // Named axes of size other than 1 stay (PyTorch semantics).
  expect_tensor(run_op(x.param(), "tensor<fp32, [3, 1, 2]>", "squeeze(x = x, axes = " + i32s({0, 1}) + ")", x.in()),
                DType::FP32, {3, 1, 2}, iota(6));
  expect_tensor(run_op("tensor<int32, [1, 1]> x", "int32", "squeeze(x = x)", {{"x", make(DType::Int32, {1, 1}, {5})}}),
                DType::Int32, {}, {5});
  Iota y{{2, 3}};
  // Output rank 4: -1 is the last position, 0 the first.
  expect_tensor(run_op(y.param(), "tensor<fp32, [1, 2, 3, 1]>", "expand_dims(x = x, axes = " + i32s({-1, 0}) + ")",
                       y.in()),
                DType::FP32, {1, 2, 3, 1}, iota(6));
  expect_tensor(run_op(y.param(), "tensor<fp32, [2, 1, 3]>", "expand_dims(x = x, axes = " + i32s({-2}) + ")", y.in()),
                DType::FP32, {2, 1, 3}, iota(6));
  expect_error(y.param(), "tensor<fp32, [2, 3, 1]>", "expand_dims(x = x, axes = " + i32s({3}) + ")", y.in(),
               "expand_dims", "out of range");
  expect_error(y.param(), "tensor<fp32, [2, 3]>", "squeeze(x = x, axes = " + i32s({2}) + ")", y.in(), "squeeze",
               "out of range");
}

TEST(Flatten2d, AxisDefaultAndNegative) {
  Iota x{{2, 3, 2}};
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 6]>", "flatten2d(x = x)", x.in()), DType::FP32, {2, 6}, iota(12));
  expect_tensor(run_op(x.param(), "tensor<fp32, [6, 2]>", "flatten2d(x = x, axis = int32(-1))", x.in()), DType::FP32,
                {6, 2}, iota(12));
  expect_tensor(run_op(x.param(), "tensor<fp32, [1, 12]>", "flatten2d(x = x, axis = int32(0))", x.in()), DType::FP32,
                {1, 12}, iota(12));
}

// ---------------------------------------------------------------- concat, split, stack

TEST(Concat, AxesAndInterleave) {
  std::string params = "tensor<fp32, [3, 2]> a, tensor<fp32, [3, 2]> b";
  TensorMap in = {{"a", make(DType::FP32, {3, 2}, {1, 2, 3, 4, 5, 6})},
                  {"b", make(DType::FP32, {3, 2}, {7, 8, 9, 10, 11, 12})}};
  expect_tensor(run_op(params, "tensor<fp32, [6, 2]>", "concat(values = (a, b), axis = int32(0))", in), DType::FP32,
                {6, 2}, iota(12, 1));
  // The coremltools docstring example.
  expect_tensor(run_op(params, "tensor<fp32, [6, 2]>",
                       "concat(values = (a, b), axis = int32(0), interleave = bool(true))", in),
                DType::FP32, {6, 2}, {1, 2, 7, 8, 3, 4, 9, 10, 5, 6, 11, 12});
  expect_tensor(run_op(params, "tensor<fp32, [3, 4]>",
                       "concat(values = (a, b), axis = int32(-1), interleave = bool(true))", in),
                DType::FP32, {3, 4}, {1, 7, 2, 8, 3, 9, 4, 10, 5, 11, 6, 12});
  // Different sizes along the axis, with a constant among the values.
  expect_tensor(run_op("tensor<fp32, [2, 1]> a, tensor<fp32, [2, 2]> b", "tensor<fp32, [2, 4]>",
                       "concat(values = (a, b, tensor<fp32, [2, 1]>([[0], [9]])), axis = int32(-1))",
                       {{"a", make(DType::FP32, {2, 1}, {1, 2})}, {"b", make(DType::FP32, {2, 2}, {3, 4, 5, 6})}}),
                DType::FP32, {2, 4}, {1, 3, 4, 0, 2, 5, 6, 9});
}

TEST(Concat, UnknownDimsAndErrors) {
  std::string params = "tensor<fp32, [?, 2]> a, tensor<fp32, [3, 2]> b";
  TensorMap in = {{"a", make(DType::FP32, {1, 2}, {1, 2})}, {"b", make(DType::FP32, {3, 2}, iota(6))}};
  expect_tensor(run_op(params, "tensor<fp32, [?, 2]>", "concat(values = (a, b), axis = int32(0))", in), DType::FP32,
                {4, 2}, {1, 2, 0, 1, 2, 3, 4, 5});
  expect_error("tensor<fp32, [2, 2]> a, tensor<fp32, [2, 3]> b", "tensor<fp32, [4, 2]>",
               "concat(values = (a, b), axis = int32(0))", {}, "concat", "differ");
  expect_error("tensor<fp32, [2, 2]> a, tensor<fp32, [2, 3]> b", "tensor<fp32, [2, 5]>",
               "concat(values = (a, b), axis = int32(1), interleave = bool(true))", {}, "concat", "interleave");
  expect_error("tensor<fp32, [2, 2]> a, tensor<fp32, [2, 3]> b", "tensor<fp32, [2, 5]>",
               "concat(values = (a, b), axis = int32(2))", {}, "concat", "out of range");
  expect_error("tensor<fp32, [2, 2]> a, tensor<fp16, [2, 3]> b", "tensor<fp32, [2, 5]>",
               "concat(values = (a, b), axis = int32(1))", {}, "concat", "dtype");
}

TEST(Split, ByNumAndBySizes) {
  Iota x{{2, 6}};
  std::string body = stmt("tensor<fp32, [2, 2]> a, tensor<fp32, [2, 2]> b, tensor<fp32, [2, 2]>", "c",
                          "split(x = x, num_splits = int32(3), axis = int32(1))");
  TensorMap r = run_body(x.param(), body, "a, b, c", x.in());
  expect_tensor(r.at("a"), DType::FP32, {2, 2}, {0, 1, 6, 7});
  expect_tensor(r.at("b"), DType::FP32, {2, 2}, {2, 3, 8, 9});
  expect_tensor(r.at("c"), DType::FP32, {2, 2}, {4, 5, 10, 11});
  body = stmt("tensor<fp32, [2, 1]> a, tensor<fp32, [2, 3]> b, tensor<fp32, [2, 2]>", "c",
              "split(x = x, split_sizes = " + i32s({1, 3, 2}) + ", axis = int32(-1))");
  r = run_body(x.param(), body, "a, b, c", x.in());
  expect_tensor(r.at("a"), DType::FP32, {2, 1}, {0, 6});
  expect_tensor(r.at("b"), DType::FP32, {2, 3}, {1, 2, 3, 7, 8, 9});
  expect_tensor(r.at("c"), DType::FP32, {2, 2}, {4, 5, 10, 11});
  body = stmt("tensor<fp32, [1, 6]> a, tensor<fp32, [1, 6]>", "b", "split(x = x, num_splits = int32(2), axis = int32(0))");
  r = run_body(x.param(), body, "a, b", x.in());
  expect_tensor(r.at("b"), DType::FP32, {1, 6}, iota(6, 6));
}

TEST(Split, Errors) {
  Iota x{{2, 6}};
  auto expect_split_error = [&](const std::string& decl, const std::string& expr, const std::string& fragment) {
    try {
      run_body(x.param(), stmt(decl, "b", expr), "b", x.in());
      ADD_FAILURE() << "no error for " << expr;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("split"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_split_error("tensor<fp32, [2, 1]> a, tensor<fp32, [2, 5]>", "split(x = x, num_splits = int32(4), axis = int32(1))",
                     "does not divide");
  expect_split_error("tensor<fp32, [2, 1]> a, tensor<fp32, [2, 4]>",
                     "split(x = x, split_sizes = " + i32s({1, 4}) + ", axis = int32(1))", "sum to");
  expect_split_error("tensor<fp32, [2, 3]> a, tensor<fp32, [2, 3]>", "split(x = x, axis = int32(1))", "num_splits");
  expect_split_error("tensor<fp32, [2, 3]> a, tensor<fp32, [2, 3]>",
                     "split(x = x, num_splits = int32(3), axis = int32(1))", "outputs");
}

TEST(Stack, NewAxis) {
  std::string params = "tensor<fp32, [2, 3]> a, tensor<fp32, [2, 3]> b";
  TensorMap in = {{"a", make(DType::FP32, {2, 3}, iota(6))}, {"b", make(DType::FP32, {2, 3}, iota(6, 10))}};
  expect_tensor(run_op(params, "tensor<fp32, [2, 2, 3]>", "stack(values = (a, b), axis = int32(0))", in), DType::FP32,
                {2, 2, 3}, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  expect_tensor(run_op(params, "tensor<fp32, [2, 3, 2]>", "stack(values = (a, b), axis = int32(-1))", in),
                DType::FP32, {2, 3, 2}, {0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15});
  expect_error("tensor<fp32, [2, 3]> a, tensor<fp32, [3, 2]> b", "tensor<fp32, [2, 2, 3]>",
               "stack(values = (a, b), axis = int32(0))", {}, "stack", "shape");
}

// ---------------------------------------------------------------- slicing

// slice_by_index on x = iota [4, 5] with the given argument text after x.
Tensor slice45(const std::string& type, const std::string& args) {
  Iota x{{4, 5}};
  return run_op(x.param(), type, "slice_by_index(x = x, " + args + ")", x.in());
}

TEST(SliceByIndex, BeginEndStride) {
  expect_tensor(slice45("tensor<fp32, [2, 5]>", "begin = " + i32s({1, 0}) + ", end = " + i32s({3, 5})), DType::FP32,
                {2, 5}, pick2(5, {1, 2}, {0, 1, 2, 3, 4}));
  expect_tensor(slice45("tensor<fp32, [2, 2]>", "begin = " + i32s({0, 1}) + ", end = " + i32s({4, 5}) +
                                                    ", stride = " + i32s({2, 3})),
                DType::FP32, {2, 2}, pick2(5, {0, 2}, {1, 4}));
  // End past the dim clamps.
  expect_tensor(slice45("tensor<fp32, [1, 2]>", "begin = " + i32s({3, 3}) + ", end = " + i32s({9, 100})), DType::FP32,
                {1, 2}, pick2(5, {3}, {3, 4}));
}

TEST(SliceByIndex, Masks) {
  // begin_mask ignores begin; end_mask ignores end.
  expect_tensor(slice45("tensor<fp32, [4, 3]>", "begin = " + i32s({3, 1}) + ", end = " + i32s({4, 4}) +
                                                    ", begin_mask = " + bools({true, false})),
                DType::FP32, {4, 3}, pick2(5, {0, 1, 2, 3}, {1, 2, 3}));
  expect_tensor(slice45("tensor<fp32, [2, 2]>", "begin = " + i32s({2, 0}) + ", end = " + i32s({0, 2}) +
                                                    ", end_mask = " + bools({true, false})),
                DType::FP32, {2, 2}, pick2(5, {2, 3}, {0, 1}));
  // squeeze_mask picks begin and drops the dim (end is ignored).
  expect_tensor(slice45("tensor<fp32, [5]>", "begin = " + i32s({2, 0}) + ", end = " + i32s({0, 5}) +
                                                 ", squeeze_mask = " + bools({true, false})),
                DType::FP32, {5}, pick2(5, {2}, {0, 1, 2, 3, 4}));
  expect_tensor(slice45("fp32", "begin = " + i32s({-1, -2}) + ", end = " + i32s({0, 0}) +
                                    ", squeeze_mask = " + bools({true, true})),
                DType::FP32, {}, {18});
  expect_tensor(slice45("tensor<fp32, [4]>", "begin = " + i32s({0, 1}) + ", end = " + i32s({0, 0}) +
                                                 ", begin_mask = " + bools({true, false}) + ", end_mask = " +
                                                 bools({true, false}) + ", squeeze_mask = " + bools({false, true})),
                DType::FP32, {4}, pick2(5, {0, 1, 2, 3}, {1}));
}

TEST(SliceByIndex, NegativeIndicesAndStrides) {
  expect_tensor(slice45("tensor<fp32, [2, 3]>", "begin = " + i32s({-3, -4}) + ", end = " + i32s({-1, -1})),
                DType::FP32, {2, 3}, pick2(5, {1, 2}, {1, 2, 3}));
  expect_tensor(slice45("tensor<fp32, [3, 2]>", "begin = " + i32s({3, 4}) + ", end = " + i32s({0, 0}) +
                                                    ", stride = " + i32s({-1, -2})),
                DType::FP32, {3, 2}, pick2(5, {3, 2, 1}, {4, 2}));
  // Reversal with masks: x[::-2, ::-1].
  expect_tensor(slice45("tensor<fp32, [2, 5]>", "begin = " + i32s({0, 0}) + ", end = " + i32s({0, 0}) +
                                                    ", stride = " + i32s({-2, -1}) + ", begin_mask = " +
                                                    bools({true, true}) + ", end_mask = " + bools({true, true})),
                DType::FP32, {2, 5}, pick2(5, {3, 1}, {4, 3, 2, 1, 0}));
  // Negative stride with a negative end: x[-1:-4:-1, 1].
  expect_tensor(slice45("tensor<fp32, [3]>", "begin = " + i32s({-1, 1}) + ", end = " + i32s({-4, 0}) +
                                                 ", stride = " + i32s({-1, 1}) + ", squeeze_mask = " +
                                                 bools({false, true})),
                DType::FP32, {3}, pick2(5, {3, 2, 1}, {1}));
}

TEST(SliceByIndex, NonConstantBoundsAndErrors) {
  std::string params = "tensor<fp32, [4, 5]> x, tensor<int32, [2]> b";
  TensorMap in = {{"x", make(DType::FP32, {4, 5}, iota(20))}, {"b", make(DType::Int32, {2}, {1, 2})}};
  // Dims with both masks and unit stride stay known.
  expect_tensor(run_op(params, "tensor<fp32, [?, 5]>",
                       "slice_by_index(x = x, begin = b, end = " + i32s({3, 0}) + ", begin_mask = " +
                           bools({false, true}) + ", end_mask = " + bools({false, true}) + ")",
                       in),
                DType::FP32, {2, 5}, pick2(5, {1, 2}, {0, 1, 2, 3, 4}));
  expect_error(params, "tensor<fp32, [?, 4]>",
               "slice_by_index(x = x, begin = b, end = " + i32s({3, 0}) + ", begin_mask = " + bools({false, true}) +
                   ", end_mask = " + bools({false, true}) + ")",
               in, "slice_by_index", "declared");
  Iota x{{4, 5}};
  expect_error(x.param(), "tensor<fp32, [4]>", "slice_by_index(x = x, begin = " + i32s({0}) + ", end = " + i32s({4}) + ")",
               x.in(), "slice_by_index", "2 elements");
  expect_error(x.param(), "tensor<fp32, [5]>",
               "slice_by_index(x = x, begin = " + i32s({4, 0}) + ", end = " + i32s({0, 5}) + ", squeeze_mask = " +
                   bools({true, false}) + ")",
               x.in(), "slice_by_index", "out of range");
  expect_error(x.param(), "tensor<fp32, [4, 5]>",
               "slice_by_index(x = x, begin = " + i32s({0, 0}) + ", end = " + i32s({4, 5}) + ", stride = " +
                   i32s({1, 0}) + ")",
               x.in(), "slice_by_index", "stride");
}

TEST(SliceBySize, MinusOneMeansToTheEnd) {
  Iota x{{3, 4}};
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 2]>",
                       "slice_by_size(x = x, begin = " + i32s({1, 1}) + ", size = " + i32s({-1, 2}) + ")", x.in()),
                DType::FP32, {2, 2}, pick2(4, {1, 2}, {1, 2}));
  expect_tensor(run_op(x.param(), "tensor<fp32, [1, 4]>",
                       "slice_by_size(x = x, begin = " + i32s({-1, 0}) + ", size = " + i32s({1, -1}) + ")", x.in()),
                DType::FP32, {1, 4}, pick2(4, {2}, {0, 1, 2, 3}));
  // A non-constant begin leaves -1 sizes unknown.
  expect_tensor(run_op(x.param() + ", tensor<int32, [2]> b", "tensor<fp32, [2, ?]>",
                       "slice_by_size(x = x, begin = b, size = " + i32s({2, -1}) + ")",
                       {{"x", x.in().at("x")}, {"b", make(DType::Int32, {2}, {0, 3})}}),
                DType::FP32, {2, 1}, pick2(4, {0, 1}, {3}));
  expect_error(x.param(), "tensor<fp32, [2, 2]>",
               "slice_by_size(x = x, begin = " + i32s({2, 0}) + ", size = " + i32s({2, 2}) + ")", x.in(),
               "slice_by_size", "does not fit");
}

TEST(SliceUpdate, ReplacesTheSlice) {
  std::string params = "tensor<int32, [3, 4]> x, tensor<int32, [2, 2]> u";
  TensorMap in = {{"x", make(DType::Int32, {3, 4}, iota(12))}, {"u", make(DType::Int32, {2, 2}, {-1, -2, -3, -4})}};
  // x[0:3:2, 3:0:-2] = u
  expect_tensor(run_op(params, "tensor<int32, [3, 4]>",
                       "slice_update(x = x, update = u, begin = " + i32s({0, 3}) + ", end = " + i32s({3, 0}) +
                           ", stride = " + i32s({2, -2}) + ")",
                       in),
                DType::Int32, {3, 4}, {0, -2, 2, -1, 4, 5, 6, 7, 8, -4, 10, -3});
  // A squeezed dim: x[1, 1:3] = v
  expect_tensor(run_op("tensor<int32, [3, 4]> x, tensor<int32, [2]> v", "tensor<int32, [3, 4]>",
                       "slice_update(x = x, update = v, begin = " + i32s({1, 1}) + ", end = " + i32s({0, 3}) +
                           ", squeeze_mask = " + bools({true, false}) + ")",
                       {{"x", in.at("x")}, {"v", make(DType::Int32, {2}, {50, 60})}}),
                DType::Int32, {3, 4}, {0, 1, 2, 3, 4, 50, 60, 7, 8, 9, 10, 11});
  expect_error(params, "tensor<int32, [3, 4]>",
               "slice_update(x = x, update = u, begin = " + i32s({0, 0}) + ", end = " + i32s({3, 2}) + ")", in,
               "slice_update", "shape of the slice");
}

// ---------------------------------------------------------------- gather / scatter

TEST(Gather, AxesAndNegativeIndices) {
  Iota x{{3, 4}};
  expect_tensor(run_op(x.param(), "tensor<fp32, [3, 4]>", "gather(x = x, indices = " + i32s({2, -1, 0}) + ")", x.in()),
                DType::FP32, {3, 4}, {8, 9, 10, 11, 8, 9, 10, 11, 0, 1, 2, 3});
  // axis -1 with 2-D indices: out[i, a, b] = x[i, idx[a, b]].
  std::vector<double> want;
  std::vector<int> idx = {0, -1, 1, 2};
  for (int i = 0; i < 3; ++i)
    for (int k : idx) want.push_back(double(i * 4 + (k < 0 ? k + 4 : k)));
  expect_tensor(run_op(x.param(), "tensor<fp32, [3, 2, 2]>",
                       "gather(x = x, indices = tensor<int32, [2, 2]>([[0, -1], [1, 2]]), axis = int32(-1))", x.in()),
                DType::FP32, {3, 2, 2}, want);
  // A scalar index drops the axis.
  expect_tensor(run_op(x.param(), "tensor<fp32, [3]>", "gather(x = x, indices = int32(-3), axis = int32(1))", x.in()),
                DType::FP32, {3}, {1, 5, 9});
}

TEST(Gather, IntegerDataBatchDimsAndRuntimeIndices) {
  Tensor x = make(DType::Int32, {2, 3}, {2147483647, -5, 7, 16777217, 0, -2147483648.0});
  expect_tensor(run_op("tensor<int32, [2, 3]> x", "tensor<int32, [2, 2]>",
                       "gather(x = x, indices = tensor<int32, [2, 2]>([[2, 0], [1, -3]]), axis = int32(1), "
                       "batch_dims = int32(1))",
                       {{"x", x}}),
                DType::Int32, {2, 2}, {7, 2147483647, 0, 16777217});
  std::string params = "tensor<int32, [2, 3]> x, tensor<int32, [2]> i";
  expect_tensor(run_op(params, "tensor<int32, [2, 2]>", "gather(x = x, indices = i, axis = int32(1))",
                       {{"x", x}, {"i", make(DType::Int32, {2}, {-1, 1})}}),
                DType::Int32, {2, 2}, {7, -5, -2147483648.0, 0});
  expect_error(params, "tensor<int32, [2, 2]>", "gather(x = x, indices = i, axis = int32(1))",
               {{"x", x}, {"i", make(DType::Int32, {2}, {3, 0})}}, "gather", "out of range");
  expect_error(params, "tensor<int32, [2, 2]>", "gather(x = x, indices = i, axis = int32(1), validate_indices = bool(true))",
               {{"x", x}, {"i", make(DType::Int32, {2}, {-1, 0})}}, "gather", "out of range");
}

TEST(Gather, Errors) {
  Iota x{{3, 4}};
  expect_error(x.param(), "tensor<fp32, [2, 4]>", "gather(x = x, indices = " + i32s({0, 3}) + ")", x.in(), "gather",
               "out of range");
  expect_error(x.param(), "tensor<fp32, [2, 4]>", "gather(x = x, indices = " + i32s({0, 1}) + ", axis = int32(2))",
               x.in(), "gather", "axis 2");
  expect_error(x.param(), "tensor<fp32, [2, 4]>",
               "gather(x = x, indices = " + i32s({0, -1}) + ", validate_indices = bool(true))", x.in(), "gather",
               "out of range");
  expect_error(x.param(), "tensor<fp32, [3, 4]>", "gather(x = x, indices = " + i32s({0, 1}) + ")", x.in(), "gather",
               "declared");
}

TEST(GatherAlongAxis, TakesAlongEachAxis) {
  Iota x{{2, 3}};
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 3]>",
                       "gather_along_axis(x = x, indices = tensor<int32, [2, 3]>([[0, 2, 1], [2, 2, -3]]), axis = "
                       "int32(1))",
                       x.in()),
                DType::FP32, {2, 3}, {0, 2, 1, 5, 5, 3});
  expect_tensor(run_op(x.param(), "tensor<fp32, [1, 3]>",
                       "gather_along_axis(x = x, indices = tensor<int32, [1, 3]>([[1, 0, 1]]))", x.in()),
                DType::FP32, {1, 3}, {3, 1, 5});
  expect_error(x.param(), "tensor<fp32, [2, 2]>",
               "gather_along_axis(x = x, indices = tensor<int32, [2, 2]>([[0, 0], [0, 0]]), axis = int32(0))", x.in(),
               "gather_along_axis", "differ");
}

TEST(GatherNd, RowsAndElements) {
  Iota x{{2, 3}};
  expect_tensor(run_op(x.param(), "tensor<fp32, [2]>",
                       "gather_nd(x = x, indices = tensor<int32, [2, 2]>([[1, 2], [0, 0]]))", x.in()),
                DType::FP32, {2}, {5, 0});
  expect_tensor(run_op(x.param(), "tensor<fp32, [1, 3]>", "gather_nd(x = x, indices = tensor<int32, [1, 1]>([[1]]))",
                       x.in()),
                DType::FP32, {1, 3}, {3, 4, 5});
  Iota y{{2, 2, 3}};
  // batch_dims = 1: out[b, i] = y[b, idx[b, i, 0], idx[b, i, 1]].
  expect_tensor(run_op(y.param(), "tensor<fp32, [2, 1]>",
                       "gather_nd(x = x, indices = tensor<int32, [2, 1, 2]>([[[1, 2]], [[0, 1]]]), batch_dims = "
                       "int32(1))",
                       y.in()),
                DType::FP32, {2, 1}, {5, 7});
}

TEST(Scatter, ModesAndAxes) {
  std::string params = "tensor<fp32, [2, 3]> d";
  TensorMap in = {{"d", make(DType::FP32, {2, 3}, {1, 2, 3, 4, 5, 6})}};
  // The coremltools docstring example (mode add, the default).
  expect_tensor(run_op(params, "tensor<fp32, [2, 3]>",
                       "scatter(data = d, indices = " + i32s({1, 0}) +
                           ", updates = tensor<fp32, [2, 3]>([[5, 6, 7], [8, 9, 10]]))",
                       in),
                DType::FP32, {2, 3}, {9, 11, 13, 9, 11, 13});
  expect_tensor(run_op(params, "tensor<fp32, [2, 3]>",
                       "scatter(data = d, indices = " + i32s({2}) +
                           ", updates = tensor<fp32, [2, 1]>([[0], [-1]]), axis = int32(1), mode = string(\"update\"))",
                       in),
                DType::FP32, {2, 3}, {1, 2, 0, 4, 5, -1});
  expect_tensor(run_op(params, "tensor<fp32, [2, 3]>",
                       "scatter_along_axis(data = d, indices = tensor<int32, [1, 3]>([[1, 0, 1]]), updates = "
                       "tensor<fp32, [1, 3]>([[10, 10, 10]]), mode = string(\"mul\"))",
                       in),
                DType::FP32, {2, 3}, {1, 20, 3, 40, 5, 60});
  expect_tensor(run_op(params, "tensor<fp32, [2, 3]>",
                       "scatter_nd(data = d, indices = tensor<int32, [2, 2]>([[0, 1], [1, 2]]), updates = "
                       "tensor<fp32, [2]>([7, 0]), mode = string(\"max\"))",
                       in),
                DType::FP32, {2, 3}, {1, 7, 3, 4, 5, 6});
  expect_error(params, "tensor<fp32, [2, 3]>",
               "scatter(data = d, indices = " + i32s({1}) + ", updates = tensor<fp32, [2, 3]>([[1, 1, 1], [1, 1, 1]]))",
               in, "scatter", "updates");
}

// ---------------------------------------------------------------- pad, tile, band_part, reverse

TEST(Pad, EveryModeOnTwoDims) {
  std::string params = "tensor<fp32, [2, 3]> x";
  TensorMap in = {{"x", make(DType::FP32, {2, 3}, {1, 2, 3, 4, 5, 6})}};
  std::string pad = "pad = " + i32s({1, 1, 2, 1});
  expect_tensor(run_op(params, "tensor<fp32, [4, 6]>", "pad(x = x, " + pad + ", constant_val = fp32(9))", in),
                DType::FP32, {4, 6},
                {9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9, 9, 9, 9, 9, 9, 9});
  expect_tensor(run_op(params, "tensor<fp32, [4, 6]>", "pad(x = x, " + pad + ", mode = string(\"reflect\"))", in),
                DType::FP32, {4, 6},
                {6, 5, 4, 5, 6, 5, 3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5, 3, 2, 1, 2, 3, 2});
  expect_tensor(run_op(params, "tensor<fp32, [4, 6]>", "pad(x = x, " + pad + ", mode = string(\"replicate\"))", in),
                DType::FP32, {4, 6},
                {1, 1, 1, 2, 3, 3, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5, 6, 6, 4, 4, 4, 5, 6, 6});
  // The default constant is 0.
  expect_tensor(run_op(params, "tensor<fp32, [2, 4]>", "pad(x = x, pad = " + i32s({0, 0, 0, 1}) + ")", in),
                DType::FP32, {2, 4}, {1, 2, 3, 0, 4, 5, 6, 0});
}

TEST(Pad, LastDimsOnlyFp16AndErrors) {
  // Two pad entries pad only the last dim of a rank-3 tensor; fp16 rounds the constant.
  Tensor x = make(DType::FP16, {2, 1, 2}, {1, 2, 3, 4});
  double c = f16_to_f32(f32_to_f16(0.1f));
  expect_tensor(run_op("tensor<fp16, [2, 1, 2]> x", "tensor<fp16, [2, 1, 3]>",
                       "pad(x = x, pad = " + i32s({1, 0}) + ", constant_val = fp16(0.1))", {{"x", x}}),
                DType::FP16, {2, 1, 3}, {c, 1, 2, c, 3, 4});
  Iota y{{2, 3}};
  expect_error(y.param(), "tensor<fp32, [4, 3]>",
               "pad(x = x, pad = " + i32s({2, 0, 0, 0}) + ", mode = string(\"reflect\"))", y.in(), "pad", "too large");
  expect_error(y.param(), "tensor<fp32, [2, 3]>", "pad(x = x, pad = " + i32s({0, 0, 0}) + ")", y.in(), "pad");
  expect_error(y.param(), "tensor<fp32, [2, 3]>", "pad(x = x, pad = " + i32s({0, 0}) + ", mode = string(\"wrap\"))",
               y.in(), "pad", "mode");
  // A non-constant pad must cover every dim; its result dims are unknown.
  expect_tensor(run_op(y.param() + ", tensor<int32, [4]> p", "tensor<fp32, [?, ?]>", "pad(x = x, pad = p)",
                       {{"x", y.in().at("x")}, {"p", make(DType::Int32, {4}, {0, 1, 0, 0})}}),
                DType::FP32, {3, 3}, {0, 1, 2, 3, 4, 5, 0, 0, 0});
}

TEST(Tile, Reps) {
  Iota x{{2, 3}};
  expect_tensor(run_op(x.param(), "tensor<fp32, [4, 3]>", "tile(x = x, reps = " + i32s({2, 1}) + ")", x.in()),
                DType::FP32, {4, 3}, {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5});
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 6]>", "tile(x = x, reps = " + i32s({1, 2}) + ")", x.in()),
                DType::FP32, {2, 6}, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  expect_error(x.param(), "tensor<fp32, [2, 3]>", "tile(x = x, reps = " + i32s({1}) + ")", x.in(), "tile");
  expect_error(x.param(), "tensor<fp32, [2, 3]>", "tile(x = x, reps = " + i32s({1, 0}) + ")", x.in(), "tile",
               "positive");
}

TEST(BandPart, LowerUpperAndMinusOne) {
  Iota x{{3, 4}};
  auto band = [&](int lower, int upper) {
    return run_op(x.param(), "tensor<fp32, [3, 4]>",
                  "band_part(x = x, lower = int32(" + std::to_string(lower) + "), upper = int32(" +
                      std::to_string(upper) + "))",
                  x.in());
  };
  expect_tensor(band(-1, 0), DType::FP32, {3, 4}, {0, 0, 0, 0, 4, 5, 0, 0, 8, 9, 10, 0});
  expect_tensor(band(0, -1), DType::FP32, {3, 4}, {0, 1, 2, 3, 0, 5, 6, 7, 0, 0, 10, 11});
  expect_tensor(band(0, 0), DType::FP32, {3, 4}, {0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 10, 0});
  expect_tensor(band(1, 1), DType::FP32, {3, 4}, {0, 1, 0, 0, 4, 5, 6, 0, 0, 9, 10, 11});
  // Defaults keep everything; bools stay bools.
  expect_tensor(run_op("tensor<bool, [2, 2]> x", "tensor<bool, [2, 2]>", "band_part(x = x, upper = int32(0))",
                       {{"x", make(DType::Bool, {2, 2}, {1, 1, 1, 1})}}),
                DType::Bool, {2, 2}, {1, 0, 1, 1});
}

TEST(Reverse, AxesAndSequences) {
  Iota x{{2, 3}};
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 3]>", "reverse(x = x)", x.in()), DType::FP32, {2, 3},
                {5, 4, 3, 2, 1, 0});
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 3]>", "reverse(x = x, axes = " + i32s({-1}) + ")", x.in()),
                DType::FP32, {2, 3}, {2, 1, 0, 5, 4, 3});
  // Batch along axis 0; reverse the first lengths[b] entries along axis 1.
  expect_tensor(run_op(x.param(), "tensor<fp32, [2, 3]>",
                       "reverse_sequence(x = x, lengths = " + i32s({2, 3}) + ", seq_axis = int32(1))", x.in()),
                DType::FP32, {2, 3}, {1, 0, 2, 5, 4, 3});
}

// ---------------------------------------------------------------- generators

TEST(Range1d, FloatIntAndNonConstant) {
  Iota dummy{{1}};
  expect_tensor(run_op(dummy.param(), "tensor<fp32, [3]>",
                       "range_1d(start = fp32(0.5), end = fp32(2.0), step = fp32(0.5))", dummy.in()),
                DType::FP32, {3}, {0.5, 1.0, 1.5});
  // Element i is start + i * step rounded once: ceil(1 / 0.3f) = 4 elements.
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) want.push_back(double(float(i * double(0.3f))));
  expect_tensor(run_op(dummy.param(), "tensor<fp32, [4]>",
                       "range_1d(start = fp32(0), end = fp32(1), step = fp32(0.3))", dummy.in()),
                DType::FP32, {4}, want);
  expect_tensor(run_op(dummy.param(), "tensor<int32, [3]>", "range_1d(start = int32(10), end = int32(1), step = int32(-3))",
                       dummy.in()),
                DType::Int32, {3}, {10, 7, 4});
  expect_tensor(run_op(dummy.param(), "tensor<int32, [0]>", "range_1d(start = int32(3), end = int32(1), step = int32(1))",
                       dummy.in()),
                DType::Int32, {0}, {});
  expect_tensor(run_op("int32 e", "tensor<int32, [?]>", "range_1d(start = int32(-2), end = e, step = int32(2))",
                       {{"e", make(DType::Int32, {}, {5})}}),
                DType::Int32, {4}, {-2, 0, 2, 4});
  expect_error(dummy.param(), "tensor<int32, [3]>", "range_1d(start = int32(0), end = fp32(3), step = int32(1))",
               dummy.in(), "range_1d", "dtype");
  expect_error(dummy.param(), "tensor<int32, [3]>", "range_1d(start = int32(0), end = int32(3), step = int32(0))",
               dummy.in(), "range_1d", "step");
}

TEST(Fill, ConstantAndParameterShapes) {
  Iota dummy{{1}};
  expect_tensor(run_op(dummy.param(), "tensor<fp32, [2, 3]>", "fill(shape = " + i32s({2, 3}) + ", value = fp32(1.5))",
                       dummy.in()),
                DType::FP32, {2, 3}, std::vector<double>(6, 1.5));
  expect_tensor(run_op(dummy.param(), "tensor<fp32, [2]>", "fill(shape = " + i32s({2}) + ")", dummy.in()), DType::FP32,
                {2}, {0, 0});
  expect_tensor(run_op("tensor<int32, [2]> s", "tensor<int32, [?, ?]>", "fill(shape = s, value = int32(-4))",
                       {{"s", make(DType::Int32, {2}, {1, 2})}}),
                DType::Int32, {1, 2}, {-4, -4});
  expect_tensor(run_op(dummy.param(), "tensor<bool, [1]>", "fill_like(ref_tensor = x, value = bool(true))", dummy.in()),
                DType::Bool, {1}, {1});
  expect_error(dummy.param(), "tensor<fp32, [2]>", "fill(shape = " + i32s({2}) + ", value = int32(1))", dummy.in(),
               "fill", "declared");
}

TEST(Shape, IsInt32AndFollowsRuntimeDims) {
  expect_tensor(run_op("tensor<fp16, [?, 3, 1]> x", "tensor<int32, [3]>", "shape(x = x)",
                       {{"x", make(DType::FP16, {2, 3, 1}, iota(6))}}),
                DType::Int32, {3}, {2, 3, 1});
  // shape feeding reshape: not a compile-time constant, so the target dims are unknown.
  std::string body = stmt("tensor<int32, [2]>", "s", "shape(x = y)") +
                     stmt("tensor<fp32, [?, ?]>", "z", "reshape(x = x, shape = s)");
  TensorMap r = run_body("tensor<fp32, [6]> x, tensor<fp32, [2, 3]> y", body, "z",
                         {{"x", make(DType::FP32, {6}, iota(6))}, {"y", make(DType::FP32, {2, 3}, iota(6))}});
  expect_tensor(r.at("z"), DType::FP32, {2, 3}, iota(6));
}

TEST(OneHot, AxisAndValues) {
  std::string params = "tensor<int32, [3]> i";
  TensorMap in = {{"i", make(DType::Int32, {3}, {0, 2, 1})}};
  expect_tensor(run_op(params, "tensor<int32, [3, 3]>", "one_hot(indices = i, one_hot_vector_size = int32(3))", in),
                DType::Int32, {3, 3}, {1, 0, 0, 0, 0, 1, 0, 1, 0});
  expect_tensor(run_op(params, "tensor<fp32, [4, 3]>",
                       "one_hot(indices = i, one_hot_vector_size = int32(4), axis = int32(0), on_value = fp32(2), "
                       "off_value = fp32(-1))",
                       in),
                DType::FP32, {4, 3}, {2, -1, -1, -1, -1, 2, -1, 2, -1, -1, -1, -1});
}

TEST(Identity, PassesThrough) {
  Tensor x = make(DType::Int32, {2}, {2147483647, -1});
  expect_tensor(run_op("tensor<int32, [2]> x", "tensor<int32, [2]>", "identity(x = x)", {{"x", x}}), DType::Int32, {2},
                {2147483647, -1});
}

TEST(NonZero, RowsOfIndices) {
  expect_tensor(run_op("tensor<fp32, [2, 3]> x", "tensor<int32, [?, 2]>", "non_zero(x = x)",
                       {{"x", make(DType::FP32, {2, 3}, {0, 1.5, 0, -2, 0, 3})}}),
                DType::Int32, {3, 2}, {0, 1, 1, 0, 1, 2});
}

// ---------------------------------------------------------------- sorting, scans

TEST(Topk, DescendingAndAscendingWithTies) {
  std::string params = "tensor<fp32, [2, 5]> x";
  TensorMap in = {{"x", make(DType::FP32, {2, 5}, {3, 1, 3, 2, 1, 0, 5, -1, 5, 4})}};
  auto topk = [&](const std::string& args) {
    return run_body(params, stmt("tensor<fp32, [2, 3]> v, tensor<int32, [2, 3]>", "i", "topk(x = x, k = int32(3)" + args + ")"),
                    "v, i", in);
  };
  // Ties keep their original order.
  TensorMap r = topk("");
  expect_tensor(r.at("v"), DType::FP32, {2, 3}, {3, 3, 2, 5, 5, 4});
  expect_tensor(r.at("i"), DType::Int32, {2, 3}, {0, 2, 3, 1, 3, 4});
  r = topk(", ascending = bool(true)");
  expect_tensor(r.at("v"), DType::FP32, {2, 3}, {1, 1, 2, -1, 0, 4});
  expect_tensor(r.at("i"), DType::Int32, {2, 3}, {1, 4, 3, 2, 0, 4});
}

TEST(Topk, AxisZeroValuesOnlyAllAndErrors) {
  std::string params = "tensor<int32, [3, 2]> x";
  TensorMap in = {{"x", make(DType::Int32, {3, 2}, {4, 9, 7, 9, 7, 1})}};
  TensorMap r = run_body(params,
                         stmt("tensor<int32, [2, 2]> v, tensor<uint16, [2, 2]>", "i",
                              "topk(x = x, k = int32(2), axis = int32(0), output_indices_dtype = string(\"uint16\"))"),
                         "v, i", in);
  expect_tensor(r.at("v"), DType::Int32, {2, 2}, {7, 9, 7, 9});
  expect_tensor(r.at("i"), DType::UInt16, {2, 2}, {1, 0, 2, 1});
  expect_tensor(run_op(params, "tensor<int32, [3, 1]>", "topk(x = x, return_indices = bool(false))", in), DType::Int32,
                {3, 1}, {9, 9, 7});
  expect_tensor(run_op(params, "tensor<int32, [3, 2]>",
                       "topk(x = x, k = int32(-1), ascending = bool(true), return_indices = bool(false))", in),
                DType::Int32, {3, 2}, {4, 9, 7, 9, 1, 7});
  expect_error(params, "tensor<int32, [3, 3]>", "topk(x = x, k = int32(3), return_indices = bool(false))", in, "topk",
               "exceeds");
  expect_error(params, "tensor<int32, [3, 1]>", "topk(x = x)", in, "topk", "outputs");
}

TEST(Argsort, DefaultDescendingStable) {
  std::string params = "tensor<fp32, [5]> x";
  TensorMap in = {{"x", make(DType::FP32, {5}, {2, 7, 2, -1, 7})}};
  expect_tensor(run_op(params, "tensor<int32, [5]>", "argsort(x = x)", in), DType::Int32, {5}, {1, 4, 0, 2, 3});
  expect_tensor(run_op(params, "tensor<int32, [5]>", "argsort(x = x, ascending = bool(true))", in), DType::Int32, {5},
                {3, 0, 2, 1, 4});
}

TEST(Cumsum, ExclusiveAndReverse) {
  Iota x{{2, 3}};  // [[0, 1, 2], [3, 4, 5]]
  auto cumsum = [&](const std::string& args) {
    return run_op(x.param(), "tensor<fp32, [2, 3]>", "cumsum(x = x" + args + ")", x.in());
  };
  expect_tensor(cumsum(""), DType::FP32, {2, 3}, {0, 1, 2, 3, 5, 7});
  expect_tensor(cumsum(", axis = int32(-1)"), DType::FP32, {2, 3}, {0, 1, 3, 3, 7, 12});
  expect_tensor(cumsum(", axis = int32(1), exclusive = bool(true)"), DType::FP32, {2, 3}, {0, 0, 1, 0, 3, 7});
  expect_tensor(cumsum(", axis = int32(1), reverse = bool(true)"), DType::FP32, {2, 3}, {3, 3, 2, 12, 9, 5});
  expect_tensor(cumsum(", axis = int32(1), exclusive = bool(true), reverse = bool(true)"), DType::FP32, {2, 3},
                {3, 2, 0, 9, 5, 0});
}

// ---------------------------------------------------------------- unknown dims

TEST(UnknownDims, PropagateThroughShapeOps) {
  std::string body =
      stmt("tensor<fp32, [4, ?]>", "t", "transpose(x = x, perm = " + i32s({1, 0}) + ")") +
      stmt("tensor<fp32, [?, 2]> s0, tensor<fp32, [?, 2]>", "s1", "split(x = x, num_splits = int32(2), axis = int32(1))") +
      stmt("tensor<fp32, [?, 6]>", "p", "pad(x = x, pad = " + i32s({0, 0, 1, 1}) + ")") +
      stmt("tensor<fp32, [?, 4]>", "r", "tile(x = x, reps = " + i32s({2, 1}) + ")") +
      stmt("tensor<fp32, [2, 4]>", "g", "gather(x = x, indices = " + i32s({0, -1}) + ")") +
      stmt("tensor<fp32, [1, ?, 4]>", "e", "expand_dims(x = x, axes = " + i32s({0}) + ")") +
      stmt("tensor<int32, [2]>", "k", "shape(x = x)");
  TensorMap r = run_body("tensor<fp32, [?, 4]> x", body, "t, s1, p, r, g, e, k",
                           {{"x", make(DType::FP32, {2, 4}, iota(8))}});
  expect_tensor(r.at("t"), DType::FP32, {4, 2}, {0, 4, 1, 5, 2, 6, 3, 7});
  expect_tensor(r.at("s1"), DType::FP32, {2, 2}, {2, 3, 6, 7});
  expect_tensor(r.at("p"), DType::FP32, {2, 6}, {0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 0});
  expect_tensor(r.at("r"), DType::FP32, {4, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7});
  expect_tensor(r.at("g"), DType::FP32, {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_tensor(r.at("e"), DType::FP32, {1, 2, 4}, iota(8));
  expect_tensor(r.at("k"), DType::Int32, {2}, {2, 4});
}

// ---------------------------------------------------------------- opsets

TEST(Opsets, LaterRulesAreRefusedInEarlierOpsets) {
  Iota x{{2, 3, 4}};
  // Before iOS17 a 0 in 'shape' needs len(shape) == rank(x).
  expect_opset_error("ios16", x.param(), "tensor<fp32, [3, 8]>", "reshape(x = x, shape = " + i32s({0, -1}) + ")",
                     "reshape", "ios17");
  EXPECT_NO_THROW(verify(parse_mil(program_text(x.param(),
                                                stmt("tensor<fp32, [2, 6, 2]>", "z",
                                                     "reshape(x = x, shape = " + i32s({0, -1, 2}) + ")"),
                                                "z", "ios15"),
                                   "<test>", ".")));
  expect_opset_error("ios16", "tensor<fp32, [3, 2]> x", "tensor<fp32, [3, 2]>",
                     "topk(x = x, k = int32(-1), return_indices = bool(false))", "topk", "ios17");
  expect_opset_error("ios15", "tensor<fp32, [3, 2]> x", "tensor<fp32, [3, 1]>",
                     "topk(x = x, return_indices = bool(false))", "topk", "return_indices");
  expect_opset_error("ios15", x.param(), "tensor<fp32, [2, 1, 4]>",
                     "gather(x = x, indices = " + i32s({0}) + ", axis = int32(1), batch_dims = int32(0))", "gather",
                     "batch_dims");
  expect_opset_error("ios16", x.param(), "tensor<fp32, [2, 1, 4]>",
                     "gather(x = x, indices = " + i32s({0}) + ", axis = int32(1), validate_indices = bool(true))",
                     "gather", "validate_indices");
  expect_opset_error("ios17", "tensor<fp32, [2]> x, tensor<fp32, [1]> u", "tensor<fp32, [2]>",
                     "slice_update(x = x, update = u, begin = " + i32s({0}) + ", end = " + i32s({1}) + ")",
                     "slice_update", "ios18");
  expect_opset_error("ios15", x.param(), "tensor<fp32, [2, 3, 4]>", "fill_like(ref_tensor = x)", "fill_like", "ios16");
}

}  // namespace
}  // namespace milrt::test
