// CompileOptions::bf16_operands: under matmul_precision bf16, values that
// only matrix products read are stored in bf16 by their producers.
//  - the analysis (runtime/bf16_operands.h) on small functions: IR in, the
//    chosen values out;
//  - the producers' bf16 kernels against the definition: milrt::f32_to_bf16
//    (dtype.h, the out-of-line reference rounding) of the fp32 kernel's
//    result, bit for bit, and against fp64 written here within bf16's
//    rounding;
//  - whole plans (the seed layer's and a Llama's loss and gradients, as
//    the trainer compiles them): bit-identical to fp32 storage, with the
//    bf16 producers present so the comparison is not vacuous.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/control_flow.h"
#include "kernels/generic/copy.h"
#include "kernels/generic/norm.h"
#include "kernels/generic/swiglu.h"
#include "llm/llama_builder.h"
#include "llm/llama_config.h"
#include "llm/seed_layer_builder.h"
#include "milrt/autodiff.h"
#include "milrt/dtype.h"
#include "milrt/plan.h"
#include "runtime/bf16_operands.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test {
namespace {

using rewrite::parse_program;

std::set<std::string> chosen(const Program& p) {
  Function f = *p.function("main");
  expose_captures(f);
  return rt::bf16_operand_values(f, rt::decide_buffers(f, {}, {}));
}

TEST(Bf16OperandsAnalysis, PicksValuesOnlyProductsRead) {
  const Program p = parse_program(
      "tensor<fp32, [8, 16]> x, tensor<fp32, [16, 4]> w, tensor<fp32, [16, 4]> w2, tensor<fp32, [16]> g",
      R"(
        tensor<fp32, [8, 16]> n1 = rms_norm(x = x, w = g)[name = string("n1")];
        tensor<fp32, [8, 4]> a = matmul(x = n1, y = w)[name = string("a")];
        tensor<fp32, [8, 4]> b = matmul(x = n1, y = w2)[name = string("b")];
        tensor<fp32, [8, 16]> n2 = rms_norm(x = x, w = g)[name = string("n2")];
        tensor<fp32, [8, 4]> c = matmul(x = n2, y = w)[name = string("c")];
        tensor<fp32, [8, 16]> d = add(x = n2, y = x)[name = string("d")];
      )" + rewrite::const_stmt("wc", Tensor(DType::FP32, {4, 16})) + R"(
        tensor<fp32, [8, 16]> n3 = rms_norm(x = x, w = g)[name = string("n3")];
        tensor<fp32, [8, 4]> e = matmul(x = n3, y = wc, transpose_y = bool(true))[name = string("e")];
        tensor<fp32, [16, 8]> t = transpose(x = x, perm = tensor<int32, [2]>([1, 0]))[name = string("t")];
        tensor<fp32, [16, 8]> tr = reshape(x = t, shape = tensor<int32, [2]>([16, 8]))[name = string("tr")];
        tensor<fp32, [16, 4]> f = matmul(x = tr, y = a, transpose_x = bool(false))[name = string("f")];
        tensor<fp32, [8, 16]> n4 = rms_norm(x = x, w = g)[name = string("n4")];
      )",
      "a, b, c, d, e, f, n4");
  // n1: two products. n2: also an add. n3: a product with a constant weight
  // (kernels that read fp32 A). t and its view tr: one product. n4: an output.
  EXPECT_EQ(chosen(p), (std::set<std::string>{"n1", "t", "tr"}));
}

TEST(Bf16OperandsAnalysis, ResidualsAndOtherOpsStayFp32) {
  const Program p = parse_program(
      "tensor<fp32, [8, 16]> x, tensor<fp32, [16, 8]> w, tensor<fp32, [8, 8]> s, tensor<fp32, [16]> g", R"(
        tensor<fp32, [8, 16]> n = rms_norm(x = x, w = g)[name = string("n")];
        tensor<fp32, [8, 8]> r = transpose(x = s, perm = tensor<int32, [2]>([1, 0]))[name = string("r")];
        tensor<fp32, [8, 8]> y = milrt_gemm(x = n, y = w, residual = r)[name = string("y")];
        tensor<fp32, [16, 8]> t = transpose(x = x, perm = tensor<int32, [2]>([1, 0]))[name = string("t")];
        tensor<fp32, [8, 16]> u = transpose(x = t, perm = tensor<int32, [2]>([1, 0]))[name = string("u")];
        tensor<fp32, [8, 8]> z = matmul(x = u, y = w)[name = string("z")];
      )",
      "y, z");
  // r is a product's residual, not an operand; t feeds a transpose; u and n
  // are operands only.
  EXPECT_EQ(chosen(p), (std::set<std::string>{"n", "u"}));
}

// ---- kernels --------------------------------------------------------------

std::vector<uint16_t> reference_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = f32_to_bf16(v[i]);
  return r;
}

// |bf16 - want| within bf16's rounding (2^-8 relative) of an fp64 value.
void expect_bf16_near(uint16_t got, double want, const std::string& what) {
  ASSERT_LE(std::fabs(double(bf16_to_f32(got)) - want), std::ldexp(std::fabs(want), -8) + 1e-30) << what;
}

TEST(Bf16OperandsKernels, RmsNormRoundsTheFp32Result) {
  for (int64_t inner : {1, 3}) {
    const int64_t outer = 301, n = 96;  // above 2^16 elements: split over threads
    std::vector<float> x = uniform_floats(size_t(outer * n * inner), 1, -2, 2), g = uniform_floats(size_t(n), 2, 0.5, 1.5);
    std::vector<float> y(x.size());
    std::vector<uint16_t> y16(x.size());
    kernels::rms_norm_f32(x.data(), g.data(), y.data(), outer, n, inner, 1e-5f);
    kernels::rms_norm_f32_to_bf16(x.data(), g.data(), y16.data(), outer, n, inner, 1e-5f);
    EXPECT_EQ(y16, reference_bf16(y)) << "inner " << inner;
    for (int64_t o : {int64_t(0), outer - 1})
      for (int64_t j = 0; j < inner; ++j) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[size_t((o * n + i) * inner + j)]) * x[size_t((o * n + i) * inner + j)];
        const double r = 1 / std::sqrt(ss / double(n) + 1e-5);
        for (int64_t i = 0; i < n; ++i) {
          const size_t at = size_t((o * n + i) * inner + j);
          expect_bf16_near(y16[at], x[at] * r * g[size_t(i)], "rms_norm at " + std::to_string(at));
        }
      }
  }
}

TEST(Bf16OperandsKernels, SiluMulAndItsGradientRoundTheFp32Results) {
  const int64_t n = 70001;  // split over threads, with a ragged end
  const std::vector<float> a = uniform_floats(size_t(n), 3, -6, 6), b = uniform_floats(size_t(n), 4, -2, 2),
                           dy = uniform_floats(size_t(n), 5, -1, 1);
  std::vector<float> y(static_cast<size_t>(n)), da(static_cast<size_t>(n)), db(static_cast<size_t>(n));
  kernels::silu_mul_f32(a.data(), b.data(), y.data(), n);
  kernels::silu_mul_backward_f32(a.data(), b.data(), dy.data(), da.data(), db.data(), n);
  std::vector<uint16_t> y16(static_cast<size_t>(n));
  kernels::silu_mul_f32_to_bf16(a.data(), b.data(), y16.data(), n);
  EXPECT_EQ(y16, reference_bf16(y));
  for (int flags = 0; flags < 4; ++flags) {
    const bool a16 = flags & 1, b16 = flags & 2;
    std::vector<float> fa(static_cast<size_t>(n)), fb(static_cast<size_t>(n));
    std::vector<uint16_t> ha(static_cast<size_t>(n)), hb(static_cast<size_t>(n));
    kernels::silu_mul_backward(a.data(), b.data(), dy.data(), a16 ? static_cast<void*>(ha.data()) : fa.data(), a16,
                               b16 ? static_cast<void*>(hb.data()) : fb.data(), b16, n);
    if (a16) EXPECT_EQ(ha, reference_bf16(da)) << flags;
    else EXPECT_EQ(fa, da) << flags;
    if (b16) EXPECT_EQ(hb, reference_bf16(db)) << flags;
    else EXPECT_EQ(fb, db) << flags;
  }
  for (int64_t i = 0; i < n; i += 997) {
    const double v = a[size_t(i)], s = 1 / (1 + std::exp(-v));
    // exp_poly's relative error (below 3e-7) is far inside bf16's rounding.
    expect_bf16_near(y16[size_t(i)], v * s * b[size_t(i)], "silu_mul at " + std::to_string(i));
  }
}

TEST(Bf16OperandsKernels, TransposeToBf16MatchesAnIndexLoop) {
  const int64_t T = 515, H = 12, D = 64;  // [T, H, D] -> [H, T, D], split over threads
  const std::vector<float> x = uniform_floats(size_t(T * H * D), 6, -3, 3);
  const int64_t dims[3] = {H, T, D}, ss[3] = {D, H * D, 1}, ds[3] = {T * D, D, 1};
  std::vector<uint16_t> got(x.size());
  kernels::strided_copy_f32_to_bf16(x.data(), got.data(), 3, dims, ss, ds);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < D; ++e)
        ASSERT_EQ(got[size_t((h * T + t) * D + e)], f32_to_bf16(x[size_t((t * H + h) * D + e)])) << h << " " << t;
  // A strided innermost run (the element loop, not the row conversion).
  const int64_t dims2[2] = {T, H}, ss2[2] = {1, T}, ds2[2] = {H, 1};
  std::vector<uint16_t> got2(size_t(T * H));
  kernels::strided_copy_f32_to_bf16(x.data(), got2.data(), 2, dims2, ss2, ds2);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) ASSERT_EQ(got2[size_t(t * H + h)], f32_to_bf16(x[size_t(h * T + t)]));
}

// ---- whole plans ------------------------------------------------------------

struct Compiled {
  TensorMap outputs;
  int bf16_steps = 0;
};

// The trainer's step options (stable weights, accumulated gradients), bf16
// products, with or without bf16 operand storage; two runs, so the
// accumulated gradients sum twice.
Compiled run_gradients(const Program& loss, const std::vector<llm::WeightSpec>& weights, bool bf16_operands,
                       const TensorMap& inputs) {
  GradOptions go;
  go.loss = "loss";
  for (const llm::WeightSpec& w : weights) go.wrt.push_back(w.name);
  CompileOptions o;
  o.function = "main_grad";
  o.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  o.bf16_operands = bf16_operands;
  for (const llm::WeightSpec& w : weights) o.stable_inputs.push_back(w.name), o.accumulate_outputs.push_back(w.name + "_grad");
  Plan plan = compile(differentiate(loss, go), o);
  Compiled c;
  for (const Plan::StepInfo& s : plan.steps()) c.bf16_steps += s.kernel.find("[to bf16]") != std::string::npos;
  plan.run(inputs);
  c.outputs = plan.run(inputs);
  return c;
}

void expect_identical(const Compiled& fp32_storage, const Compiled& bf16_storage) {
  EXPECT_EQ(fp32_storage.bf16_steps, 0);
  ASSERT_EQ(fp32_storage.outputs.size(), bf16_storage.outputs.size());
  for (const auto& [name, t] : fp32_storage.outputs) {
    ASSERT_TRUE(bf16_storage.outputs.count(name)) << name;
    EXPECT_TRUE(bf16_storage.outputs.at(name).same_bytes(t)) << name << " differs";
  }
}

TEST(Bf16OperandsPlans, SeedLayerGradientsAreBitIdenticalToFp32Storage) {
  const llm::SeedLayerConfig cfg{64, 128, 4, 32};
  const Program loss = llm::build_seed_layer_loss(cfg);
  TensorMap in = llm::seed_layer_synthetic_inputs(cfg, 7);
  std::mt19937_64 rng(8);
  for (const llm::WeightSpec& w : llm::seed_layer_weight_specs(cfg))
    if (!in.count(w.name)) in[w.name] = rewrite::random_tensor(DType::FP32, w.shape, rng, -0.2, 0.2);
  const Compiled with = run_gradients(loss, llm::seed_layer_weight_specs(cfg), true, in);
  // Both norms, the SwiGLU and its gradient, the transposes into products.
  EXPECT_GE(with.bf16_steps, 5);
  expect_identical(run_gradients(loss, llm::seed_layer_weight_specs(cfg), false, in), with);
}

TEST(Bf16OperandsPlans, LlamaGradientsAreBitIdenticalToFp32Storage) {
  const llm::LlamaConfig cfg{64, 128, 2, 4, 2, 97, 16};
  const Program loss = llm::build_llama_loss(cfg);
  std::mt19937_64 rng(9);
  TensorMap in;
  for (const char* name : {"tokens", "targets"}) {
    Tensor t(DType::Int32, {1, cfg.seq});
    for (int64_t i = 0; i < cfg.seq; ++i) t.set(size_t(i), double(rng() % uint64_t(cfg.vocab)));
    in[name] = t;
  }
  for (const llm::WeightSpec& w : llm::llama_weight_specs(cfg))
    in[w.name] = rewrite::random_tensor(DType::FP32, w.shape, rng, -0.2, 0.2);
  const Compiled with = run_gradients(loss, llm::llama_weight_specs(cfg), true, in);
  EXPECT_GE(with.bf16_steps, 5 * cfg.layers);
  expect_identical(run_gradients(loss, llm::llama_weight_specs(cfg), false, in), with);
}

}  // namespace
}  // namespace milrt::test
