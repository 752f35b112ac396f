// milrt_conv_chain compiled (kernels/generic/conv_chain.*) against the
// reference executor on the unfused program, and once against a plain fp64
// loop written here; the default pipeline gives one step per chain.
//
// Tolerances (|a - b| <= abs + rel·|b|; inputs in [-1, 1], weights in
// ±1/sqrt(fan-in), so values stay within a few units):
//  - fp32: fp32 sums of at most 64 products per link against fp64 rounded to
//    fp32 after each op: 1e-5 + 1e-5·|y|.
//  - fp16 against the unfused reference, which rounds to fp16 after every op
//    (up to three per link) while the plan keeps fp32 intermediates and
//    rounds once: 2e-2 + 2e-2·|y|; against the fused reference (also one
//    rounding) one fp16 ulp: 2e-3 + 2e-3·|y|.
#include <cmath>
#include <cstring>

#include "kernels/generic/conv_chain.h"
#include "kernels/threads.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "passes/pass_registry.h"
#include "test_conv_chain_util.h"

namespace milrt::test::rewrite {
namespace {

Program fused(const Program& p) {
  Program q = p;
  run_passes(q, {"fuse-conv-chain"});
  return q;
}

void expect_one_chain_step(const Plan& plan, size_t links) {
  std::vector<Plan::StepInfo> steps = plan.steps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].kernel, "conv_chain:" + std::to_string(links) + "x1x1");
}

TEST(CompiledConvChain, AwkwardShapesAgainstTheReference) {
  const std::vector<std::vector<LinkSpec>> chains = {
      {{3, "conv", "relu"}, {1, "none", "sigmoid"}},                                  // C 1 -> 3 -> 1
      {{17, "add", "silu"}, {64, "conv", "relu_clip"}},                              // 3 -> 17 -> 64
      {{64, "conv", "relu"}, {17, "none", "none"}, {1, "conv", "clip"}},             // 17 -> 64 -> 17 -> 1
      {{64, "conv", "silu"}, {3, "conv", "none"}},                                   // 64 -> 64 -> 3
  };
  const std::vector<int64_t> cin = {1, 3, 17, 64};
  const std::vector<Shape> spatial = {{1, 1}, {7}, {25, 40}};   // 1, 7 and 1000 positions
  for (DType dt : {DType::FP32, DType::FP16})
    for (size_t c = 0; c < chains.size(); ++c)
      for (const Shape& sp : spatial) {
        Shape xs = {2, cin[c]};
        xs.insert(xs.end(), sp.begin(), sp.end());
        SCOPED_TRACE(dtype_word(dt) + " chain " + std::to_string(c) + " x " + shape_str(xs));
        Program p = chain_program(dt, xs, chains[c], c + 1);
        Plan plan = compile(p);
        expect_one_chain_step(plan, chains[c].size());
        TensorMap in = random_inputs(p, 90 + c);
        TensorMap got = plan.run(in);
        const double t = dt == DType::FP16 ? 2e-2 : 1e-5;
        expect_outputs_close(run_reference(p, "main", in), got, t, t, "plan vs unfused reference");
        if (dt == DType::FP16)
          expect_outputs_close(run_reference(fused(p), "main", in), got, 2e-3, 2e-3, "plan vs fused reference");
      }
}

// x [2, 3, 3, 7] -> 5 channels (bias, relu) -> 4 channels (no bias, silu),
// recomputed here in fp64 from the program's own constants.
TEST(CompiledConvChain, MatchesAPlainFp64Loop) {
  Program p = chain_program(DType::FP32, {2, 3, 3, 7}, {{5, "conv", "relu"}, {4, "none", "silu"}}, 5);
  const Function& f = p.functions.at(0);
  auto value = [&](const std::string& name) -> const Tensor& {
    for (const Op& op : f.ops)
      if (op.outputs[0].name == name) return op.arg("val")->lit->value;
    throw Error("no const " + name);
  };
  const Tensor &w0 = value("w0"), &b0 = value("bias0"), &w1 = value("w1");
  TensorMap in = random_inputs(p, 3);
  const Tensor& x = in.at("x");
  const int64_t P = 21;
  std::vector<double> want(2 * 4 * P);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t p0 = 0; p0 < P; ++p0) {
      double h[5];
      for (int64_t o = 0; o < 5; ++o) {
        double s = b0.at(size_t(o));
        for (int64_t i = 0; i < 3; ++i) s += w0.at(size_t(o * 3 + i)) * x.at(size_t((n * 3 + i) * P + p0));
        h[o] = std::max(s, 0.0);
      }
      for (int64_t o = 0; o < 4; ++o) {
        double s = 0;
        for (int64_t i = 0; i < 5; ++i) s += w1.at(size_t(o * 5 + i)) * h[i];
        want[size_t((n * 4 + o) * P + p0)] = s / (1 + std::exp(-s));
      }
    }
  Plan plan = compile(p);
  expect_one_chain_step(plan, 2);
  Tensor got = plan.run(in).at("a1");
  ASSERT_EQ(got.shape(), (Shape{2, 4, 3, 7}));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.at(i), want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << i;
}

// The tiles depend on the shapes only: the same bits for 1 and 2 threads,
// on a chain large enough to be split over threads (two images of 56x56).
TEST(CompiledConvChain, SameBitsForAnyThreadCount) {
  Program p = chain_program(DType::FP32, {2, 16, 56, 56}, {{64, "conv", "relu"}, {16, "conv", "silu"}});
  Plan plan = compile(p);
  expect_one_chain_step(plan, 2);
  TensorMap in = random_inputs(p, 4);
  const int before = kernels::num_threads();
  kernels::set_num_threads(1);
  Tensor one = plan.run(in).at("a1");
  kernels::set_num_threads(2);
  Tensor two = plan.run(in).at("a1");
  kernels::set_num_threads(before);
  ASSERT_EQ(one.nbytes(), two.nbytes());
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.nbytes()), 0);
  expect_outputs_close(run_reference(p, "main", in), {{"a1", two}}, 1e-5, 1e-5, "plan vs unfused reference");
}

TEST(CompiledConvChain, TileSizes) {
  using kernels::conv_chain_tile;
  EXPECT_EQ(conv_chain_tile({64, 256, 64}, 7), 7);            // a small image is one tile
  const int64_t t = conv_chain_tile({64, 256, 64, 64}, 3136);  // 56x56: 512 KB / (4·320) floats per position
  EXPECT_GE(t, 48);
  EXPECT_LE(t * 320 * 4, 512 * 1024);
  EXPECT_EQ(t % 48, 0);
  EXPECT_EQ(((3136 + t - 1) / t) % 2, 0);                      // an even number of tiles
  EXPECT_EQ(conv_chain_tile({8, 8000, 8}, 1000), 0);          // too wide for 48 positions
  EXPECT_EQ(conv_chain_tile({8, 8000, 8}, 1), 1);
  EXPECT_EQ(conv_chain_tile({1024, 1024, 1024}, 1024), 0);   // 8 MB of weights, read per tile
  EXPECT_EQ(conv_chain_tile({1024, 1024, 1024}, 40), 40);     // ... unless one tile is the image
  EXPECT_GT(conv_chain_tile({256, 512, 256}, 784), 0);         // 1 MB of weights
  EXPECT_EQ(conv_chain_tile({8}, 10), 0);
  EXPECT_THROW(kernels::ConvChainKernel(1, 1000, {8, 8000, 8}, {{}, {}}), Error);
}

TEST(CompiledConvChain, RunTimeWeightsAreAOneLineError) {
  std::string text = program_text(
      "tensor<fp32, [1, 3, 5]> x, tensor<fp32, [8, 3, 1]> w",
      const_stmt("b", random(DType::FP32, {8}, 3)) +
          stmt("tensor<fp32, [1, 8, 5]>", "c",
               "milrt_conv_chain(x = x, weights = (w), biases = (b), activations = string(\"relu\"))"),
      "c");
  Program p = parse_mil(text, "t.mil", ".");
  verify(p);
  try {
    compile(p);
    FAIL() << "compiled";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("weights[0] must be a compile-time constant"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace milrt::test::rewrite
