// Gradient rules of the data-movement ops (src/autodiff/rules_tensor.cpp),
// each checked against central differences of the forward program on the
// reference executor, and its derived program against the compiled plan
// (tests/support/grad_check.h). Every loss is reduce_sum(z * w) with random
// w, so each element's gradient is distinct: a rule that misplaces, drops or
// duplicates an element fails. These ops are linear in x, so the central
// difference is exact up to fp32 rounding of the loss.
#include <gtest/gtest.h>

#include <random>

#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "support/grad_check.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

// Checks d loss / d x for z = expr(x) with x of shape xs.
GradCheckResult check_x(const Shape& xs, const std::string& expr, const Shape& zs, const std::string& pre = "",
                        TensorMap inputs = {}, const std::string& extra_params = "",
                        const GradCheckOptions& o = GradCheckOptions{}) {
  SCOPED_TRACE(expr);
  std::string params = mil_type(xs) + " x" + (extra_params.empty() ? "" : ", " + extra_params);
  return expect_gradients_match(weighted_sum_loss_program(params, expr, zs, pre), "loss", {"x"}, inputs, o);
}

// The op types of the derived function.
std::vector<std::string> derived_ops(const GradCheckResult& r) {
  std::vector<std::string> t;
  for (const Op& op : r.derived.function("main_grad")->ops) t.push_back(op.type);
  return t;
}
bool has_op(const GradCheckResult& r, const std::string& type) {
  auto t = derived_ops(r);
  return std::find(t.begin(), t.end(), type) != t.end();
}

// ---- reshape family, transpose ------------------------------------------------

TEST(TensorGrad, Reshape) {
  check_x({2, 3, 4}, "reshape(x = x, shape = " + mil_ints({4, 6}) + ")", {4, 6});
  check_x({2, 3, 4}, "reshape(x = x, shape = " + mil_ints({6, -1}) + ")", {6, 4});
  check_x({2, 3, 4}, "reshape(x = x, shape = " + mil_ints({0, 2, -1}) + ")", {2, 2, 6});   // 0: x's dim, right-aligned
  check_x({5}, "reshape(x = x, shape = " + mil_ints({1, 5, 1}) + ")", {1, 5, 1});
}

TEST(TensorGrad, ReshapeShapeFromConstOp) {
  // coremltools writes parameters as `const` ops rather than literals.
  std::string pre = "        tensor<int32, [2]> shp = const()[name = string(\"shp\"), val = " + mil_ints({3, 8}) + "];\n";
  check_x({2, 3, 4}, "reshape(x = x, shape = shp)", {3, 8}, pre);
}

TEST(TensorGrad, SqueezeExpandFlatten) {
  check_x({2, 1, 3, 1}, "squeeze(x = x, axes = " + mil_ints({-1}) + ")", {2, 1, 3});
  check_x({2, 1, 3, 1}, "squeeze(x = x)", {2, 3});
  check_x({2, 3}, "expand_dims(x = x, axes = " + mil_ints({0, -1}) + ")", {1, 2, 3, 1});
  check_x({2, 3, 4}, "flatten2d(x = x, axis = int32(1))", {2, 12});
  check_x({2, 3, 4}, "flatten2d(x = x, axis = int32(-1))", {6, 4});
  check_x({3, 2}, "identity(x = x)", {3, 2});
}

TEST(TensorGrad, Transpose) {
  check_x({2, 3, 4}, "transpose(x = x, perm = " + mil_ints({2, 0, 1}) + ")", {4, 2, 3});
  check_x({2, 3, 4, 5}, "transpose(x = x, perm = " + mil_ints({-1, 0, 2, 1}) + ")", {5, 2, 4, 3});
  check_x({3, 5}, "transpose(x = x, perm = " + mil_ints({1, 0}) + ")", {5, 3});
}

// ---- slices -------------------------------------------------------------------------

struct SliceCase {
  const char* name;
  Shape xs;
  std::string args;   // everything after `x = x, `
  Shape zs;
  const char* expect_op;   // the op that writes the gradient back: pad or slice_update
};

void PrintTo(const SliceCase& c, std::ostream* os) { *os << c.name; }

class SliceGrad : public ::testing::TestWithParam<SliceCase> {};

TEST_P(SliceGrad, MatchesFiniteDifferences) {
  const SliceCase& s = GetParam();
  auto r = check_x(s.xs, "slice_by_index(x = x, " + s.args + ")", s.zs);
  if (HasFailure()) return;
  EXPECT_TRUE(has_op(r, s.expect_op)) << s.name;
}

INSTANTIATE_TEST_SUITE_P(
    Slices, SliceGrad,
    ::testing::Values(
        SliceCase{"block", {4, 5}, "begin = " + mil_ints({1, 0}) + ", end = " + mil_ints({3, 5}), {2, 5}, "pad"},
        SliceCase{"negative_begin", {4, 5}, "begin = " + mil_ints({-3, 1}) + ", end = " + mil_ints({4, -1}), {3, 3}, "pad"},
        SliceCase{"masks_nonempty", {4, 5},
                  "begin = " + mil_ints({2, 3}) + ", end = " + mil_ints({3, 1}) + ", begin_mask = " + mil_bools({1, 0}) +
                      ", end_mask = " + mil_bools({0, 1}),
                  {3, 2}, "pad"},
        SliceCase{"squeeze", {3, 4, 5},
                  "begin = " + mil_ints({0, -2, 1}) + ", end = " + mil_ints({3, 0, 4}) + ", squeeze_mask = " + mil_bools({0, 1, 0}),
                  {3, 3}, "pad"},
        SliceCase{"squeeze_first", {3, 4},
                  "begin = " + mil_ints({2, 0}) + ", end = " + mil_ints({0, 4}) + ", squeeze_mask = " + mil_bools({1, 0}), {4}, "pad"},
        SliceCase{"stride2", {4, 7},
                  "begin = " + mil_ints({0, 1}) + ", end = " + mil_ints({4, 7}) + ", stride = " + mil_ints({1, 2}), {4, 3},
                  "slice_update"},
        SliceCase{"stride3_clamped", {2, 8},
                  "begin = " + mil_ints({0, 2}) + ", end = " + mil_ints({2, 100}) + ", stride = " + mil_ints({1, 3}), {2, 2},
                  "slice_update"},
        SliceCase{"reverse", {3, 5},
                  "begin = " + mil_ints({0, 0}) + ", end = " + mil_ints({0, 0}) + ", stride = " + mil_ints({1, -1}) +
                      ", begin_mask = " + mil_bools({1, 1}) + ", end_mask = " + mil_bools({1, 1}),
                  {3, 5}, "slice_update"},
        SliceCase{"reverse_stride2_to_zero", {2, 6},
                  "begin = " + mil_ints({0, 4}) + ", end = " + mil_ints({2, 0}) + ", stride = " + mil_ints({1, -2}) +
                      ", end_mask = " + mil_bools({0, 1}),
                  {2, 3}, "slice_update"},
        SliceCase{"reverse_partial", {2, 6},
                  "begin = " + mil_ints({0, -1}) + ", end = " + mil_ints({2, 1}) + ", stride = " + mil_ints({1, -2}), {2, 2},
                  "slice_update"},
        SliceCase{"strided_and_squeezed", {3, 4, 6},
                  "begin = " + mil_ints({1, 0, 5}) + ", end = " + mil_ints({0, 4, 0}) + ", stride = " + mil_ints({1, 2, -2}) +
                      ", squeeze_mask = " + mil_bools({1, 0, 0}),
                  {2, 3}, "slice_update"}),
    [](const ::testing::TestParamInfo<SliceCase>& i) { return std::string(i.param.name); });

TEST(TensorGrad, SliceBySize) {
  check_x({4, 5}, "slice_by_size(x = x, begin = " + mil_ints({1, 2}) + ", size = " + mil_ints({2, -1}) + ")", {2, 3});
  check_x({2, 3, 4}, "slice_by_size(x = x, begin = " + mil_ints({0, -2, 1}) + ", size = " + mil_ints({2, 2, 2}) + ")", {2, 2, 2});
  check_x({3, 4}, "slice_by_size(x = x, begin = " + mil_ints({0, 0}) + ", size = " + mil_ints({3, 4}) + ")", {3, 4});
}

// ---- concat, split, stack -----------------------------------------------------------

TEST(TensorGrad, Concat) {
  // Two differentiated values and one that is not (y is a weight-like input, c a const).
  Shape xs{2, 3}, ys{2, 4};
  std::string pre = "        tensor<fp32, [2, 1]> c = const()[name = string(\"c\"), val = tensor<fp32, [2, 1]>([[0.5], [-0.5]])];\n";
  std::string text = weighted_sum_loss_program(mil_type(xs) + " x, " + mil_type(ys) + " y",
                                  "concat(values = (x, c, y, x), axis = int32(-1), interleave = bool(false))",
                                  {2, 11}, pre);
  expect_gradients_match(text, "loss", {"x", "y"}, {}, GradCheckOptions{});
}

TEST(TensorGrad, ConcatAxis0AndInterleave) {
  check_x({2, 3}, "concat(values = (x, x), axis = int32(0), interleave = bool(false))", {4, 3});
  Shape xs{2, 3};
  std::string text = weighted_sum_loss_program(mil_type(xs) + " x, " + mil_type(xs) + " y",
                                  "concat(values = (x, y, x), axis = int32(1), interleave = bool(true))", {2, 9});
  auto r = expect_gradients_match(text, "loss", {"x", "y"});
  EXPECT_TRUE(has_op(r, "slice_by_index"));
}

TEST(TensorGrad, SplitAllOutputsUsed) {
  Shape xs{3, 7};
  std::string body =
      "        tensor<fp32, [3, 2]> a, tensor<fp32, [3, 4]> b, tensor<fp32, [3, 1]> d = split(x = x, split_sizes = " +
      mil_ints({2, 4, 1}) + ", axis = int32(-1))[name = string(\"sp\")];\n" +
      stmt(mil_type({3, 2}), "a2", "mul(x = a, y = wa)") + stmt(mil_type({3, 4}), "b2", "mul(x = b, y = wb)") +
      stmt(mil_type({3, 1}), "d2", "mul(x = d, y = d)") + stmt("fp32", "la", "reduce_sum(x = a2)") +
      stmt("fp32", "lb", "reduce_sum(x = b2)") + stmt("fp32", "ld", "reduce_sum(x = d2)") +
      stmt("fp32", "lab", "add(x = la, y = lb)") + stmt("fp32", "loss", "add(x = lab, y = ld)");
  std::string text = program_text(mil_type(xs) + " x, " + mil_type({3, 2}) + " wa, " + mil_type({3, 4}) + " wb", body, "loss");
  expect_gradients_match(text, "loss", {"x"}, {}, GradCheckOptions{});
}

TEST(TensorGrad, SplitSomeOutputsUnused) {
  // Only the middle part reaches the loss: the others' gradients are zeros.
  Shape xs{6, 2};
  std::string body = "        tensor<fp32, [2, 2]> a, tensor<fp32, [2, 2]> b, tensor<fp32, [2, 2]> d = "
                     "split(x = x, num_splits = int32(3), axis = int32(0))[name = string(\"sp\")];\n" +
                     stmt(mil_type({2, 2}), "b2", "mul(x = b, y = wb)") + stmt("fp32", "loss", "reduce_sum(x = b2)");
  std::string text = program_text(mil_type(xs) + " x, " + mil_type({2, 2}) + " wb", body, "loss");
  auto r = expect_gradients_match(text, "loss", {"x"}, {}, GradCheckOptions{});
  std::vector<double> g = values(r.grads.at("x_grad"));
  ASSERT_EQ(g.size(), 12u);
  for (size_t i : {0u, 1u, 2u, 3u, 8u, 9u, 10u, 11u}) EXPECT_EQ(g[i], 0.0) << i;
}

TEST(TensorGrad, Stack) {
  Shape xs{2, 3};
  std::string text = weighted_sum_loss_program(mil_type(xs) + " x, " + mil_type(xs) + " y", "stack(values = (x, y, x), axis = int32(1))",
                                  {2, 3, 3});
  expect_gradients_match(text, "loss", {"x", "y"});
  check_x(xs, "stack(values = (x, x), axis = int32(-1))", {2, 3, 2});
}

TEST(TensorGrad, Tile) {
  check_x({2, 3}, "tile(x = x, reps = " + mil_ints({2, 1}) + ")", {4, 3});
  check_x({2, 3}, "tile(x = x, reps = " + mil_ints({3, 2}) + ")", {6, 6});
  check_x({2, 1, 3}, "tile(x = x, reps = " + mil_ints({2, 4, 2}) + ")", {4, 4, 6});
  check_x({3}, "tile(x = x, reps = " + mil_ints({1}) + ")", {3});
}

// ---- gathers ---------------------------------------------------------------------------

Tensor ints(const Shape& s, const std::vector<double>& v) { return make(DType::Int32, s, v); }

TEST(TensorGrad, GatherRepeatedIndicesAccumulate) {
  // Row 2 is read three times, row 0 never: an embedding lookup's gradient.
  Shape xs{5, 3};
  TensorMap in{{"idx", ints({2, 3}, {2, 4, 2, 1, -3, 2})}};
  auto r = check_x(xs, "gather(x = x, indices = idx, axis = int32(0))", {2, 3, 3}, "", in, "tensor<int32, [2, 3]> idx");
  if (HasFailure()) return;
  EXPECT_TRUE(has_op(r, "scatter"));
  for (int j = 0; j < 3; ++j) EXPECT_EQ(r.grads.at("x_grad").at(size_t(j)), 0.0);   // row 0 unread
}

TEST(TensorGrad, GatherOtherAxes) {
  TensorMap in{{"idx", ints({4}, {3, 0, 0, -1})}};
  check_x({2, 4, 3}, "gather(x = x, indices = idx, axis = int32(1))", {2, 4, 3}, "", in, "tensor<int32, [4]> idx");
  check_x({2, 4, 3}, "gather(x = x, indices = idx, axis = int32(-1))", {2, 4, 4}, "",
          {{"idx", ints({4}, {2, 0, 0, 1})}}, "tensor<int32, [4]> idx");
  // Constant indices, as a model's fixed lookups have them.
  check_x({4, 2}, "gather(x = x, indices = " + mil_ints({1, 1, 3}) + ", axis = int32(0))", {3, 2});
}

TEST(TensorGrad, GatherAlongAxis) {
  TensorMap in{{"idx", ints({2, 3}, {0, 2, 2, 1, 1, 0})}};
  check_x({3, 3}, "gather_along_axis(x = x, indices = idx, axis = int32(0))", {2, 3}, "", in,
          "tensor<int32, [2, 3]> idx");
  in["idx"] = ints({3, 2}, {0, 0, 2, 1, 1, 2});
  check_x({3, 3}, "gather_along_axis(x = x, indices = idx, axis = int32(-1))", {3, 2}, "", in,
          "tensor<int32, [3, 2]> idx");
}

// ---- band_part, pad ----------------------------------------------------------------------

TEST(TensorGrad, BandPart) {
  auto r = check_x({2, 4, 4}, "band_part(x = x, lower = int32(1), upper = int32(0))", {2, 4, 4});
  if (HasFailure()) return;
  // Outside the band the gradient is exactly zero: element (0, 0, 3).
  EXPECT_EQ(r.grads.at("x_grad").at(3), 0.0);
  check_x({3, 5}, "band_part(x = x, lower = int32(-1), upper = int32(1))", {3, 5});
}

TEST(TensorGrad, PadConstant) {
  check_x({2, 3}, "pad(x = x, pad = " + mil_ints({1, 2}) + ", mode = string(\"constant\"), constant_val = fp32(3))", {2, 6});
  check_x({2, 3, 2}, "pad(x = x, pad = " + mil_ints({0, 1, 2, 0, 1, 1}) + ")", {3, 5, 4});
}

TEST(TensorGrad, PadReflectIsRejectedClearly) {
  Shape xs{2, 4};
  std::string text = weighted_sum_loss_program(mil_type(xs) + " x", "pad(x = x, pad = " + mil_ints({1, 1}) + ", mode = string(\"reflect\"))", {2, 6});
  Program p = parse_mil(text, "<test>", ".");
  GradOptions o;
  o.loss = "loss";
  o.wrt = {"x"};
  try {
    differentiate(p, o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reflect"), std::string::npos) << e.what();
  }
}

TEST(TensorGrad, GatherBatchDimsIsRejectedClearly) {
  Shape xs{2, 4};
  std::string text = weighted_sum_loss_program(mil_type(xs) + " x, tensor<int32, [2, 1]> idx",
                                  "gather(x = x, indices = idx, axis = int32(1), batch_dims = int32(1))", {2, 1});
  Program p = parse_mil(text, "<test>", ".");
  GradOptions o;
  o.loss = "loss";
  o.wrt = {"x"};
  try {
    differentiate(p, o);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_dims"), std::string::npos) << e.what();
  }
}

// ---- random chains ---------------------------------------------------------------------

// Random shapes through reshape -> transpose -> slice -> concat -> tile, so
// rules compose on shapes nobody picked by hand.
TEST(TensorGrad, RandomChains) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::mt19937_64 rng(seed);
    int64_t a = 1 + int64_t(rng() % 4), b = 2 + int64_t(rng() % 3), c = 1 + int64_t(rng() % 3);
    Shape xs{a, b * c};
    std::vector<int64_t> perm = (rng() & 1) ? std::vector<int64_t>{2, 0, 1} : std::vector<int64_t>{1, 2, 0};
    Shape r3{a, b, c}, t3(3);
    for (size_t i = 0; i < 3; ++i) t3[i] = r3[size_t(perm[i])];
    Shape sl = t3;
    sl[0] = t3[0] - 1 > 0 ? t3[0] - 1 : 1;
    int64_t begin0 = t3[0] - sl[0];
    Shape cat = sl;
    cat[2] += t3[2];
    Shape tl = cat;
    tl[1] *= 2;
    std::string body = stmt(mil_type(r3), "r", "reshape(x = x, shape = " + mil_ints(r3) + ")") +
                       stmt(mil_type(t3), "t", "transpose(x = r, perm = " + mil_ints(perm) + ")") +
                       stmt(mil_type(sl), "s", "slice_by_index(x = t, begin = " + mil_ints({begin0, 0, 0}) + ", end = " +
                                             mil_ints({t3[0], t3[1], t3[2]}) + ")") +
                       stmt(mil_type(t3), "t2", "mul(x = t, y = t)") +
                       stmt(mil_type(sl), "s2", "slice_by_size(x = t2, begin = " + mil_ints({0, 0, 0}) + ", size = " + mil_ints(sl) + ")") +
                       stmt(mil_type(cat), "k", "concat(values = (s, s2), axis = int32(-1), interleave = bool(false))") +
                       stmt(mil_type(tl), "z", "tile(x = k, reps = " + mil_ints({1, 2, 1}) + ")") +
                       stmt(mil_type(tl), "p", "mul(x = z, y = w)") + stmt("fp32", "loss", "reduce_sum(x = p)");
    SCOPED_TRACE("seed " + std::to_string(seed) + " x " + shape_str(xs));
    GradCheckOptions o;
    o.seed = seed;
    expect_gradients_match(program_text(mil_type(xs) + " x, " + mil_type(tl) + " w", body, "loss"), "loss", {"x"}, {}, o);
  }
}

}  // namespace
}  // namespace milrt::test
