// Tests of the fuse-attention pass (src/passes/fuse_attention.cpp) and of the
// ops it makes, milrt_attention and milrt_softmax: which patterns fuse and
// which must not, the printed IR parsing back, and numerics — the reference
// executor on the unfused program against the reference on the fused one and
// against the compiled plan (milrt::compile) — on random inputs, fp32 and
// fp16, over small programs, the second seed's attention kernels and the
// whole corpus.
//
// Tolerances (elementwise abs + rel·|want|):
//  fp32: the unfused reference rounds to fp32 after each of its five ops, the
//        fused one once; the kernel sums in fp32 with a polynomial exp. Both
//        differ from each other by a few 1e-7 relative on outputs of order 1:
//        bound 3e-5 + 3e-4·|want|.
//  fp16: the unfused program rounds scores to fp16 (ulp 2^-8 at 2..4) before
//        the exp, which turns that into relative errors of a few 1e-3 in the
//        probabilities; the fused op rounds only its output: bound
//        5e-3 + 1e-2·|want|.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "llm/seed_kernels.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "test_pass_rewrite_util.h"
#include "test_pass_util.h"

namespace milrt::test {
namespace {

using rewrite::const_input;
using rewrite::const_stmt;
using rewrite::expect_outputs_close;
using rewrite::op_types;
using rewrite::random_inputs;
using rewrite::random_tensor;

const std::vector<std::string> kBefore = {"fold-constexpr", "canonicalize", "decompose", "cse", "dce"};

// A small attention program in MIL text, with the pattern's variations.
struct Spec {
  std::string dt = "fp32";
  int64_t b = 2, h = 3, tq = 5, tk = 7, d = 8, dv = 6;
  std::string scale = "mul";      // mul, mul_left, real_div, none, param (not constant)
  std::string mask = "param";     // none, param, bcast (a [Tk] row), causal, causal_fp16, wide (grows the scores)
  std::string k = "ty";           // ty (matmul transpose_y), swap (transpose [0,1,3,2]), perm (k as [B,Tk,H,D])
  bool tap_probs = false;         // the probabilities are a function output too
  bool tap_scores = false;        // the scaled scores are a function output too
  std::string axis = "-1";
};

std::string shp(std::vector<int64_t> s) { return shape_str(s); }

std::string program(const Spec& s) {
  std::string t = s.dt, body, params;
  auto ty = [&](std::vector<int64_t> sh) { return "tensor<" + t + ", " + shp(sh) + ">"; };
  int64_t mb = s.mask == "wide" ? 2 * s.b : s.b;
  params = ty({s.b, s.h, s.tq, s.d}) + " q, " +
           (s.k == "perm" ? ty({s.b, s.tk, s.h, s.d}) : ty({s.b, s.h, s.tk, s.d})) + " k, " +
           ty({mb, s.h, s.tk, s.dv}) + " v";
  std::vector<int64_t> sc = {s.b, s.h, s.tq, s.tk}, wide = {mb, s.h, s.tq, s.tk};
  std::string kk = "k";
  if (s.k == "swap") {
    body += "    " + ty({s.b, s.h, s.d, s.tk}) +
            " kt = transpose(x = k, perm = tensor<int32, [4]>([0, 1, 3, 2]))[name = string(\"kt\")];\n";
    kk = "kt";
  } else if (s.k == "perm") {
    body += "    " + ty({s.b, s.h, s.d, s.tk}) +
            " kt = transpose(x = k, perm = tensor<int32, [4]>([0, 2, 3, 1]))[name = string(\"kt\")];\n";
    kk = "kt";
  }
  body += "    " + ty(sc) + " s = matmul(x = q, y = " + kk + ", transpose_x = bool(false), transpose_y = bool(" +
          (s.k == "ty" ? "true" : "false") + "))[name = string(\"s\")];\n";
  std::string cur = "s";
  if (s.scale != "none") {
    std::string c = s.scale == "param" ? "c" : t + "(0x1.6a09e6p-2)";  // ~1/sqrt(8)
    if (s.scale == "param") params += ", tensor<" + t + ", [1]> c";
    std::string expr = s.scale == "real_div" ? "real_div(x = s, y = " + t + "(0x1.6a09e6p+1))"
                       : s.scale == "mul_left" ? "mul(x = " + c + ", y = s)"
                                               : "mul(x = s, y = " + c + ")";
    body += "    " + ty(sc) + " s2 = " + expr + "[name = string(\"s2\")];\n";
    cur = "s2";
  }
  if (s.mask != "none") {
    std::vector<int64_t> ms = s.mask == "bcast" ? std::vector<int64_t>{s.tk} : s.mask == "wide" ? wide
                              : std::vector<int64_t>{1, 1, s.tq, s.tk};
    if (s.mask == "param" || s.mask == "bcast" || s.mask == "wide") {
      params += ", " + ty(ms) + " m";
    } else {
      Tensor m(*dtype_from_name(t), ms);
      double low = s.mask == "causal_fp16" ? -65504.0 : -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < s.tq; ++i)
        for (int64_t j = 0; j < s.tk; ++j) m.set(size_t(i * s.tk + j), j <= i + (s.tk - s.tq) ? 0.0 : low);
      body += rewrite::const_stmt("m", m);
    }
    body += "    " + ty(s.mask == "wide" ? wide : sc) + " s3 = add(x = " + cur + ", y = m)[name = string(\"s3\")];\n";
    cur = "s3";
  }
  std::vector<int64_t> ps = s.mask == "wide" ? wide : sc;
  body += "    " + ty(ps) + " p = softmax(x = " + cur + ", axis = int32(" + s.axis + "))[name = string(\"p\")];\n";
  body += "    " + ty({mb, s.h, s.tq, s.dv}) +
          " o = matmul(x = p, y = v, transpose_x = bool(false), transpose_y = bool(false))[name = string(\"o\")];\n";
  std::string outs = "o";
  if (s.tap_probs) outs += ", p";
  if (s.tap_scores) outs += ", " + std::string(s.scale == "none" ? "s" : "s2");
  return program_text(params, body, outs, "ios18");
}

Program parse(const std::string& text) {
  Program p = parse_mil(text, "t.mil", ".");
  verify(p);
  return p;
}

Program fused(const Program& p) {
  Program q = p;
  run_passes(q, {"fuse-attention"});
  return q;
}

const Op* find_op(const Program& p, const std::string& type) {
  for (const Op& op : p.functions.at(0).ops)
    if (op.type == type) return &op;
  return nullptr;
}

struct Tol {
  double rel, abs;
};
Tol tol_for(const Program& p) {
  bool half = false;
  for (const Param& prm : p.functions.at(0).params) half |= prm.type.dtype == DType::FP16;
  return half ? Tol{1e-2, 5e-3} : Tol{3e-4, 3e-5};
}

// Reference(before) vs reference(after) vs compiled(after's pipeline).
void expect_numerics(const Program& before, const Program& after, const std::string& what, double lo = -2,
                     double hi = 2) {
  Tol t = tol_for(before);
  for (uint64_t seed : {1, 2}) {
    TensorMap in = random_inputs(before, seed, lo, hi);
    TensorMap want = run_reference(before, "main", in);
    expect_outputs_close(want, run_reference(after, "main", in), t.rel, t.abs, what + ": fused reference");
    CompileOptions o;
    o.passes = {"fuse-attention", "dce"};
    Plan plan = compile(before, o);
    expect_outputs_close(want, plan.run(in), t.rel, t.abs, what + ": compiled");
  }
}

// ---- what fuses -------------------------------------------------------------

TEST(FuseAttention, FullPatternBecomesOneOp) {
  Program before = parse(program(Spec{}));
  Program after = fused(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"milrt_attention"}));
  const Op& a = *find_op(after, "milrt_attention");
  EXPECT_EQ(a.outputs[0].name, "o");
  EXPECT_EQ(a.name, "o");
  EXPECT_EQ(const_input(after, a, "fused_from")->strings().at(0), "s s2 s3 p o");
  EXPECT_TRUE(a.find("fused_from")->in_attr_block);
  EXPECT_EQ(rewrite::var_of(a, "mask"), "m");
  EXPECT_NEAR(const_input(after, a, "scale")->at(0), 0x1.6a09e6p-2, 1e-9);
  EXPECT_EQ(const_input(after, a, "causal")->at(0), 0);
  expect_numerics(before, after, "full");
}

TEST(FuseAttention, VariantsOfScaleMaskAndKeyLayout) {
  struct V {
    Spec s;
    std::vector<std::string> types;
    std::string fused_from;
  };
  auto spec = [](auto f) { Spec s; f(s); return s; };
  std::vector<V> cases = {
      {spec([](Spec& s) { s.scale = "real_div"; }), {"milrt_attention"}, "s s2 s3 p o"},
      {spec([](Spec& s) { s.scale = "mul_left"; }), {"milrt_attention"}, "s s2 s3 p o"},
      {spec([](Spec& s) { s.scale = "none"; s.mask = "none"; }), {"milrt_attention"}, "s p o"},
      {spec([](Spec& s) { s.mask = "bcast"; }), {"milrt_attention"}, "s s2 s3 p o"},
      {spec([](Spec& s) { s.k = "swap"; }), {"milrt_attention"}, "kt s s2 s3 p o"},
      {spec([](Spec& s) { s.k = "perm"; }), {"transpose", "milrt_attention"}, "kt s s2 s3 p o"},
      {spec([](Spec& s) { s.tq = 1; s.tk = 9; }), {"milrt_attention"}, "s s2 s3 p o"},
  };
  for (const V& c : cases) {
    SCOPED_TRACE(program(c.s));
    Program before = parse(program(c.s));
    Program after = fused(before);
    EXPECT_EQ(op_types(after), c.types);
    const Op* a = find_op(after, "milrt_attention");
    ASSERT_TRUE(a);
    EXPECT_EQ(const_input(after, *a, "fused_from")->strings().at(0), c.fused_from);
    if (c.s.scale == "real_div") {
      EXPECT_NEAR(const_input(after, *a, "scale")->at(0), 1 / 0x1.6a09e6p+1, 1e-7);
    }
    if (c.s.k == "swap") {
      EXPECT_EQ(rewrite::var_of(*a, "k"), "k");
    }
    expect_numerics(before, after, c.s.scale + "/" + c.s.mask + "/" + c.s.k);
  }
}

TEST(FuseAttention, ConstantCausalMaskBecomesTheFlag) {
  for (std::string dt : {"fp32", "fp16"})
    for (std::string mask : {"causal", "causal_fp16"})
      for (auto [tq, tk] : {std::pair<int64_t, int64_t>{5, 5}, {3, 7}, {1, 6}}) {
        Spec s;
        s.dt = dt, s.mask = mask, s.tq = tq, s.tk = tk;
        SCOPED_TRACE(program(s));
        Program before = parse(program(s));
        Program after = fused(before);
        EXPECT_EQ(op_types(after), (std::vector<std::string>{"milrt_attention"}));
        const Op& a = *find_op(after, "milrt_attention");
        EXPECT_FALSE(a.has("mask"));
        EXPECT_EQ(const_input(after, a, "causal")->at(0), 1);
        EXPECT_EQ(op_types(after, true).size(), 1u) << "the mask constant is dropped";
        expect_numerics(before, after, dt + "/" + mask);
      }
}

TEST(FuseAttention, ArbitraryConstantMaskStaysAMask) {
  // Causal but one entry above the diagonal only -100: not causal.
  Spec s;
  s.mask = "none";
  std::string text = program(s);
  Tensor m(DType::FP32, {1, 1, s.tq, s.tk});
  for (int64_t i = 0; i < s.tq; ++i)
    for (int64_t j = 0; j < s.tk; ++j) m.set(size_t(i * s.tk + j), j <= i + 2 ? 0.0 : -1e9);
  m.set(size_t(s.tk - 1), -100);
  std::string body = const_stmt("m", m) +
                     "    tensor<fp32, [2, 3, 5, 7]> s = matmul(x = q, y = k, transpose_y = bool(true))[name = string(\"s\")];\n"
                     "    tensor<fp32, [2, 3, 5, 7]> s3 = add(x = m, y = s)[name = string(\"s3\")];\n"
                     "    tensor<fp32, [2, 3, 5, 7]> p = softmax(x = s3, axis = int32(3))[name = string(\"p\")];\n"
                     "    tensor<fp32, [2, 3, 5, 6]> o = matmul(x = p, y = v)[name = string(\"o\")];\n";
  Program before = parse(program_text(
      "tensor<fp32, [2, 3, 5, 8]> q, tensor<fp32, [2, 3, 7, 8]> k, tensor<fp32, [2, 3, 7, 6]> v", body, "o", "ios18"));
  Program after = fused(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"milrt_attention"}));
  const Op& a = *find_op(after, "milrt_attention");
  EXPECT_EQ(rewrite::var_of(a, "mask"), "m");
  EXPECT_EQ(const_input(after, a, "causal")->at(0), 0);
  EXPECT_EQ(const_input(after, a, "fused_from")->strings().at(0), "s s3 p o");
  expect_numerics(before, after, "arbitrary const mask");
}

TEST(FuseAttention, Fp16Programs) {
  for (std::string mask : {"param", "bcast", "none"}) {
    Spec s;
    s.dt = "fp16", s.mask = mask, s.tq = 17, s.tk = 33, s.d = 16, s.dv = 16;
    Program before = parse(program(s));
    Program after = fused(before);
    EXPECT_EQ(op_types(after), (std::vector<std::string>{"milrt_attention"})) << mask;
    expect_numerics(before, after, "fp16/" + mask);
  }
}

// ---- what must not fuse -----------------------------------------------------

TEST(FuseAttention, ProbabilitiesUsedTwiceGiveMilrtSoftmax) {
  Spec s;
  s.tap_probs = true;
  Program before = parse(program(s));
  Program after = fused(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"matmul", "milrt_softmax", "matmul"}));
  const Op& sm = *find_op(after, "milrt_softmax");
  EXPECT_EQ(sm.outputs[0].name, "p");
  EXPECT_EQ(rewrite::var_of(sm, "x"), "s");
  EXPECT_EQ(rewrite::var_of(sm, "mask"), "m");
  EXPECT_EQ(const_input(after, sm, "fused_from")->strings().at(0), "s2 s3 p");
  expect_numerics(before, after, "tap");
}

TEST(FuseAttention, ScoresUsedElsewhereOrAsOutputStayUnfused) {
  Spec s;
  s.tap_scores = true;  // s2 (after the scale) is a function output: only add + softmax fuse
  Program before = parse(program(s));
  Program after = fused(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"matmul", "mul", "milrt_softmax", "matmul"}));
  EXPECT_EQ(rewrite::var_of(*find_op(after, "milrt_softmax"), "x"), "s2");
  expect_numerics(before, after, "scores tap");
}

TEST(FuseAttention, NonConstantScaleDoesNotFuse) {
  Spec s;
  s.scale = "param";
  s.mask = "none";
  Program before = parse(program(s));
  Program after = fused(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"matmul", "mul", "softmax", "matmul"}));
  EXPECT_EQ(ir_diff(before, after), "");
}

TEST(FuseAttention, MaskThatGrowsTheScoresDoesNotFuse) {
  Spec s;
  s.b = 1;
  s.mask = "wide";  // [2, H, Tq, Tk] added to [1, H, Tq, Tk]
  Program before = parse(program(s));
  Program after = fused(before);
  EXPECT_EQ(find_op(after, "milrt_attention"), nullptr);
  // add is commutative: the wide operand may pass for the scores of a
  // milrt_softmax, the scaled scores for its mask; the matmuls stay.
  EXPECT_EQ(pass::op_counts(after)["matmul"], 2);
  EXPECT_NE(find_op(after, "mul"), nullptr);
  expect_numerics(before, after, "wide mask");
}

TEST(FuseAttention, SoftmaxOverAnotherAxisIsOnlyASoftmax) {
  Spec s;
  s.axis = "2";
  Program before = parse(program(s));
  Program after = fused(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"matmul", "milrt_softmax", "matmul"}));
  EXPECT_EQ(const_input(after, *find_op(after, "milrt_softmax"), "axis")->at(0), 2);
  expect_numerics(before, after, "axis 2");
}

TEST(FuseAttention, TransposeWithAnotherUseIsNotFolded) {
  Spec s;
  s.k = "swap";
  std::string text = program(s);
  text.replace(text.find("} -> (o)"), 8, "} -> (o, kt)");
  Program before = parse(text);
  Program after = fused(before);
  EXPECT_EQ(find_op(after, "milrt_attention"), nullptr);
  EXPECT_NE(find_op(after, "transpose"), nullptr);
  expect_numerics(before, after, "shared transpose");
}

TEST(FuseAttention, UnusedProbabilitiesAreLeftToDce) {
  // p feeds nothing: no attention; scale and mask still fold into milrt_softmax.
  std::string body =
      "    tensor<fp32, [2, 5, 7]> s = matmul(x = q, y = k, transpose_y = bool(true))[name = string(\"s\")];\n"
      "    tensor<fp32, [2, 5, 7]> s2 = mul(x = s, y = fp32(0.5))[name = string(\"s2\")];\n"
      "    tensor<fp32, [2, 5, 7]> p = softmax(x = s2, axis = int32(-1))[name = string(\"p\")];\n";
  Program before = parse(program_text("tensor<fp32, [2, 5, 8]> q, tensor<fp32, [2, 7, 8]> k", body, "s", "ios18"));
  Program after = fused(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"matmul", "milrt_softmax"}));
}

// ---- scaled_dot_product_attention -------------------------------------------

TEST(FuseAttention, ScaledDotProductAttention) {
  const std::string params =
      "tensor<fp32, [2, 3, 5, 8]> q, tensor<fp32, [2, 3, 9, 8]> k, tensor<fp32, [2, 3, 9, 4]> v";
  // A bool mask input (true = keep) and a float one.
  for (std::string m : {"tensor<bool, [1, 5, 9]> m", "tensor<fp32, [3, 5, 9]> m"}) {
    Program before = parse(program_text(params + ", " + m,
                                        "    tensor<fp32, [2, 3, 5, 4]> o = scaled_dot_product_attention(query = q, "
                                        "key = k, value = v, attn_mask = m)[name = string(\"o\")];\n",
                                        "o", "ios18"));
    Program after = fused(before);
    EXPECT_EQ(op_types(after), (std::vector<std::string>{"milrt_attention"}));
    const Op& a = *find_op(after, "milrt_attention");
    EXPECT_NEAR(const_input(after, a, "scale")->at(0), 1 / std::sqrt(8.0), 1e-7);
    EXPECT_EQ(rewrite::var_of(a, "mask"), "m");
    // A bool mask of random bits can hide every key of a row (NaN in both).
    expect_numerics(before, after, m);
  }
  // A constant bool causal mask becomes the flag.
  Tensor c(DType::Bool, {5, 9});
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 9; ++j) c.set(size_t(i * 9 + j), j <= i + 4);
  Program before = parse(program_text(params,
                                      const_stmt("m", c) +
                                          "    tensor<fp32, [2, 3, 5, 4]> o = scaled_dot_product_attention(query = q, "
                                          "key = k, value = v, attn_mask = m)[name = string(\"o\")];\n",
                                      "o", "ios18"));
  Program after = fused(before);
  const Op& a = *find_op(after, "milrt_attention");
  EXPECT_FALSE(a.has("mask"));
  EXPECT_EQ(const_input(after, a, "causal")->at(0), 1);
  expect_numerics(before, after, "sdpa causal");
}

// ---- printing, inference errors -------------------------------------------------

TEST(FuseAttention, PrintedIrParsesBack) {
  Spec a, b;
  b.tap_probs = true;
  b.dt = "fp16";
  for (const Spec& s : {a, b}) {
    Program after = fused(parse(program(s)));
    std::string text = print_mil(after);
    Program again = parse(text);
    EXPECT_EQ(ir_diff(after, again), "") << text;
    EXPECT_EQ(print_mil(again), text);
  }
}

TEST(FuseAttention, BadFusedOpsAreRejected) {
  const std::string params =
      "tensor<fp32, [2, 5, 8]> q, tensor<fp32, [2, 7, 8]> k, tensor<fp32, [2, 7, 4]> v, tensor<fp32, [2, 7, 6]> v2";
  auto fails = [&](const std::string& expr, const std::string& fragment) {
    std::string body = "    tensor<fp32, [2, 5, 4]> o = " + expr + "[name = string(\"o\")];\n";
    try {
      parse(program_text(params + ", tensor<fp32, [3, 5, 7]> m3, tensor<fp32, [5, 8]> m8", body, "o", "ios18"));
      ADD_FAILURE() << "accepted: " << expr;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  fails("milrt_attention(q = q, k = q, v = v, scale = fp32(1))", "key count");
  fails("milrt_attention(q = q, k = k, v = v, mask = m3, scale = fp32(1))", "broadcast");
  fails("milrt_attention(q = q, k = k, v = v, mask = m8, scale = fp32(1))", "broadcast");
  fails("milrt_attention(q = q, k = k, v = v, scale = q)", "scale");
  fails("milrt_attention(q = q, k = k, v = v, causal = int32(1))", "causal");
  fails("milrt_softmax(x = q, axis = int32(3))", "axis");
}

// ---- the second seed's attention kernels ------------------------------------

llm::SeedLayerWeights seed_weights(int dim, int hidden, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto mat = [&](int64_t r, int64_t c, double sd, double mean = 0) {
    return random_tensor(DType::FP16, {r, c}, rng, mean - sd, mean + sd).reshaped(c == 1 ? Shape{r} : Shape{r, c});
  };
  llm::SeedLayerWeights w;
  double sd = 1 / std::sqrt(double(dim));
  w.rms1 = mat(dim, 1, 0.25, 1);
  w.rms2 = mat(dim, 1, 0.25, 1);
  w.wq = mat(dim, dim, 2 * sd), w.wk = mat(dim, dim, 2 * sd), w.wv = mat(dim, dim, 2 * sd), w.wo = mat(dim, dim, 2 * sd);
  w.w1 = mat(hidden, dim, sd), w.w3 = mat(hidden, dim, sd), w.w2 = mat(dim, hidden, sd);
  return w;
}

TEST(FuseAttention, SeedAttentionKernelsFuse) {
  llm::SeedLayerConfig cfg{32, 64, 4, 16};
  llm::SeedLayerWeights w = seed_weights(cfg.dim, cfg.hidden, 3);
  struct K {
    std::string name;
    Program p;
    std::string type;  // what the attention becomes
  };
  std::vector<K> kernels = {{"sdpa_fwd_taps", llm::seed_sdpa_fwd_taps(cfg, w), "milrt_attention"},
                            {"sdpa_bwd1", llm::seed_sdpa_bwd1(cfg, w), "milrt_softmax"}};
  for (K& k : kernels) {
    SCOPED_TRACE(k.name);
    verify(k.p);
    Program prepared = k.p;
    run_passes(prepared, kBefore);
    Program after = prepared;
    run_passes(after, {"fuse-attention"});
    auto counts = pass::op_counts(after);
    EXPECT_EQ(counts[k.type], 1);
    EXPECT_EQ(counts["softmax"], 0);
    if (k.type == "milrt_attention") {
      const Op& a = *find_op(after, "milrt_attention");
      EXPECT_EQ(const_input(after, a, "causal")->at(0), 1) << "the seed's -65504 mask is causal";
      EXPECT_FALSE(a.has("mask"));
    }
    Program again = parse_mil(print_mil(after), "seed.mil", ".");
    verify(again);
    EXPECT_EQ(ir_diff(after, again), "") << "print -> parse round trip";
    // Inputs of the seed's scale; fp16 throughout, several ops before and after.
    TensorMap in = random_inputs(k.p, 9, -1, 1);
    TensorMap want = run_reference(k.p, "main", in);
    expect_outputs_close(want, run_reference(after, "main", in), 2e-2, 1e-2, k.name + ": fused reference");
    Plan plan = compile(k.p);  // the default pipeline, fuse-attention included
    bool lowered = false;
    for (const Plan::StepInfo& s : plan.steps()) lowered |= s.kernel == (k.type == "milrt_attention" ? "attention" : "softmax");
    EXPECT_TRUE(lowered);
    expect_outputs_close(want, plan.run(in), 2e-2, 1e-2, k.name + ": compiled");
  }
}

// ---- the corpus -------------------------------------------------------------

void run_corpus(const std::vector<pass::CorpusProgram>& corpus, int& fused_ops) {
  for (const pass::CorpusProgram& c : corpus) {
    SCOPED_TRACE(c.name);
    Program before = c.program;
    run_passes(before, kBefore);
    Program after = before;
    run_passes(after, {"fuse-attention"});
    auto counts = pass::op_counts(after);
    fused_ops += counts["milrt_attention"] + counts["milrt_softmax"];
    if (pass::op_counts(before) == counts) {
      EXPECT_EQ(ir_diff(before, after), "");
      continue;
    }
    // Only programs the pass changed are run again (the reference is slow on big ones).
    const Function& f = before.functions.at(0);
    TensorMap in = pass::inputs_for(f, 5);
    TensorMap want = run_reference(before, f.name, in);
    expect_outputs_close(want, run_reference(after, f.name, in), 2e-2, 1e-2, c.name);
  }
}

TEST(FuseAttention, CorpusKeepsItsOutputs) {
  int fused_ops = 0;
  run_corpus(pass::seed_corpus(), fused_ops);
  if (pass::shared_corpus().empty()) GTEST_SKIP() << "../shared/testdata absent: only the seed programs were run";
  run_corpus(pass::shared_corpus(), fused_ops);
  std::printf("fuse-attention over the corpus: %d fused ops\n", fused_ops);
}

}  // namespace
}  // namespace milrt::test
