// Compiled products with weights kept compact: int8 + block scales (through
// fuse-quantized-weights) and bf16 constants, against the reference executor
// on the original program (constexpr + matmul, or matmul of the bf16
// constant widened exactly), and the Llama decoder built with those storages.
//
// Tolerances. x in [-1, 1], |w| <= 1, K = 64, so every |x·w| sum is <= 64.
//  - int8, fp32 scales: the plan forms q·s·x in fp32 with fp32 accumulation
//    (K·2^-24·64 ~ 2.4e-4 worst case, in practice ~1e-6); the reference
//    rounds the dequantized weights to fp32 first (64·2^-24): bound 2e-4.
//  - int8, fp16 scales (an fp16 program): the reference rounds each
//    dequantized weight to fp16 (2^-11 relative) and the plan does not:
//    <= 64·2^-11 = 0.031, then both round the result to fp16 (one ulp apart
//    at most, 2^-5 below 64): bound 0.07.
//  - int8, fp16 scales in an fp32 program (the fp16 weight cast to fp32 for
//    the fp32 matmul; the decoder's default): the same 0.031 from the
//    weights' fp16 rounding, an fp32 result: bound 0.04.
//  - bf16 weights, fp32 matmul precision: the weights are exact in both, only
//    fp32 accumulation differs: bound 2e-4.
//  - bf16 matmul precision: x is rounded to bf16 too (2^-9 relative) on the
//    packed path: <= 64·2^-9 = 0.125 worst case, bound 0.13.
// Measured values are printed.
#include <cstdio>
#include <map>
#include <optional>

#include "llm/checkpoint.h"
#include "llm/llama_config.h"
#include "llm/llama_decoder.h"
#include "milrt/plan.h"
#include "milrt/reference.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

constexpr int64_t kN = 24, kK = 64;

// z = matmul(x [rows, K], dequant(int8 [N, K], scale [N, K/block])ᵀ) (+ b),
// in a program of dtype `xdt` (default: the scales' dtype; fp32 with fp16
// scales: the fp16 weight cast to fp32 for the fp32 matmul, the decoder's form).
Program int8_program(int64_t rows, int64_t block, DType sdt, bool bias, uint64_t seed,
                     std::optional<DType> xdt = std::nullopt) {
  const std::string dt(dtype_name(xdt.value_or(sdt)));
  const std::string zt = "tensor<" + dt + ", [" + std::to_string(rows) + ", " + std::to_string(kN) + "]>";
  const bool widen = xdt.value_or(sdt) != sdt;
  std::string body = const_stmt("d", random(DType::Int8, {kN, kK}, seed, -127, 127)) +
                     const_stmt("s", random(sdt, {kN, kK / block}, seed + 1, 0, 1.0 / 127)) +
                     stmt("tensor<" + std::string(dtype_name(sdt)) + ", [24, 64]>", widen ? "w_s" : "w",
                          "constexpr_blockwise_shift_scale(data = d, scale = s)");
  if (widen) body += stmt("tensor<" + dt + ", [24, 64]>", "w", "cast(x = w_s, dtype = string(\"" + dt + "\"))");
  body += stmt(zt, bias ? "mm" : "z", "matmul(x = x, y = w, transpose_x = bool(false), transpose_y = bool(true))");
  if (bias)
    body += const_stmt("b", random(xdt.value_or(sdt), {kN}, seed + 2)) + stmt(zt, "z", "add(x = mm, y = b)");
  return parse_program("tensor<" + dt + ", [" + std::to_string(rows) + ", 64]> x", body, "z");
}

// The plan of `p` (default pipeline) against the reference on p; returns the
// largest deviation and leaves the plan's steps in `steps`.
Deviation plan_vs_reference(const Program& p, double abs, const std::string& what,
                            std::vector<Plan::StepInfo>* steps = nullptr, const CompileOptions& opt = {}) {
  Plan plan = compile(p, opt);
  if (steps) *steps = plan.steps();
  Deviation dev;
  for (int k = 0; k < 2; ++k) {
    TensorMap in = random_inputs(p, uint64_t(500 + k));
    dev.merge(expect_outputs_close(run_reference(p, "main", in), plan.run(in), 0, abs, what));
  }
  return dev;
}

std::vector<std::string> kernels_of(const std::vector<Plan::StepInfo>& steps) {
  std::vector<std::string> r;
  for (auto& s : steps) r.push_back(s.kernel);
  return r;
}

TEST(CompiledWeightFormats, Int8BlockScalesMatchTheReference) {
  double worst32 = 0, worst16 = 0, worst16_in32 = 0;
  struct Form {
    DType sdt, xdt;
    double bound;
    double* worst;
  };
  const Form forms[] = {{DType::FP32, DType::FP32, 2e-4, &worst32},
                        {DType::FP16, DType::FP16, 0.07, &worst16},
                        {DType::FP16, DType::FP32, 0.04, &worst16_in32}};
  for (int64_t rows : {1, 3, 7})
    for (int64_t block : {1, 4, 32})
      for (const Form& f : forms) {
        const std::string what = "rows " + std::to_string(rows) + ", block " + std::to_string(block) + ", " +
                                 std::string(dtype_name(f.sdt)) + " scales, " + std::string(dtype_name(f.xdt)) +
                                 " program";
        SCOPED_TRACE(what);
        std::vector<Plan::StepInfo> steps;
        const Deviation d = plan_vs_reference(
            int8_program(rows, block, f.sdt, false, uint64_t(rows * 100 + block), f.xdt), f.bound, what, &steps);
        *f.worst = std::max(*f.worst, d.abs);
        // One step reading the int8 data and the scales as stored: no dequantized matrix anywhere.
        ASSERT_EQ(steps.size(), 1u);
        EXPECT_EQ(steps[0].kernel, "gemm[int8 weights/" + std::to_string(block) + "]");
        EXPECT_EQ(steps[0].ops, std::vector<std::string>{"z"});
        // The weight's bytes: one per element plus a scale as stored (4 or 2 bytes) per block.
        const double weight = double(kN * kK) * (1.0 + double(dtype_size(f.sdt)) / double(block));
        EXPECT_DOUBLE_EQ(steps[0].bytes, 4.0 * double(rows * (kK + kN)) + weight);
      }
  std::printf("[weight formats] int8 plan vs reference: fp32 scales %g, fp16 scales %g, fp16 scales in an fp32 "
              "program %g\n",
              worst32, worst16, worst16_in32);
}

// Under matmul_precision bf16, a quantized product of more rows than
// weight_gemm streams (prefill) runs its panels on the bf16 kernels: the step
// says so, and the values are the reference's within bf16 rounding of x and
// of the dequantized weights (2 · 2^-9 relative on sums of |x·w| <= 64:
// bound 0.26). Rows that stream stay exact, fp32 math (bound 2e-4).
TEST(CompiledWeightFormats, Int8PanelsTakeBf16MatmulPrecision) {
  CompileOptions bf16;
  bf16.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  double worst_exact = 0, worst_bf16 = 0;
  for (int64_t rows : {3, 16, 37}) {
    const std::string what = "rows " + std::to_string(rows);
    SCOPED_TRACE(what);
    const Program p = int8_program(rows, 32, DType::FP32, false, uint64_t(rows));
    std::vector<Plan::StepInfo> steps;
    const bool panels = rows > 4;
    const Deviation d = plan_vs_reference(p, panels ? 0.26 : 2e-4, what, &steps, bf16);
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0].kernel, panels ? "gemm[int8 weights/32][bf16]" : "gemm[int8 weights/32]");
    (panels ? worst_bf16 : worst_exact) = std::max(panels ? worst_bf16 : worst_exact, d.abs);
    if (panels) {
      // Not the exact product: the bf16 kernels ran (exact agrees to ~1e-6).
      const Deviation exact = plan_vs_reference(p, 2e-4, what + " fp32 math");
      EXPECT_GT(d.abs, 10 * exact.abs + 1e-5) << what;
    }
  }
  std::printf("[weight formats] int8 under bf16 matmul precision vs reference: streamed %g, panels %g\n", worst_exact,
              worst_bf16);
}

// A bias add after the quantized product: the plan computes it either fused
// into the product or as its own step; the values agree with the reference.
TEST(CompiledWeightFormats, Int8WithBias) {
  std::vector<Plan::StepInfo> steps;
  const Deviation d = plan_vs_reference(int8_program(3, 4, DType::FP32, true, 7), 2e-4, "bias", &steps);
  std::string all;
  for (auto& k : kernels_of(steps)) all += k + "; ";
  EXPECT_NE(all.find("gemm[int8 weights/4]"), std::string::npos) << all;
  std::printf("[weight formats] int8 + bias: %s deviation %g\n", all.c_str(), d.abs);
}

// z = matmul(x [rows, 64], W bf16 [N, 64], transpose_y) + b.
Program bf16_program(int64_t rows, uint64_t seed, bool ty = true) {
  const std::string zt = "tensor<fp32, [" + std::to_string(rows) + ", 24]>";
  const Shape ws = ty ? Shape{kN, kK} : Shape{kK, kN};
  return parse_program("tensor<fp32, [" + std::to_string(rows) + ", 64]> x",
                       const_stmt("w", random(DType::BF16, ws, seed)) + const_stmt("b", random(DType::FP32, {kN}, seed + 1)) +
                           stmt(zt, "mm", std::string("matmul(x = x, y = w, transpose_x = bool(false), transpose_y = bool(") +
                                              (ty ? "true" : "false") + "))") +
                           stmt(zt, "z", "add(x = mm, y = b)"),
                       "z");
}

TEST(CompiledWeightFormats, Bf16ConstantWeights) {
  struct Case {
    int64_t rows;
    bool ty, bf16_math;
    std::string kernel;
    double tol;
  };
  const Case cases[] = {
      {1, true, false, "gemm[bf16 weights]+bias", 2e-4},
      {4, true, false, "gemm[bf16 weights]+bias", 2e-4},
      {7, true, false, "gemm[B packed]+bias", 2e-4},
      {7, false, false, "gemm[B packed]+bias", 2e-4},
      {1, true, true, "gemm[bf16 weights]+bias", 0.13},
      {7, true, true, "gemm[B packed][bf16]+bias", 0.13},
  };
  for (const Case& c : cases) {
    const std::string what = "rows " + std::to_string(c.rows) + (c.ty ? "" : ", W stored [K, N]") +
                             (c.bf16_math ? ", bf16 matmuls" : "");
    SCOPED_TRACE(what);
    CompileOptions opt;
    if (c.bf16_math) opt.matmul_precision = CompileOptions::MatmulPrecision::bf16;
    std::vector<Plan::StepInfo> steps;
    const Deviation d = plan_vs_reference(bf16_program(c.rows, uint64_t(c.rows), c.ty), c.tol, what, &steps, opt);
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0].kernel, c.kernel);
    if (c.kernel.find("bf16 weights") != std::string::npos) {
      EXPECT_DOUBLE_EQ(steps[0].bytes, 4.0 * double(c.rows * (kK + kN)) + 2.0 * kN * kK + 4.0 * kN);
    }
    std::printf("[weight formats] bf16 weights, %s: %s, deviation %g\n", what.c_str(), steps[0].kernel.c_str(), d.abs);
  }
}

// The schema accepts bf16 only as a constant weight.
TEST(CompiledWeightFormats, Bf16OnlyAsAConstantWeight) {
  const std::string err = error_of([] {
    parse_program("tensor<fp32, [2, 64]> x, tensor<bf16, [24, 64]> w",
                  stmt("tensor<fp32, [2, 24]>", "z", "matmul(x = x, y = w, transpose_x = bool(false), transpose_y = bool(true))"),
                  "z");
  });
  EXPECT_NE(err.find("bf16 only as a compile-time constant"), std::string::npos) << err;
}

// ---- the Llama decoder ------------------------------------------------------------

struct DecoderRun {
  std::vector<Plan::StepInfo> steps;
  double max_err = 0, max_ref = 0;
};

// Compiles build_llama_decoder(w, T, opt), runs it and the reference executor
// over three calls (positions 0, T, 2T), comparing logits and a cache.
DecoderRun run_decoder(const llm::LlamaWeights& w, int64_t T, const llm::DecoderOptions& opt) {
  const Program prog = llm::build_llama_decoder(w, T, opt);
  Plan plan = compile(prog);
  DecoderRun r;
  r.steps = plan.steps();
  TensorMap ref_states;
  for (int call = 0; call < 3; ++call) {
    TensorMap in;
    std::vector<double> toks;
    for (int64_t i = 0; i < T; ++i) toks.push_back(double((call * 37 + i * 11 + 1) % w.cfg.vocab));
    in["tokens"] = make(DType::Int32, {1, T}, toks);
    in["pos"] = make(DType::Int32, {1}, {double(call * T)});
    const Tensor want = run_reference(prog, "main", in, ref_states).at("logits");
    const Tensor got = plan.run(in).at("logits");
    for (int64_t i = 0; i < want.numel(); ++i) {
      r.max_err = std::max(r.max_err, std::fabs(want.at(size_t(i)) - got.at(size_t(i))));
      r.max_ref = std::max(r.max_ref, std::fabs(want.at(size_t(i))));
    }
  }
  const std::vector<double> a = values(plan.state("l1_kcache")), b = values(ref_states.at("l1_kcache"));
  for (size_t i = 0; i < a.size(); ++i) r.max_err = std::max(r.max_err, std::fabs(a[i] - b[i]));
  return r;
}

// Steps that multiply by a weight matrix: "gemm[...]" (packed or compact B);
// the attention products (two variable operands) are plain "gemm".
std::vector<Plan::StepInfo> weight_steps(const std::vector<Plan::StepInfo>& steps) {
  std::vector<Plan::StepInfo> r;
  for (auto& s : steps)
    if (s.kernel.rfind("gemm[", 0) == 0) r.push_back(s);
  return r;
}

double bytes_of(const std::vector<Plan::StepInfo>& steps) {
  double b = 0;
  for (auto& s : steps) b += s.bytes;
  return b;
}

// The decoder's logits and caches agree with the reference executor on the
// same program: its matmuls read the same weights (int8 dequantized, bf16
// widened), the plan accumulates in fp32 and the reference in fp64 (rounding
// each op to fp32; with fp16 scales, each dequantized weight to fp16 as
// Core ML defines the op, where the plan multiplies by the exact q·s: ~2e-4
// measured, 1e-7 with fp32 scales): 2e-3 absolute on logits of magnitude ~1
// over 2 layers, measured values printed. fp16 scales read 2 bytes a block
// fewer than fp32 ones.
TEST(CompiledWeightFormats, LlamaDecoderKeepsWeightsCompact) {
  const llm::LlamaWeights w = llm::init_llama_weights(*llm::llama_preset("tiny"), 1);
  const size_t products = size_t(7 * w.cfg.layers + 1);
  const DecoderRun f32 = run_decoder(w, 1, {llm::WeightStorage::fp32, 32});
  const std::vector<Plan::StepInfo> f32_steps = weight_steps(f32.steps);
  ASSERT_EQ(f32_steps.size(), products);
  struct Case {
    llm::WeightStorage storage;
    int64_t T;
    std::string kernel;   // every weight product's kernel starts so ...
    std::string logits;   // ... but the classifier's (one row: the last token's)
    double byte_ratio;    // weight steps' bytes vs the fp32 plan's, at most
    DType scales = DType::FP16;  // int8, int4
  };
  const Case cases[] = {
      {llm::WeightStorage::int8, 1, "gemm[int8 weights/4]", "gemm[int8 weights/4]", 0.6},
      {llm::WeightStorage::int8, 1, "gemm[int8 weights/4]", "gemm[int8 weights/4]", 0.6, DType::FP32},
      {llm::WeightStorage::int4, 1, "gemm[int4 weights/4]", "gemm[int4 weights/4]", 0.4},
      {llm::WeightStorage::bf16, 1, "gemm[bf16 weights]", "gemm[bf16 weights]", 0.6},
      {llm::WeightStorage::int8, 5, "gemm[int8 weights/4]", "gemm[int8 weights/4]", 0.0},
      {llm::WeightStorage::int4, 5, "gemm[int4 weights/4]", "gemm[int4 weights/4]", 0.0, DType::FP32},
      {llm::WeightStorage::bf16, 5, "gemm[B packed]", "gemm[bf16 weights]", 0.0},
  };
  // The weight steps' bytes of int8 T = 1 with each scale dtype: fp16 reads 2 bytes a block fewer.
  std::map<DType, double> int8_bytes;
  for (const Case& c : cases) {
    const std::string what = std::string(llm::weight_storage_name(c.storage)) + ", T = " + std::to_string(c.T) +
                             (c.storage == llm::WeightStorage::int8 || c.storage == llm::WeightStorage::int4
                                  ? ", " + std::string(dtype_name(c.scales)) + " scales"
                                  : "");
    SCOPED_TRACE(what);
    const DecoderRun r = run_decoder(w, c.T, {c.storage, 4, DType::FP32, c.scales});
    const std::vector<Plan::StepInfo> ws = weight_steps(r.steps);
    if (c.storage == llm::WeightStorage::int8 && c.T == 1) int8_bytes[c.scales] = bytes_of(ws);
    ASSERT_EQ(ws.size(), products);
    for (auto& s : ws)
      EXPECT_EQ(s.kernel.rfind(s.ops.back() == "logits" ? c.logits : c.kernel, 0), 0u) << s.kernel << " for "
                                                                                       << s.ops.back();
    if (c.byte_ratio > 0) {
      EXPECT_LT(bytes_of(ws), c.byte_ratio * bytes_of(f32_steps));
    }
    EXPECT_LT(r.max_err, 2e-3);
    std::printf("[weight formats] llama tiny %s: %zu weight steps (%s...), %.0f bytes (fp32 plan: %.0f), "
                "plan vs reference %g (logits up to %g)\n",
                what.c_str(), ws.size(), ws[0].kernel.c_str(), bytes_of(ws), bytes_of(f32_steps), r.max_err,
                r.max_ref);
  }
  const llm::LlamaConfig& g = w.cfg;
  const int64_t matrix =
      g.layers * (2 * g.dim * g.dim + 2 * g.kv_dim() * g.dim + 3 * g.hidden * g.dim) + g.vocab * g.dim;
  EXPECT_DOUBLE_EQ(int8_bytes.at(DType::FP32) - int8_bytes.at(DType::FP16), 2.0 * double(matrix / 4));
}

}  // namespace
}  // namespace milrt::test::rewrite
