// GEMM kernels on every path this machine can run, against a plain fp64
// GEMM written here.
//
// Tolerances: fp32 accumulation of K products errs by at most about
// K·2^-24·Σ|a||b| (recursive summation bound; blocking only shortens the
// chains), so each element is checked against (K + 2)·2^-24·Σ_k |a_ik||b_kj|
// times |alpha|, plus half an ulp of the output type and, for activations, the
// function's own fp32 error. bf16 inputs are checked against fp64 math on the
// bf16 values (GemmMath::bf16 rounds fp32 operands to bf16 first, so the
// reference rounds them too). Matrix padding (ld > row length) holds NaN, so a
// kernel that reads outside a matrix fails every check; output padding holds a
// sentinel that must survive.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numbers>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"
#include "milrt/error.h"
#include "support/gemm_matrices.h"

namespace {

namespace k = milrt::kernels;
using namespace milrt::test;
using k::Activation;
using k::ElemType;
using k::GemmMath;
using k::Isa;

// ---- matrices (Logical, Stored: support/gemm_matrices.h) ----------------------

// ---- the fp64 reference ------------------------------------------------------

struct Reference {
  std::vector<double> c;    // Σ a·b, exact to fp64
  std::vector<double> mag;  // Σ |a|·|b|
};

Reference reference_gemm(const Logical& a, const Logical& b) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  Reference r{std::vector<double>(size_t(M * N)), std::vector<double>(size_t(M * N))};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t kk = 0; kk < K; ++kk) {
      const double aik = a.at(i, kk);
      for (int64_t j = 0; j < N; ++j) {
        r.c[i * N + j] += aik * b.at(kk, j);
        r.mag[i * N + j] += std::abs(aik * b.at(kk, j));
      }
    }
  return r;
}

double gemm_error_bound(const Reference& r, size_t idx, int64_t K, double alpha) {
  return std::abs(alpha) * double(K + 2) * kU32 * r.mag[idx];
}

// Checks every element and the padding; reports the first few mismatches.
void expect_near_all(const Buffer& got, int64_t M, int64_t N, const std::vector<double>& want,
                     const std::vector<double>& tol) {
  int bad = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const double g = got.get(i, j), w = want[i * N + j], t = tol[i * N + j];
      if (std::abs(g - w) <= t) continue;
      if (++bad <= 3) ADD_FAILURE() << "C(" << i << ", " << j << ") = " << g << ", want " << w << " ± " << t;
    }
  EXPECT_EQ(bad, 0) << "mismatches of " << M * N;
  EXPECT_TRUE(got.padding_intact()) << "wrote outside C";
}

// ---- shapes ---------------------------------------------------------------------

struct Shape {
  int64_t M, N, K;
};

// Awkward sizes around every path's register tile (6/14 rows × 8/16/32
// columns) and cache blocks (KC 256/384, MC 96..168, NC 256/512), K = 1, odd
// K for bf16 pairs.
const Shape kShapes[] = {
    {1, 1, 1},     {1, 15, 17},   {15, 1, 17},  {17, 33, 15}, {33, 17, 64},  {64, 64, 64},
    {100, 33, 257}, {15, 257, 100}, {257, 17, 33}, {1, 257, 257}, {257, 1, 15}, {33, 100, 1},
    {64, 1100, 17}, {20, 40, 1031}, {257, 64, 100},
};

std::string describe(const Shape& s) {
  return "M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K);
}

// Runs C = alpha·op(A)·op(B) on every path, unpacked and pre-packed, for
// every transpose combination, and checks against the reference.
void check_products(const Shape& s, ElemType ta, ElemType tb, GemmMath math, uint32_t seed) {
  const Logical a = random_logical(s.M, s.K, seed, ta), b = random_logical(s.K, s.N, seed + 1, tb);
  const Reference r = math == GemmMath::bf16 ? reference_gemm(rounded(a, ElemType::bf16), rounded(b, ElemType::bf16))
                                             : reference_gemm(a, b);
  const double alpha = -1.25;
  std::vector<double> want(r.c.size()), tol(r.c.size());
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = alpha * r.c[i];
    tol[i] = gemm_error_bound(r, i, s.K, alpha) + kU32 * std::abs(want[i]);
  }
  for (Isa isa : k::usable_isas())
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true})
        for (bool prepacked : {false, true}) {
          SCOPED_TRACE(std::string(k::isa_name(isa)) + " " + describe(s) + " A:" + type_name(ta) +
                       (trans_a ? "ᵀ" : "") + " B:" + type_name(tb) + (trans_b ? "ᵀ" : "") +
                       (math == GemmMath::bf16 ? " math:bf16" : " math:fp32") + (prepacked ? " packed" : ""));
          const Stored sa(a, ta, trans_a, 3), sb(b, tb, trans_b, 5);
          Buffer c(s.M, s.N, ElemType::f32, 2);
          const k::Epilogue ep{.alpha = float(alpha)};
          if (prepacked) {
            const k::PackedB pb(sb.ref(), s.K, s.N, math, isa);
            k::gemm(s.M, sa.ref(), pb, c.out(), ep);
          } else {
            k::gemm(s.M, s.N, s.K, sa.ref(), sb.ref(), c.out(), ep, math, isa);
          }
          expect_near_all(c, s.M, s.N, want, tol);
        }
}

// ---- activations ----------------------------------------------------------------

const Activation kActs[] = {Activation::none, Activation::relu, Activation::gelu_tanh, Activation::silu,
                            Activation::sigmoid};

const char* act_name(Activation a) { return k::activation_name(a); }

double act_ref(Activation a, double x) {
  switch (a) {
    case Activation::none: return x;
    case Activation::relu: return x > 0 ? x : 0;
    case Activation::sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::silu: return x / (1 + std::exp(-x));
    case Activation::gelu_tanh: {
      // 0.5·x·(1 + tanh(u)), written as x / (1 + e^-2u) (the same function) so
      // that 1 + tanh(u) does not cancel to 0 in fp64 for u < -19.
      const double u = std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x);
      return x / (1 + std::exp(-2 * u));
    }
    default: break;
  }
  ADD_FAILURE() << "no fp64 reference for " << act_name(a);
  return x;
}

// Bound on |f'| (how much an input error can grow).
double act_slope(Activation a) {
  switch (a) {
    case Activation::sigmoid: return 0.25;
    case Activation::silu: case Activation::gelu_tanh: return 1.2;
    default: return 1;
  }
}

// The fp32 evaluation error of f at an exact x: a few ulps, growing with the
// exponent's argument z (its rounding error is relative to z), plus a tiny
// absolute floor where exp saturates (x / (1 + e^88) instead of x / (1 + e^z)).
double act_eval_error(Activation a, double x) {
  double z = 0;
  if (a == Activation::silu || a == Activation::sigmoid) z = x;
  if (a == Activation::gelu_tanh) z = 2 * std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 1e-6 * (2 + std::abs(z)) * std::abs(act_ref(a, x)) + 1e-37 * (1 + std::abs(x));
}

// ---- MILRT_ISA in tests -----------------------------------------------------------

// Restores MILRT_ISA and the cached path when a test ends.
class IsaEnvGuard {
 public:
  IsaEnvGuard() {
    if (const char* v = std::getenv("MILRT_ISA")) saved_ = v;
  }
  ~IsaEnvGuard() {
    if (saved_) setenv("MILRT_ISA", saved_->c_str(), 1);
    else unsetenv("MILRT_ISA");
    try {
      k::reload_isa();
    } catch (const milrt::Error&) {
      // A bad MILRT_ISA from outside the test stays an error for the next caller.
    }
  }

 private:
  std::optional<std::string> saved_;
};

// ---- tests -------------------------------------------------------------------------

TEST(CpuFeatures, PathsAreConsistent) {
  const k::CpuFeatures& f = k::cpu_features();
  const std::vector<Isa> isas = k::usable_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::generic);
  EXPECT_EQ(isas.back(), k::best_isa());
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::amx}) {
    EXPECT_EQ(k::isa_from_name(k::isa_name(isa)), isa);
    EXPECT_EQ(std::find(isas.begin(), isas.end(), isa) != isas.end(), k::isa_usable(isa));
  }
  EXPECT_FALSE(k::isa_from_name("sse2"));
  EXPECT_TRUE(!k::isa_usable(Isa::avx2) || (f.avx2 && f.fma && f.f16c && f.os_avx));
  EXPECT_TRUE(!k::isa_usable(Isa::avx512) || (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.os_avx512));
  EXPECT_TRUE(!k::isa_usable(Isa::amx) || (f.amx_tile && f.amx_bf16 && f.os_amx && f.amx_permitted));
  // Tile permission is only asked for on a CPU whose OS enables tiles.
  EXPECT_TRUE(f.os_amx || !f.amx_permitted);
  EXPECT_TRUE(!(f.avx512_bf16 || f.avx512_vnni || f.avx512_fp16) || f.avx512f);
  RecordProperty("cpu_features", k::cpu_features_string());
  RecordProperty("best_isa", std::string(k::isa_name(k::best_isa())));
}

TEST(CpuFeatures, MilrtIsaForcesAUsablePath) {
  IsaEnvGuard guard;
  for (Isa isa : k::usable_isas()) {
    setenv("MILRT_ISA", std::string(k::isa_name(isa)).c_str(), 1);
    EXPECT_EQ(k::reload_isa(), isa);
    EXPECT_EQ(k::current_isa(), isa);
    // The default path of a packing is the forced one.
    const float one = 1;
    EXPECT_EQ(k::PackedB(k::MatrixRef{&one, ElemType::f32, 1}, 1, 1).isa(), isa);
  }
  unsetenv("MILRT_ISA");
  EXPECT_EQ(k::reload_isa(), k::best_isa());
  setenv("MILRT_ISA", "", 1);
  EXPECT_EQ(k::reload_isa(), k::best_isa());
}

TEST(CpuFeatures, MilrtIsaRejectsUnknownAndUnavailablePaths) {
  IsaEnvGuard guard;
  auto expect_error = [](const char* value, const char* fragment) {
    setenv("MILRT_ISA", value, 1);
    try {
      k::reload_isa();
      ADD_FAILURE() << "MILRT_ISA=" << value << " was accepted";
    } catch (const milrt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    // Still an error on the next query: a bad value is never replaced by a stale path.
    EXPECT_THROW(k::current_isa(), milrt::Error);
  };
  expect_error("avx1024", "unknown kernel path");
  expect_error("AVX2", "unknown kernel path");
  for (Isa isa : {Isa::avx2, Isa::avx512, Isa::amx})
    if (!k::isa_usable(isa)) expect_error(std::string(k::isa_name(isa)).c_str(), "cannot run");
}

TEST(Gemm, Fp32MatchesFp64OnEveryPath) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) check_products(s, ElemType::f32, ElemType::f32, GemmMath::fp32, seed += 2);
}

TEST(Gemm, Bf16InputsMatchFp64OnBf16Values) {
  struct Combo {
    ElemType a, b;
    GemmMath math;
  };
  const Combo combos[] = {
      {ElemType::bf16, ElemType::bf16, GemmMath::bf16}, {ElemType::f32, ElemType::bf16, GemmMath::bf16},
      {ElemType::bf16, ElemType::f32, GemmMath::bf16},  {ElemType::f32, ElemType::f32, GemmMath::bf16},
      {ElemType::bf16, ElemType::bf16, GemmMath::fp32}, {ElemType::f32, ElemType::bf16, GemmMath::fp32},
  };
  const Shape shapes[] = {{1, 15, 17}, {17, 33, 15}, {15, 1, 1}, {33, 100, 1}, {100, 33, 257},
                          {20, 40, 1031}, {64, 1100, 17}, {257, 64, 100}};
  uint32_t seed = 1000;
  for (const Combo& c : combos)
    for (const Shape& s : shapes) check_products(s, c.a, c.b, c.math, seed += 2);
}

// Every epilogue against its unfused composition, for every output and residual type.
TEST(Gemm, FusedEpilogueMatchesUnfusedComposition) {
  const Shape shapes[] = {{17, 33, 40}, {15, 100, 300}};  // edge tiles; K split over blocks
  const std::optional<ElemType> residual_types[] = {std::nullopt, ElemType::f32, ElemType::f16, ElemType::bf16};
  uint32_t seed = 5000;
  for (Isa isa : k::usable_isas())
    for (GemmMath math : {GemmMath::fp32, GemmMath::bf16})
      for (const Shape& s : shapes) {
        const ElemType in_type = math == GemmMath::bf16 ? ElemType::bf16 : ElemType::f32;
        const Logical a = random_logical(s.M, s.K, seed++, in_type), b = random_logical(s.K, s.N, seed++, in_type);
        const Reference r = reference_gemm(a, b);
        const Stored sa(a, in_type, false, 1), sb(b, in_type, true, 2);
        std::vector<float> bias(size_t(s.N));
        std::mt19937 rng(seed++);
        for (float& x : bias) x = std::uniform_real_distribution<float>(-2, 2)(rng);
        const double alpha = 1.5;
        for (Activation act : kActs)
          for (bool with_bias : {false, true})
            for (const auto& rtype : residual_types)
              for (ElemType out_type : {ElemType::f32, ElemType::f16, ElemType::bf16}) {
                SCOPED_TRACE(std::string(k::isa_name(isa)) + " " + describe(s) + " act=" + act_name(act) +
                             (with_bias ? " bias" : "") + " residual=" + (rtype ? type_name(*rtype) : "none") +
                             " out=" + type_name(out_type) + (math == GemmMath::bf16 ? " math:bf16" : ""));
                std::optional<Buffer> res;
                const Logical rv = random_logical(s.M, s.N, seed++, rtype.value_or(ElemType::f32));
                if (rtype) {
                  res.emplace(s.M, s.N, *rtype, 3);
                  for (int64_t i = 0; i < s.M; ++i)
                    for (int64_t j = 0; j < s.N; ++j) res->set(i, j, rv.at(i, j));
                }
                // The unfused composition, in fp64.
                std::vector<double> want(r.c.size()), tol(r.c.size());
                for (int64_t i = 0; i < s.M; ++i)
                  for (int64_t j = 0; j < s.N; ++j) {
                    const size_t idx = size_t(i * s.N + j);
                    const double bj = with_bias ? bias[j] : 0;
                    const double t = alpha * r.c[idx] + bj;
                    const double f = act_ref(act, t);
                    const double res_v = rtype ? rv.at(i, j) : 0;
                    want[idx] = f + res_v;
                    const double t_err = gemm_error_bound(r, idx, s.K, alpha) + 2 * kU32 * (std::abs(t) + std::abs(bj));
                    tol[idx] = act_slope(act) * t_err + act_eval_error(act, t) +
                               (kU32 + unit_roundoff(out_type)) * (std::abs(f) + std::abs(res_v)) + 1e-7;
                  }
                Buffer c(s.M, s.N, out_type, 2);
                const k::Epilogue ep{.alpha = float(alpha),
                                     .bias = with_bias ? bias.data() : nullptr,
                                     .act = act,
                                     .residual = res ? res->data() : nullptr,
                                     .residual_type = rtype.value_or(ElemType::f32),
                                     .residual_ld = res ? res->ld() : 0};
                k::gemm(s.M, s.N, s.K, sa.ref(), sb.ref(), c.out(), ep, math, isa);
                expect_near_all(c, s.M, s.N, want, tol);
              }
      }
}

// Activations over a wide range of exact inputs (C = x·1 with K = 1), across
// full and edge tiles: checks the vector exp and the saturation ends.
TEST(Gemm, ActivationsOverTheirRange) {
  std::vector<double> xs = {0, 1e-30, -1e-30, 1e-3, -1e-3, 0.5, -0.5, 3, -3, 10, -10, 20, -20, 30, -30,
                            80, -80, 87.5, -87.5, 88.5, -88.5, 90, -90, 100, -100, 1e4, -1e4, 3e7, -3e7};
  for (int i = -200; i <= 200; ++i) xs.push_back(i * 0.0731);
  const int64_t M = int64_t(xs.size()), N = 40, K = 1;
  Logical a{M, 1, std::vector<double>(size_t(M))};
  for (int64_t i = 0; i < M; ++i) a.v[i] = float(xs[i]);
  const Logical b{1, N, std::vector<double>(size_t(N), 1.0)};
  const Stored sa(a, ElemType::f32, false, 0), sb(b, ElemType::f32, false, 0);
  for (Isa isa : k::usable_isas())
    for (Activation act : kActs) {
      SCOPED_TRACE(std::string(k::isa_name(isa)) + " act=" + act_name(act));
      std::vector<double> want(size_t(M * N)), tol(size_t(M * N));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          want[i * N + j] = act_ref(act, a.v[i]);
          tol[i * N + j] = act_eval_error(act, a.v[i]) + kU32 * std::abs(want[i * N + j]);
        }
      Buffer c(M, N, ElemType::f32, 0);
      k::gemm(M, N, K, sa.ref(), sb.ref(), c.out(), k::Epilogue{.act = act}, GemmMath::fp32, isa);
      expect_near_all(c, M, N, want, tol);
    }
}

// Output conversion is bit-exact nearest-even, as milrt::f32_to_f16/bf16:
// halfway cases, fp16 subnormals, overflow, infinities and NaN. Residual
// loads widen exactly.
TEST(Gemm, OutputAndResidualConversionsAreExact) {
  std::vector<float> xs = {1.0f, -2.5f, 65504.0f, 65520.0f, 70000.0f, -1e9f, 1e-8f, 6e-8f, 3e-5f, -4e-7f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 1e-40f, 3.0e38f};
  // Exact ties between neighbours: 1 + 2^-11 (fp16), 1 + 2^-8 and 1 + 3·2^-8 (bf16), and nearby.
  for (float base : {1.0f, 1.5f, 1024.0f, 0.0078125f})
    for (int sh : {8, 9, 11, 12})
      for (float m : {1.0f, 3.0f, -1.0f}) xs.push_back(base * (1 + m * std::ldexp(1.0f, -sh)));
  std::mt19937 rng(7);
  for (int i = 0; i < 64; ++i) xs.push_back(std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), i % 40 - 28));
  const int64_t M = int64_t(xs.size()), N = 48;
  Logical a{M, 1, std::vector<double>(size_t(M))};
  for (int64_t i = 0; i < M; ++i) a.v[i] = xs[i];
  const Logical b{1, N, std::vector<double>(size_t(N), 1.0)};
  const Stored sa(a, ElemType::f32, false, 0), sb(b, ElemType::f32, false, 0);
  for (Isa isa : k::usable_isas())
    for (ElemType t : {ElemType::f16, ElemType::bf16}) {
      SCOPED_TRACE(std::string(k::isa_name(isa)) + " out=" + type_name(t));
      Buffer c(M, N, t, 1);
      k::gemm(M, N, 1, sa.ref(), sb.ref(), c.out(), {}, GemmMath::fp32, isa);
      int bad = 0;
      for (int64_t i = 0; i < M; ++i) {
        const uint16_t want = t == ElemType::f16 ? milrt::f32_to_f16(xs[i]) : milrt::f32_to_bf16(xs[i]);
        for (int64_t j = 0; j < N; ++j)
          if (c.bits16(i, j) != want && ++bad <= 3)
            ADD_FAILURE() << xs[i] << " -> 0x" << std::hex << c.bits16(i, j) << ", want 0x" << want;
      }
      EXPECT_TRUE(c.padding_intact());

      // C = 0·B + residual: the residual's value, widened exactly to fp32.
      Buffer res(M, N, t, 2);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) res.set(i, j, xs[i]);
      const Logical zero{M, 1, std::vector<double>(size_t(M), 0.0)};
      const Stored sz(zero, ElemType::f32, false, 0);
      Buffer c32(M, N, ElemType::f32, 0);
      k::gemm(M, N, 1, sz.ref(), sb.ref(), c32.out(),
              k::Epilogue{.residual = res.data(), .residual_type = t, .residual_ld = res.ld()}, GemmMath::fp32, isa);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          const double w = res.get(i, j), g = c32.get(i, j);
          if (!(g == w || (std::isnan(g) && std::isnan(w))) && ++bad <= 3)
            ADD_FAILURE() << "residual " << w << " came back as " << g;
        }
      EXPECT_EQ(bad, 0);
    }
}

TEST(Gemm, PackedBIsReusableAndKeepsItsPath) {
  const int64_t K = 70, N = 45;
  const Logical b = random_logical(K, N, 42, ElemType::bf16);
  const Stored sb(b, ElemType::bf16, true, 4);
  for (Isa isa : k::usable_isas())
    for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
      k::PackedB pb(sb.ref(), K, N, math, isa);
      EXPECT_EQ(pb.k(), K);
      EXPECT_EQ(pb.n(), N);
      EXPECT_EQ(pb.isa(), isa);
      EXPECT_EQ(pb.math(), math);
      EXPECT_GE(pb.bytes(), size_t(K * N * 2));
      const k::PackedB moved = std::move(pb);
      for (int64_t M : {1, 15, 257, 3}) {
        SCOPED_TRACE(std::string(k::isa_name(isa)) + " M=" + std::to_string(M));
        const Logical a = random_logical(M, K, uint32_t(M), ElemType::bf16);
        const Stored sa(a, ElemType::f32, false, 1);
        const Reference r = reference_gemm(a, b);
        std::vector<double> tol(r.c.size());
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = gemm_error_bound(r, i, K, 1) + kU32 * std::abs(r.c[i]);
        Buffer c(M, N, ElemType::f32, 1);
        k::gemm(M, sa.ref(), moved, c.out());
        expect_near_all(c, M, N, r.c, tol);
      }
    }
}

// A whose rows lie 4 KiB apart (ld = 1024 fp32, 2048 bf16) is copied to a
// padded layout before the kernels read it; the result must not change.
TEST(Gemm, RowsFourKibApartGiveTheSameResult) {
  for (ElemType ta : {ElemType::f32, ElemType::bf16}) {
    const int64_t ld = ta == ElemType::f32 ? 1024 : 2048;
    const Shape s{30, 40, ld - 24};
    const Logical a = random_logical(s.M, s.K, 11, ta), b = random_logical(s.K, s.N, 12, ElemType::bf16);
    const Stored sa(a, ta, false, ld - s.K), sb(b, ElemType::bf16, false, 0);
    for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
      const Reference r = reference_gemm(math == GemmMath::bf16 ? rounded(a, ElemType::bf16) : a, b);
      std::vector<double> tol(r.c.size());
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = gemm_error_bound(r, i, s.K, 1) + kU32 * std::abs(r.c[i]);
      for (Isa isa : k::usable_isas()) {
        SCOPED_TRACE(std::string(k::isa_name(isa)) + " A:" + type_name(ta) +
                     (math == GemmMath::bf16 ? " math:bf16" : " math:fp32"));
        Buffer c(s.M, s.N, ElemType::f32, 0);
        k::gemm(s.M, s.N, s.K, sa.ref(), sb.ref(), c.out(), {}, math, isa);
        expect_near_all(c, s.M, s.N, r.c, tol);
      }
    }
  }
}

// residual = C itself: C += A·B in place.
TEST(Gemm, ResidualMayBeTheOutput) {
  const Shape s{19, 70, 33};
  const Logical a = random_logical(s.M, s.K, 1), b = random_logical(s.K, s.N, 2), c0 = random_logical(s.M, s.N, 3);
  const Reference r = reference_gemm(a, b);
  const Stored sa(a, ElemType::f32, false, 0), sb(b, ElemType::f32, false, 0);
  for (Isa isa : k::usable_isas()) {
    SCOPED_TRACE(std::string(k::isa_name(isa)));
    Buffer c(s.M, s.N, ElemType::f32, 3);
    std::vector<double> want(r.c.size()), tol(r.c.size());
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        c.set(i, j, c0.at(i, j));
        const size_t idx = size_t(i * s.N + j);
        want[idx] = r.c[idx] + c0.at(i, j);
        tol[idx] = gemm_error_bound(r, idx, s.K, 1) + 2 * kU32 * (std::abs(want[idx]) + std::abs(c0.at(i, j)));
      }
    k::gemm(s.M, s.N, s.K, sa.ref(), sb.ref(), c.out(),
            k::Epilogue{.residual = c.data(), .residual_type = ElemType::f32, .residual_ld = c.ld()},
            GemmMath::fp32, isa);
    expect_near_all(c, s.M, s.N, want, tol);
  }
}

TEST(Gemm, EmptyDimensions) {
  const std::vector<float> bias = {0.5f, -1.0f, 2.0f};
  for (Isa isa : k::usable_isas())
    for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
      SCOPED_TRACE(std::string(k::isa_name(isa)));
      // K = 0: C = act(bias) + residual.
      Buffer c(2, 3, ElemType::f32, 1), res(2, 3, ElemType::f32, 0);
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) res.set(i, j, double(i));
      k::gemm(2, 3, 0, k::MatrixRef{nullptr, ElemType::f32, 0}, k::MatrixRef{nullptr, ElemType::f32, 3}, c.out(),
              k::Epilogue{.bias = bias.data(), .act = Activation::relu, .residual = res.data(), .residual_ld = 3},
              math, isa);
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(c.get(i, j), std::max(0.0f, bias[j]) + double(i));
      EXPECT_TRUE(c.padding_intact());
      // M = 0 or N = 0: nothing is read or written.
      const std::vector<float> b(12, 1.0f);
      k::gemm(0, 3, 4, k::MatrixRef{nullptr, ElemType::f32, 4}, k::MatrixRef{b.data(), ElemType::f32, 3},
              k::OutputRef{nullptr, ElemType::f32, 3}, {}, math, isa);
      k::gemm(2, 0, 4, k::MatrixRef{b.data(), ElemType::f32, 4}, k::MatrixRef{nullptr, ElemType::f32, 0},
              k::OutputRef{nullptr, ElemType::f32, 0}, {}, math, isa);
      k::PackedB empty(k::MatrixRef{nullptr, ElemType::bf16, 0}, 5, 0, math, isa);
      k::gemm(2, k::MatrixRef{b.data(), ElemType::f32, 5}, empty, k::OutputRef{nullptr, ElemType::f32, 0});
    }
}

TEST(Gemm, BadArgumentsAreErrors) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint16_t> h(64, 0x3c00);
  const k::MatrixRef a{x.data(), ElemType::f32, 4}, b{x.data(), ElemType::f32, 4};
  const k::OutputRef c{x.data(), ElemType::f32, 4};
  auto expect_error = [](auto&& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error for: " << fragment;
    } catch (const milrt::Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("gemm: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    }
  };
  expect_error([&] { k::gemm(4, 4, 4, k::MatrixRef{h.data(), ElemType::f16, 4}, b, c); }, "A is fp16");
  expect_error([&] { k::gemm(4, 4, 4, a, k::MatrixRef{h.data(), ElemType::f16, 4}, c); }, "B is fp16");
  expect_error([&] { k::gemm(4, 4, 5, a, b, c); }, "A has ld 4 < its stored row length 5");
  expect_error([&] { k::gemm(5, 4, 4, k::MatrixRef{x.data(), ElemType::f32, 4, true}, b, c); },
               "A has ld 4 < its stored row length 5");
  expect_error([&] { k::gemm(4, 5, 4, a, b, k::OutputRef{x.data(), ElemType::f32, 5}); }, "B has ld 4");
  expect_error([&] { k::gemm(4, 4, 4, a, b, k::OutputRef{x.data(), ElemType::f32, 3}); }, "C has ld 3 < N = 4");
  expect_error([&] { k::gemm(-1, 4, 4, a, b, c); }, "negative size");
  expect_error([&] { k::gemm(4, 4, 4, k::MatrixRef{nullptr, ElemType::f32, 4}, b, c); }, "A is null");
  expect_error([&] { k::gemm(4, 4, 4, a, b, c, k::Epilogue{.residual = x.data(), .residual_ld = 2}); },
               "the residual has ld 2");
  expect_error([&] { k::PackedB(k::MatrixRef{x.data(), ElemType::f32, 3}, 4, 4); }, "B has ld 3");
  for (Isa isa : {Isa::avx2, Isa::avx512, Isa::amx})
    if (!k::isa_usable(isa)) {
      expect_error([&] { k::gemm(4, 4, 4, a, b, c, {}, GemmMath::fp32, isa); }, "cannot run on this CPU");
      expect_error([&] { k::PackedB(b, 4, 4, GemmMath::fp32, isa); }, "cannot run on this CPU");
    }
}

// ---- threads ------------------------------------------------------------------

// Restores the default thread count when a test ends.
// Threads take whole blocks of C, so the result is the same bits for any
// count; sizes large enough to be split (and awkward: partial register tiles,
// several K blocks, M = 1), with every epilogue stage, each path and math.
TEST(GemmThreads, AnyThreadCountGivesIdenticalBits) {
  const Shape shapes[] = {{300, 700, 600}, {1, 2000, 700}, {257, 1100, 33}, {100, 257, 1031}, {29, 3000, 65}};
  for (const Shape& s : shapes) {
    const Logical a = random_logical(s.M, s.K, 11), b = random_logical(s.K, s.N, 12), res = random_logical(s.M, s.N, 13);
    std::vector<float> bias(size_t(s.N)), resf(res.v.begin(), res.v.end());
    for (int64_t j = 0; j < s.N; ++j) bias[size_t(j)] = float(0.01 * double(j % 17) - 0.08);
    const Stored sa(a, ElemType::f32, false, 1), sb(b, ElemType::f32, true, 2);
    const k::Epilogue ep{.alpha = 0.75f, .bias = bias.data(), .act = Activation::gelu_tanh, .residual = resf.data(),
                         .residual_ld = s.N};
    const Reference ref32 = reference_gemm(a, b);
    const Reference ref16 = reference_gemm(rounded(a, ElemType::bf16), rounded(b, ElemType::bf16));
    for (Isa isa : k::usable_isas())
      for (GemmMath math : {GemmMath::fp32, GemmMath::bf16})
        for (bool prepacked : {false, true}) {
          SCOPED_TRACE(std::string(k::isa_name(isa)) + " " + describe(s) + (math == GemmMath::bf16 ? " bf16" : " fp32") +
                       (prepacked ? " packed" : ""));
          std::vector<Buffer> outs;
          for (int threads : {1, 2, 3}) {
            ThreadCount tc(threads);
            ASSERT_EQ(k::num_threads(), threads);
            Buffer c(s.M, s.N, ElemType::f32, 1);
            if (prepacked) k::gemm(s.M, sa.ref(), k::PackedB(sb.ref(), s.K, s.N, math, isa), c.out(), ep);
            else k::gemm(s.M, s.N, s.K, sa.ref(), sb.ref(), c.out(), ep, math, isa);
            outs.push_back(std::move(c));
          }
          // The single-threaded result is right (checked to the fp64 bound on a sample) ...
          const Reference& r = math == GemmMath::bf16 ? ref16 : ref32;
          for (int64_t i = 0; i < s.M; i += 7)
            for (int64_t j = 0; j < s.N; j += 5) {
              const size_t idx = size_t(i * s.N + j);
              const double want = act_ref(Activation::gelu_tanh, 0.75 * r.c[idx] + bias[size_t(j)]) + resf[idx];
              const double tol = 1.2 * gemm_error_bound(r, idx, s.K, 0.75) + 1e-5 * (1 + std::abs(want));
              ASSERT_NEAR(outs[0].get(i, j), want, tol) << "C(" << i << ", " << j << ")";
            }
          // ... and every thread count gives its bits.
          for (size_t t = 1; t < outs.size(); ++t)
            EXPECT_EQ(std::memcmp(outs[0].data(), outs[t].data(), size_t(s.M * outs[0].ld()) * 4), 0)
                << (t + 1) << " threads differ from 1";
        }
  }
}

// A training step's weight gradient: dW[M, N] += dYᵀ·X, i.e. A = dY stored
// [K, M] and read transposed, B = X [K, N] packed per call, the residual C
// itself, bf16 math (the AVX-512 bf16 path packs such an A into row panels).
// Checked against fp64 sums of the bf16-rounded operands written out here,
// and bit for bit across thread counts. Edges: partial register tiles in M
// and N, odd K (a half-empty last pair), rows of C 4 KiB apart (N = 1024).
TEST(GemmThreads, WeightGradientAccumulatesInPlace) {
  const Shape shapes[] = {{70, 50, 36}, {70, 50, 256}, {29, 33, 7}, {300, 200, 256}, {43, 1024, 255}, {768, 97, 256}};
  for (const Shape& s : shapes)
    for (ElemType ta : {ElemType::f32, ElemType::bf16}) {
      const Logical dy = random_logical(s.K, s.M, 21, ta), x = random_logical(s.K, s.N, 22),
                    c0 = random_logical(s.M, s.N, 23);
      const Stored sa(dy, ta, /*trans: stored [K, M] as dY is*/ false, 3), sb(x, ElemType::f32, false, 2);
      const k::MatrixRef a_ref{sa.data(), ta, sa.ref().ld, /*trans=*/true};
      // The plain reference: C0 + Σ_k bf16(dY[k][i])·bf16(X[k][j]) in fp64.
      std::vector<double> want(size_t(s.M * s.N)), tol(want.size());
      for (int64_t i = 0; i < s.M; ++i)
        for (int64_t j = 0; j < s.N; ++j) {
          double sum = 0, mag = 0;
          for (int64_t kk = 0; kk < s.K; ++kk) {
            const double p = round_to(ElemType::bf16, dy.at(kk, i)) * round_to(ElemType::bf16, x.at(kk, j));
            sum += p;
            mag += std::abs(p);
          }
          const size_t idx = size_t(i * s.N + j);
          want[idx] = c0.at(i, j) + sum;
          tol[idx] = double(s.K + 2) * kU32 * mag + 2 * kU32 * (std::abs(want[idx]) + std::abs(c0.at(i, j)));
        }
      for (Isa isa : k::usable_isas()) {
        SCOPED_TRACE(std::string(k::isa_name(isa)) + " " + describe(s) + " dY:" + type_name(ta));
        std::vector<Buffer> outs;
        for (int threads : {1, 2, 3}) {
          ThreadCount tc(threads);
          Buffer c(s.M, s.N, ElemType::f32, s.N == 1024 ? 0 : 1);
          for (int64_t i = 0; i < s.M; ++i)
            for (int64_t j = 0; j < s.N; ++j) c.set(i, j, c0.at(i, j));
          k::gemm(s.M, s.N, s.K, a_ref, sb.ref(), c.out(),
                  k::Epilogue{.residual = c.data(), .residual_type = ElemType::f32, .residual_ld = c.ld()},
                  GemmMath::bf16, isa);
          outs.push_back(std::move(c));
        }
        expect_near_all(outs[0], s.M, s.N, want, tol);
        for (size_t t = 1; t < outs.size(); ++t)
          EXPECT_EQ(outs[0].raw(), outs[t].raw()) << (t + 1) << " threads differ from 1";
      }
    }
}

TEST(GemmThreads, EnvironmentSetsTheDefault) {
  // MILRT_THREADS is read once per process; here only its effect is visible.
  const char* env = std::getenv("MILRT_THREADS");
  if (env && std::atoi(env) > 0) EXPECT_EQ(k::num_threads(), std::atoi(env));
  else EXPECT_GE(k::num_threads(), 1);
  k::set_num_threads(5);
  EXPECT_EQ(k::num_threads(), 5);
  k::set_num_threads(0);
  EXPECT_GE(k::num_threads(), 1);
}

}  // namespace
