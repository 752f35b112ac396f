// dce: ops none of whose outputs reach a function output are removed;
// everything feeding an output stays.
#include "passes/pass_registry.h"
#include "test_pass_util.h"

namespace milrt::test::pass {
namespace {

Program after_dce(const Program& p) {
  Program q = p;
  run_passes(q, {"dce"});
  return q;
}

std::vector<std::string> defined(const Program& p) {
  std::vector<std::string> r;
  for (const Op& op : p.functions.at(0).ops)
    for (const Output& o : op.outputs) r.push_back(o.name);
  return r;
}

TEST(Dce, RemovesChainsThatReachNoOutput) {
  const Program before = parse18(
      "tensor<fp32, [2, 3]> x",
      "    tensor<fp32, []> k = const()[name = string(\"k\"), val = fp32(3)];\n"
      "    tensor<fp32, []> unused = const()[name = string(\"unused\"), val = fp32(4)];\n"
      "    tensor<fp32, [2, 3]> a = mul(x = x, y = k)[name = string(\"a\")];\n"
      "    tensor<fp32, [2, 3]> dead1 = exp(x = a)[name = string(\"dead1\")];\n"
      "    tensor<fp32, [2, 3]> dead2 = add(x = dead1, y = unused)[name = string(\"dead2\")];\n"
      "    tensor<fp32, [2, 3]> b = relu(x = a)[name = string(\"b\")];\n"
      "    tensor<fp32, [4, 3]> c = concat(values = (a, b), axis = int32(0))[name = string(\"c\")];",
      "c");
  const Program after = after_dce(before);
  EXPECT_EQ(defined(after), (std::vector<std::string>{"k", "a", "b", "c"}));  // tuple elements stay live
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"const", "mul", "relu", "concat"}));
  const std::string text = print_mil(after);
  EXPECT_EQ(text.find("dead"), std::string::npos) << text;
  expect_same_outputs(before, after);
}

TEST(Dce, KeepsAMultiOutputOpWhenAnyOutputIsUsed) {
  const Program before = parse18(
      "tensor<fp32, [4, 2]> x",
      "    tensor<fp32, [2, 2]> a0, tensor<fp32, [2, 2]> a1 = split(x = x, num_splits = int32(2), axis = int32(0))"
      "[name = string(\"a\")];\n"
      "    tensor<fp32, [1, 2]> t0, tensor<fp32, [3, 2]> t1 = split(x = x, split_sizes = tensor<int32, [2]>([1, 3]), "
      "axis = int32(0))[name = string(\"t\")];\n"
      "    tensor<fp32, [2, 2]> y = sigmoid(x = a1)[name = string(\"y\")];",
      "y");
  const Program after = after_dce(before);
  EXPECT_EQ(defined(after), (std::vector<std::string>{"a0", "a1", "y"}));
  expect_same_outputs(before, after);
}

TEST(Dce, OutputsThatAreParametersOrConstantsNeedNothingElse) {
  const Program before = parse18(
      "tensor<fp16, [3]> x, tensor<fp16, [3]> z",
      "    tensor<fp16, [3]> s = add(x = x, y = z)[name = string(\"s\")];\n"
      "    tensor<fp16, [2]> k = const()[name = string(\"k\"), val = tensor<fp16, [2]>([1, 2])];",
      "z, k, x");
  const Program after = after_dce(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"const"}));
  EXPECT_EQ(after.functions[0].outputs, (std::vector<std::string>{"z", "k", "x"}));
  expect_same_outputs(before, after);
}

TEST(Dce, LiveProgramIsUnchanged) {
  const Program before = parse18(
      "tensor<fp32, [2, 3]> x",
      "    tensor<fp32, [2, 3]> a = exp(x = x)[name = string(\"a\")];\n"
      "    tensor<fp32, [2, 3]> b = tanh(x = a)[name = string(\"b\")];",
      "b, a");
  EXPECT_EQ(ir_diff(before, after_dce(before)), "");
}

// A state update's effect is the point even when its result is unused. The
// op is not in the registry yet, so the program is not verified and the pass
// is called directly.
TEST(Dce, KeepsStateUpdates) {
  Program p = parse_mil(program_text("tensor<fp16, [2]> x, state<tensor<fp16, [2]>> s",
                                     "    tensor<fp16, [2]> u = coreml_update_state(state = s, value = x)"
                                     "[name = string(\"u\")];\n"
                                     "    tensor<fp16, [2]> y = relu(x = x)[name = string(\"y\")];\n"
                                     "    tensor<fp16, [2]> dead = exp(x = x)[name = string(\"dead\")];",
                                     "y"),
                        "t.mil", ".");
  passes::dce(p);
  EXPECT_EQ(op_types(p), (std::vector<std::string>{"coreml_update_state", "relu"}));
}

TEST(Dce, SeedProgramsComputeTheSame) {
  expect_preserved(seed_corpus(), {"dce"}, [](const std::string& name, const Program& before, const Program& after) {
    EXPECT_EQ(total_ops(after), total_ops(before)) << name;  // nothing dead as written
  });
  // Once the dequantization is folded, its quantized data and scales are dead.
  expect_preserved(seed_corpus(), {"fold-constexpr", "dce"},
                   [](const std::string& name, const Program& before, const Program& after) {
                     const int removed = name == "seed1/rms_q8_swiglu" ? 2 : 0;
                     EXPECT_EQ(total_ops(after), total_ops(before) - removed) << name;
                     if (removed) {
                       EXPECT_EQ(producer(after, "Wu_q"), nullptr);
                     }
                   });
}

TEST(Dce, CoreMLBundlesComputeTheSame) {
  MILRT_REQUIRE_SHARED();
  // Every op of these bundles feeds an output (Core ML's converter already
  // removed dead code); the decompression inputs are literals, not ops.
  expect_preserved(shared_corpus(), {"dce"}, [](const std::string& name, const Program& before, const Program& after) {
    EXPECT_EQ(total_ops(after), total_ops(before)) << name;
  });
}

}  // namespace
}  // namespace milrt::test::pass
