// int4 block-quantized weights through fuse-quantized-weights and the
// lowering: constexpr_blockwise_shift_scale of int4 data [N, K] with one
// scale per row block becomes milrt_gemm(y = data, y_scale = scale) (IR
// before and after), an odd block is left to fold-constexpr, and the compiled
// plan (nibbles packed once, kernels::weight_gemm's q4 format) matches the
// reference executor on the original program.
//
// Tolerances (x in [-1, 1], q in [-8, 7], scales in [0, 1/7], so |w| <= 8/7
// and Σ|x·w| over K = 64 stays <= 74): the original rounds each dequantized
// weight to fp32 and the fused reference does not: 64 weights off by <= 2^-24
// relative, plus one fp32 rounding of the result: bound 1e-5. The plan sums
// K = 64 fp32 products in some order (<= 64·2^-24·74 ~ 2.8e-4 worst case):
// bound 3e-4. Measured values are printed.
#include <cstdio>

#include "milrt/plan.h"
#include "milrt/reference.h"
#include "passes/pass_registry.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

using Strings = std::vector<std::string>;

// z = matmul(x [rows, K], dequant(int4 [N, K], scale [N, K / block])ᵀ), or
// linear with a bias.
Program int4_program(int64_t rows, int64_t n, int64_t k, int64_t block, bool linear, uint64_t seed) {
  const std::string wt = "tensor<fp32, [" + std::to_string(n) + ", " + std::to_string(k) + "]>";
  const std::string zt = "tensor<fp32, [" + std::to_string(rows) + ", " + std::to_string(n) + "]>";
  std::string body = const_stmt("w_d", random(DType::Int4, {n, k}, seed, -8, 7)) +
                     const_stmt("w_s", random(DType::FP32, {n, k / block}, seed + 1, 0, 1.0 / 7)) +
                     stmt(wt, "w", "constexpr_blockwise_shift_scale(data = w_d, scale = w_s)");
  if (linear)
    body += const_stmt("b", random(DType::FP32, {n}, seed + 2)) + stmt(zt, "z", "linear(x = x, weight = w, bias = b)");
  else
    body += stmt(zt, "z", "matmul(x = x, y = w, transpose_x = bool(false), transpose_y = bool(true))");
  return parse_program("tensor<fp32, [" + std::to_string(rows) + ", " + std::to_string(k) + "]> x", body, "z");
}

Program fused(const Program& p) {
  Program q = p;
  run_passes(q, {"fuse-quantized-weights"});
  return q;
}

TEST(FuseInt4Weights, MatmulReadsTheInt4DataAndScales) {
  const Program before = int4_program(3, 8, 64, 16, false, 1);
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"milrt_gemm"}));
  EXPECT_EQ(op_types(after, true), (Strings{"const", "const", "milrt_gemm"})) << "the constexpr op is gone";
  const Op& g = producer(after, "z");
  EXPECT_EQ(var_of(g, "y"), "w_d");
  EXPECT_EQ(var_of(g, "y_scale"), "w_s");
  EXPECT_EQ(const_input(after, g, "y")->dtype(), DType::Int4);
  EXPECT_EQ(g.outputs[0].type, producer(before, "z").outputs[0].type);
  // The printed IR parses back to the same program.
  Program reparsed = parse_mil(print_mil(after), "t.mil", ".");
  verify(reparsed);
  EXPECT_EQ(ir_diff(after, reparsed), "");
  const Deviation d = expect_same_function(before, after, 0, 1e-5, "int4 matmul");
  std::printf("[fuse int4] fused vs original reference %g\n", d.abs);
}

TEST(FuseInt4Weights, LinearKeepsItsBias) {
  const Program before = int4_program(2, 8, 64, 32, true, 2);
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"milrt_gemm"}));
  EXPECT_EQ(var_of(producer(after, "z"), "bias"), "b");
  expect_same_function(before, after, 0, 1e-5, "int4 linear");
}

// An odd block would end mid-byte in the kernel's packing: left to fold-constexpr.
TEST(FuseInt4Weights, OddBlockLeftAlone) {
  const Program before = int4_program(3, 8, 63, 3, false, 3);
  EXPECT_EQ(ir_diff(before, fused(before)), "");
}

// The default pipeline compiles the int4 product to one q4 step; decode-like
// rows (streaming) and prefill-like rows (panels) against the reference on
// the original program.
TEST(FuseInt4Weights, CompiledPlanMatchesTheReference) {
  double worst = 0;
  for (int64_t rows : {1, 4, 9})
    for (int64_t block : {2, 16, 32})
      for (bool linear : {false, true}) {
        const std::string what = "rows " + std::to_string(rows) + ", block " + std::to_string(block) +
                                 (linear ? ", linear" : ", matmul");
        SCOPED_TRACE(what);
        const Program p = int4_program(rows, 24, 64, block, linear, uint64_t(rows * 100 + block));
        Plan plan = compile(p);
        bool q4 = false;
        for (auto& s : plan.steps()) q4 = q4 || s.kernel.find("int4 weights/" + std::to_string(block)) != std::string::npos;
        EXPECT_TRUE(q4) << "no int4 step";
        for (int t = 0; t < 2; ++t) {
          const TensorMap in = random_inputs(p, uint64_t(500 + t));
          worst = std::max(worst, expect_outputs_close(run_reference(p, "main", in), plan.run(in), 0, 3e-4, what).abs);
        }
      }
  std::printf("[fuse int4] compiled plan vs reference: max |diff| %g\n", worst);
}

}  // namespace
}  // namespace milrt::test::rewrite
