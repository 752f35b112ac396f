// fuse-conv-epilogue: conv -> [per-channel add] -> [relu | sigmoid | silu |
// clip | relu then clip] becomes one milrt_conv. Each test shows the IR
// before and after; the numerics compare the reference executor on the
// unfused program, the reference on the fused one, and the compiled plan.
//
// Tolerances (|a - b| <= abs + rel·|b|, inputs and weights in [-1, 1]):
//  - unfused vs fused reference, fp32: the unfused program rounds the conv sum
//    to fp32 before the bias/activation, the fused one rounds once at the end:
//    one or two extra roundings of 2^-24 relative: 1e-6 + 1e-6·|y|.
//  - the same in fp16: up to three fp16 roundings (2^-11 each) in the unfused
//    program against one: 2e-3 + 2e-3·|y|.
//  - compiled plan vs fused reference: fp32 sums of at most 48 products, each
//    rounding 2^-24: 1e-5 absolute is ample; fp16 outputs are rounded once by
//    both, so they differ by at most one fp16 ulp after a tiny fp32 error: 2e-3.
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "passes/pass_registry.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

using Strings = std::vector<std::string>;

Program fused(const Program& p) {
  Program q = p;
  run_passes(q, {"fuse-conv-epilogue"});
  return q;
}

std::string str_of(const Program& p, const Op& op, const std::string& key) {
  const Tensor* t = const_input(p, op, key);
  return t && t->dtype() == DType::String ? t->strings().at(0) : "";
}

double num_of(const Program& p, const Op& op, const std::string& key) {
  const Tensor* t = const_input(p, op, key);
  return t ? t->at(0) : NAN;
}

// The three-way check: reference before vs after, and compiled vs reference after.
void expect_numerics(const Program& before, const Program& after, double rel, double abs, double plan_tol) {
  expect_same_function(before, after, rel, abs, "fused vs unfused reference");
  for (int k = 0; k < 2; ++k) {
    TensorMap in = random_inputs(after, uint64_t(50 + k));
    expect_outputs_close(run_reference(after, "main", in), compile(after).run(in), plan_tol, plan_tol,
                         "compiled plan vs fused reference");
  }
}

// conv [1, 3, 10] -> [1, 8, 10] with weights w and optionally a bias b, as text.
std::string conv_text(DType dt, bool bias, const std::string& out = "c") {
  const std::string d = dt == DType::FP16 ? "fp16" : "fp32";
  return const_stmt("w", random(dt, {8, 3, 3}, 1)) + (bias ? const_stmt("b", random(dt, {8}, 2)) : "") +
         stmt("tensor<" + d + ", [1, 8, 10]>", out,
              std::string("conv(x = x, weight = w") + (bias ? ", bias = b" : "") +
                  ", pad_type = string(\"same\"), strides = tensor<int32, [1]>([1]), dilations = tensor<int32, "
                  "[1]>([1]), groups = int32(1))");
}

const char* kX32 = "tensor<fp32, [1, 3, 10]> x";
const char* kX16 = "tensor<fp16, [1, 3, 10]> x";
const char* kT32 = "tensor<fp32, [1, 8, 10]>";
const char* kT16 = "tensor<fp16, [1, 8, 10]>";

TEST(FuseConvEpilogue, ReluThenClipBecomesOneClip) {
  Program p = parse_program(kX32,
                            conv_text(DType::FP32, true) + stmt(kT32, "r", "relu(x = c)") +
                                stmt(kT32, "k", "clip(x = r, alpha = fp32(-0.5), beta = fp32(0.25))"),
                            "k");
  EXPECT_EQ(op_types(p), (Strings{"conv", "relu", "clip"}));
  Program q = fused(p);
  ASSERT_EQ(op_types(q), (Strings{"milrt_conv"}));
  const Op& f = producer(q, "k");
  EXPECT_EQ(f.name, "k");
  EXPECT_EQ(str_of(q, f, "activation"), "clip");
  EXPECT_EQ(str_of(q, f, "fused_from"), "c r k");
  EXPECT_EQ(num_of(q, f, "alpha"), 0.0);   // max(-0.5, 0): the relu's floor
  EXPECT_EQ(num_of(q, f, "beta"), 0.25);
  EXPECT_EQ(var_of(f, "bias"), "b");
  expect_numerics(p, q, 1e-6, 1e-6, 1e-5);
}

TEST(FuseConvEpilogue, PerChannelAddBecomesTheBias) {
  for (const char* act : {"sigmoid", "silu", "relu"}) {
    SCOPED_TRACE(act);
    Program p = parse_program(kX32,
                              conv_text(DType::FP32, false) + const_stmt("bb", random(DType::FP32, {8, 1}, 3)) +
                                  stmt(kT32, "a", "add(x = bb, y = c)") + stmt(kT32, "s", std::string(act) + "(x = a)"),
                              "s");
    Program q = fused(p);
    ASSERT_EQ(op_types(q), (Strings{"milrt_conv"}));
    const Op& f = producer(q, "s");
    EXPECT_EQ(str_of(q, f, "activation"), act);
    EXPECT_EQ(str_of(q, f, "fused_from"), "c a s");
    ASSERT_NE(const_input(q, f, "bias"), nullptr);
    EXPECT_EQ(const_input(q, f, "bias")->shape(), (Shape{8}));
    expect_numerics(p, q, 1e-6, 1e-6, 1e-5);
  }
}

TEST(FuseConvEpilogue, Fp16ProgramsInBothDialects) {
  const std::string body = conv_text(DType::FP16, true) + stmt(kT16, "r", "relu(x = c)") +
                           stmt(kT16, "k", "clip(x = r, alpha = fp16(0.0), beta = fp16(0.5))");
  for (const char* opset : {"ios16", "ios18"}) {
    SCOPED_TRACE(opset);
    Program p = parse_program(kX16, body, "k", opset);
    Program q = fused(p);
    ASSERT_EQ(op_types(q), (Strings{"milrt_conv"}));
    expect_numerics(p, q, 2e-3, 2e-3, 2e-3);
  }
  Program p = parse_program(kX16, conv_text(DType::FP16, true) + stmt(kT16, "s", "silu(x = c)"), "s");
  expect_numerics(p, fused(p), 2e-3, 2e-3, 2e-3);
}

TEST(FuseConvEpilogue, ClipAloneAndBiasOnly) {
  Program p = parse_program(kX32,
                            conv_text(DType::FP32, true) +
                                stmt(kT32, "k", "clip(x = c, alpha = fp32(-0.3), beta = fp32(0.2))"),
                            "k");
  Program q = fused(p);
  ASSERT_EQ(op_types(q), (Strings{"milrt_conv"}));
  EXPECT_NEAR(num_of(q, producer(q, "k"), "alpha"), -0.3, 1e-7);
  expect_numerics(p, q, 1e-6, 1e-6, 1e-5);
  // A bias add with nothing after it still fuses (activation none).
  p = parse_program(kX32,
                    conv_text(DType::FP32, false) + const_stmt("bb", random(DType::FP32, {1, 8, 1}, 4)) +
                        stmt(kT32, "a", "add(x = c, y = bb)"),
                    "a");
  q = fused(p);
  ASSERT_EQ(op_types(q), (Strings{"milrt_conv"}));
  EXPECT_EQ(str_of(q, producer(q, "a"), "activation"), "none");
  expect_numerics(p, q, 1e-6, 1e-6, 1e-5);
}

// A depthwise conv (one channel per group) runs the plain loop, not the
// packed GEMM: its activation is applied there.
TEST(FuseConvEpilogue, DepthwiseConvWithActivation) {
  for (const char* act : {"silu", "sigmoid", "relu"}) {
    SCOPED_TRACE(act);
    Program p = parse_program(
        kX32,
        const_stmt("w", random(DType::FP32, {3, 1, 3}, 8)) + const_stmt("b", random(DType::FP32, {3}, 9)) +
            stmt("tensor<fp32, [1, 3, 4]>", "c",
                 "conv(x = x, weight = w, bias = b, pad_type = string(\"valid\"), strides = tensor<int32, [1]>([2]), "
                 "groups = int32(3))") +
            stmt("tensor<fp32, [1, 3, 4]>", "s", std::string(act) + "(x = c)"),
        "s");
    Program q = fused(p);
    ASSERT_EQ(op_types(q), (Strings{"milrt_conv"}));
    expect_numerics(p, q, 1e-6, 1e-6, 1e-5);
  }
}

TEST(FuseConvEpilogue, WhatMustNotFuse) {
  // The conv output read twice.
  Program p = parse_program(kX32, conv_text(DType::FP32, true) + stmt(kT32, "r", "relu(x = c)") +
                                      stmt(kT32, "s", "add(x = r, y = c)"),
                            "s");
  EXPECT_EQ(op_types(fused(p)), (Strings{"conv", "relu", "add"}));
  // The conv output is a function output.
  p = parse_program(kX32, conv_text(DType::FP32, true) + stmt(kT32, "r", "relu(x = c)"), "r, c");
  EXPECT_EQ(op_types(fused(p)), (Strings{"conv", "relu"}));
  // The relu output is read twice: conv + relu fuse, the clip stays.
  p = parse_program(kX32,
                    conv_text(DType::FP32, true) + stmt(kT32, "r", "relu(x = c)") +
                        stmt(kT32, "k", "clip(x = r, alpha = fp32(0), beta = fp32(1))") +
                        stmt(kT32, "s", "add(x = r, y = k)"),
                    "s");
  Program q = fused(p);
  EXPECT_EQ(op_types(q), (Strings{"milrt_conv", "clip", "add"}));
  EXPECT_EQ(str_of(q, producer(q, "r"), "activation"), "relu");
  expect_numerics(p, q, 1e-6, 1e-6, 1e-5);
  // The relu is a function output: same.
  p = parse_program(kX32,
                    conv_text(DType::FP32, true) + stmt(kT32, "r", "relu(x = c)") +
                        stmt(kT32, "k", "clip(x = r, alpha = fp32(0), beta = fp32(1))"),
                    "k, r");
  EXPECT_EQ(op_types(fused(p)), (Strings{"milrt_conv", "clip"}));
  // Clip bounds that are not constants.
  p = parse_program(std::string(kX32) + ", tensor<fp32, []> lo",
                    conv_text(DType::FP32, true) + stmt(kT32, "k", "clip(x = c, alpha = lo, beta = fp32(1))"), "k");
  EXPECT_EQ(op_types(fused(p)), (Strings{"conv", "clip"}));
  // An add that is not per channel (broadcast over positions), a run-time
  // bias, and an add after a conv that already has a bias.
  p = parse_program(kX32,
                    conv_text(DType::FP32, false) + const_stmt("bb", random(DType::FP32, {1, 1, 10}, 5)) +
                        stmt(kT32, "a", "add(x = c, y = bb)"),
                    "a");
  EXPECT_EQ(op_types(fused(p)), (Strings{"conv", "add"}));
  p = parse_program(std::string(kX32) + ", tensor<fp32, [1, 8, 1]> bb",
                    conv_text(DType::FP32, false) + stmt(kT32, "a", "add(x = c, y = bb)"), "a");
  EXPECT_EQ(op_types(fused(p)), (Strings{"conv", "add"}));
  p = parse_program(kX32,
                    conv_text(DType::FP32, true) + const_stmt("bb", random(DType::FP32, {8, 1}, 6)) +
                        stmt(kT32, "a", "add(x = c, y = bb)"),
                    "a");
  EXPECT_EQ(op_types(fused(p)), (Strings{"conv", "add"}));
  // An activation reading the conv output through another input than x.
  p = parse_program(kX32, conv_text(DType::FP32, true) + stmt(kT32, "m", "mul(x = c, y = c)"), "m");
  EXPECT_EQ(op_types(fused(p)), (Strings{"conv", "mul"}));
}

TEST(FuseConvEpilogue, PrintedIrParsesBack) {
  for (const char* opset : {"ios16", "ios18"}) {
    Program p = parse_program(kX32,
                              conv_text(DType::FP32, false) + const_stmt("bb", random(DType::FP32, {8, 1}, 3)) +
                                  stmt(kT32, "a", "add(x = c, y = bb)") + stmt(kT32, "r", "relu(x = a)") +
                                  stmt(kT32, "k", "clip(x = r, alpha = fp32(0.1), beta = fp32(0.6))"),
                              "k", opset);
    Program q = fused(p);
    ASSERT_EQ(op_types(q), (Strings{"milrt_conv"}));
    Program back = parse_mil(print_mil(q), "printed.mil", ".");
    verify(back);
    EXPECT_EQ(ir_diff(q, back), "") << print_mil(q);
    expect_same_function(q, back, 0, 0, "printed and parsed back");
  }
}

TEST(FuseConvEpilogue, BadFusedOpsAreErrors) {
  const std::string pre = const_stmt("w", random(DType::FP32, {8, 3, 3}, 1));
  for (const std::string& extra :
       {std::string("activation = string(\"tanh\")"), std::string("activation = string(\"clip\")"),
        std::string("activation = string(\"clip\"), alpha = fp32(0), beta = lo")}) {
    SCOPED_TRACE(extra);
    std::string text = program_text(std::string(kX32) + ", tensor<fp32, []> lo",
                                    pre + stmt(kT32, "c", "milrt_conv(x = x, weight = w, pad_type = string(\"same\"), " +
                                                              extra + ")"),
                                    "c");
    EXPECT_THROW(verify(parse_mil(text, "t.mil", ".")), Error);
  }
}

// Every bundle and seed program through the default pipeline up to this pass
// (the pass sees what it sees in a plan), then this pass: outputs within
// tolerance. fp16 bundles round after every op in the unfused program: 2e-2
// relative to the output's scale covers chains of such roundings.
TEST(FuseConvEpilogue, CorpusKeepsItsOutputs) {
  std::vector<std::string> paths = coreml_bundles();
  if (paths.empty()) GTEST_SKIP() << "../shared/testdata is absent: no Core ML bundles to run";
  const Strings before = {"legalize-layout-idioms", "fold-constexpr", "canonicalize", "decompose", "cse", "dce",
                          "fuse-attention", "fuse-norms", "fuse-gemm-epilogue"};
  int fused_total = 0;
  auto check = [&](const std::string& name, Program p) {
    SCOPED_TRACE(name);
    run_passes(p, before);
    Program q = p;
    run_passes(q, {"fuse-conv-epilogue"});
    for (const Op& op : q.functions.at(0).ops) fused_total += op.type == "milrt_conv";
    if (print_mil(p) == print_mil(q)) return;
    for (const Function& f : p.functions) {
      TensorMap in = random_inputs(p, 7, -1, 1, f.name);
      TensorMap want = run_reference(p, f.name, in), got = run_reference(q, f.name, in);
      for (auto& [k, w] : want) {
        double scale = 0;
        for (int64_t i = 0; i < w.numel(); ++i) scale = std::max(scale, std::fabs(w.at(size_t(i))));
        expect_outputs_close({{k, w}}, {{k, got.at(k)}}, 2e-2, 2e-2 * std::max(scale, 1.0), name + " " + k);
      }
    }
  };
  for (const std::string& path : paths) check(path, load_verified(path));
  for (const std::string& mil : seed1_programs()) check(mil, load_seed1(mil, 11));
  EXPECT_GT(fused_total, 0) << "no conv of the corpus was fused";
}

}  // namespace
}  // namespace milrt::test::rewrite
