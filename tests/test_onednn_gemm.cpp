// The oneDNN GEMM backend: OnednnGemm against a plain fp64 GEMM written
// here, the backend rule (gemm_backend.h), and plans compiled with
// MILRT_GEMM=onednn against the reference executor.
//
// Tolerances, as in test_gemm.cpp: fp32 accumulation of K products errs by
// at most about K·2^-24·Σ|a||b| whatever the order of the sums (oneDNN's
// order is not milrt's), so each element is checked against
// |alpha|·(K + 2)·2^-24·Σ_k |a_ik||b_kj| (times the activation's slope, at
// most 1.13 for gelu_tanh), plus a few fp32 roundings of the epilogue's
// values (bias add, scale, residual add), the activation's own error (oneDNN
// evaluates exp / tanh with polynomial approximations: 1e-6 absolute is
// generous) and half an ulp of the output type. bf16 math is checked against
// fp64 math on the bf16-rounded operands. Padding of A and B (ld > row
// length) holds NaN, so a read outside a matrix fails every check.
//
// What oneDNN 2.6 supports depends on the CPU (on AVX2: f32 only, no bf16
// matmul, no f16/bf16 output, no strided C or residual without its reference
// kernel); where a case throws, the test checks that the constructor said so
// in one line and moves on, and it prints which cases ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemm_backend.h"
#include "kernels/onednn/onednn_gemm.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"
#include "milrt/plan.h"
#include "support/activation_fp64.h"
#include "support/gemm_matrices.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test {
namespace {

namespace k = milrt::kernels;
using k::Activation;
using k::ElemType;
using k::GemmMath;

#define SKIP_WITHOUT_ONEDNN() \
  if (!k::onednn_available()) GTEST_SKIP() << "this build has no oneDNN (libdnnl-dev not found by CMake)"

// Restores the backend mode and thread count a test changed.
struct Restore {
  ~Restore() {
    k::set_gemm_backend_mode(std::nullopt);
    k::set_num_threads(0);
  }
};

// A C or residual buffer of any storage type with row stride ld.
class Out {
 public:
  Out(ElemType t, int64_t rows, int64_t ld, float fill) : type_(t), ld_(ld) {
    if (t == ElemType::f32) f_.assign(size_t(rows * ld), fill);
    else h_.assign(size_t(rows * ld), t == ElemType::f16 ? f32_to_f16(fill) : f32_to_bf16(fill));
  }
  void* data() { return type_ == ElemType::f32 ? static_cast<void*>(f_.data()) : h_.data(); }
  k::OutputRef ref() { return {data(), type_, ld_}; }
  double get(int64_t r, int64_t c) const {
    const size_t i = size_t(r * ld_ + c);
    if (type_ == ElemType::f32) return f_[i];
    return type_ == ElemType::f16 ? f16_to_f32(h_[i]) : bf16_to_f32(h_[i]);
  }
  void set(int64_t r, int64_t c, double v) {
    const size_t i = size_t(r * ld_ + c);
    if (type_ == ElemType::f32) f_[i] = float(v);
    else h_[i] = type_ == ElemType::f16 ? f32_to_f16(float(v)) : f32_to_bf16(float(v));
  }
  bool same_bits(const Out& o) const { return f_ == o.f_ && h_ == o.h_; }

 private:
  ElemType type_;
  int64_t ld_;
  std::vector<float> f_;
  std::vector<uint16_t> h_;
};

// One product to check: shapes, storage and epilogue.
struct Case {
  int64_t m = 1, n = 1, k = 1;
  ElemType a_type = ElemType::f32, b_type = ElemType::f32, c_type = ElemType::f32;
  bool ta = false, tb = false, b_const = true;
  int64_t pad = 0;   // extra elements per stored row of A and B
  int64_t c_pad = 0; // extra elements per row of C (and of a separate residual)
  float alpha = 1;
  bool bias = false;
  Activation act = Activation::none;
  int residual = 0;  // 0: none, 1: its own buffer, 2: C itself
  GemmMath math = GemmMath::fp32;
  ElemType res_type = ElemType::f32;  // of a residual in its own buffer; C itself has C's type

  std::string str() const {
    char s[256];
    std::snprintf(s, sizeof s, "%lldx%lldx%lld A %s%s B %s%s%s C %s pad %lld/%lld alpha %g%s act %d res %d (%s) %s",
                  (long long)m, (long long)n, (long long)k, type_name(a_type), ta ? "ᵀ" : "", type_name(b_type),
                  tb ? "ᵀ" : "", b_const ? " const" : "", type_name(c_type), (long long)pad, (long long)c_pad, alpha,
                  bias ? " bias" : "", int(act), residual, type_name(res_type),
                  math == GemmMath::bf16 ? "bf16 math" : "fp32 math");
    return s;
  }
};

// Whether oneDNN accepted the case; false if the constructor threw (checked to be a one-line milrt::Error).
struct Outcome {
  bool ran = false, sums_in_place = false;
  std::string impl, error;
  double worst = 0;  // largest |error| / bound
};

Outcome check_case(const Case& cs, uint32_t seed) {
  SCOPED_TRACE(cs.str());
  const ElemType round_a = cs.math == GemmMath::bf16 ? ElemType::bf16 : cs.a_type;
  const ElemType round_b = cs.math == GemmMath::bf16 ? ElemType::bf16 : cs.b_type;
  const Logical A = random_logical(cs.m, cs.k, seed, cs.a_type), B = random_logical(cs.k, cs.n, seed + 1, cs.b_type);
  const Stored sa(A, cs.a_type, cs.ta, cs.pad), sb(B, cs.b_type, cs.tb, cs.pad);
  std::vector<float> bias(size_t(cs.n));
  {
    std::mt19937 rng(seed + 2);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (float& b : bias) b = dist(rng);
  }
  const int64_t ldc = cs.n + cs.c_pad;
  const float sentinel = 12345.f;
  const ElemType res_type = cs.residual == 2 ? cs.c_type : cs.res_type;
  Out c(cs.c_type, cs.m, ldc, sentinel), res(res_type, cs.m, ldc, 0);
  {
    std::mt19937 rng(seed + 3);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) (cs.residual == 2 ? c : res).set(i, j, dist(rng));
  }
  const Out c_before = c;

  k::OnednnGemmDesc d;
  d.m = cs.m, d.n = cs.n, d.k = cs.k;
  d.a = sa.ref(false);
  d.b = sb.ref(cs.b_const);
  d.b_const = cs.b_const;
  d.c_type = cs.c_type;
  d.c_ld = ldc;
  d.alpha = cs.alpha;
  d.has_bias = cs.bias;
  d.act = cs.act;
  d.has_residual = cs.residual != 0;
  d.residual_type = res_type;
  d.residual_ld = ldc;
  d.math = cs.math;
  Outcome out;
  std::optional<k::OnednnGemm> g;
  try {
    g.emplace(d);
  } catch (const Error& e) {
    out.error = e.what();
    EXPECT_EQ(out.error.find('\n'), std::string::npos) << out.error;
    EXPECT_NE(out.error.find("oneDNN"), std::string::npos) << out.error;
    return out;
  }
  out.ran = true;
  out.impl = g->impl_name();
  out.sums_in_place = g->sums_residual_in_place();
  EXPECT_EQ(out.impl.rfind("ref", 0), std::string::npos) << "a reference kernel was accepted: " << out.impl;
  g->run(sa.data(), cs.b_const ? nullptr : sb.data(), c.ref(), cs.bias ? bias.data() : nullptr,
         cs.residual == 1 ? res.data() : cs.residual == 2 ? c.data() : nullptr);

  const double slope = cs.act == Activation::none || cs.act == Activation::relu ? 1 : 1.13;
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      double dot = 0, mag = 0;
      for (int64_t p = 0; p < cs.k; ++p) {
        const double a = round_to(round_a, A.at(i, p)), b = round_to(round_b, B.at(p, j));
        dot += a * b;
        mag += std::fabs(a * b);
      }
      double pre = cs.alpha * dot + (cs.bias ? bias[size_t(j)] : 0.0);
      double want = act64(cs.act, pre);
      const double r = cs.residual == 1 ? res.get(i, j) : cs.residual == 2 ? c_before.get(i, j) : 0.0;
      want += r;
      const double bound = slope * (std::fabs(cs.alpha) * (cs.k + 2) * kU32 * mag + 4 * kU32 * std::fabs(pre)) +
                           (cs.act == Activation::none || cs.act == Activation::relu ? 0 : 1e-6) +
                           2 * kU32 * (std::fabs(want) + std::fabs(r)) + unit_roundoff(cs.c_type) * std::fabs(want) +
                           1e-30;
      const double got = c.get(i, j), err = std::fabs(got - want);
      if (!(err <= bound)) {
        ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", want " << want << " (bound " << bound << ")";
        return out;
      }
      out.worst = std::max(out.worst, err / bound);
    }
    for (int64_t j = cs.n; j < ldc; ++j)
      if (c.get(i, j) != (cs.residual == 2 ? c_before.get(i, j) : round_to(cs.c_type, sentinel))) {
        ADD_FAILURE() << "C padding overwritten at [" << i << "," << j << "]";
        return out;
      }
  }
  return out;
}

// Runs every case, prints which ran on which implementation; returns how many ran.
int check_all(const std::vector<Case>& cases, const char* what) {
  int ran = 0;
  std::string impls, errors;
  double worst = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Outcome o = check_case(cases[i], uint32_t(100 + 7 * i));
    if (o.ran) {
      ++ran;
      worst = std::max(worst, o.worst);
      if (impls.find(o.impl) == std::string::npos) impls += (impls.empty() ? "" : ", ") + o.impl;
    } else if (errors.empty()) {
      errors = o.error;
    }
  }
  std::printf("[onednn gemm] %s: %d of %zu cases ran (%s), worst error/bound %.3f%s%s\n", what, ran, cases.size(),
              impls.c_str(), worst, errors.empty() ? "" : "; first refusal: ", errors.c_str());
  return ran;
}

// ---- the kernel ------------------------------------------------------------------------

TEST(OnednnGemm, F32ShapesLayoutsAndLeadingDims) {
  SKIP_WITHOUT_ONEDNN();
  std::vector<Case> cases;
  const int64_t sizes[] = {1, 15, 17, 33, 64, 100};
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t kk : {int64_t(1), int64_t(17), int64_t(100)}) {
        const int v = int(m + 3 * n + 5 * kk);
        Case c;
        c.m = m, c.n = n, c.k = kk;
        c.ta = v & 1, c.tb = (v >> 1) & 1, c.b_const = (v >> 2) & 1, c.pad = (v % 3 == 0) ? 3 : 0;
        cases.push_back(c);
      }
  // Every layout at one awkward size, padded and not, constant B and per-call B.
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int b_const = 0; b_const < 2; ++b_const)
        for (int64_t pad : {0, 5}) cases.push_back(Case{.m = 33, .n = 15, .k = 64, .ta = bool(ta), .tb = bool(tb),
                                                        .b_const = bool(b_const), .pad = pad});
  // A plain f32 product must not be refused: that is the path plans rely on.
  EXPECT_EQ(check_all(cases, "f32 shapes/layouts"), int(cases.size()));
}

TEST(OnednnGemm, Bf16InputsWithFp32MathAreExact) {
  SKIP_WITHOUT_ONEDNN();
  std::vector<Case> cases;
  for (int tb = 0; tb < 2; ++tb)
    for (int b_const = 0; b_const < 2; ++b_const) {
      cases.push_back(Case{.m = 17, .n = 33, .k = 15, .a_type = ElemType::bf16, .b_type = ElemType::bf16,
                           .tb = bool(tb), .b_const = bool(b_const), .pad = 2});
      cases.push_back(Case{.m = 17, .n = 33, .k = 15, .b_type = ElemType::bf16, .ta = true, .tb = bool(tb),
                           .b_const = bool(b_const), .pad = 1});
      // A stored transposed is converted into a plain row-major copy: several 32x32 tiles and edges.
      cases.push_back(Case{.m = 70, .n = 33, .k = 45, .a_type = ElemType::bf16, .b_type = ElemType::bf16,
                           .ta = true, .tb = bool(tb), .b_const = bool(b_const), .pad = 3});
    }
  // Converted to f32 by the wrapper before oneDNN sees them: the f32 matmul serves these.
  EXPECT_EQ(check_all(cases, "bf16 stored, fp32 math"), int(cases.size()));
}

TEST(OnednnGemm, Bf16MathRunsOrIsRefused) {
  SKIP_WITHOUT_ONEDNN();
  std::vector<Case> cases;
  for (ElemType at : {ElemType::f32, ElemType::bf16})
    for (int b_const = 0; b_const < 2; ++b_const)
      for (int64_t kk : {int64_t(1), int64_t(33), int64_t(100)})
        cases.push_back(Case{.m = 15, .n = 17, .k = kk, .a_type = at, .b_type = ElemType::f32, .ta = kk == 33,
                             .tb = kk == 100, .b_const = bool(b_const), .pad = 1, .bias = true,
                             .math = GemmMath::bf16});
  for (int b_const = 0; b_const < 2; ++b_const)  // A transposed and converted to bf16: several tiles
    cases.push_back(Case{.m = 70, .n = 17, .k = 100, .ta = true, .b_const = bool(b_const), .pad = 2,
                         .math = GemmMath::bf16});
  const int ran = check_all(cases, "bf16 math");
  // oneDNN has a bf16 matmul for all of these or for none: it depends on the
  // ISA, not the shape. With AVX-512 BF16 (or AMX) it has one (brgemm); on
  // an AVX2 CPU it has none; plain AVX-512 may go either way (emulation).
  const k::CpuFeatures& f = k::cpu_features();
  if (f.avx512_bf16) EXPECT_EQ(ran, int(cases.size())) << "this CPU has avx512_bf16";
  else if (!f.avx512f) EXPECT_EQ(ran, 0) << "oneDNN 2.6 has no bf16 matmul on AVX2";
  else EXPECT_TRUE(ran == 0 || ran == int(cases.size())) << ran;
}

TEST(OnednnGemm, EveryEpilogue) {
  SKIP_WITHOUT_ONEDNN();
  std::vector<Case> cases;
  for (float alpha : {1.0f, 0.5f, -1.25f})
    for (int bias = 0; bias < 2; ++bias)
      for (Activation act : {Activation::none, Activation::relu, Activation::gelu_tanh, Activation::silu,
                             Activation::sigmoid})
        for (int residual = 0; residual < 3; ++residual)
          cases.push_back(Case{.m = 17, .n = 33, .k = 15, .tb = residual == 1, .b_const = residual != 2,
                               .alpha = alpha, .bias = bool(bias), .act = act, .residual = residual});
  // Dense f32 C and residual: every epilogue has a non-reference implementation on every ISA oneDNN supports.
  EXPECT_EQ(check_all(cases, "epilogues"), int(cases.size()));
  // A residual that is C, with no other post-op (a native bias is none), is
  // summed in place; the cases above checked its values.
  for (const Case& cs : cases) {
    const bool sole = cs.residual != 0 && cs.act == Activation::none && (!cs.bias || cs.alpha == 1);
    EXPECT_EQ(check_case(cs, 1).sums_in_place, sole) << cs.str();
  }
}

TEST(OnednnGemm, OutputTypesAndStridedOutputsRunOrAreRefused) {
  SKIP_WITHOUT_ONEDNN();
  std::vector<Case> cases;
  for (ElemType ct : {ElemType::f16, ElemType::bf16})
    for (int residual = 0; residual < 3; ++residual)
      cases.push_back(Case{.m = 15, .n = 17, .k = 33, .c_type = ct, .bias = true, .act = Activation::silu,
                           .residual = residual});
  // f16/bf16 C: oneDNN 2.6 refuses it on the CPUs seen so far (AVX2, AVX-512,
  // AMX); whatever runs is checked against the fp64 product.
  check_all(cases, "f16/bf16 output");
  // An f16/bf16 residual is widened to f32 by the wrapper: it runs wherever
  // the f32 product does.
  std::vector<Case> widened;
  for (ElemType rt : {ElemType::f16, ElemType::bf16})
    widened.push_back(Case{.m = 15, .n = 17, .k = 33, .bias = true, .residual = 1, .res_type = rt});
  EXPECT_EQ(check_all(widened, "f16/bf16 residual"), int(widened.size()));
  std::vector<Case> strided;
  for (int residual = 0; residual < 3; ++residual)
    strided.push_back(Case{.m = 15, .n = 17, .k = 33, .c_pad = 4, .bias = true, .act = Activation::relu,
                           .residual = residual});
  check_all(strided, "C / residual ld > N");
}

TEST(OnednnGemm, DeterministicForEachThreadCount) {
  SKIP_WITHOUT_ONEDNN();
  Restore restore;
  const int64_t M = 64, N = 100, K = 300;
  const Logical A = random_logical(M, K, 1), B = random_logical(K, N, 2);
  const Stored sa(A, ElemType::f32, false, 0), sb(B, ElemType::f32, true, 0);
  std::vector<float> bias(size_t(N), 0.25f);
  for (bool b_const : {true, false}) {
    k::OnednnGemmDesc d{.m = M, .n = N, .k = K, .a = sa.ref(false), .b = sb.ref(b_const), .b_const = b_const,
                        .has_bias = true, .act = Activation::gelu_tanh};
    const k::OnednnGemm g(d);
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      Out c1(ElemType::f32, M, N, 0), c2(ElemType::f32, M, N, 0);
      g.run(sa.data(), sb.data(), c1.ref(), bias.data(), nullptr);
      g.run(sa.data(), sb.data(), c2.ref(), bias.data(), nullptr);
      EXPECT_TRUE(c1.same_bits(c2)) << threads << " threads, b_const " << b_const;
    }
  }
}

TEST(OnednnGemm, BadDescriptionsAndCallsThrow) {
  SKIP_WITHOUT_ONEDNN();
  std::vector<float> w(64 * 64, 0.5f);
  const k::OnednnGemmDesc ok{.m = 4, .n = 8, .k = 16, .a = {nullptr, ElemType::f32, 16},
                             .b = {w.data(), ElemType::f32, 8}, .b_const = true};
  auto bad = [&](auto change, const std::string& fragment) {
    k::OnednnGemmDesc d = ok;
    change(d);
    expect_error_containing([&] { k::OnednnGemm g(d); }, fragment);
  };
  bad([](auto& d) { d.m = 0; }, "M, N and K must be >= 1");
  bad([](auto& d) { d.k = -3; }, "M, N and K must be >= 1");
  bad([](auto& d) { d.a.ld = 15; }, "A ld 15 < its stored row length 16");
  bad([](auto& d) { d.b.trans = true, d.b.ld = 15; }, "B ld 15 < its stored row length 16");
  bad([](auto& d) { d.b.ld = 7; }, "B ld 7 < its stored row length 8");
  bad([](auto& d) { d.b.type = ElemType::f16; }, "B must be f32 or bf16");
  bad([](auto& d) { d.b.data = nullptr; }, "a constant B needs its data");
  bad([](auto& d) { d.c_ld = 7; }, "C ld 7 < N 8");
  bad([](auto& d) { d.has_residual = true, d.residual_ld = 3; }, "residual ld 3 < N 8");

  const k::OnednnGemm g(ok);
  std::vector<float> a(4 * 16, 1), c(4 * 8), bias(8);
  EXPECT_STREQ(g.impl_name(), g.impl_name());
  EXPECT_GE(g.bytes(), 16u * 8u * 4u);
  expect_error_containing([&] { g.run(a.data(), nullptr, {c.data(), ElemType::f32, 9}, nullptr, nullptr); },
                          "C must be f32 with ld 8");
  expect_error_containing([&] { g.run(a.data(), nullptr, {c.data(), ElemType::bf16, 8}, nullptr, nullptr); },
                          "C must be f32 with ld 8");
  expect_error_containing([&] { g.run(a.data(), nullptr, {c.data(), ElemType::f32, 8}, bias.data(), nullptr); },
                          "a bias was not described");
  expect_error_containing([&] { g.run(a.data(), nullptr, {c.data(), ElemType::f32, 8}, nullptr, c.data()); },
                          "a residual was not described");
  expect_error_containing([&] { g.run(nullptr, nullptr, {c.data(), ElemType::f32, 8}, nullptr, nullptr); },
                          "A and C must not be null");
  k::OnednnGemmDesc var = ok;
  var.b_const = false, var.b.data = nullptr, var.has_bias = true;
  const k::OnednnGemm gv(var);
  expect_error_containing([&] { gv.run(a.data(), nullptr, {c.data(), ElemType::f32, 8}, bias.data(), nullptr); },
                          "B must not be null");
  expect_error_containing([&] { gv.run(a.data(), w.data(), {c.data(), ElemType::f32, 8}, nullptr, nullptr); },
                          "the described bias is missing");
}

// ---- the backend rule ----------------------------------------------------------------------

TEST(GemmBackend, Rule) {
  Restore restore;
  EXPECT_EQ(k::gemm_backend_name(k::GemmBackend::own), "own");
  EXPECT_EQ(k::gemm_backend_name(k::GemmBackend::onednn), "onednn");
  k::set_gemm_backend_mode(k::GemmBackendMode::own);
  EXPECT_EQ(k::gemm_backend_mode(), k::GemmBackendMode::own);
  for (k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512, k::Isa::amx})
    EXPECT_EQ(k::choose_gemm_backend(256, 768, 768, GemmMath::fp32, true, isa), k::GemmBackend::own);
  k::set_gemm_backend_mode(k::GemmBackendMode::auto_);
  // auto: the own kernels everywhere (see choose_gemm_backend for why).
  for (k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512, k::Isa::amx})
    for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
      EXPECT_EQ(k::choose_gemm_backend(256, 768, 768, math, true, isa), k::GemmBackend::own);
      EXPECT_EQ(k::choose_gemm_backend(512, 32000, 768, math, false, isa), k::GemmBackend::own);
    }
  k::set_gemm_backend_mode(k::GemmBackendMode::onednn);
  if (k::onednn_available()) {
    EXPECT_EQ(k::choose_gemm_backend(1, 1, 1, GemmMath::fp32, false, k::Isa::generic), k::GemmBackend::onednn);
  } else {
    expect_error_containing([] { k::choose_gemm_backend(1, 1, 1, GemmMath::fp32, false); }, "no oneDNN");
    expect_error_containing([] { k::OnednnGemm g(k::OnednnGemmDesc{}); }, "this build has no oneDNN");
  }
  k::set_gemm_backend_mode(std::nullopt);
  // Back to MILRT_GEMM (unset or valid in the test environment).
  EXPECT_NO_THROW(k::gemm_backend_mode());
}

// ---- plans ---------------------------------------------------------------------------------

using rewrite::const_stmt;
using rewrite::Deviation;
using rewrite::expect_outputs_close;
using rewrite::parse_program;
using rewrite::random;
using rewrite::random_inputs;

struct PlanProgram {
  std::string what;
  Program p;
  std::vector<std::string> kernels;  // expected step kernels under mode onednn, in order
};

std::vector<PlanProgram> plan_programs() {
  std::vector<PlanProgram> r;
  // matmul with a constant B, A with 33 rows.
  r.push_back({"matmul const B",
               parse_program("tensor<fp32, [33, 17]> x",
                             const_stmt("w", random(DType::FP32, {17, 15}, 1)) +
                                 stmt("tensor<fp32, [33, 15]>", "z", "matmul(x = x, y = w)"),
                             "z"),
               {"gemm[B packed][onednn]"}});
  // linear with bias (the default pipeline fuses it into one GEMM with a bias epilogue).
  r.push_back({"linear+bias",
               parse_program("tensor<fp32, [7, 64]> x",
                             const_stmt("w", random(DType::FP32, {24, 64}, 2)) +
                                 const_stmt("b", random(DType::FP32, {24}, 3)) +
                                 stmt("tensor<fp32, [7, 24]>", "z", "linear(x = x, weight = w, bias = b)"),
                             "z"),
               {"gemm[B packed][onednn]+bias"}});
  // The whole fused chain: scale, bias, gelu_tanh, residual.
  r.push_back({"alpha+bias+gelu+residual",
               parse_program("tensor<fp32, [2, 3, 16]> x, tensor<fp32, [2, 3, 8]> r",
                             const_stmt("w", random(DType::FP32, {16, 8}, 4)) +
                                 const_stmt("b", random(DType::FP32, {8}, 5)) +
                                 const_stmt("s", make(DType::FP32, {}, {0.5})) +
                                 stmt("tensor<fp32, [2, 3, 8]>", "mm", "matmul(x = x, y = w)") +
                                 stmt("tensor<fp32, [2, 3, 8]>", "sc", "mul(x = s, y = mm)") +
                                 stmt("tensor<fp32, [2, 3, 8]>", "bi", "add(x = sc, y = b)") +
                                 stmt("tensor<fp32, [2, 3, 8]>", "ge",
                                      "gelu(x = bi, mode = string(\"TANH_APPROXIMATION\"))") +
                                 stmt("tensor<fp32, [2, 3, 8]>", "z", "add(x = ge, y = r)"),
                             "z"),
               {"gemm[B packed][onednn]+alpha+bias+gelu_tanh+residual"}});
  // Variable batched B (the training-style product): one primitive, two batches.
  r.push_back({"batched variable B + silu",
               parse_program("tensor<fp32, [2, 5, 16]> x, tensor<fp32, [2, 16, 9]> y",
                             stmt("tensor<fp32, [2, 5, 9]>", "mm", "matmul(x = x, y = y)") +
                                 stmt("tensor<fp32, [2, 5, 9]>", "z", "silu(x = mm)"),
                             "z"),
               {"gemm[onednn]+silu"}});
  // A batched constant B, transposed: one primitive per B batch.
  r.push_back({"batched const Bᵀ",
               parse_program("tensor<fp32, [2, 5, 16]> x",
                             const_stmt("w", random(DType::FP32, {2, 9, 16}, 6)) +
                                 stmt("tensor<fp32, [2, 5, 9]>", "z",
                                      "matmul(x = x, y = w, transpose_x = bool(false), transpose_y = bool(true))"),
                             "z"),
               {"gemm[B packed][onednn]"}});
  return r;
}

std::vector<std::string> kernels_of(const Plan& plan) {
  std::vector<std::string> r;
  for (auto& s : plan.steps()) r.push_back(s.kernel);
  return r;
}

// K <= 64, |x|, |w| <= 1: fp32 accumulation in any order plus the fused
// epilogue's roundings stay below 66·2^-24·64 + a few ulps ~ 3e-4 in the worst
// case; typical errors are ~1e-6.
constexpr double kPlanTol = 3e-4;

TEST(OnednnGemmPlans, ForcedOnednnMatchesTheReference) {
  SKIP_WITHOUT_ONEDNN();
  Restore restore;
  for (const PlanProgram& pp : plan_programs()) {
    SCOPED_TRACE(pp.what);
    k::set_gemm_backend_mode(k::GemmBackendMode::onednn);
    Plan plan = compile(pp.p);
    EXPECT_EQ(kernels_of(plan), pp.kernels);
    Deviation dev;
    for (int t = 0; t < 2; ++t) {
      TensorMap in = random_inputs(pp.p, uint64_t(40 + t));
      dev.merge(expect_outputs_close(run_reference(pp.p, "main", in), plan.run(in), 0, kPlanTol, pp.what));
    }
    std::printf("[onednn plans] %s: %s, deviation %g\n", pp.what.c_str(), plan.steps().back().kernel.c_str(),
                dev.abs);
    // The same program with the own kernels: no step on oneDNN, same values.
    k::set_gemm_backend_mode(k::GemmBackendMode::own);
    Plan own = compile(pp.p);
    for (const std::string& s : kernels_of(own)) EXPECT_EQ(s.find("[onednn]"), std::string::npos) << s;
    TensorMap in = random_inputs(pp.p, 40);
    expect_outputs_close(own.run(in), plan.run(in), 0, kPlanTol, pp.what + " own vs onednn");
  }
}

// bf16 matmul precision: oneDNN serves it where it has a bf16 matmul; where it
// has none (AVX2) the step quietly stays on the own kernels. Either way the
// values match the reference within the bf16 rounding of x and w
// (64·2^-9·1 = 0.125 worst case at K = 64).
TEST(OnednnGemmPlans, Bf16PrecisionUsesOnednnOrFallsBack) {
  SKIP_WITHOUT_ONEDNN();
  Restore restore;
  k::set_gemm_backend_mode(k::GemmBackendMode::onednn);
  const Program p = plan_programs()[1].p;
  CompileOptions opt;
  opt.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  Plan plan = compile(p, opt);
  const std::vector<std::string> ks = kernels_of(plan);
  ASSERT_EQ(ks.size(), 1u);
  if (k::cpu_features().avx512_bf16)  // oneDNN has a bf16 matmul here (see Bf16MathRunsOrIsRefused)
    EXPECT_EQ(ks[0], "gemm[B packed][bf16][onednn]+bias");
  else
    EXPECT_TRUE(ks[0] == "gemm[B packed][bf16][onednn]+bias" || ks[0] == "gemm[B packed][bf16]+bias") << ks[0];
  TensorMap in = random_inputs(p, 9);
  const Deviation d = expect_outputs_close(run_reference(p, "main", in), plan.run(in), 0, 0.13, "bf16");
  std::printf("[onednn plans] bf16 precision: %s, deviation %g\n", ks[0].c_str(), d.abs);
}

}  // namespace
}  // namespace milrt::test
