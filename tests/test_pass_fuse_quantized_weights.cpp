// fuse-quantized-weights: a matmul/linear reading constexpr_blockwise_shift_scale
// of int8 data becomes milrt_gemm(y = data, y_scale = scale). The IR before
// and after on small programs, the forms left alone, and the fused program's
// reference (milrt_gemm's own fp64 reference) against the original's.
//
// Tolerances (x in [-1, 1], q in [-127, 127], scales in [0, 1/127], so
// |w| <= 1 and |x·w| summed over K = 64 stays <= 64): the original rounds each
// dequantized weight to the scale's dtype and the product to the output's;
// the fused reference rounds once. fp32 scales: 64 weights off by <= 2^-24
// relative plus one fp32 rounding of a value <= 64: <= 64·2^-24 + 2^-18,
// bound 1e-5. fp16 scales: <= 64·2^-11·1 = 0.031 in the worst case (bound
// 0.04); measured values are printed.
#include <cstdio>

#include "milrt/plan.h"
#include "milrt/reference.h"
#include "passes/pass_registry.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

using Strings = std::vector<std::string>;

Program fused(const Program& p) {
  Program q = p;
  run_passes(q, {"fuse-quantized-weights"});
  return q;
}

std::string str_input(const Program& p, const Op& op, const std::string& key) {
  const Tensor* t = const_input(p, op, key);
  return t && t->dtype() == DType::String ? t->strings().at(0) : "";
}

// w = constexpr_blockwise_shift_scale(d, s): int8 data [n, k] (or `data_dtype`),
// scales `scale_shape` (default [n, k / block]) of `sdt`; `offset` adds one.
struct Quant {
  int64_t n = 8, k = 64, block = 4;
  DType sdt = DType::FP32, data_dtype = DType::Int8;
  Shape scale_shape;
  std::string offset;  // "" none, "zero", "nonzero"
  uint64_t seed = 1;
};

std::string quantized(const std::string& w, const Quant& q) {
  const Shape ss = q.scale_shape.empty() ? Shape{q.n, q.k / q.block} : q.scale_shape;
  const double lo = q.data_dtype == DType::Int8 ? -127 : 0, hi = q.data_dtype == DType::Int8 ? 127 : 255;
  std::string body = const_stmt(w + "_d", random(q.data_dtype, {q.n, q.k}, q.seed, lo, hi)) +
                     const_stmt(w + "_s", random(q.sdt, ss, q.seed + 1, 0, 1.0 / 127));
  std::string args = "data = " + w + "_d, scale = " + w + "_s";
  if (!q.offset.empty()) {
    Tensor off = random(q.data_dtype, ss, q.seed + 2, 1, 3);
    if (q.offset == "zero") off = random(q.data_dtype, ss, q.seed + 2, 0, 0);
    body += const_stmt(w + "_o", off);
    args += ", offset = " + w + "_o";
  }
  const std::string wt = "tensor<" + std::string(dtype_name(q.sdt)) + ", [" + std::to_string(q.n) + ", " +
                         std::to_string(q.k) + "]>";
  return body + stmt(wt, w, "constexpr_blockwise_shift_scale(" + args + ")");
}

std::string matmul(const std::string& out, const std::string& type, const std::string& x, const std::string& w,
                   bool ty = true) {
  return stmt(type, out, "matmul(x = " + x + ", y = " + w + ", transpose_x = bool(false), transpose_y = bool(" +
                             (ty ? "true" : "false") + "))");
}

TEST(FuseQuantizedWeights, MatmulReadsTheInt8DataAndScales) {
  const Program before = parse_program("tensor<fp32, [2, 3, 64]> x", quantized("w", {}) +
                                                                          matmul("z", "tensor<fp32, [2, 3, 8]>", "x", "w"),
                                       "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"milrt_gemm"}));
  EXPECT_EQ(op_types(after, true), (Strings{"const", "const", "milrt_gemm"})) << "the constexpr op is gone";
  const Op& g = producer(after, "z");
  EXPECT_EQ(g.name, "z");
  EXPECT_EQ(g.outputs[0].type, producer(before, "z").outputs[0].type);
  EXPECT_EQ(var_of(g, "x"), "x");
  EXPECT_EQ(var_of(g, "y"), "w_d");
  EXPECT_EQ(var_of(g, "y_scale"), "w_s");
  EXPECT_EQ(values(*const_input(after, g, "transpose_y")), std::vector<double>{1});
  EXPECT_EQ(str_input(after, g, "fused_from"), "z");
  // The printed IR parses back to the same program.
  const std::string text = print_mil(after);
  EXPECT_NE(text.find("y_scale = w_s"), std::string::npos) << text;
  Program reparsed = parse_mil(text, "t.mil", ".");
  verify(reparsed);
  EXPECT_EQ(ir_diff(after, reparsed), "");
  const Deviation d = expect_same_function(before, after, 0, 1e-5, "int8 matmul");
  std::printf("[fuse-quantized-weights] fp32 scales: fused vs original reference %g\n", d.abs);
}

// linear's bias moves onto the fused op; an all-zero offset is no offset.
TEST(FuseQuantizedWeights, LinearWithBiasAndZeroOffset) {
  Quant q;
  q.offset = "zero";
  q.block = 32;
  const Program before = parse_program(
      "tensor<fp32, [3, 64]> x",
      quantized("w", q) + const_stmt("b", random(DType::FP32, {8}, 9)) +
          stmt("tensor<fp32, [3, 8]>", "z", "linear(x = x, weight = w, bias = b)"),
      "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after, true), (Strings{"const", "const", "const", "milrt_gemm"}))
      << "the constexpr op and its offset are gone";
  const Op& g = producer(after, "z");
  EXPECT_EQ(var_of(g, "bias"), "b");
  EXPECT_EQ(var_of(g, "y"), "w_d");
  expect_same_function(before, after, 0, 1e-5, "linear");
}

// fuse-gemm-epilogue then takes the residual add after the int8 product into
// the same milrt_gemm (the decoder's wo and w2 projections), keeping y_scale.
TEST(FuseQuantizedWeights, EpilogueFusionKeepsTheScales) {
  const Program before = parse_program(
      "tensor<fp32, [3, 64]> x, tensor<fp32, [3, 8]> r",
      quantized("w", {}) + matmul("m", "tensor<fp32, [3, 8]>", "x", "w") +
          stmt("tensor<fp32, [3, 8]>", "z", "add(x = m, y = r)"),
      "z");
  Program after = before;
  run_passes(after, {"fuse-quantized-weights", "fuse-gemm-epilogue"});
  EXPECT_EQ(op_types(after), (Strings{"milrt_gemm"}));
  const Op& g = producer(after, "z");
  EXPECT_EQ(var_of(g, "y_scale"), "w_s");
  EXPECT_EQ(var_of(g, "residual"), "r");
  EXPECT_EQ(str_input(after, g, "fused_from"), "m z");
  expect_same_function(before, after, 0, 1e-5, "int8 matmul + residual");
  // The compiled plan runs it as one step.
  Plan plan = compile(before);
  ASSERT_EQ(plan.steps().size(), 1u);
  EXPECT_NE(plan.steps()[0].kernel.find("int8 weights"), std::string::npos) << plan.steps()[0].kernel;
  EXPECT_NE(plan.steps()[0].kernel.find("residual"), std::string::npos) << plan.steps()[0].kernel;
}

// fp16 program and fp16 scales: the result keeps x's dtype.
TEST(FuseQuantizedWeights, Fp16ScalesAndProgram) {
  Quant q;
  q.sdt = DType::FP16;
  q.block = 1;
  const Program before = parse_program("tensor<fp16, [5, 64]> x",
                                       quantized("w", q) + matmul("z", "tensor<fp16, [5, 8]>", "x", "w"), "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"milrt_gemm"}));
  // fp16 result: the original rounds each weight and the product to fp16; the
  // fused op once: 0.04 (above) plus one fp16 rounding of a value <= 64 (2^-5).
  const Deviation d = expect_same_function(before, after, 0, 0.04 + 0.032, "fp16");
  std::printf("[fuse-quantized-weights] fp16 scales, fp16 program: fused vs original reference %g\n", d.abs);
}

// fp16 scales in an fp32 program (the decoder's default): the fp16 weight
// reaches the fp32 matmul through cast(dtype = "fp32"); the fused op reads the
// fp16 scales as stored, and the cast goes with the constexpr op. A cast
// another op also reads stays, with its constexpr op.
TEST(FuseQuantizedWeights, Fp16ScalesCastToFp32) {
  Quant q;
  q.sdt = DType::FP16;
  q.block = 32;
  const std::string cast = stmt("tensor<fp32, [8, 64]>", "w32", "cast(x = w, dtype = string(\"fp32\"))");
  const Program before = parse_program("tensor<fp32, [3, 64]> x",
                                       quantized("w", q) + cast + matmul("z", "tensor<fp32, [3, 8]>", "x", "w32"), "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after, true), (Strings{"const", "const", "milrt_gemm"})) << "the cast and constexpr op are gone";
  const Op& g = producer(after, "z");
  EXPECT_EQ(var_of(g, "y"), "w_d");
  EXPECT_EQ(var_of(g, "y_scale"), "w_s");
  EXPECT_EQ(g.outputs[0].type, producer(before, "z").outputs[0].type);
  // fp32 result: only the weights' fp16 rounding in the original (bound 0.04, above).
  const Deviation d = expect_same_function(before, after, 0, 0.04, "fp16 scales, fp32 program");
  std::printf("[fuse-quantized-weights] fp16 scales cast to fp32: fused vs original reference %g\n", d.abs);

  const Program shared = parse_program(
      "tensor<fp32, [3, 64]> x",
      quantized("w", q) + cast + matmul("z", "tensor<fp32, [3, 8]>", "x", "w32") +
          stmt("tensor<fp32, [8, 64]>", "w2", "mul(x = w32, y = w32)"),
      "z, w2");
  EXPECT_EQ(op_types(fused(shared)), (Strings{"constexpr_blockwise_shift_scale", "cast", "milrt_gemm", "mul"}));
  // A cast to another dtype is not the fp32 matmul's form: left alone.
  const Program to_fp16 = parse_program(
      "tensor<fp16, [3, 64]> x",
      quantized("w", q) + stmt("tensor<fp16, [8, 64]>", "w16", "cast(x = w, dtype = string(\"fp16\"))") +
          matmul("z", "tensor<fp16, [3, 8]>", "x", "w16"),
      "z");
  EXPECT_EQ(op_types(fused(to_fp16)), (Strings{"constexpr_blockwise_shift_scale", "cast", "matmul"}));
}

// The weight shared with another consumer: the product is fused, the
// constexpr op stays for the other reader (fold-constexpr expands it there).
TEST(FuseQuantizedWeights, SharedWeightKeepsTheConstexprForOtherReaders) {
  const Program before = parse_program(
      "tensor<fp32, [3, 64]> x",
      quantized("w", {}) + matmul("z", "tensor<fp32, [3, 8]>", "x", "w") +
          stmt("tensor<fp32, [8, 64]>", "w2", "mul(x = w, y = w)"),
      "z, w2");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"constexpr_blockwise_shift_scale", "milrt_gemm", "mul"}));
  expect_same_function(before, after, 0, 1e-5, "shared");
}

// Forms the kernel cannot read stay as they are.
TEST(FuseQuantizedWeights, LeavesOtherFormsAlone) {
  struct Case {
    std::string what;
    Quant q;
    bool ty = true;
  };
  std::vector<Case> cases;
  {
    Case c{"nonzero offset", {}};
    c.q.offset = "nonzero";
    cases.push_back(c);
  }
  {
    Case c{"uint8 data", {}};
    c.q.data_dtype = DType::UInt8;
    cases.push_back(c);
  }
  {
    Case c{"scale blocked along N", {}};
    c.q.scale_shape = {4, 16};
    cases.push_back(c);
  }
  {
    Case c{"weight not transposed (blocks along N of y)", {}};
    c.q.n = 64;
    c.q.k = 8;
    c.q.block = 2;
    c.ty = false;
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int64_t outn = c.ty ? c.q.n : c.q.k;
    const Program before = parse_program(
        "tensor<fp32, [3, 64]> x",
        quantized("w", c.q) + matmul("z", "tensor<fp32, [3, " + std::to_string(outn) + "]>", "x", "w", c.ty), "z");
    const Program after = fused(before);
    EXPECT_EQ(ir_diff(before, after), "");
  }
  // Non-constant data or scale: constexpr ops may not take variables, so the
  // closest form is a plain matmul of a variable int8-valued weight.
  const Program var = parse_program("tensor<fp32, [3, 64]> x, tensor<fp32, [8, 64]> w",
                                    matmul("z", "tensor<fp32, [3, 8]>", "x", "w"), "z");
  EXPECT_EQ(ir_diff(var, fused(var)), "");
}

// Schema: milrt_gemm with y_scale checks its operands with clear messages.
TEST(FuseQuantizedWeights, SchemaRejectsBadQuantizedOperands) {
  const std::string consts = const_stmt("d", random(DType::Int8, {8, 64}, 1, -127, 127)) +
                             const_stmt("s", random(DType::FP32, {8, 4}, 2, 0, 0.01)) +
                             const_stmt("s3", random(DType::FP32, {8, 3}, 2, 0, 0.01)) +
                             const_stmt("f", random(DType::FP32, {8, 64}, 3));
  auto msg = [&](const std::string& expr) {
    return error_of([&] { parse_program("tensor<fp32, [3, 64]> x", consts + stmt("tensor<fp32, [3, 8]>", "z", expr), "z"); });
  };
  EXPECT_NE(msg("milrt_gemm(x = x, y = d, y_scale = s, transpose_y = bool(false))").find("transpose_y must be"),
            std::string::npos);
  EXPECT_NE(msg("milrt_gemm(x = x, y = f, y_scale = s, transpose_y = bool(true))").find("must be an int8 [N, K]"),
            std::string::npos);
  EXPECT_NE(msg("milrt_gemm(x = x, y = d, y_scale = s3, transpose_y = bool(true))").find("equal blocks"),
            std::string::npos);
  EXPECT_EQ(msg("milrt_gemm(x = x, y = d, y_scale = s, transpose_y = bool(true))"), "<no error>");
}

TEST(FuseQuantizedWeights, RegisteredRightBeforeFoldConstexpr) {
  std::vector<std::string> names;
  for (const PassInfo& p : all_passes()) names.push_back(p.name);
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  ASSERT_LT(at("fuse-quantized-weights"), int64_t(names.size()));
  EXPECT_EQ(at("fuse-quantized-weights") + 1, at("fold-constexpr"));
  const auto& dflt = CompileOptions{}.passes;
  auto it = std::find(dflt.begin(), dflt.end(), "fuse-quantized-weights");
  ASSERT_NE(it, dflt.end());
  EXPECT_EQ(*(it + 1), "fold-constexpr");
}

// The corpus: the pass changes nothing it should not (outputs preserved).
TEST(FuseQuantizedWeights, CorpusOutputsPreserved) {
  int fused_ops = 0, programs = 0;
  for (const std::string& path : coreml_bundles()) {
    SCOPED_TRACE(path);
    const Program before = load_verified(path);
    const Program after = fused(before);
    ++programs;
    for (const Function& f : after.functions)
      for (const Op& op : f.ops) fused_ops += op.type == "milrt_gemm";
    if (ir_diff(before, after).empty()) continue;
    expect_same_function(before, after, 1e-3, 1e-3, path);
  }
  if (programs == 0) GTEST_SKIP() << "../shared/testdata is absent: no Core ML bundles to run";
  std::printf("[fuse-quantized-weights] %d bundles, %d products fused\n", programs, fused_ops);
}

}  // namespace
}  // namespace milrt::test::rewrite
