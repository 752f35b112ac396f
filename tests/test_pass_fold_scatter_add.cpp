// fold-scatter-add: add(a, scatter-add into zeros) becomes a scatter-add into
// a. With distinct indices the values are bit-identical (a + (0 + u) is
// a + u); with repeated indices they change by the order of the additions.
// The compiled scatter may then write into a's buffer: checked against the
// reference executor on the unfolded program, with a an input (which must
// survive) and a value that other ops read afterwards.
#include <cmath>

#include "milrt/plan.h"
#include "test_pass_util.h"

namespace milrt::test::pass {
namespace {

Program folded(const Program& p) {
  Program q = p;
  run_passes(q, {"fold-scatter-add", "dce"});
  return q;
}

// a [4, 3] plus a scatter-add of u [2, 3] into zero rows `rows` (a literal).
Program row_scatter(const std::string& rows, const std::string& zeros, const std::string& add_operands,
                    const std::string& mode = "string(\"add\")") {
  return parse18("tensor<fp32, [4, 3]> a, tensor<fp32, [2, 3]> u",
                 "    tensor<fp32, [4, 3]> z = " + zeros + "[name = string(\"z\")];\n"
                 "    tensor<fp32, [4, 3]> s = scatter(data = z, indices = tensor<int32, [2]>(" + rows +
                     "), updates = u, axis = int32(0), mode = " + mode + ")[name = string(\"s\")];\n"
                 "    tensor<fp32, [4, 3]> y = add(" + add_operands + ")[name = string(\"y\")];",
                 "y");
}

const std::string kFill = "fill(shape = tensor<int32, [2]>([4, 3]), value = fp32(0))";

TEST(FoldScatterAdd, ScattersIntoTheAddendOnEitherSide) {
  for (const char* operands : {"x = a, y = s", "x = s, y = a"}) {
    const Program before = row_scatter("[2, 0]", kFill, operands);
    const Program after = folded(before);
    EXPECT_EQ(op_types(after), (std::vector<std::string>{"scatter"})) << operands;
    const Op* y = producer(after, "y");
    ASSERT_NE(y, nullptr);
    EXPECT_EQ(y->arg("data")->var, "a");
    EXPECT_EQ(y->arg("updates")->var, "u");
    expect_same_outputs(before, after);
  }
}

TEST(FoldScatterAdd, TakesAConstantOfZerosAndADefaultMode) {
  const Program before = parse18(
      "tensor<fp32, [4, 3]> a, tensor<fp32, [2, 3]> u",
      "    tensor<fp32, [4, 3]> z = const()[name = string(\"z\"), val = tensor<fp32, [4, 3]>([[0, 0, 0], [0, 0, 0], "
      "[0, 0, 0], [0, 0, 0]])];\n"
      "    tensor<fp32, [4, 3]> s = scatter(data = z, indices = tensor<int32, [2]>([3, 1]), updates = u)"
      "[name = string(\"s\")];\n"
      "    tensor<fp32, [4, 3]> y = add(x = a, y = s)[name = string(\"y\")];",
      "y");
  const Program after = folded(before);
  EXPECT_EQ(producer(after, "y")->type, "scatter");
  expect_same_outputs(before, after);
}

TEST(FoldScatterAdd, FoldsScatterAlongAxisAndScatterNd) {
  const Program along = parse18(
      "tensor<fp32, [2, 5]> a, tensor<fp32, [2, 1]> u",
      "    tensor<fp32, [2, 5]> z = fill(shape = tensor<int32, [2]>([2, 5]), value = fp32(0))[name = string(\"z\")];\n"
      "    tensor<fp32, [2, 5]> s = scatter_along_axis(data = z, indices = tensor<int32, [2, 1]>([[4], [1]]), "
      "updates = u, axis = int32(-1), mode = string(\"add\"))[name = string(\"s\")];\n"
      "    tensor<fp32, [2, 5]> y = add(x = s, y = a)[name = string(\"y\")];",
      "y");
  const Program along_after = folded(along);
  EXPECT_EQ(op_types(along_after), (std::vector<std::string>{"scatter_along_axis"}));
  expect_same_outputs(along, along_after);

  const Program nd = parse18(
      "tensor<fp32, [3, 4]> a, tensor<fp32, [2]> u",
      "    tensor<fp32, [3, 4]> z = fill(shape = tensor<int32, [2]>([3, 4]), value = fp32(0))[name = string(\"z\")];\n"
      "    tensor<fp32, [3, 4]> s = scatter_nd(data = z, indices = tensor<int32, [2, 2]>([[0, 3], [2, 1]]), "
      "updates = u, mode = string(\"add\"))[name = string(\"s\")];\n"
      "    tensor<fp32, [3, 4]> y = add(x = a, y = s)[name = string(\"y\")];",
      "y");
  const Program nd_after = folded(nd);
  EXPECT_EQ(op_types(nd_after), (std::vector<std::string>{"scatter_nd"}));
  expect_same_outputs(nd, nd_after);
}

TEST(FoldScatterAdd, LeavesOtherScattersAndAddsAlone) {
  // Not an add-scatter; the scatter read twice; a broadcast.
  const Program update = row_scatter("[2, 0]", kFill, "x = a, y = s", "string(\"update\")");
  EXPECT_EQ(producer(folded(update), "y")->type, "add");
  const Program twice = parse18(
      "tensor<fp32, [4, 3]> a, tensor<fp32, [2, 3]> u",
      "    tensor<fp32, [4, 3]> z = " + kFill + "[name = string(\"z\")];\n"
      "    tensor<fp32, [4, 3]> s = scatter(data = z, indices = tensor<int32, [2]>([2, 0]), updates = u, "
      "axis = int32(0), mode = string(\"add\"))[name = string(\"s\")];\n"
      "    tensor<fp32, [4, 3]> y = add(x = a, y = s)[name = string(\"y\")];",
      "y, s");
  EXPECT_EQ(producer(folded(twice), "y")->type, "add");
  // The add broadcasts a [1, 3] row: scattering into it would change the shape.
  const Program broadcast = parse18(
      "tensor<fp32, [1, 3]> a, tensor<fp32, [2, 3]> u",
      "    tensor<fp32, [4, 3]> z = " + kFill + "[name = string(\"z\")];\n"
      "    tensor<fp32, [4, 3]> s = scatter(data = z, indices = tensor<int32, [2]>([2, 0]), updates = u, "
      "axis = int32(0), mode = string(\"add\"))[name = string(\"s\")];\n"
      "    tensor<fp32, [4, 3]> y = add(x = a, y = s)[name = string(\"y\")];",
      "y");
  EXPECT_EQ(producer(folded(broadcast), "y")->type, "add");
}

// A scatter into something else than zeros moves out of the add:
// a + scatter(d, u) = scatter(a + d, u), equal to fp32 rounding.
TEST(FoldScatterAdd, MovesAScatterIntoOtherDataOutOfTheAdd) {
  const Program before = parse18(
      "tensor<fp32, [4, 3]> a, tensor<fp32, [4, 3]> d, tensor<fp32, [2, 3]> u",
      "    tensor<fp32, [4, 3]> s = scatter(data = d, indices = tensor<int32, [2]>([2, 0]), updates = u, "
      "axis = int32(0), mode = string(\"add\"))[name = string(\"s\")];\n"
      "    tensor<fp32, [4, 3]> y = add(x = a, y = s)[name = string(\"y\")];",
      "y");
  const Program after = folded(before);
  const Op* y = producer(after, "y");
  ASSERT_EQ(y->type, "scatter");
  const Op* sum = producer(after, y->arg("data")->var);
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->type, "add");
  EXPECT_EQ(op_counts(after)["scatter"], 1);  // the old one is gone
  TensorMap in = inputs_for(before.functions[0], 9);
  const Tensor want = run_reference(before, "main", in).at("y");
  const Tensor got = run_reference(after, "main", in).at("y");
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.at(size_t(i)), want.at(size_t(i)), 1e-6) << i;
}

// Repeated indices: (a + u1) + u2 instead of a + (u1 + u2), equal to fp32 rounding.
TEST(FoldScatterAdd, RepeatedIndicesAgreeToRounding) {
  const Program before = row_scatter("[1, 1]", kFill, "x = a, y = s");
  const Program after = folded(before);
  ASSERT_EQ(producer(after, "y")->type, "scatter");
  TensorMap in = inputs_for(before.functions[0], 7);
  const Tensor want = run_reference(before, "main", in).at("y");
  const Tensor got = run_reference(after, "main", in).at("y");
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.at(size_t(i)), want.at(size_t(i)), 1e-6) << i;
}

// Compiled: the scatter runs in the addend's buffer when nothing else reads it,
// never in an input's and never under a later reader.
TEST(FoldScatterAdd, CompiledScatterKeepsInputsAndLaterReadersIntact) {
  const Program p = parse18(
      "tensor<fp32, [4, 3]> x, tensor<fp32, [3, 3]> u",
      "    tensor<fp32, [4, 3]> a = mul(x = x, y = fp32(2))[name = string(\"a\")];\n"
      "    tensor<fp32, [4, 3]> z = " + kFill + "[name = string(\"z\")];\n"
      "    tensor<fp32, [4, 3]> s = scatter(data = z, indices = tensor<int32, [3]>([3, 0, 3]), updates = u, "
      "axis = int32(0), mode = string(\"add\"))[name = string(\"s\")];\n"
      "    tensor<fp32, [4, 3]> y = add(x = a, y = s)[name = string(\"y\")];\n"
      "    tensor<fp32, [4, 3]> z2 = " + kFill + "[name = string(\"z2\")];\n"
      "    tensor<fp32, [4, 3]> s2 = scatter(data = z2, indices = tensor<int32, [3]>([1, 2, 1]), updates = u, "
      "axis = int32(0), mode = string(\"add\"))[name = string(\"s2\")];\n"
      "    tensor<fp32, [4, 3]> y2 = add(x = s2, y = x)[name = string(\"y2\")];\n"
      "    tensor<fp32, [4, 3]> z3 = " + kFill + "[name = string(\"z3\")];\n"
      "    tensor<fp32, [4, 3]> s3 = scatter(data = z3, indices = tensor<int32, [3]>([0, 1, 2]), updates = u, "
      "axis = int32(0), mode = string(\"add\"))[name = string(\"s3\")];\n"
      "    tensor<fp32, [4, 3]> y3 = add(x = a, y = s3)[name = string(\"y3\")];\n"
      "    tensor<fp32, [4, 3]> w = sub(x = a, y = y3)[name = string(\"w\")];",
      "y, y2, w");
  TensorMap in = inputs_for(p.functions[0], 3);
  const Tensor x_before = in.at("x");
  const TensorMap want = run_reference(p, "main", in);
  Plan plan = compile(p);
  const TensorMap got = plan.run(in);
  EXPECT_TRUE(in.at("x").same_bytes(x_before)) << "the input was written";
  for (const char* name : {"y", "y2", "w"})
    for (int64_t i = 0; i < want.at(name).numel(); ++i)
      EXPECT_NEAR(got.at(name).at(size_t(i)), want.at(name).at(size_t(i)), 1e-6) << name << " " << i;
  // The folded program is what ran.
  Program q = p;
  run_passes(q, CompileOptions{}.passes);
  EXPECT_EQ(op_counts(q)["add"], 0);
  EXPECT_EQ(op_counts(q)["fill"], 0);
}

}  // namespace
}  // namespace milrt::test::pass
