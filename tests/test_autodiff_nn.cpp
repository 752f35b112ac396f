// Gradient rules of softmax, rms_norm, layer_norm,
// scaled_dot_product_attention and conv (src/autodiff/rules_nn.cpp), each
// against central differences of the forward program on the reference
// executor and its derived program against the compiled plan
// (tests/support/grad_check.h: tolerance 2e-3 relative, step 1e-2, and why).
// Losses are reduce_sum(z * w) with random w so every element's gradient is
// distinct; the last test differentiates a small attention block end to end.
#include <gtest/gtest.h>

#include <random>

#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "milrt/reference.h"
#include "support/grad_check.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

GradCheckResult check(const std::string& params, const std::string& expr, const Shape& zs,
                      const std::vector<std::string>& wrt, const TensorMap& in = {},
                      const GradCheckOptions& o = GradCheckOptions{}) {
  SCOPED_TRACE(expr);
  return expect_gradients_match(weighted_sum_loss_program(params, expr, zs), "loss", wrt, in, o);
}

// ---- softmax ------------------------------------------------------------------

TEST(NnGrad, Softmax) {
  const Shape s{2, 3, 4};
  for (const char* axis : {"int32(-1)", "int32(0)", "int32(1)"}) {
    GradCheckOptions o;
    o.ranges["x"] = {-2, 2};
    check(mil_type(s) + " x", std::string("softmax(x = x, axis = ") + axis + ")", s, {"x"}, {}, o);
  }
  check(mil_type({5}) + " x", "softmax(x = x)", {5}, {"x"});
}

// ---- rms_norm ------------------------------------------------------------------

TEST(NnGrad, RmsNormLastDim) {
  check(mil_type({3, 5}) + " x, " + mil_type({5}) + " g", "rms_norm(x = x, w = g, eps = fp32(0.00001))", {3, 5}, {"x", "g"});
  check(mil_type({2, 2, 4}) + " x, " + mil_type({4}) + " g", "rms_norm(x = x, w = g, eps = fp32(0.1))", {2, 2, 4}, {"x", "g"});
}

TEST(NnGrad, RmsNormChannelDimOfRank4) {
  // [B, C, 1, S]: normalized over C (dim 1); w shaped [1, C, 1, 1] and [C].
  check(mil_type({2, 6, 1, 3}) + " x, " + mil_type({1, 6, 1, 1}) + " g", "rms_norm(x = x, w = g, eps = fp32(0.00001))",
        {2, 6, 1, 3}, {"x", "g"});
  check(mil_type({1, 4, 2, 3}) + " x, " + mil_type({4}) + " g", "rms_norm(x = x, w = g)", {1, 4, 2, 3}, {"x", "g"});
}

TEST(NnGrad, RmsNormWithoutOrConstWeight) {
  check(mil_type({3, 4}) + " x", "rms_norm(x = x, eps = fp32(0.001))", {3, 4}, {"x"});
  check(mil_type({2, 3}) + " x", "rms_norm(x = x, w = tensor<fp32, [3]>([0.5, -1.5, 2.0]))", {2, 3}, {"x"});
}

// ---- milrt_rope ------------------------------------------------------------------

// Arbitrary tables (not a rotation: sin[2i] != -sin[2i+1]) so a rule that
// assumed llama2.c's signs would fail; both directions of the map.
TEST(NnGrad, RopeWithConstantTables) {
  const std::string tables =
      "tensor<fp32, [3, 4]>([[0.9, -0.3, 0.5, 1.2], [0.1, 0.7, -0.8, 0.4], [1.1, 0.2, 0.6, -0.5]])";
  const std::string sines =
      "tensor<fp32, [3, 4]>([[0.3, 0.8, -0.6, 0.2], [-0.9, 0.4, 0.1, 0.7], [0.5, -0.2, 1.3, 0.6]])";
  for (const char* transpose : {"bool(false)", "bool(true)"})
    check(mil_type({2, 3, 4}) + " x", "milrt_rope(x = x, cos = " + tables + ", sin = " + sines +
                                          ", transpose = " + transpose + ")",
          {2, 3, 4}, {"x"});
}

// ---- milrt_silu_mul ----------------------------------------------------------------

TEST(NnGrad, SiluMulBothOperands) {
  GradCheckOptions o;
  o.ranges["a"] = {-4, 4};
  check(mil_type({3, 7}) + " a, " + mil_type({3, 7}) + " b", "milrt_silu_mul(a = a, b = b)", {3, 7}, {"a", "b"}, {}, o);
  check(mil_type({5}) + " a, " + mil_type({5}) + " b", "milrt_silu_mul(a = a, b = b)", {5}, {"b"});
}

// ---- layer_norm -----------------------------------------------------------------

TEST(NnGrad, LayerNormLastAxis) {
  check(mil_type({2, 3, 4}) + " x, " + mil_type({4}) + " gamma, " + mil_type({4}) + " beta",
        "layer_norm(x = x, axes = " + mil_ints({-1}) + ", gamma = gamma, beta = beta, epsilon = fp32(0.00001))", {2, 3, 4},
        {"x", "gamma", "beta"});
}

TEST(NnGrad, LayerNormSeveralAxes) {
  // Adjacent, non-adjacent, and all axes (axes absent).
  check(mil_type({2, 3, 4}) + " x, " + mil_type({3, 4}) + " gamma, " + mil_type({3, 4}) + " beta",
        "layer_norm(x = x, axes = " + mil_ints({1, 2}) + ", gamma = gamma, beta = beta, epsilon = fp32(0.001))", {2, 3, 4},
        {"x", "gamma", "beta"});
  // Non-adjacent axes: the forward decomposes into a transpose and one
  // reduction; the rule's own reductions go one run of axes at a time.
  check(mil_type({2, 3, 4}) + " x, " + mil_type({2, 4}) + " gamma, " + mil_type({2, 4}) + " beta",
        "layer_norm(x = x, axes = " + mil_ints({0, -1}) + ", gamma = gamma, beta = beta)", {2, 3, 4},
        {"x", "gamma", "beta"});
  check(mil_type({3, 4}) + " x", "layer_norm(x = x, epsilon = fp32(0.01))", {3, 4}, {"x"});
}

TEST(NnGrad, LayerNormGammaOnly) {
  check(mil_type({4, 5}) + " x, " + mil_type({5}) + " gamma", "layer_norm(x = x, axes = " + mil_ints({1}) + ", gamma = gamma)", {4, 5},
        {"x", "gamma"});
}

// ---- scaled_dot_product_attention ---------------------------------------------------

TEST(NnGrad, SdpaNoMask) {
  check(mil_type({2, 3, 4}) + " q, " + mil_type({2, 5, 4}) + " k, " + mil_type({2, 5, 6}) + " v",
        "scaled_dot_product_attention(query = q, key = k, value = v)", {2, 3, 6}, {"q", "k", "v"});
}

TEST(NnGrad, SdpaCausalBoolMaskWithHeads) {
  // [B, H, L, E] with a causal bool mask [L, S]: masked scores get no gradient.
  std::string mask = "tensor<bool, [3, 3]>([[true, false, false], [true, true, false], [true, true, true]])";
  check(mil_type({1, 2, 3, 4}) + " q, " + mil_type({1, 2, 3, 4}) + " k, " + mil_type({1, 2, 3, 5}) + " v",
        "scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = " + mask + ")", {1, 2, 3, 5},
        {"q", "k", "v"});
}

TEST(NnGrad, SdpaBoolMaskInput) {
  Tensor m(DType::Bool, {2, 3, 4});
  std::mt19937_64 rng(5);
  for (int64_t i = 0; i < m.numel(); ++i) m.set(size_t(i), (i % 4 == 0 || (rng() & 1)) ? 1.0 : 0.0);
  check(mil_type({2, 3, 4}) + " q, " + mil_type({2, 4, 4}) + " k, " + mil_type({2, 4, 2}) + " v, tensor<bool, [2, 3, 4]> m",
        "scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = m)", {2, 3, 2}, {"q", "k", "v"},
        {{"m", m}});
}

TEST(NnGrad, SdpaFloatMaskDifferentiated) {
  // A float mask that broadcasts over batch and rows ([S]) and one that does
  // not: both get gradients (summed over what they broadcast across).
  check(mil_type({2, 3, 4}) + " q, " + mil_type({2, 5, 4}) + " k, " + mil_type({2, 5, 3}) + " v, " + mil_type({5}) + " m",
        "scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = m)", {2, 3, 3},
        {"q", "k", "v", "m"});
  check(mil_type({2, 3, 4}) + " q, " + mil_type({2, 2, 4}) + " k, " + mil_type({2, 2, 3}) + " v, " + mil_type({2, 3, 2}) + " m",
        "scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = m)", {2, 3, 3},
        {"q", "k", "v", "m"});
}

// ---- conv ------------------------------------------------------------------------

struct ConvCase {
  const char* name;
  Shape xs, ws, zs;
  std::string args;   // after `x = x, weight = wt`
  bool bias = false;
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class ConvGrad : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvGrad, MatchesFiniteDifferences) {
  const ConvCase& c = GetParam();
  std::string params = mil_type(c.xs) + " x, " + mil_type(c.ws) + " wt";
  std::vector<std::string> wrt = {"x", "wt"};
  std::string args = c.args;
  if (c.bias) {
    params += ", " + mil_type({c.ws[0]}) + " b";
    args += ", bias = b";
    wrt.push_back("b");
  }
  GradCheckOptions o;
  o.max_elements = 32;
  check(params, "conv(x = x, weight = wt" + args + ")", c.zs, wrt, {}, o);
}

INSTANTIATE_TEST_SUITE_P(
    Conv, ConvGrad,
    ::testing::Values(
        ConvCase{"valid", {1, 2, 5, 5}, {3, 2, 3, 3}, {1, 3, 3, 3}, ""},
        ConvCase{"bias_pointwise", {2, 3, 2, 3}, {4, 3, 1, 1}, {2, 4, 2, 3}, "", true},
        ConvCase{"strided_custom_pad", {2, 2, 6, 7}, {3, 2, 3, 2}, {2, 3, 3, 5},
                 ", strides = " + mil_ints({2, 2}) + ", pad_type = string(\"custom\"), pad = " + mil_ints({1, 0, 1, 2}), true},
        ConvCase{"stride_skips_tail", {1, 1, 9, 6}, {2, 1, 2, 3}, {1, 2, 3, 2}, ", strides = " + mil_ints({3, 2})},
        ConvCase{"dilated", {1, 2, 7, 6}, {2, 2, 2, 2}, {1, 2, 5, 3}, ", dilations = " + mil_ints({2, 3})},
        ConvCase{"groups_same", {1, 4, 5, 4}, {6, 2, 3, 3}, {1, 6, 3, 2},
                 ", strides = " + mil_ints({2, 2}) + ", pad_type = string(\"same\"), groups = int32(2)", true},
        ConvCase{"depthwise_same_lower", {2, 3, 4, 4}, {3, 1, 2, 2}, {2, 3, 4, 4},
                 ", pad_type = string(\"same_lower\"), groups = int32(3)"},
        ConvCase{"big_pad", {1, 1, 3, 3}, {1, 1, 2, 2}, {1, 1, 6, 4},
                 ", pad_type = string(\"custom\"), pad = " + mil_ints({3, 1, 1, 1})},
        ConvCase{"conv1d", {2, 3, 9}, {4, 3, 3}, {2, 4, 4}, ", strides = " + mil_ints({2}) + ", dilations = " + mil_ints({1}), true},
        ConvCase{"all_mixed", {2, 4, 9, 8}, {4, 2, 3, 2}, {2, 4, 3, 3},
                 ", strides = " + mil_ints({2, 3}) + ", dilations = " + mil_ints({2, 1}) +
                     ", pad_type = string(\"custom\"), pad = " + mil_ints({1, 0, 0, 1}) + ", groups = int32(2)",
                 true}),
    [](const ::testing::TestParamInfo<ConvCase>& i) { return std::string(i.param.name); });

// ---- fp16 programs -------------------------------------------------------------------

// The rules emit their scalars (eps, scales, mask fills) in the program's
// dtype. An fp16 program's gradients (reference executor, every op rounded
// to fp16) against the same program in fp32 on the same (fp16-exact)
// inputs: they agree to fp16 precision, about 1e-2 of the largest gradient
// after a few rounded ops; a wrong rule or a dtype mix-up would be off by O(1)
// or not verify at all.
TEST(NnGrad, Fp16ProgramsMatchFp32) {
  struct Case {
    std::string params, expr;
    Shape zs;
    std::vector<std::string> wrt;
  };
  auto cases = [](const std::string& dt) {
    std::string mask = "tensor<bool, [3, 3]>([[true, false, false], [true, true, false], [true, true, true]])";
    return std::vector<Case>{
        {mil_type({2, 5}, dt) + " x", "softmax(x = x, axis = int32(-1))", {2, 5}, {"x"}},
        {mil_type({3, 6}, dt) + " x, " + mil_type({6}, dt) + " g", "rms_norm(x = x, w = g, eps = " + dt + "(0.001))", {3, 6},
         {"x", "g"}},
        {mil_type({2, 3, 4}, dt) + " x, " + mil_type({4}, dt) + " gamma, " + mil_type({4}, dt) + " beta",
         "layer_norm(x = x, axes = " + mil_ints({-1}) + ", gamma = gamma, beta = beta, epsilon = " + dt + "(0.001))",
         {2, 3, 4}, {"x", "gamma", "beta"}},
        {mil_type({2, 3, 4}, dt) + " q, " + mil_type({2, 3, 4}, dt) + " k, " + mil_type({2, 3, 2}, dt) + " v",
         "scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = " + mask + ")", {2, 3, 2},
         {"q", "k", "v"}},
        {mil_type({1, 2, 5, 5}, dt) + " x, " + mil_type({2, 2, 3, 3}, dt) + " wt",
         "conv(x = x, weight = wt, strides = " + mil_ints({2, 2}) + ", pad_type = string(\"same\"))", {1, 2, 3, 3},
         {"x", "wt"}},
    };
  };
  auto text = [](const Case& c, const std::string& dt) {
    std::string body = stmt(mil_type(c.zs, dt), "z", c.expr) + stmt(mil_type(c.zs, dt), "p", "mul(x = z, y = w)") +
                       stmt(dt, "loss", "reduce_sum(x = p)");
    return program_text(c.params + ", " + mil_type(c.zs, dt) + " w", body, "loss");
  };
  std::vector<Case> c16 = cases("fp16"), c32 = cases("fp32");
  for (size_t i = 0; i < c16.size(); ++i) {
    SCOPED_TRACE(c16[i].expr);
    Program p16 = parse_mil(text(c16[i], "fp16"), "<fp16>", "."), p32 = parse_mil(text(c32[i], "fp32"), "<fp32>", ".");
    GradOptions go;
    go.loss = "loss";
    go.wrt = c16[i].wrt;
    Program d16 = differentiate(p16, go), d32 = differentiate(p32, go);
    TensorMap in16, in32;
    uint64_t seed = 40 + i;
    for (const Param& prm : p16.function("main")->params) {
      in16[prm.name] = random_tensor(DType::FP16, prm.type.shape, seed++);
      Tensor t(DType::FP32, prm.type.shape);
      for (int64_t j = 0; j < t.numel(); ++j) t.set(size_t(j), in16[prm.name].at(size_t(j)));
      in32[prm.name] = t;
    }
    TensorMap g16 = run_reference(d16, "main_grad", in16), g32 = run_reference(d32, "main_grad", in32);
    CompileOptions co;
    co.function = "main_grad";
    TensorMap plan16 = compile(d16, co).run(in16);
    for (const std::string& w : c16[i].wrt) {
      const std::string n = w + "_grad";
      EXPECT_EQ(g16.at(n).dtype(), DType::FP16);
      std::vector<double> a = values(g16.at(n)), b = values(g32.at(n)), c = values(plan16.at(n));
      double mx = 0;
      for (double v : b) mx = std::max(mx, std::fabs(v));
      ASSERT_GT(mx, 0.0) << n;
      for (size_t j = 0; j < a.size(); ++j) {
        EXPECT_NEAR(a[j], b[j], 2e-2 * mx) << n << "[" << j << "] fp16 reference vs fp32 reference";
        EXPECT_NEAR(c[j], b[j], 2e-2 * mx) << n << "[" << j << "] fp16 plan vs fp32 reference";
      }
    }
  }
}

// ---- an attention block end to end -------------------------------------------------------

// x [T, D] -> rms_norm -> q, k, v = xn W^T -> [H, T, hd] heads -> sdpa with a
// causal mask -> [T, D] -> output projection -> reduce_mean(y * y) loss.
struct Block {
  int64_t T = 4, D = 8, H = 2;
  std::string text() const {
    const int64_t hd = D / H;
    std::string mask = "tensor<bool, [" + std::to_string(T) + ", " + std::to_string(T) + "]>([";
    for (int64_t i = 0; i < T; ++i) {
      mask += i ? ", [" : "[";
      for (int64_t j = 0; j < T; ++j) mask += std::string(j ? ", " : "") + (j <= i ? "true" : "false");
      mask += "]";
    }
    mask += "])";
    auto heads = [&](const std::string& in, const std::string& out) {
      return stmt(mil_type({T, H, hd}), out + "_r", "reshape(x = " + in + ", shape = " + mil_ints({T, H, hd}) + ")") +
             stmt(mil_type({H, T, hd}), out, "transpose(x = " + out + "_r, perm = " + mil_ints({1, 0, 2}) + ")");
    };
    auto proj = [&](const std::string& w, const std::string& out) {
      return stmt(mil_type({T, D}), out,
                  "matmul(x = xn, y = " + w + ", transpose_x = bool(false), transpose_y = bool(true))");
    };
    std::string body = stmt(mil_type({T, D}), "xn", "rms_norm(x = x, w = g, eps = fp32(0.00001))") + proj("wq", "q") +
                       proj("wk", "k") + proj("wv", "v") + heads("q", "qh") + heads("k", "kh") + heads("v", "vh") +
                       stmt(mil_type({H, T, hd}), "att",
                            "scaled_dot_product_attention(query = qh, key = kh, value = vh, attn_mask = " + mask + ")") +
                       stmt(mil_type({T, H, hd}), "att_t", "transpose(x = att, perm = " + mil_ints({1, 0, 2}) + ")") +
                       stmt(mil_type({T, D}), "merged", "reshape(x = att_t, shape = " + mil_ints({T, D}) + ")") +
                       stmt(mil_type({T, D}), "y",
                            "matmul(x = merged, y = wo, transpose_x = bool(false), transpose_y = bool(true))") +
                       stmt(mil_type({T, D}), "y2", "mul(x = y, y = y)") + stmt("fp32", "loss", "reduce_mean(x = y2)");
    std::string params = mil_type({T, D}) + " x, " + mil_type({D}) + " g";
    for (const char* w : {"wq", "wk", "wv", "wo"}) params += ", " + mil_type({D, D}) + " " + w;
    return program_text(params, body, "loss");
  }
};

TEST(NnGrad, AttentionBlockEndToEnd) {
  Block blk;
  GradCheckOptions o;
  o.max_elements = 24;
  o.directions = 3;
  // Every parameter and the input; the harness also compiles main_grad with
  // the default pipeline and compares it with the reference executor.
  auto r = expect_gradients_match(blk.text(), "loss", {"x", "g", "wq", "wk", "wv", "wo"}, {}, o);
  if (HasFailure()) return;
  EXPECT_LE(r.compile_err, o.compile_tol);
  RecordProperty("compile_err", std::to_string(r.compile_err));
  for (auto& [k, e] : r.max_err) RecordProperty("fd_err_" + k, std::to_string(e));
}

TEST(NnGrad, AttentionBlockCompiledPlanMatchesReference) {
  // The derived program on its own: compiled (default pipeline, so fusion
  // passes see it) against the reference executor on fresh inputs.
  Block blk;
  blk.T = 6;
  blk.D = 12;
  blk.H = 3;
  Program p = parse_mil(blk.text(), "<block>", ".");
  GradOptions go;
  go.loss = "loss";
  go.wrt = {"g", "wq", "wk", "wv", "wo"};
  Program d = differentiate(p, go);
  TensorMap in;
  uint64_t seed = 11;
  for (const Param& prm : d.function("main_grad")->params) in[prm.name] = random_tensor(DType::FP32, prm.type.shape, seed++);
  TensorMap ref = run_reference(d, "main_grad", in);
  CompileOptions co;
  co.function = "main_grad";
  Plan plan = compile(d, co);
  TensorMap got = plan.run(in);
  ASSERT_EQ(ref.size(), got.size());
  for (auto& [name, t] : ref) {
    std::vector<double> a = values(t), b = values(got.at(name));
    double mx = 1;
    for (double v : a) mx = std::max(mx, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-4 * mx) << name << "[" << i << "]";
  }
}

}  // namespace
}  // namespace milrt::test
