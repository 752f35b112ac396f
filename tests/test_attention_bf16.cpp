// The bf16 fused attention kernels against a plain fp64 forward and backward
// written here: the AMX kernels (src/kernels/x86/attention_amx.cpp), the
// vdpbf16ps kernels (src/kernels/x86/attention_avx512_bf16.cpp) and the
// vector kernels with GemmMath::bf16 (src/kernels/generic/attention*.cpp:
// vdpbf16ps on avx512_bf16, bf16 operands emulated in fp32 elsewhere), which
// round the same operands. Then compiled plans with matmul_precision bf16
// against the fp32 plans (milrt_attention with milrt_attention_grad as
// written, and a loss differentiated by milrt::differentiate), on whichever
// of the kernels this machine's ISA chooses, and the same plan on 1 and 2
// threads. The AMX kernel tests skip, saying so, on a machine without AMX
// bf16, the vdpbf16ps ones on a machine without avx512_bf16; the rest run
// everywhere.
//
// Operands: the test rounds Q, K, V and dO to bf16 itself (milrt::f32_to_bf16)
// and hands the kernel those values, so the kernel's own conversion of them is
// exact and the fp64 reference sees the same operands. What remains is what
// the kernel rounds inside: P before O += P·V and dV = Pᵀ·dO, dS before
// dQ = scale·dS·K and dK = scale·dSᵀ·Q, each to bf16 (relative error
// <= 2^-8), plus fp32 errors (scores accumulated over D products, the
// polynomial exp, sums over keys) below 4e-5 relative. Summing the bound over
// the terms of each output element (worst case, every error the same sign):
//
//   O_ic:  (2^-8 + 4e-5)·Σ_j P_ij·|V_jc| + 1e-6
//   dV_jc: (2^-8 + 4e-5)·Σ_i P_ij·|dO_ic| + 1e-6
//   dQ_ic: |scale|·Σ_j [(2^-8 + 4e-5)·|dS_ij| + 2e-5·P_ij·(A_ij + B_i)]·|K_jc| + 1e-6
//   dK_jc: the same with |Q_ic|
//
// with A_ij = Σ_c |dO_ic|·|V_jc| (the fp32 error of dP_ij) and
// B_i = Σ_c |dO_ic|·|O_ic| (that of D_i). lse: 2e-5·(1 + |lse|). The bound is
// per element, so it is about 2^-8 of the element's own magnitudes: a causal
// limit off by one (the first rows see 1 key instead of 2), a wrong scale,
// a skipped key tile or a transposed operand give errors of order 0.1 to 1 of
// the magnitudes; the mutations tried are listed in the report of the change.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_amx.h"
#include "kernels/attention_avx512_bf16.h"
#include "kernels/cpu_features.h"
#include "kernels/generic/attention.h"
#include "kernels/generic/attention_backward.h"
#include "kernels/threads.h"
#include "milrt/autodiff.h"
#include "milrt/dtype.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/grad_check.h"
#include "support/test_util.h"

namespace milrt::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kBf16 = 1.0 / 256;  // 2^-8: unit roundoff of bf16 (8 significant bits, nearest)
constexpr double kF32 = 4e-5;

#define REQUIRE_AMX()                                                                                  \
  do {                                                                                                 \
    if (!attention_amx_usable()) GTEST_SKIP() << "no AMX bf16 on this machine: AMX attention skipped"; \
  } while (0)

#define REQUIRE_AVX512_BF16()                                                                \
  do {                                                                                       \
    if (!attention_avx512_bf16_usable())                                                     \
      GTEST_SKIP() << "no AVX-512 with avx512_bf16 on this machine: vdpbf16ps attention skipped"; \
  } while (0)

struct Case {
  int64_t tq, tk, d, dv;
  bool causal;
  AttentionMaskKind mask = AttentionMaskKind::none;
  double scale = 0;  // 0: 1/sqrt(D)
};

std::string name(const Case& c) {
  const char* m = c.mask == AttentionMaskKind::none ? "none" : c.mask == AttentionMaskKind::additive ? "add" : "keep";
  return "tq=" + std::to_string(c.tq) + " tk=" + std::to_string(c.tk) + " d=" + std::to_string(c.d) +
         " dv=" + std::to_string(c.dv) + (c.causal ? " causal" : "") + " mask=" + m +
         (c.scale != 0 ? " scale=" + std::to_string(c.scale) : "");
}

// Forward and backward in fp64 with per-element error bounds (see the top).
struct Ref {
  std::vector<double> o, lse, dq, dk, dv;
  std::vector<double> tol_o, tol_dq, tol_dk, tol_dv;
};

Ref reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
              const std::vector<float>& dout, const std::vector<float>& fmask, const std::vector<uint8_t>& bmask,
              double scale) {
  const auto tq = size_t(c.tq), tk = size_t(c.tk), d = size_t(c.d), dv = size_t(c.dv);
  Ref r;
  r.o.assign(tq * dv, 0);
  r.tol_o.assign(tq * dv, 1e-6);
  r.lse.assign(tq, -kInf);
  r.dq.assign(tq * d, 0);
  r.tol_dq.assign(tq * d, 1e-6);
  r.dk.assign(tk * d, 0);
  r.tol_dk.assign(tk * d, 1e-6);
  r.dv.assign(tk * dv, 0);
  r.tol_dv.assign(tk * dv, 1e-6);
  std::vector<double> p(tk), dp(tk), a(tk);
  for (size_t i = 0; i < tq; ++i) {
    double mx = -kInf;
    for (size_t j = 0; j < tk; ++j) {
      double dot = 0;
      for (size_t e = 0; e < d; ++e) dot += double(q[i * d + e]) * k[j * d + e];
      double x = scale * dot;
      if (c.mask == AttentionMaskKind::additive) x += fmask[i * tk + j];
      if (c.mask == AttentionMaskKind::keep && !bmask[i * tk + j]) x = -kInf;
      if (c.causal && int64_t(j) > int64_t(i) + (c.tk - c.tq)) x = -kInf;
      p[j] = x;
      mx = std::max(mx, x);
    }
    if (mx == -kInf) {  // sees no key: NaN output, dQ row 0
      for (size_t e = 0; e < dv; ++e) r.o[i * dv + e] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    double den = 0;
    for (double& x : p) den += (x = std::exp(x - mx));
    r.lse[i] = mx + std::log(den);
    for (double& x : p) x /= den;
    for (size_t e = 0; e < dv; ++e) {
      double acc = 0, mag = 0;
      for (size_t j = 0; j < tk; ++j) acc += p[j] * v[j * dv + e], mag += p[j] * std::abs(v[j * dv + e]);
      r.o[i * dv + e] = acc;
      r.tol_o[i * dv + e] += (kBf16 + kF32) * mag;
    }
    double di = 0, bi = 0;
    for (size_t e = 0; e < dv; ++e)
      di += double(dout[i * dv + e]) * r.o[i * dv + e], bi += std::abs(double(dout[i * dv + e]) * r.o[i * dv + e]);
    for (size_t j = 0; j < tk; ++j) {
      double acc = 0, mag = 0;
      for (size_t e = 0; e < dv; ++e)
        acc += double(dout[i * dv + e]) * v[j * dv + e], mag += std::abs(double(dout[i * dv + e]) * v[j * dv + e]);
      dp[j] = acc;
      a[j] = mag;
    }
    for (size_t j = 0; j < tk; ++j) {
      const double ds = p[j] * (dp[j] - di);
      const double err = (kBf16 + kF32) * std::abs(ds) + 2e-5 * p[j] * (a[j] + bi);
      for (size_t e = 0; e < dv; ++e) {
        r.dv[j * dv + e] += p[j] * dout[i * dv + e];
        r.tol_dv[j * dv + e] += (kBf16 + kF32) * p[j] * std::abs(double(dout[i * dv + e]));
      }
      for (size_t e = 0; e < d; ++e) {
        r.dq[i * d + e] += scale * ds * k[j * d + e];
        r.tol_dq[i * d + e] += std::abs(scale) * err * std::abs(double(k[j * d + e]));
        r.dk[j * d + e] += scale * ds * q[i * d + e];
        r.tol_dk[j * d + e] += std::abs(scale) * err * std::abs(double(q[i * d + e]));
      }
    }
  }
  return r;
}

// got within tol of want; NaN where want is NaN. Returns the largest
// |got − want| / tol seen (for the report of how tight the bound is).
double expect_within(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& tol,
                     const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      if (!std::isnan(got[i]) && bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want NaN";
      continue;
    }
    const double err = std::abs(double(got[i]) - want[i]);
    worst = std::max(worst, err / tol[i]);
    if (!(err <= tol[i]) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (tolerance " << tol[i]
                    << ")";
  }
  if (bad > 5) ADD_FAILURE() << what << ": " << bad << " elements out of tolerance";
  return worst;
}

std::vector<float> bf16_values(std::vector<float> x) {
  for (float& f : x) f = bf16_to_f32(f32_to_bf16(f));
  return x;
}

enum class Kernels { amx, avx512_bf16, vector_bf16 };

double run_case(const Case& c, uint64_t seed, Kernels kernels) {
  SCOPED_TRACE(name(c));
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t n, double r) {
    std::uniform_real_distribution<double> u(-r, r);
    std::vector<float> x(static_cast<size_t>(n));
    std::generate(x.begin(), x.end(), [&] { return float(u(rng)); });
    return bf16_values(x);
  };
  auto q = uniform(c.tq * c.d, 2), k = uniform(c.tk * c.d, 2), v = uniform(c.tk * c.dv, 1),
       dout = uniform(c.tq * c.dv, 1);
  std::vector<float> fmask(size_t(c.tq * c.tk));
  std::vector<uint8_t> bmask(size_t(c.tq * c.tk));
  std::uniform_real_distribution<double> u(0, 1);
  for (size_t i = 0; i < fmask.size(); ++i) {
    double r = u(rng);
    fmask[i] = r < 0.2 ? -1e9f : float(2 * r - 1);  // some entries masked out, the rest shifted
    bmask[i] = r >= 0.25;
  }
  // Keep mask: query 1 sees no key at all (a NaN row).
  if (c.tq > 1)
    for (int64_t j = 0; j < c.tk; ++j) bmask[size_t(c.tk + j)] = 0;
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(double(c.d));
  const Ref want = reference(c, q, k, v, dout, fmask, bmask, scale);

  AttentionShape sh{c.tq, c.tk, c.d, c.dv, float(scale), c.causal, GemmMath::bf16};
  const bool amx = kernels == Kernels::amx, vb16 = kernels == Kernels::avx512_bf16;
  AttentionMask mask;
  mask.kind = c.mask;
  if (c.mask == AttentionMaskKind::additive) mask.data = fmask.data();
  if (c.mask == AttentionMaskKind::keep) mask.data = bmask.data();
  mask.row_stride = c.tk;
  mask.col_stride = 1;
  if (amx) {
    EXPECT_TRUE(attention_amx_supports(sh, mask));
  }
  if (vb16) {
    EXPECT_TRUE(attention_avx512_bf16_supports(sh, mask));
  }

  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> o(size_t(c.tq * c.dv), nan), lse(size_t(c.tq), nan);
  std::vector<float> scratch(amx    ? attention_amx_scratch_floats(sh)
                             : vb16 ? attention_avx512_bf16_scratch_floats(sh)
                                    : attention_scratch_floats(sh),
                             nan);
  (amx ? attention_bf16_amx : vb16 ? attention_bf16_avx512 : attention_f32)(q.data(), k.data(), v.data(), o.data(), sh,
                                                                          mask, scratch.data(), lse.data());
  double worst = expect_within(o, want.o, want.tol_o, "o");
  for (size_t i = 0; i < lse.size(); ++i) {
    if (want.lse[i] == -kInf) {
      EXPECT_EQ(lse[i], -std::numeric_limits<float>::infinity()) << "lse[" << i << "]";
    } else {
      EXPECT_NEAR(lse[i], want.lse[i], 2e-5 * (1 + std::abs(want.lse[i]))) << "lse[" << i << "]";
    }
  }

  // The backward takes the fp32 O (NaN rows as the forward gives them).
  std::vector<float> of(want.o.begin(), want.o.end());
  for (const float* given_lse : {static_cast<const float*>(nullptr), static_cast<const float*>(lse.data())}) {
    SCOPED_TRACE(given_lse ? "lse given" : "lse recomputed");
    std::vector<float> dq(size_t(c.tq * c.d), nan), dk(size_t(c.tk * c.d), nan), dv(size_t(c.tk * c.dv), nan);
    (amx ? attention_backward_bf16_amx : vb16 ? attention_backward_bf16_avx512 : attention_backward_f32)(
        q.data(), k.data(), v.data(), of.data(), dout.data(), given_lse, dq.data(), dk.data(), dv.data(), sh, mask);
    worst = std::max(worst, expect_within(dq, want.dq, want.tol_dq, "dq"));
    worst = std::max(worst, expect_within(dk, want.dk, want.tol_dk, "dk"));
    worst = std::max(worst, expect_within(dv, want.dv, want.tol_dv, "dv"));
  }
  return worst;
}

TEST(AttentionAmx, Supports) {
  AttentionShape sh{10, 10, 64, 64, 1, true};
  EXPECT_TRUE(attention_amx_supports(sh, {}) || !attention_amx_usable());
  for (int64_t d : {0, 16, 48, 65, 288}) {
    sh.d = d;
    EXPECT_FALSE(attention_amx_supports(sh, {})) << "d = " << d;
  }
  sh.d = 64;
  sh.dv = 40;
  EXPECT_FALSE(attention_amx_supports(sh, {}));
}

std::vector<Case> shape_cases() {
  std::vector<Case> cases;
  for (int64_t t : {1, 37, 100, 512, 513})
    for (bool causal : {false, true}) cases.push_back({t, t, 64, 64, causal});
  // Tq != Tk: key j seen by query i when j <= i + Tk − Tq; with Tq > Tk the
  // first rows see nothing (NaN output rows, zero dQ rows).
  cases.push_back({100, 513, 64, 64, true});
  cases.push_back({1, 200, 64, 64, true});
  cases.push_back({130, 63, 64, 64, true});
  cases.push_back({37, 100, 64, 64, false});
  // Other head dims.
  cases.push_back({100, 100, 128, 128, true});
  cases.push_back({70, 70, 32, 96, false});
  cases.push_back({37, 37, 256, 32, true});
  cases.push_back({200, 200, 96, 64, true});
  // Masks (keep: row 1 masked whole).
  cases.push_back({100, 100, 64, 64, false, AttentionMaskKind::additive});
  cases.push_back({100, 130, 64, 64, true, AttentionMaskKind::additive});
  cases.push_back({100, 100, 64, 64, true, AttentionMaskKind::keep});
  cases.push_back({37, 200, 32, 32, false, AttentionMaskKind::keep});
  // A negative scale (the row maximum of scale·S is not scale·max S).
  cases.push_back({100, 150, 64, 64, true, AttentionMaskKind::none, -0.2});
  return cases;
}

double worst_over_cases(const std::vector<Case>& cases, Kernels kernels) {
  uint64_t seed = 1;
  double worst = 0;
  for (const Case& c : cases) worst = std::max(worst, run_case(c, seed++, kernels));
  // How much of the (worst-case) bound the errors use.
  std::printf("largest error / bound: %.3f\n", worst);
  return worst;
}

TEST(AttentionAmx, MatchesFp64AcrossShapes) {
  REQUIRE_AMX();
  RecordProperty("worst_error_over_bound", std::to_string(worst_over_cases(shape_cases(), Kernels::amx)));
}

// The vector kernels take any head size: add odd ones to the AMX cases.
TEST(AttentionVectorBf16, MatchesFp64AcrossShapes) {
  std::vector<Case> cases = shape_cases();
  cases.push_back({50, 50, 17, 33, true});
  cases.push_back({9, 70, 5, 3, false, AttentionMaskKind::additive});
  const double worst = worst_over_cases(cases, Kernels::vector_bf16);
  RecordProperty("worst_error_over_bound", std::to_string(worst));
  // bf16 really rounded: fp32 operands for P and dS would leave errors far
  // below 2^-8 of the magnitudes (the fp32 kernels stay under 1% of it).
  EXPECT_GT(worst, 0.02) << "errors too small for bf16 products: were the operands rounded?";
}

TEST(AttentionAmx, EmptyAndErrors) {
  REQUIRE_AMX();
  AttentionShape sh{0, 4, 32, 32, 1, true};
  std::vector<float> k(4 * 32, 1), v(4 * 32, 1), dk(4 * 32, 7), dv(4 * 32, 7);
  attention_backward_bf16_amx(nullptr, k.data(), v.data(), nullptr, nullptr, nullptr, nullptr, dk.data(), dv.data(),
                              sh, {});
  for (float x : dk) EXPECT_EQ(x, 0);
  for (float x : dv) EXPECT_EQ(x, 0);
  // Tk = 0: every row sees nothing.
  AttentionShape none{3, 0, 32, 32, 1, false};
  std::vector<float> q(3 * 32, 1), o(3 * 32, 0), lse(3, 0), scratch(attention_amx_scratch_floats(none));
  attention_bf16_amx(q.data(), nullptr, nullptr, o.data(), none, {}, scratch.data(), lse.data());
  for (float x : o) EXPECT_TRUE(std::isnan(x));
  for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  sh.tq = -1;
  EXPECT_THROW(attention_bf16_amx(nullptr, nullptr, nullptr, nullptr, sh, {}, nullptr), Error);
  sh.tq = 4;
  sh.d = 40;
  EXPECT_THROW(attention_bf16_amx(nullptr, nullptr, nullptr, nullptr, sh, {}, nullptr), Error);
}

// The vdpbf16ps kernels: the AMX cases (their code paths: causal and not,
// Tq != Tk, every mask kind, rows that see no key, other head sizes), plus
// odd sizes around their blocks (48 queries and 128 keys forward, 64 keys
// and chunks of 48 queries backward) and head sizes that are multiples of
// 16 only.
TEST(AttentionAvx512Bf16, Supports) {
  AttentionShape sh{10, 10, 64, 64, 1, true};
  EXPECT_TRUE(attention_avx512_bf16_supports(sh, {}) || !attention_avx512_bf16_usable());
  for (int64_t d : {16, 48, 80, 256}) {
    sh.d = d;
    EXPECT_TRUE(attention_avx512_bf16_supports(sh, {}) || !attention_avx512_bf16_usable()) << "d = " << d;
  }
  for (int64_t d : {0, 8, 40, 65, 272}) {
    sh.d = d;
    EXPECT_FALSE(attention_avx512_bf16_supports(sh, {})) << "d = " << d;
  }
  sh.d = 64;
  sh.dv = 40;
  EXPECT_FALSE(attention_avx512_bf16_supports(sh, {}));
}

TEST(AttentionAvx512Bf16, MatchesFp64AcrossShapes) {
  REQUIRE_AVX512_BF16();
  std::vector<Case> cases = shape_cases();
  for (int64_t t : {7, 47, 49, 65, 96, 130, 256})
    for (bool causal : {false, true}) cases.push_back({t, t, 64, 64, causal});
  cases.push_back({7, 130, 64, 64, true});
  cases.push_back({130, 7, 64, 64, true});
  cases.push_back({65, 1, 64, 64, false});
  cases.push_back({1, 65, 64, 64, true, AttentionMaskKind::keep});
  cases.push_back({65, 65, 64, 64, true, AttentionMaskKind::keep});
  cases.push_back({130, 130, 64, 64, false, AttentionMaskKind::keep});
  cases.push_back({49, 130, 64, 64, true, AttentionMaskKind::additive});
  cases.push_back({50, 50, 16, 48, true});
  cases.push_back({33, 77, 80, 16, false, AttentionMaskKind::additive});
  cases.push_back({130, 130, 48, 112, true, AttentionMaskKind::keep});
  const double worst = worst_over_cases(cases, Kernels::avx512_bf16);
  RecordProperty("worst_error_over_bound", std::to_string(worst));
  EXPECT_GT(worst, 0.02) << "errors too small for bf16 products: were the operands rounded?";
}

TEST(AttentionAvx512Bf16, EmptyAndErrors) {
  REQUIRE_AVX512_BF16();
  AttentionShape sh{0, 4, 32, 32, 1, true};
  std::vector<float> k(4 * 32, 1), v(4 * 32, 1), dk(4 * 32, 7), dv(4 * 32, 7);
  attention_backward_bf16_avx512(nullptr, k.data(), v.data(), nullptr, nullptr, nullptr, nullptr, dk.data(),
                                 dv.data(), sh, {});
  for (float x : dk) EXPECT_EQ(x, 0);
  for (float x : dv) EXPECT_EQ(x, 0);
  // Tk = 0: every row sees nothing.
  AttentionShape none{3, 0, 32, 32, 1, false};
  std::vector<float> q(3 * 32, 1), o(3 * 32, 0), lse(3, 0), scratch(attention_avx512_bf16_scratch_floats(none));
  attention_bf16_avx512(q.data(), nullptr, nullptr, o.data(), none, {}, scratch.data(), lse.data());
  for (float x : o) EXPECT_TRUE(std::isnan(x));
  for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  sh.tq = -1;
  EXPECT_THROW(attention_bf16_avx512(nullptr, nullptr, nullptr, nullptr, sh, {}, nullptr), Error);
  sh.tq = 4;
  sh.d = 40;
  EXPECT_THROW(attention_bf16_avx512(nullptr, nullptr, nullptr, nullptr, sh, {}, nullptr), Error);
}

}  // namespace
}  // namespace milrt::kernels

namespace milrt::test {
namespace {

// The kernel names a bf16 plan's attention steps (head size 64) get on this
// machine: the AMX kernels where MILRT_ISA (or the best path) is amx, the
// vdpbf16ps ones where it is avx512 (or amx without AMX attention) on a CPU
// with avx512_bf16, else the vector ones.
std::string bf16_attention_kernel(const char* base) {
  const kernels::Isa isa = kernels::current_isa();
  const bool amx = kernels::attention_amx_usable() && isa == kernels::Isa::amx;
  const bool vb16 = !amx && kernels::attention_avx512_bf16_usable() &&
                    (isa == kernels::Isa::avx512 || isa == kernels::Isa::amx);
  return std::string(base) + (amx ? "[bf16][amx]" : vb16 ? "[bf16][avx512]" : "[bf16]");
}

// milrt_attention (causal, scale 1/8) and milrt_attention_grad on its o and
// lse, for q, k, v and g of shape `qs`; outputs o, lse, dq, dk, dv.
Program attention_pair_program(const Shape& qs) {
  const Shape ls(qs.begin(), qs.end() - 1);
  const std::string t = mil_type(qs);
  const std::string attrs = "v = v, scale = fp32(0.125), causal = bool(true)";
  const std::string body = "    " + t + " o, tensor<fp32, " + shape_str(ls) + "> lse = milrt_attention(q = q, k = k, " +
                           attrs + ")[name = string(\"o\")];\n    " + t + " dq, " + t + " dk, " + t +
                           " dv = milrt_attention_grad(q = q, k = k, o = o, dout = g, lse = lse, " + attrs +
                           ")[name = string(\"dq\")];\n";
  Program prog = parse_mil(program_text(t + " q, " + t + " k, " + t + " v, " + t + " g", body, "o, lse, dq, dk, dv"),
                           "<test>", ".");
  verify(prog);
  return prog;
}

// Uniform values in [-1, 1] for q, k, v and g (seeds seed, seed + 1, ...).
TensorMap attention_pair_inputs(const Shape& qs, uint64_t seed) {
  TensorMap in;
  for (const char* n : {"q", "k", "v", "g"}) in[n] = random_tensor(DType::FP32, qs, seed++, -1, 1);
  return in;
}

// milrt_attention and milrt_attention_grad in one program (the transformer
// block's form: the forward's lse to the backward), compiled with
// matmul_precision bf16 (bf16 kernels) and fp32 (the fp32 kernels). The
// bf16 plan's errors are the kernel's (2^-8 of the magnitudes summed, see the
// top) plus those of rounding Q, K, V, dO to bf16 (2^-8 relative each,
// carried through the softmax by |scale·ΔS| <= 2·2^-8·scale·Σ|q||k|); with
// values in [-1, 1] and D = 64 the bound 1.5e-2 of max(1, max |fp32 value|)
// per output holds them, while a wrong mask or a dropped tile moves outputs by
// tenths of that scale.
TEST(AttentionBf16Plan, Bf16PlanMatchesFp32Plan) {
  const Shape qs{2, 3, 100, 64};
  const Program prog = attention_pair_program(qs);
  const TensorMap in = attention_pair_inputs(qs, 7);
  CompileOptions f32, bf16;
  bf16.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  Plan p32 = compile(prog, f32), p16 = compile(prog, bf16);
  int bf16_steps = 0;
  for (const Plan::StepInfo& s : p16.steps())
    bf16_steps += s.kernel == bf16_attention_kernel("attention") || s.kernel == bf16_attention_kernel("attention_grad");
  EXPECT_EQ(bf16_steps, 2);
  for (const Plan::StepInfo& s : p32.steps()) EXPECT_EQ(s.kernel.find("[bf16]"), std::string::npos) << s.kernel;
  // Useful FLOPs, as the profile reports them: 2·3 slices × 100·101/2 visible
  // (query, key) pairs × 2·(64 + 64); the backward's four products twice that.
  const double forward_flops = 6.0 * 5050.0 * 256.0;
  int counted = 0;
  for (const Plan::StepInfo& s : p32.steps()) {
    if (s.kernel == "attention") {
      EXPECT_DOUBLE_EQ(s.flops, forward_flops);
      ++counted;
    }
    if (s.kernel == "attention_grad") {
      EXPECT_DOUBLE_EQ(s.flops, 2 * forward_flops);
      ++counted;
    }
  }
  EXPECT_EQ(counted, 2);
  TensorMap want = p32.run(in), got = p16.run(in);
  for (const char* name : {"o", "lse", "dq", "dk", "dv"}) {
    const Tensor &w = want.at(name), &g = got.at(name);
    ASSERT_EQ(g.shape(), w.shape()) << name;
    double amax = 1, worst = 0;
    for (int64_t i = 0; i < w.numel(); ++i) amax = std::max(amax, std::abs(w.at(size_t(i))));
    for (int64_t i = 0; i < w.numel(); ++i) worst = std::max(worst, std::abs(g.at(size_t(i)) - w.at(size_t(i))));
    EXPECT_LE(worst / amax, 1.5e-2) << name;
    EXPECT_GT(worst, 0) << name << ": the bf16 plan gave the fp32 plan's values (bf16 kernels not run?)";
    std::printf("%s: max |bf16 - fp32| / max(1, max|fp32|) = %.2e\n", name, worst / amax);
  }
}

// The same through milrt::differentiate: loss = Σ w∘milrt_attention(q, k, v),
// its derived function compiled both ways. The gradients come from the fused
// backward the autodiff pass emits (with the forward's lse); same bound.
TEST(AttentionBf16Plan, DifferentiatedAttentionBf16MatchesFp32) {
  const Shape qs{2, 2, 77, 64};
  const std::string t = mil_type(qs);
  Program p = parse_mil(weighted_sum_loss_program(t + " q, " + t + " k, " + t + " v",
                                                  "milrt_attention(q = q, k = k, v = v, scale = fp32(0.125), causal = "
                                                  "bool(true))",
                                                  qs),
                        "<test>", ".");
  GradOptions go;
  go.loss = "loss";
  go.wrt = {"q", "k", "v"};
  Program d = differentiate(p, go);
  TensorMap in;
  uint64_t seed = 11;
  for (const char* n : {"q", "k", "v", "w"}) in[n] = random_tensor(DType::FP32, qs, seed++, -1, 1);
  CompileOptions f32, bf16;
  f32.function = bf16.function = "main_grad";
  bf16.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  Plan p32 = compile(d, f32), p16 = compile(d, bf16);
  bool fwd = false, bwd = false;
  for (const Plan::StepInfo& s : p16.steps()) {
    fwd |= s.kernel == bf16_attention_kernel("attention");
    bwd |= s.kernel == bf16_attention_kernel("attention_grad");
  }
  EXPECT_TRUE(fwd && bwd) << "the bf16 plan did not choose both bf16 attention kernels";
  TensorMap want = p32.run(in), got = p16.run(in);
  ASSERT_FALSE(want.empty());
  for (const auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    ASSERT_EQ(g.shape(), w.shape()) << name;
    double amax = 1, worst = 0;
    for (int64_t i = 0; i < w.numel(); ++i) amax = std::max(amax, std::abs(w.at(size_t(i))));
    for (int64_t i = 0; i < w.numel(); ++i) worst = std::max(worst, std::abs(g.at(size_t(i)) - w.at(size_t(i))));
    EXPECT_LE(worst / amax, 1.5e-2) << name;
    std::printf("%s: max |bf16 - fp32| / max(1, max|fp32|) = %.2e\n", name.c_str(), worst / amax);
  }
}

// The vdpbf16ps kernels in a plan: chosen for both steps on the AVX-512 path
// (not when MILRT_ISA forces avx2), heads spread over threads with results
// that do not depend on the thread count (each head is computed whole by one
// thread), and within the bound of the plan test above against fp32.
TEST(AttentionBf16Plan, Avx512Bf16StepsThreadsBitIdentical) {
  if (!kernels::attention_avx512_bf16_usable())
    GTEST_SKIP() << "no AVX-512 with avx512_bf16 on this machine: vdpbf16ps attention skipped";
  const kernels::Isa isa = kernels::current_isa();
  if (isa != kernels::Isa::avx512 && isa != kernels::Isa::amx)
    GTEST_SKIP() << "MILRT_ISA chooses " << kernels::isa_name(isa) << ": the vdpbf16ps attention is not used";
  const bool amx = kernels::attention_amx_usable() && isa == kernels::Isa::amx;
  const Shape qs{1, 6, 193, 64};
  const Program prog = attention_pair_program(qs);
  const TensorMap in = attention_pair_inputs(qs, 21);
  CompileOptions f32, bf16;
  bf16.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  Plan p16 = compile(prog, bf16);
  int steps = 0;
  for (const Plan::StepInfo& s : p16.steps())
    steps += s.kernel == "attention[bf16][avx512]" || s.kernel == "attention_grad[bf16][avx512]";
  if (!amx) {
    EXPECT_EQ(steps, 2);
  }
  // MILRT_ISA=avx2 keeps the vector kernels.
  kernels::set_isa(kernels::Isa::avx2);
  Plan p16_avx2 = compile(prog, bf16);
  kernels::set_isa(std::nullopt);
  for (const Plan::StepInfo& s : p16_avx2.steps()) EXPECT_EQ(s.kernel.find("[avx512]"), std::string::npos) << s.kernel;

  const int threads = kernels::num_threads();
  kernels::set_num_threads(1);
  TensorMap one = p16.run(in);
  kernels::set_num_threads(2);
  TensorMap two = p16.run(in);
  kernels::set_num_threads(threads);
  TensorMap want = compile(prog, f32).run(in);
  for (const char* name : {"o", "lse", "dq", "dk", "dv"}) {
    const Tensor &a = one.at(name), &b = two.at(name), &w = want.at(name);
    ASSERT_EQ(a.shape(), b.shape()) << name;
    int64_t differ = 0;
    double amax = 1, worst = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const float x = a.at(size_t(i)), y = b.at(size_t(i));
      differ += std::memcmp(&x, &y, sizeof x) != 0;
      amax = std::max(amax, std::abs(w.at(size_t(i))));
      worst = std::max(worst, std::abs(x - w.at(size_t(i))));
    }
    EXPECT_EQ(differ, 0) << name << ": 1 and 2 threads differ";
    EXPECT_LE(worst / amax, 1.5e-2) << name;
  }
}

}  // namespace
}  // namespace milrt::test
