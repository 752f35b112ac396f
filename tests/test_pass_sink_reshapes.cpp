// sink-reshapes: reshapes move below elementwise ops (unary; binary with a
// reshape of the same shape or a one-element operand), so the chain after a
// matmul is contiguous. Values stay bit-identical: the same elements meet the
// same ops.
#include "passes/pass_registry.h"
#include "test_pass_util.h"

namespace milrt::test::pass {
namespace {

Program sunk(const Program& p) {
  Program q = p;
  run_passes(q, {"sink-reshapes", "dce"});
  return q;
}

// The shape the first op of type `type` reads as input `key`.
std::string input_of(const Program& p, const std::string& type, const std::string& key) {
  for (const Op& op : p.functions.at(0).ops)
    if (op.type == type) return op.arg(key)->var;
  return "";
}

TEST(SinkReshapes, MovesAReshapeBelowAnElementwiseChain) {
  // The first seed's conv + SiLU + residual after canonicalize: matmul → reshape → sigmoid → mul → add.
  const Program before = parse18(
      "tensor<fp16, [1, 64, 1]> m, tensor<fp16, [1, 64, 1]> r",
      "    tensor<int32, [4]> s4 = const()[name = string(\"s4\"), val = tensor<int32, [4]>([1, 64, 1, 1])];\n"
      "    tensor<fp16, [1, 64, 1, 1]> g = reshape(x = m, shape = s4)[name = string(\"g\")];\n"
      "    tensor<fp16, [1, 64, 1, 1]> res = reshape(x = r, shape = s4)[name = string(\"res\")];\n"
      "    tensor<fp16, [1, 64, 1, 1]> gs = sigmoid(x = g)[name = string(\"gs\")];\n"
      "    tensor<fp16, [1, 64, 1, 1]> gsl = mul(x = g, y = gs)[name = string(\"gsl\")];\n"
      "    tensor<fp16, [1, 64, 1, 1]> y = add(x = res, y = gsl)[name = string(\"y\")];",
      "y");
  const Program after = sunk(before);
  // Every elementwise op now reads 3-D values; one reshape, producing y, is left.
  EXPECT_EQ(op_counts(after)["reshape"], 1);
  const Op* y = producer(after, "y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->type, "reshape");
  EXPECT_EQ(input_of(after, "sigmoid", "x"), "m");
  for (const Op& op : after.functions[0].ops)
    if (op.type != "reshape" && op.type != "const") {
      EXPECT_EQ(op.outputs[0].type.shape, (Shape{1, 64, 1})) << op.type;
    }
  expect_same_outputs(before, after);
}

TEST(SinkReshapes, SinksPastAScalarOperandOnEitherSide) {
  const Program before = parse18(
      "tensor<fp32, [6]> a",
      "    tensor<int32, [2]> s = const()[name = string(\"s\"), val = tensor<int32, [2]>([2, 3])];\n"
      "    tensor<fp32, [2, 3]> r = reshape(x = a, shape = s)[name = string(\"r\")];\n"
      "    tensor<fp32, [2, 3]> p = mul(x = r, y = fp32(2))[name = string(\"p\")];\n"
      "    tensor<fp32, [2, 3]> q = sub(x = fp32(1), y = p)[name = string(\"q\")];",
      "q");
  const Program after = sunk(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"mul", "sub", "reshape"}));
  expect_same_outputs(before, after);
}

TEST(SinkReshapes, LeavesBroadcastsAndMismatchedReshapesAlone) {
  // r1 and r2 come from different shapes; the bias broadcasts along a reshaped
  // dim; a [1, 1, 1] operand would raise the rank of a 2-D source. None of
  // these commute with the reshape.
  const Program before = parse18(
      "tensor<fp32, [6]> a, tensor<fp32, [2, 3]> b, tensor<fp32, [3]> bias, tensor<fp32, [1, 1, 1]> one",
      "    tensor<int32, [2]> s = const()[name = string(\"s\"), val = tensor<int32, [2]>([2, 3])];\n"
      "    tensor<fp32, [2, 3]> r1 = reshape(x = a, shape = s)[name = string(\"r1\")];\n"
      "    tensor<fp32, [2, 3]> r2 = reshape(x = b, shape = s)[name = string(\"r2\")];\n"
      "    tensor<fp32, [2, 3]> u = add(x = r1, y = r2)[name = string(\"u\")];\n"
      "    tensor<fp32, [2, 3]> v = add(x = r1, y = bias)[name = string(\"v\")];\n"
      "    tensor<fp32, [1, 2, 3]> w = mul(x = r1, y = one)[name = string(\"w\")];",
      "u, v, w");
  const Program after = sunk(before);
  EXPECT_EQ(producer(after, "u")->type, "add");
  EXPECT_EQ(producer(after, "v")->type, "add");
  EXPECT_EQ(producer(after, "w")->type, "mul");
  expect_same_outputs(before, after);
}

TEST(SinkReshapes, MergesReshapeChains) {
  const Program before = parse18(
      "tensor<fp32, [2, 3, 4]> a",
      "    tensor<fp32, [6, 4]> r1 = reshape(x = a, shape = tensor<int32, [2]>([6, 4]))[name = string(\"r1\")];\n"
      "    tensor<fp32, [24]> r2 = reshape(x = r1, shape = tensor<int32, [1]>([24]))[name = string(\"r2\")];",
      "r2");
  const Program after = sunk(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"reshape"}));
  EXPECT_EQ(input_of(after, "reshape", "x"), "a");
  expect_same_outputs(before, after);
}

TEST(SinkReshapes, PreservesEveryCorpusProgram) {
  if (shared_dir().empty()) GTEST_SKIP() << "../shared is absent: the Core ML bundles are not checked";
  for (const auto* corpus : {&shared_corpus(), &seed_corpus()})
    expect_preserved(*corpus, {"sink-reshapes", "dce"},
                     [](const std::string&, const Program&, const Program&) {});
}

}  // namespace
}  // namespace milrt::test::pass
