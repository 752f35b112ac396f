// The fused attention backward: the kernel (src/kernels/generic/
// attention_backward.*) against a plain fp64 backward written here, the op
// milrt_attention_grad compiled against the reference executor, and the
// gradient rules of milrt_attention and scaled_dot_product_attention against
// finite differences.
//
// Kernel tolerance: fp32 GEMMs over up to 512 keys and a polynomial exp give
// errors of a few 1e-6 relative to the gradients' scale; the bound,
// 3e-5·(1 + max|want|) + 1e-4·|want|, sits orders of magnitude below what an
// indexing, masking or causal-offset mistake gives (errors of order 0.1 of
// the scale).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/generic/attention_backward.h"
#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "milrt/reference.h"
#include "support/grad_check.h"
#include "support/test_util.h"

namespace milrt::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  int64_t tq, tk, d, dv;
  bool causal;
  AttentionMaskKind mask;
};

struct Grads {
  std::vector<double> o, lse, dq, dk, dv;
};

// Forward and backward in fp64, straight from the definitions: P = softmax(S),
// dV = Pᵀ dO, dP = dO Vᵀ, dS_ij = P_ij (dP_ij − Σ_l P_il dP_il), dQ = scale dS K,
// dK = scale dSᵀ Q. Rows that see no key get P = 0.
Grads naive(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
            const std::vector<float>& dout, const std::vector<float>& fmask, const std::vector<uint8_t>& bmask,
            double scale) {
  Grads g;
  g.o.assign(size_t(c.tq * c.dv), 0);
  g.lse.assign(size_t(c.tq), -kInf);
  g.dq.assign(size_t(c.tq * c.d), 0);
  g.dk.assign(size_t(c.tk * c.d), 0);
  g.dv.assign(size_t(c.tk * c.dv), 0);
  for (int64_t i = 0; i < c.tq; ++i) {
    std::vector<double> p(static_cast<size_t>(c.tk)), dp(static_cast<size_t>(c.tk));
    double mx = -kInf;
    for (int64_t j = 0; j < c.tk; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < c.d; ++e) dot += double(q[size_t(i * c.d + e)]) * k[size_t(j * c.d + e)];
      double x = scale * dot;
      if (c.mask == AttentionMaskKind::additive) x += fmask[size_t(i * c.tk + j)];
      if (c.mask == AttentionMaskKind::keep && !bmask[size_t(i * c.tk + j)]) x = -kInf;
      if (c.causal && j > i + (c.tk - c.tq)) x = -kInf;
      p[size_t(j)] = x;
      mx = std::max(mx, x);
    }
    if (mx == -kInf) continue;
    double den = 0;
    for (double& x : p) den += (x = std::exp(x - mx));
    g.lse[size_t(i)] = mx + std::log(den);
    for (double& x : p) x /= den;
    for (int64_t e = 0; e < c.dv; ++e)
      for (int64_t j = 0; j < c.tk; ++j) g.o[size_t(i * c.dv + e)] += p[size_t(j)] * v[size_t(j * c.dv + e)];
    double pdp = 0;
    for (int64_t j = 0; j < c.tk; ++j) {
      double acc = 0;
      for (int64_t e = 0; e < c.dv; ++e) acc += double(dout[size_t(i * c.dv + e)]) * v[size_t(j * c.dv + e)];
      dp[size_t(j)] = acc;
      pdp += p[size_t(j)] * acc;
    }
    for (int64_t j = 0; j < c.tk; ++j) {
      double ds = p[size_t(j)] * (dp[size_t(j)] - pdp);
      for (int64_t e = 0; e < c.dv; ++e) g.dv[size_t(j * c.dv + e)] += p[size_t(j)] * dout[size_t(i * c.dv + e)];
      for (int64_t e = 0; e < c.d; ++e) {
        g.dq[size_t(i * c.d + e)] += scale * ds * k[size_t(j * c.d + e)];
        g.dk[size_t(j * c.d + e)] += scale * ds * q[size_t(i * c.d + e)];
      }
    }
  }
  return g;
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double amax = 0;
  for (double w : want) amax = std::max(amax, std::abs(w));
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = 3e-5 * (1 + amax) + 1e-4 * std::abs(want[i]);
    if (!(std::abs(double(got[i]) - want[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

std::string name(const Case& c) {
  const char* m = c.mask == AttentionMaskKind::none ? "none" : c.mask == AttentionMaskKind::additive ? "add" : "keep";
  return "tq=" + std::to_string(c.tq) + " tk=" + std::to_string(c.tk) + " d=" + std::to_string(c.d) +
         " dv=" + std::to_string(c.dv) + (c.causal ? " causal" : "") + " mask=" + m;
}

void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(name(c));
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t n, double r) {
    std::uniform_real_distribution<double> u(-r, r);
    std::vector<float> x(static_cast<size_t>(n));
    std::generate(x.begin(), x.end(), [&] { return float(u(rng)); });
    return x;
  };
  auto q = uniform(c.tq * c.d, 2), k = uniform(c.tk * c.d, 2), v = uniform(c.tk * c.dv, 1), dout = uniform(c.tq * c.dv, 1);
  std::vector<float> fmask(size_t(c.tq * c.tk));
  std::vector<uint8_t> bmask(size_t(c.tq * c.tk));
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t i = 0; i < fmask.size(); ++i) {
    double r = u(rng);
    fmask[i] = r < 0.2 ? -1e9f : float(2 * r - 1);  // some entries masked out, the rest shifted
    bmask[i] = r >= 0.25;
  }
  const double scale = 1.0 / std::sqrt(double(c.d));
  Grads want = naive(c, q, k, v, dout, fmask, bmask, scale);
  std::vector<float> o(want.o.begin(), want.o.end()), lse(want.lse.begin(), want.lse.end());

  AttentionShape sh{c.tq, c.tk, c.d, c.dv, float(scale), c.causal};
  AttentionMask mask;
  mask.kind = c.mask;
  if (c.mask == AttentionMaskKind::additive) mask.data = fmask.data();
  if (c.mask == AttentionMaskKind::keep) mask.data = bmask.data();
  mask.row_stride = c.tk;
  mask.col_stride = 1;
  // Poisoned outputs: the kernel must overwrite every element.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float* given_lse : {static_cast<const float*>(nullptr), static_cast<const float*>(lse.data())}) {
    SCOPED_TRACE(given_lse ? "lse given" : "lse recomputed");
    std::vector<float> dq(size_t(c.tq * c.d), nan), dk(size_t(c.tk * c.d), nan), dv(size_t(c.tk * c.dv), nan);
    attention_backward_f32(q.data(), k.data(), v.data(), o.data(), dout.data(), given_lse, dq.data(), dk.data(),
                           dv.data(), sh, mask);
    expect_near_all(dq, want.dq, "dq");
    expect_near_all(dk, want.dk, "dk");
    expect_near_all(dv, want.dv, "dv");
  }
}

TEST(AttentionBackwardKernel, MatchesFp64AcrossShapes) {
  std::vector<Case> cases;
  for (int64_t t : {1, 5, 63, 130, 512})
    for (bool causal : {false, true}) cases.push_back({t, t, 64, 64, causal, AttentionMaskKind::none});
  for (int64_t t : {5, 63, 130})
    for (int64_t d : {8, 64}) {
      cases.push_back({t, t, d, d == 8 ? 24 : 40, true, AttentionMaskKind::none});  // Dv != D
      cases.push_back({t, t, d, d, false, AttentionMaskKind::additive});
      cases.push_back({t, t, d, d, true, AttentionMaskKind::keep});
    }
  // Tq != Tk: causal queries are the last Tq of the keys' positions
  // (key j seen by query i when j <= i + Tk − Tq); with Tq > Tk the first
  // rows see nothing.
  cases.push_back({5, 130, 64, 64, true, AttentionMaskKind::none});
  cases.push_back({63, 130, 8, 24, true, AttentionMaskKind::additive});
  cases.push_back({130, 63, 64, 64, true, AttentionMaskKind::none});
  cases.push_back({1, 512, 64, 64, true, AttentionMaskKind::keep});
  cases.push_back({130, 5, 8, 8, false, AttentionMaskKind::keep});
  uint64_t seed = 1;
  for (const Case& c : cases) run_case(c, seed++);
}

TEST(AttentionBackwardKernel, EmptyAndNegative) {
  AttentionShape sh{0, 4, 8, 8, 1, true};
  std::vector<float> k(32, 1), v(32, 1), dk(32, 7), dv(32, 7);
  attention_backward_f32(nullptr, k.data(), v.data(), nullptr, nullptr, nullptr, nullptr, dk.data(), dv.data(), sh, {});
  for (float x : dk) EXPECT_EQ(x, 0);
  for (float x : dv) EXPECT_EQ(x, 0);
  sh.tq = -1;
  EXPECT_THROW(attention_backward_f32(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                      sh, {}),
               Error);
}

}  // namespace
}  // namespace milrt::kernels

namespace milrt::test {
namespace {

std::string ty(const Shape& s) { return mil_type(s); }

struct OpCase {
  Shape q, k, v;
  std::string mask_param;  // "" or a parameter declaration named m
  bool causal;
};

// milrt_attention then milrt_attention_grad in one program, compiled (the
// fused kernels) against the reference executor (the definitions in fp64);
// every other case has the forward give its log-sum-exp to the backward.
// Tolerance 1e-4 of max(1, max |ref|) per output: fp32 GEMMs over a few keys.
TEST(AttentionBackwardOp, CompiledMatchesReference) {
  std::vector<OpCase> cases = {
      {{2, 5, 8}, {2, 7, 8}, {2, 7, 4}, "", true},                       // Tq < Tk, causal offset
      {{2, 3, 9, 8}, {2, 1, 9, 8}, {2, 1, 9, 6}, "", true},              // grouped: K, V broadcast over dim 1
      {{3, 70, 16}, {3, 70, 16}, {3, 70, 16}, "", true},                 // more than one tile
      {{2, 6, 4}, {2, 6, 4}, {2, 6, 4}, "tensor<bool, [6, 6]> m", false},
      {{2, 6, 4}, {2, 9, 4}, {2, 9, 5}, "tensor<fp32, [2, 1, 9]> m", true},
  };
  uint64_t seed = 1;
  for (size_t n = 0; n < cases.size(); ++n) {
    const OpCase& c = cases[n];
    const bool with_lse = n % 2 == 1;
    Shape batch(c.q.begin(), c.q.end() - 2);
    if (c.k.size() == c.q.size())
      for (size_t i = 0; i + 2 < c.q.size(); ++i) batch[i] = std::max(c.q[i], c.k[i]);
    auto with = [&](int64_t r, int64_t col) {
      Shape s = batch;
      s.push_back(r);
      s.push_back(col);
      return s;
    };
    const int64_t tq = c.q[c.q.size() - 2], tk = c.k[c.k.size() - 2], d = c.q.back(), dv = c.v.back();
    std::string params = ty(c.q) + " q, " + ty(c.k) + " k, " + ty(c.v) + " v, " + ty(with(tq, dv)) + " g";
    std::string mask;
    if (!c.mask_param.empty()) params += ", " + c.mask_param, mask = "mask = m, ";
    std::string attrs = "v = v, " + mask + "scale = fp32(0.4), causal = bool(" + (c.causal ? "true" : "false") + ")";
    Shape ls = batch;
    ls.push_back(tq);
    std::string body = "    " + ty(with(tq, dv)) + " o" + (with_lse ? ", tensor<fp32, " + shape_str(ls) + "> lse" : "") +
                       " = milrt_attention(q = q, k = k, " + attrs + ")[name = string(\"o\")];\n    " +
                       ty(with(tq, d)) + " dq, " + ty(with(tk, d)) + " dk, " + ty(with(tk, dv)) +
                       " dv = milrt_attention_grad(q = q, k = k, o = o, dout = g, " + (with_lse ? "lse = lse, " : "") +
                       attrs + ")[name = string(\"dq\")];\n";
    SCOPED_TRACE(body);
    Program prog = parse_mil(program_text(params, body, with_lse ? "dq, dk, dv, lse" : "dq, dk, dv"), "<test>", ".");
    verify(prog);
    TensorMap in;
    for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{
             {"q", c.q}, {"k", c.k}, {"v", c.v}, {"g", with(tq, dv)}})
      in[name] = random_tensor(DType::FP32, shape, seed++, -2, 2);
    if (c.mask_param.rfind("tensor<bool", 0) == 0) {
      Tensor m(DType::Bool, {tq, tk});
      for (int64_t i = 0; i < m.numel(); ++i) m.set(size_t(i), (i % tk == 0 || (i * 7) % 3 != 0) ? 1.0 : 0.0);
      in["m"] = m;
    } else if (!c.mask_param.empty()) {
      in["m"] = random_tensor(DType::FP32, {2, 1, tk}, seed++, -3, 1);
    }
    TensorMap want = run_reference(prog, "main", in);
    TensorMap got = compile(prog).run(in);
    for (const char* name : {"dq", "dk", "dv", "lse"}) {
      if (!want.count(name)) continue;
      const Tensor &w = want.at(name), &g = got.at(name);
      ASSERT_EQ(g.shape(), w.shape()) << name;
      double amax = 1;
      for (int64_t i = 0; i < w.numel(); ++i) amax = std::max(amax, std::abs(w.at(size_t(i))));
      double worst = 0;
      for (int64_t i = 0; i < w.numel(); ++i) worst = std::max(worst, std::abs(g.at(size_t(i)) - w.at(size_t(i))));
      EXPECT_LE(worst / amax, 1e-4) << name;
    }
  }
}

GradCheckResult check(const std::string& params, const std::string& expr, const Shape& zs,
                      const std::vector<std::string>& wrt, const TensorMap& in = {}, bool with_lse = false) {
  SCOPED_TRACE(expr);
  GradCheckOptions o;
  o.ranges = {{"q", {-2, 2}}, {"k", {-2, 2}}};
  std::string text = weighted_sum_loss_program(params, expr, zs);
  if (with_lse) {  // z becomes the first of two outputs
    Shape ls(zs.begin(), zs.end() - 1);
    size_t at = text.find(" z = milrt_attention");
    EXPECT_NE(at, std::string::npos) << text;
    if (at == std::string::npos) return {};
    text.insert(at + 2, ", tensor<fp32, " + shape_str(ls) + "> z_lse");
  }
  GradCheckResult r = expect_gradients_match(text, "loss", wrt, in, o);
  if (with_lse) {
    const Function& f = *r.derived.function("main_grad");
    bool given = false;
    for (const Op& op : f.ops) given |= op.type == "milrt_attention_grad" && op.has("lse");
    EXPECT_TRUE(given) << "the backward did not take the forward's lse";
  }
  return r;
}

// The rules of milrt_attention and scaled_dot_product_attention (both emit
// milrt_attention_grad) against central differences of the forward on the
// reference executor (tests/support/grad_check.h: tolerance and why).
TEST(AttentionBackwardGrad, MilrtAttentionMatchesFiniteDifferences) {
  check(ty({2, 5, 4}) + " q, " + ty({2, 7, 4}) + " k, " + ty({2, 7, 3}) + " v",
        "milrt_attention(q = q, k = k, v = v, scale = fp32(0.5), causal = bool(true))", {2, 5, 3}, {"q", "k", "v"});
  // The forward's log-sum-exp given to the backward (the transformer block's form).
  check(ty({2, 5, 4}) + " q, " + ty({2, 7, 4}) + " k, " + ty({2, 7, 3}) + " v",
        "milrt_attention(q = q, k = k, v = v, scale = fp32(0.5), causal = bool(true))", {2, 5, 3}, {"q", "k", "v"}, {},
        true);
  // Grouped query heads: K and V broadcast over dim 1, their gradients summed back.
  check(ty({2, 3, 4, 4}) + " q, " + ty({2, 1, 4, 4}) + " k, " + ty({2, 1, 4, 2}) + " v",
        "milrt_attention(q = q, k = k, v = v, scale = fp32(0.5), causal = bool(true))", {2, 3, 4, 2}, {"q", "k", "v"});
  Tensor m(DType::Bool, {3, 5});
  for (int64_t i = 0; i < m.numel(); ++i) m.set(size_t(i), i % 5 == 0 || i % 3 == 1 ? 1.0 : 0.0);
  check(ty({2, 3, 4}) + " q, " + ty({2, 5, 4}) + " k, " + ty({2, 5, 3}) + " v, tensor<bool, [3, 5]> m",
        "milrt_attention(q = q, k = k, v = v, mask = m, scale = fp32(0.7))", {2, 3, 3}, {"q", "k", "v"}, {{"m", m}});
}

TEST(AttentionBackwardGrad, SdpaUsesTheFusedBackward) {
  GradCheckResult r = check(ty({2, 3, 4}) + " q, " + ty({2, 5, 4}) + " k, " + ty({2, 5, 6}) + " v",
                            "scaled_dot_product_attention(query = q, key = k, value = v)", {2, 3, 6}, {"q", "k", "v"});
  const Function& f = *r.derived.function("main_grad");
  int fused = 0, softmaxes = 0;
  for (const Op& op : f.ops) fused += op.type == "milrt_attention_grad", softmaxes += op.type == "softmax";
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(softmaxes, 0);
}

TEST(AttentionBackwardGrad, ComputedFloatMaskIsRefused) {
  std::string text = weighted_sum_loss_program(
      ty({2, 3, 4}) + " q, " + ty({2, 5, 4}) + " k, " + ty({2, 5, 3}) + " v, " + ty({3, 5}) + " m",
      "milrt_attention(q = q, k = k, v = v, mask = m, scale = fp32(0.7))", {2, 3, 3});
  Program p = parse_mil(text, "<test>", ".");
  GradOptions o;
  o.loss = "loss";
  o.wrt = {"q", "m"};
  EXPECT_THROW(differentiate(p, o), Error);
}

}  // namespace
}  // namespace milrt::test
