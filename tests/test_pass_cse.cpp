// cse: ops of the same type with the same inputs (same variables, equal
// literals) and the same output types are merged; uses of a dropped op's
// outputs read the survivor's; function outputs keep their names.
#include <cstdio>

#include "passes/pass_registry.h"
#include "test_pass_util.h"

namespace milrt::test::pass {
namespace {

Program after_cse(const Program& p) {
  Program q = p;
  run_passes(q, {"cse"});
  return q;
}

// The variable an op input reads ("" for literals).
std::string var_of(const Program& p, const std::string& out, const std::string& key) {
  const Arg* a = producer(p, out)->arg(key);
  return a && a->kind == Arg::Kind::Var ? a->var : "";
}

TEST(Cse, MergesDuplicatesAndWhatDependsOnThem) {
  const Program before = parse18(
      "tensor<fp32, [2, 3]> x",
      "    tensor<fp32, []> a = const()[name = string(\"a\"), val = fp32(2)];\n"
      "    tensor<fp32, []> b = const()[name = string(\"b\"), val = fp32(2)];\n"
      "    tensor<fp32, [2, 3]> r1 = relu(x = x)[name = string(\"r1\")];\n"
      "    tensor<fp32, [2, 3]> r2 = relu(x = x)[name = string(\"r2\")];\n"
      "    tensor<fp32, [2, 3]> s1 = mul(x = r1, y = a)[name = string(\"s1\")];\n"
      "    tensor<fp32, [2, 3]> s2 = mul(x = r2, y = b)[name = string(\"s2\")];\n"
      "    tensor<fp32, [2, 3]> y = sub(x = s1, y = s2)[name = string(\"y\")];",
      "y");
  const Program after = after_cse(before);
  // b merges into a, r2 into r1; then s2 reads (r1, a) like s1 and merges too.
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"const", "relu", "mul", "sub"}));
  EXPECT_EQ(var_of(after, "s1", "x"), "r1");
  EXPECT_EQ(var_of(after, "s1", "y"), "a");
  EXPECT_EQ(var_of(after, "y", "x"), "s1");
  EXPECT_EQ(var_of(after, "y", "y"), "s1");
  const std::string text = print_mil(after);
  EXPECT_NE(text.find("tensor<fp32, [2, 3]> y = sub(x = s1, y = s1)"), std::string::npos) << text;
  expect_same_outputs(before, after);
}

TEST(Cse, InputOrderAndEqualLiteralsDoNotMatter) {
  const Program before = parse18(
      "tensor<fp16, [4]> x, tensor<fp16, [4]> z",
      "    tensor<fp16, [4]> m1 = mul(x = x, y = fp16(0.5))[name = string(\"m1\")];\n"
      "    tensor<fp16, [4]> m2 = mul(y = fp16(0.5), x = x)[name = string(\"m2\")];\n"
      "    tensor<fp16, [4]> m3 = mul(x = x, y = fp16(0.25))[name = string(\"m3\")];\n"
      "    tensor<fp16, [4]> a1 = add(x = x, y = z)[name = string(\"a1\")];\n"
      "    tensor<fp16, [4]> a2 = add(x = z, y = x)[name = string(\"a2\")];\n"
      "    tensor<fp16, [4]> t = add(x = m1, y = m2)[name = string(\"t\")];\n"
      "    tensor<fp16, [4]> u = add(x = m3, y = a1)[name = string(\"u\")];\n"
      "    tensor<fp16, [4]> y = add(x = t, y = u)[name = string(\"y\")];\n"
      "    tensor<fp16, [4]> w = add(x = y, y = a2)[name = string(\"w\")];",
      "w");
  const Program after = after_cse(before);
  // m2 is m1 written the other way round; m3 has another literal; commutativity
  // is not assumed, so a2 = add(z, x) stays.
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"mul", "mul", "add", "add", "add", "add", "add", "add"}));
  EXPECT_EQ(producer(after, "m2"), nullptr);
  EXPECT_EQ(var_of(after, "t", "y"), "m1");
  EXPECT_NE(producer(after, "m3"), nullptr);
  EXPECT_NE(producer(after, "a2"), nullptr);
  expect_same_outputs(before, after);
}

TEST(Cse, DifferentOpsOrParametersStay) {
  const Program before = parse18(
      "tensor<fp32, [2, 3]> x",
      "    tensor<fp16, [2, 3]> c1 = cast(x = x, dtype = string(\"fp16\"))[name = string(\"c1\")];\n"
      "    tensor<int32, [2, 3]> c2 = cast(x = x, dtype = string(\"int32\"))[name = string(\"c2\")];\n"
      "    tensor<fp32, [2, 3]> s = sigmoid(x = x)[name = string(\"s\")];\n"
      "    tensor<fp32, [2, 3]> t = tanh(x = x)[name = string(\"t\")];\n"
      "    tensor<fp32, [2]> r1 = reduce_sum(x = x, axes = tensor<int32, [1]>([1]))[name = string(\"r1\")];\n"
      "    tensor<fp32, [2, 1]> r2 = reduce_sum(x = x, axes = tensor<int32, [1]>([1]), keep_dims = bool(true))"
      "[name = string(\"r2\")];\n"
      "    tensor<fp32, [2]> r3 = reduce_sum(x = x, axes = tensor<int32, [1]>([1]), keep_dims = bool(false))"
      "[name = string(\"r3\")];",
      "c1, c2, s, t, r1, r2, r3");
  const Program after = after_cse(before);
  // r3 spells out the default keep_dims: a different input list, so it stays
  // (merging is syntactic; it does not know defaults).
  EXPECT_EQ(total_ops(after), total_ops(before));
  EXPECT_EQ(ir_diff(before, after), "");
}

TEST(Cse, DuplicateFunctionOutputsKeepTheirNames) {
  const Program before = parse18(
      "tensor<fp32, [4, 2]> x",
      "    tensor<fp32, [4, 2]> y1 = relu(x = x)[name = string(\"y1\")];\n"
      "    tensor<fp32, [4, 2]> y2 = relu(x = x)[name = string(\"y2\")];\n"
      "    tensor<fp32, [2]> k1 = const()[name = string(\"k1\"), val = tensor<fp32, [2]>([1, 2])];\n"
      "    tensor<fp32, [2]> k2 = const()[name = string(\"k2\"), val = tensor<fp32, [2]>([1, 2])];\n"
      "    tensor<fp32, [4, 2]> i1 = identity(x = y1)[name = string(\"i1\")];\n"
      "    tensor<fp32, [4, 2]> i2 = identity(x = y1)[name = string(\"i2\")];\n"
      // Two-output split twice: one output of the duplicate is a function
      // output (becomes an identity), the other is only used (renamed).
      "    tensor<fp32, [2, 2]> a0, tensor<fp32, [2, 2]> a1 = split(x = x, num_splits = int32(2), axis = int32(0))"
      "[name = string(\"a\")];\n"
      "    tensor<fp32, [2, 2]> b0, tensor<fp32, [2, 2]> b1 = split(x = x, num_splits = int32(2), axis = int32(0))"
      "[name = string(\"b\")];\n"
      "    tensor<fp32, [2, 2]> d = sub(x = b1, y = a1)[name = string(\"d\")];",
      "y1, y2, k1, k2, i1, i2, b0, d");
  const Program after = after_cse(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"relu", "identity", "const", "const", "identity", "identity",
                                                       "split", "identity", "sub"}));
  EXPECT_EQ(var_of(after, "y2", "x"), "y1");  // y2 = identity(y1)
  EXPECT_EQ(producer(after, "k2")->type, "const");
  EXPECT_EQ(var_of(after, "i2", "x"), "y1");  // an identity stays itself
  EXPECT_EQ(producer(after, "b0")->type, "identity");
  EXPECT_EQ(var_of(after, "b0", "x"), "a0");
  EXPECT_EQ(var_of(after, "d", "x"), "a1");
  EXPECT_EQ(after.functions[0].outputs, before.functions[0].outputs);
  expect_same_outputs(before, after);
}

TEST(Cse, EqualConstantsMergeAcrossTheirSpellings) {
  // The same fp16 value written as a hex float and as a decimal, in the iOS16
  // dialect of the Silero bundles (whose exponent constants repeat like this).
  const Program before = parse16(
      "tensor<fp16, [3]> x",
      "        tensor<fp16, []> a = const()[name = tensor<string, []>(\"a\"), val = tensor<fp16, []>(0x1p+1)];\n"
      "        tensor<fp16, []> b = const()[name = tensor<string, []>(\"b\"), val = tensor<fp16, []>(2)];\n"
      "        tensor<fp16, []> c = const()[name = tensor<string, []>(\"c\"), val = tensor<fp16, []>(3)];\n"
      "        tensor<fp16, [3]> p = pow(x = x, y = a)[name = tensor<string, []>(\"p\")];\n"
      "        tensor<fp16, [3]> q = pow(x = x, y = b)[name = tensor<string, []>(\"q\")];\n"
      "        tensor<fp16, [3]> r = pow(x = x, y = c)[name = tensor<string, []>(\"r\")];\n"
      "        tensor<fp16, [3]> s = add(x = p, y = q)[name = tensor<string, []>(\"s\")];\n"
      "        tensor<fp16, [3]> y = add(x = s, y = r)[name = tensor<string, []>(\"y\")];",
      "y");
  const Program after = after_cse(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"const", "const", "pow", "pow", "add", "add"}));
  EXPECT_EQ(var_of(after, "s", "y"), "p");
  expect_same_outputs(before, after);
}

// Ops that are not functions of their inputs are never merged. None is in
// the op registry yet, so the program is parsed without verification and
// the pass called directly.
TEST(Cse, NeverMergesRandomDrawsOrStateOps) {
  Program p = parse_mil(program_text("tensor<int32, [2]> shape",
                                     "    tensor<fp32, [2, 2]> r1 = random_uniform(shape = shape)[name = string(\"r1\")];\n"
                                     "    tensor<fp32, [2, 2]> r2 = random_uniform(shape = shape)[name = string(\"r2\")];\n"
                                     "    tensor<fp32, [2, 2]> y = add(x = r1, y = r2)[name = string(\"y\")];",
                                     "y"),
                        "t.mil", ".");
  const Program before = p;
  passes::cse(p);
  EXPECT_EQ(ir_diff(before, p), "");
}

TEST(Cse, SeedProgramsComputeTheSame) {
  expect_preserved(seed_corpus(), {"cse"}, [](const std::string& name, const Program& before, const Program& after) {
    // legalize-layout-idioms reshapes xn to a vector twice, once for each of
    // the two matmuls reading it (u and g): one reshape is left.
    const int merged = name == "seed1/rms_q8_swiglu" ? 1 : 0;
    EXPECT_EQ(total_ops(after), total_ops(before) - merged) << name;
    EXPECT_EQ(op_counts(after)["reshape"], op_counts(before)["reshape"] - merged) << name;
  });
}

TEST(Cse, CoreMLBundlesComputeTheSame) {
  MILRT_REQUIRE_SHARED();
  expect_preserved(shared_corpus(), {"cse"}, [](const std::string& name, const Program& before, const Program& after) {
    std::printf("[cse] %s: %d -> %d ops\n", name.c_str(), total_ops(before), total_ops(after));
    EXPECT_LE(total_ops(after), total_ops(before)) << name;
    if (name.rfind("silero-vad/", 0) == 0) {
      EXPECT_LT(total_ops(after), total_ops(before)) << name;
    }
  });
}

}  // namespace
}  // namespace milrt::test::pass
