// fuse-conv-chain: pointwise convs in a row, each with its bias and
// activation, become one milrt_conv_chain. Each test shows the IR before and
// after; the numerics compare the reference executor on the unfused program,
// the reference on the fused one, and the compiled plan.
//
// Tolerances (|a - b| <= abs + rel·|b|, inputs in [-1, 1], weights scaled by
// 1/sqrt(fan-in) so every value stays within a few units):
//  - unfused vs fused reference, fp32: the unfused program rounds to fp32
//    after each op (up to three per link), the fused one once at the end; a
//    rounding error of 2^-24 grows by at most the sum of |w| (<= sqrt(C)) per
//    later link: 1e-5 + 1e-5·|y|.
//  - the same in fp16 (2^-11 per rounding): 2e-2 + 2e-2·|y|.
//  - compiled plan vs fused reference: fp32 sums of at most 64 products per
//    link: 1e-5 absolute; fp16 outputs are rounded once by both, so they
//    differ by at most an fp16 ulp after a tiny fp32 error: 2e-3 + 2e-3·|y|.
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "passes/pass_registry.h"
#include "test_conv_chain_util.h"

namespace milrt::test::rewrite {
namespace {

using Strings = std::vector<std::string>;

Program fused(const Program& p) {
  Program q = p;
  run_passes(q, {"fuse-conv-chain"});
  return q;
}

std::string str_of(const Program& p, const Op& op, const std::string& key) {
  const Tensor* t = const_input(p, op, key);
  return t && t->dtype() == DType::String ? t->strings().at(0) : "";
}

void expect_numerics(const Program& before, const Program& after, DType dt) {
  const double t = dt == DType::FP16 ? 2e-2 : 1e-5, plan = dt == DType::FP16 ? 2e-3 : 1e-5;
  expect_same_function(before, after, t, t, "fused vs unfused reference");
  for (int k = 0; k < 2; ++k) {
    TensorMap in = random_inputs(after, uint64_t(60 + k));
    expect_outputs_close(run_reference(after, "main", in), compile(after).run(in), plan, plan,
                         "compiled plan vs fused reference");
  }
}

TEST(FuseConvChain, TwoConvsWithBiasAndRelu) {
  Program p = chain_program(DType::FP32, {1, 3, 4, 5}, {{8}, {6}});
  EXPECT_EQ(op_types(p), (Strings{"conv", "relu", "conv", "relu"}));
  Program q = fused(p);
  ASSERT_EQ(op_types(q), (Strings{"milrt_conv_chain"}));
  const Op& f = producer(q, "a1");
  EXPECT_EQ(f.name, "a1");
  EXPECT_EQ(var_of(f, "x"), "x");
  EXPECT_EQ(str_of(q, f, "activations"), "relu relu");
  EXPECT_EQ(str_of(q, f, "fused_from"), "c0 a0 c1 a1");
  ASSERT_EQ(f.arg("weights")->elems.size(), 2u);
  EXPECT_EQ(f.arg("weights")->elems[1].var, "w1");
  EXPECT_EQ(f.arg("biases")->elems[0].var, "bias0");
  EXPECT_FALSE(f.has("alphas"));
  expect_numerics(p, q, DType::FP32);
}

// Three links with every kind of epilogue: none at all (a zero bias is
// written), an add of a per-channel constant with silu, and the conv's own
// bias with relu then clip (one clip from 0). 1-D convs this time.
TEST(FuseConvChain, ThreeConvsWithMixedEpilogues) {
  for (DType dt : {DType::FP32, DType::FP16}) {
    SCOPED_TRACE(dtype_word(dt));
    Program p = chain_program(dt, {2, 5, 9},
                              {{7, "none", "none"}, {4, "add", "silu"}, {3, "conv", "relu_clip"}});
    Program q = fused(p);
    ASSERT_EQ(op_types(q), (Strings{"milrt_conv_chain"}));
    const Op& f = producer(q, "a2");
    EXPECT_EQ(str_of(q, f, "activations"), "none silu clip");
    EXPECT_EQ(str_of(q, f, "fused_from"), "c0 c1 d1 a1 c2 r2 a2");
    const Tensor* zero = f.arg("biases")->elems[0].lit ? &f.arg("biases")->elems[0].lit->value : nullptr;
    ASSERT_TRUE(zero);
    EXPECT_EQ(zero->shape(), (Shape{7}));
    EXPECT_EQ(zero->at(3), 0.0);
    EXPECT_EQ(f.arg("biases")->elems[1].lit->value.shape(), (Shape{4}));   // the add's [4, 1] constant
    const Tensor* lo = const_input(q, f, "alphas");
    const Tensor* hi = const_input(q, f, "betas");
    ASSERT_TRUE(lo && hi);
    EXPECT_EQ(lo->at(2), 0.0);   // max(-1, 0): the relu's floor
    EXPECT_EQ(hi->at(2), 0.75);
    expect_numerics(p, q, dt);
  }
}

TEST(FuseConvChain, BareSigmoidLinksAndLongChains) {
  Program p = chain_program(DType::FP32, {1, 4, 3, 3},
                            {{5, "conv", "sigmoid"}, {5, "none", "relu"}, {2, "add", "none"}, {6, "conv", "silu"}});
  Program q = fused(p);
  ASSERT_EQ(op_types(q), (Strings{"milrt_conv_chain"}));
  EXPECT_EQ(str_of(q, producer(q, "a3"), "activations"), "sigmoid relu none silu");
  expect_numerics(p, q, DType::FP32);
}

// After fuse-conv-epilogue the links are milrt_conv ops: they chain the same.
TEST(FuseConvChain, ChainsEpilogueFusedConvs) {
  Program p = chain_program(DType::FP32, {1, 3, 2, 5}, {{8, "add", "relu"}, {4, "conv", "clip"}});
  Program e = p;
  run_passes(e, {"fuse-conv-epilogue"});
  ASSERT_EQ(op_types(e), (Strings{"milrt_conv", "milrt_conv"}));
  Program q = fused(e);
  ASSERT_EQ(op_types(q), (Strings{"milrt_conv_chain"}));
  EXPECT_EQ(str_of(q, producer(q, "a1"), "activations"), "relu clip");
  EXPECT_EQ(str_of(q, producer(q, "a1"), "fused_from"), "c0 d0 a0 c1 a1");
  expect_numerics(p, q, DType::FP32);
}

TEST(FuseConvChain, WhatIsNotFused) {
  // A 3x3 conv in the middle: neither side has a neighbour left.
  Program p = chain_program(DType::FP32, {1, 3, 4, 5}, {{8}, {8, "conv", "relu", 3}, {4}});
  EXPECT_EQ(op_types(fused(p)), op_types(p));
  // Stride 2, and groups 2, on the second link.
  p = chain_program(DType::FP32, {1, 4, 4, 6}, {{8}, {4, "conv", "relu", 1, 2}});
  EXPECT_EQ(op_types(fused(p)), op_types(p));
  p = chain_program(DType::FP32, {1, 4, 4, 6}, {{8}, {4, "conv", "relu", 1, 1, 2}});
  EXPECT_EQ(op_types(fused(p)), op_types(p));
  // The intermediate used twice, and the intermediate a function output.
  std::string out;
  std::string body = chain_body(DType::FP32, {1, 3, 4, 5}, {{8}, {8}}, out) +
                     stmt(tensor_type(DType::FP32, {1, 8, 4, 5}), "s", "add(x = a0, y = a1)");
  p = parse_program("tensor<fp32, [1, 3, 4, 5]> x", body, "s");
  EXPECT_EQ(op_types(fused(p)), op_types(p));
  p = parse_program("tensor<fp32, [1, 3, 4, 5]> x", chain_body(DType::FP32, {1, 3, 4, 5}, {{8}, {8}}, out),
                    "a0, " + out);
  EXPECT_EQ(op_types(fused(p)), op_types(p));
  // A run-time bias.
  p = parse_program("tensor<fp32, [1, 3, 5]> x, tensor<fp32, [8]> b",
                    const_stmt("w0", random(DType::FP32, {8, 3, 1}, 1)) +
                        const_stmt("w1", random(DType::FP32, {2, 8, 1}, 2)) +
                        stmt("tensor<fp32, [1, 8, 5]>", "c0", "conv(x = x, weight = w0, bias = b)") +
                        stmt("tensor<fp32, [1, 2, 5]>", "c1", "conv(x = c0, weight = w1)"),
                    "c1");
  EXPECT_EQ(op_types(fused(p)), op_types(p));
}

// A link whose intermediate would not fit the cache budget for a useful tile
// (4000 channels: 512 KB holds 32 positions of it) ends the chain before it.
TEST(FuseConvChain, CutsTheChainBeforeATooWideLink) {
  Program p = chain_program(DType::FP32, {1, 4, 8, 8}, {{8}, {8}, {4000, "conv", "none"}});
  Program q = fused(p);
  EXPECT_EQ(op_types(q), (Strings{"milrt_conv_chain", "conv"}));
  EXPECT_EQ(str_of(q, producer(q, "a1"), "fused_from"), "c0 a0 c1 a1");
  expect_numerics(p, q, DType::FP32);
  // On a single position it fits, and the whole chain fuses.
  p = chain_program(DType::FP32, {1, 4, 1, 1}, {{8}, {8}, {4000, "conv", "none"}});
  EXPECT_EQ(op_types(fused(p)), (Strings{"milrt_conv_chain"}));
}

// Weights past an L2 (400->400->400: 1.25 MB) are read again for every
// tile: left unfused when the image takes several tiles (10x20 positions).
TEST(FuseConvChain, LeavesChainsWithTooManyWeights) {
  Program p = chain_program(DType::FP32, {1, 400, 10, 20}, {{400, "none", "none"}, {400, "none", "none"}});
  EXPECT_EQ(op_types(fused(p)), op_types(p));
  p = chain_program(DType::FP32, {1, 400, 8, 8}, {{400, "none", "none"}, {400, "none", "none"}});
  EXPECT_EQ(op_types(fused(p)), (Strings{"milrt_conv_chain"}));   // one tile: each weight read once
}

TEST(FuseConvChain, PrintedIrParsesBack) {
  for (const char* opset : {"ios16", "ios18"}) {
    Program p = chain_program(DType::FP16, {1, 3, 2, 3},
                              {{4, "none", "none"}, {5, "add", "relu_clip"}}, 3, opset);
    Program q = fused(p);
    ASSERT_EQ(op_types(q), (Strings{"milrt_conv_chain"}));
    Program back = parse_mil(print_mil(q), "printed.mil", ".");
    verify(back);
    EXPECT_EQ(ir_diff(q, back), "") << print_mil(q);
    expect_same_function(q, back, 0, 0, "printed and parsed back");
  }
}

TEST(FuseConvChain, BadFusedOpsAreErrors) {
  const std::string pre = const_stmt("w", random(DType::FP32, {8, 3, 1}, 1)) +
                          const_stmt("v", random(DType::FP32, {8, 3, 3}, 2)) +
                          const_stmt("b", random(DType::FP32, {8}, 3));
  for (const std::string& args :
       {std::string("weights = (w), biases = (b), activations = string(\"tanh\")"),
        std::string("weights = (w), biases = (b), activations = string(\"relu relu\")"),
        std::string("weights = (w), biases = (b, b), activations = string(\"relu\")"),
        std::string("weights = (v), biases = (b), activations = string(\"relu\")"),
        std::string("weights = (w), biases = (b), activations = string(\"clip\")"),
        std::string("weights = (w), biases = (b), activations = string(\"clip\"), alphas = fp32(0), betas = fp32(1)"),
        std::string("weights = (w, w), biases = (b, b), activations = string(\"relu relu\")")}) {
    SCOPED_TRACE(args);
    std::string text = program_text("tensor<fp32, [1, 3, 5]> x",
                                    pre + stmt("tensor<fp32, [1, 8, 5]>", "c", "milrt_conv_chain(x = x, " + args + ")"),
                                    "c");
    EXPECT_THROW(verify(parse_mil(text, "t.mil", ".")), Error);
  }
}

// Every bundle through the default pipeline's passes before this one, then
// this pass: outputs as before (none of today's bundles has a chain of
// pointwise convs; the count is printed so a new one shows).
TEST(FuseConvChain, CorpusKeepsItsOutputs) {
  std::vector<std::string> paths = coreml_bundles();
  if (paths.empty()) GTEST_SKIP() << "../shared/testdata is absent: no Core ML bundles to run";
  int chains = 0;
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    Program p = load_verified(path);
    run_passes(p, {"legalize-layout-idioms", "fuse-quantized-weights", "fold-constexpr"});
    Program q = fused(p);
    for (const Op& op : q.functions.at(0).ops) chains += op.type == "milrt_conv_chain";
    if (print_mil(p) == print_mil(q)) continue;
    for (const Function& f : p.functions) {
      TensorMap in = random_inputs(p, 7, -1, 1, f.name);
      expect_outputs_close(run_reference(p, f.name, in), run_reference(q, f.name, in), 2e-2, 2e-2, path);
    }
  }
  std::printf("conv chains fused in %zu bundles: %d\n", paths.size(), chains);
}

}  // namespace
}  // namespace milrt::test::rewrite
