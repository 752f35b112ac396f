// The fused attention kernel and the softmax kernel (src/kernels/generic/
// attention.*, softmax.*) against plain fp64 implementations written here.
//
// Tolerance: the kernels compute in fp32 (products accumulated in fp32 by the
// GEMM, exp by a polynomial with relative error < 2e-7); against fp64 that
// leaves errors of a few 1e-6 for values of order 1. The bound used,
// 2e-5 + 1e-4·|want|, is far below what any indexing or masking mistake
// gives (errors of order 0.1).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/generic/attention.h"
#include "kernels/generic/softmax.h"
#include "milrt/error.h"

namespace milrt::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<float> random_vec(size_t n, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = float(u(rng));
  return v;
}

struct Case {
  int64_t tq, tk, d, dv;
  bool causal;
  AttentionMaskKind mask;
  bool row_broadcast = false;  // one mask row for every query
};

// softmax(scale·q·kᵀ + mask [+ causal])·v in fp64; rows that see no key are NaN.
std::vector<double> naive(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, const std::vector<float>& fmask,
                          const std::vector<uint8_t>& bmask, float scale) {
  std::vector<double> o(size_t(c.tq * c.dv));
  for (int64_t i = 0; i < c.tq; ++i) {
    std::vector<double> s(static_cast<size_t>(c.tk));
    double mx = -kInf;
    for (int64_t j = 0; j < c.tk; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < c.d; ++e) dot += double(q[size_t(i * c.d + e)]) * k[size_t(j * c.d + e)];
      double x = double(scale) * dot;
      int64_t mi = (c.row_broadcast ? 0 : i) * c.tk + j;
      if (c.mask == AttentionMaskKind::additive) x += fmask[size_t(mi)];
      if (c.mask == AttentionMaskKind::keep && !bmask[size_t(mi)]) x = -kInf;
      if (c.causal && j > i + (c.tk - c.tq)) x = -kInf;
      s[size_t(j)] = x;
      mx = std::max(mx, x);
    }
    double den = 0;
    for (double& x : s) den += (x = std::exp(x - mx));
    for (int64_t e = 0; e < c.dv; ++e) {
      double acc = 0;
      for (int64_t j = 0; j < c.tk; ++j) acc += s[size_t(j)] * v[size_t(j * c.dv + e)];
      o[size_t(i * c.dv + e)] = acc / den;
    }
  }
  return o;
}

void check_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "Tq=" << c.tq << " Tk=" << c.tk << " D=" << c.d << " Dv=" << c.dv
                                  << " causal=" << c.causal << " mask=" << int(c.mask) << " row_bcast=" << c.row_broadcast);
  std::mt19937_64 rng(seed);
  std::vector<float> q = random_vec(size_t(c.tq * c.d), rng, -2, 2), k = random_vec(size_t(c.tk * c.d), rng, -2, 2),
                     v = random_vec(size_t(c.tk * c.dv), rng);
  int64_t mrows = c.row_broadcast ? 1 : c.tq;
  std::vector<float> fmask = random_vec(size_t(mrows * c.tk), rng, -3, 3);
  std::vector<uint8_t> bmask(size_t(mrows * c.tk));
  for (size_t i = 0; i < bmask.size(); ++i) bmask[i] = (rng() % 4) != 0 || i % size_t(c.tk) == 0;  // every row keeps a key
  // A few -inf entries in the additive mask, never a whole row.
  for (size_t i = 1; i < fmask.size(); i += 7) fmask[i] = -std::numeric_limits<float>::infinity();
  float scale = float(1.0 / std::sqrt(double(c.d)));
  AttentionShape sh{c.tq, c.tk, c.d, c.dv, scale, c.causal};
  AttentionMask m;
  m.kind = c.mask;
  m.data = c.mask == AttentionMaskKind::keep ? static_cast<const void*>(bmask.data()) : fmask.data();
  m.row_stride = c.row_broadcast ? 0 : c.tk;
  m.col_stride = 1;
  std::vector<float> o(size_t(c.tq * c.dv), 123.0f), scratch(attention_scratch_floats(sh));
  attention_f32(q.data(), k.data(), v.data(), o.data(), sh, m, scratch.data());
  std::vector<double> want = naive(c, q, k, v, fmask, bmask, scale);
  double worst = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(o[i])) << "at " << i;
      continue;
    }
    double err = std::fabs(o[i] - want[i]);
    worst = std::max(worst, err);
    ASSERT_LE(err, 2e-5 + 1e-4 * std::fabs(want[i])) << "at " << i << ": got " << o[i] << ", want " << want[i];
  }
  ::testing::Test::RecordProperty("max_abs_error", std::to_string(worst));
}

TEST(AttentionKernel, MatchesNaiveFp64) {
  uint64_t seed = 1;
  for (int64_t tq : {1, 15, 17, 33, 100})
    for (int64_t tk : {tq, tq + 13, int64_t(300)})
      for (int64_t d : {1, 64, 80})
        for (bool causal : {false, true})
          for (AttentionMaskKind mk : {AttentionMaskKind::none, AttentionMaskKind::additive, AttentionMaskKind::keep})
            check_case({tq, tk, d, d == 1 ? 3 : d, causal, mk}, seed++);
}

TEST(AttentionKernel, BroadcastMaskRowsAndOtherValueWidths) {
  check_case({17, 40, 64, 7, false, AttentionMaskKind::additive, true}, 11);
  check_case({100, 129, 16, 130, true, AttentionMaskKind::keep, true}, 12);
  check_case({65, 65, 8, 1, true, AttentionMaskKind::none}, 13);
}

TEST(AttentionKernel, DecodeAgainstALongCache) {
  check_case({1, 4096, 64, 64, true, AttentionMaskKind::none}, 21);
  check_case({4, 2000, 64, 64, true, AttentionMaskKind::additive}, 22);
}

TEST(AttentionKernel, LargeScoresDoNotOverflow) {
  // Scores of order 1e4: exp without the running maximum would overflow.
  Case c{33, 50, 4, 4, false, AttentionMaskKind::none};
  std::mt19937_64 rng(5);
  std::vector<float> q = random_vec(size_t(c.tq * c.d), rng, -100, 100), k = random_vec(size_t(c.tk * c.d), rng, -100, 100),
                     v = random_vec(size_t(c.tk * c.dv), rng);
  AttentionShape sh{c.tq, c.tk, c.d, c.dv, 1.0f, false};
  std::vector<float> o(size_t(c.tq * c.dv)), scratch(attention_scratch_floats(sh));
  attention_f32(q.data(), k.data(), v.data(), o.data(), sh, {}, scratch.data());
  std::vector<double> want = naive(c, q, k, v, {}, {}, 1.0f);
  for (size_t i = 0; i < o.size(); ++i) {
    ASSERT_TRUE(std::isfinite(o[i]));
    // Scores this large amplify fp32 rounding of the dot products (ulp ~1e-3).
    EXPECT_NEAR(o[i], want[i], 2e-2) << i;
  }
}

TEST(AttentionKernel, RowsThatSeeNoKeyAreNaN) {
  // Causal with Tk < Tq: the first Tq - Tk queries see nothing.
  check_case({10, 4, 8, 8, true, AttentionMaskKind::none}, 31);
  // A bool mask row all false.
  std::vector<float> q(6, 0.5f), k(10, 0.25f), v(10, 1.0f), o(6), scratch(attention_scratch_floats({3, 5, 2, 2}));
  std::vector<uint8_t> keep = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0};
  attention_f32(q.data(), k.data(), v.data(), o.data(), {3, 5, 2, 2, 1.0f, false},
                {AttentionMaskKind::keep, keep.data(), 5, 1}, scratch.data());
  EXPECT_FLOAT_EQ(o[0], 1.0f);
  EXPECT_TRUE(std::isnan(o[2]) && std::isnan(o[3]));
  EXPECT_FLOAT_EQ(o[4], 1.0f);
}

TEST(AttentionKernel, VisibleKeySpans) {
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Two query rows of 6 keys: row 0 sees keys 2..3, row 1 key 4; a NaN is open.
  std::vector<float> add = {-inf, -inf, 0, 1, -inf, -inf, -inf, -inf, -inf, -inf, -2, -inf};
  AttentionMask m{AttentionMaskKind::additive, add.data(), 6, 1};
  KeySpan s = attention_visible_keys(m, 0, 2, 6);
  EXPECT_EQ(s.lo, 2);
  EXPECT_EQ(s.hi, 5);
  s = attention_visible_keys(m, 1, 1, 6);
  EXPECT_EQ(s.lo, 4);
  EXPECT_EQ(s.hi, 5);
  s = attention_visible_keys(m, 0, 1, 3);  // kend cuts the row at key 3
  EXPECT_EQ(s.lo, 2);
  EXPECT_EQ(s.hi, 3);
  add[0] = nan;
  EXPECT_EQ(attention_visible_keys(m, 0, 1, 6).lo, 0);
  // A row that sees nothing: an empty span.
  std::vector<uint8_t> keep = {0, 0, 0, 0, 1, 0, 0, 0};
  AttentionMask k{AttentionMaskKind::keep, keep.data(), 4, 1};
  s = attention_visible_keys(k, 0, 1, 4);
  EXPECT_EQ(s.lo, s.hi);
  s = attention_visible_keys(k, 0, 2, 4);
  EXPECT_EQ(s.lo, 0);
  EXPECT_EQ(s.hi, 1);
  // One mask row broadcast over the block; no mask: every key.
  AttentionMask b{AttentionMaskKind::keep, keep.data() + 4, 0, 1};
  s = attention_visible_keys(b, 3, 50, 4);
  EXPECT_EQ(s.lo, 0);
  EXPECT_EQ(s.hi, 1);
  s = attention_visible_keys({}, 0, 4, 7);
  EXPECT_EQ(s.lo, 0);
  EXPECT_EQ(s.hi, 7);
}

// Decoding against a cache whose unfilled rows (and, for a sliding window,
// the rows before it) are masked with -inf: those K and V rows are poisoned
// with NaN here, which any read of them would carry into the output. The
// fp64 reference gets zeros there instead (their probabilities are 0).
TEST(AttentionKernel, MaskedCacheRowsAreNotRead) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937_64 rng(41);
  for (int64_t tq : {1, 4, 70})
    for (int64_t first : {0, 5, 130}) {
      const int64_t tk = 400, d = 64, last = first + tq + 40;  // keys [first, last + i] visible to query i
      SCOPED_TRACE(testing::Message() << "Tq=" << tq << " first=" << first);
      Case c{tq, tk, d, d, false, AttentionMaskKind::additive};
      std::vector<float> q = random_vec(size_t(tq * d), rng, -2, 2), k = random_vec(size_t(tk * d), rng, -2, 2),
                         v = random_vec(size_t(tk * d), rng), mask(size_t(tq * tk), -inf);
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t j = first; j <= last + i; ++j) mask[size_t(i * tk + j)] = 0;
      std::vector<float> kp = k, vp = v;
      for (int64_t j = 0; j < tk; ++j) {
        if (j >= first && j <= last + tq - 1) continue;
        for (int64_t e = 0; e < d; ++e) {
          kp[size_t(j * d + e)] = vp[size_t(j * d + e)] = nan;
          k[size_t(j * d + e)] = v[size_t(j * d + e)] = 0;
        }
      }
      const float scale = 0.125f;
      AttentionShape sh{tq, tk, d, d, scale, false};
      std::vector<float> o(size_t(tq * d)), scratch(attention_scratch_floats(sh));
      attention_f32(q.data(), kp.data(), vp.data(), o.data(), sh, {AttentionMaskKind::additive, mask.data(), tk, 1},
                    scratch.data());
      std::vector<double> want = naive(c, q, k, v, mask, {}, scale);
      for (size_t i = 0; i < o.size(); ++i)
        ASSERT_LE(std::fabs(o[i] - want[i]), 2e-5 + 1e-4 * std::fabs(want[i])) << "at " << i << ": got " << o[i];
    }
}

TEST(AttentionKernel, NegativeSizesAreErrors) {
  float x = 0;
  EXPECT_THROW(attention_f32(&x, &x, &x, &x, {-1, 1, 1, 1}, {}, &x), Error);
}

// ---- softmax ----------------------------------------------------------------

// softmax(scale·x + mask) over the middle dim of [outer, n, inner], mask
// given per element (already broadcast).
std::vector<double> naive_softmax(const std::vector<float>& x, const std::vector<float>* mask, int64_t outer,
                                  int64_t n, int64_t inner, float scale) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return size_t((o * n + k) * inner + i); };
      double mx = -kInf, den = 0;
      for (int64_t k = 0; k < n; ++k) mx = std::max(mx, double(scale) * x[at(k)] + (mask ? (*mask)[at(k)] : 0.0));
      for (int64_t k = 0; k < n; ++k) den += std::exp(double(scale) * x[at(k)] + (mask ? (*mask)[at(k)] : 0.0) - mx);
      for (int64_t k = 0; k < n; ++k)
        y[at(k)] = std::exp(double(scale) * x[at(k)] + (mask ? (*mask)[at(k)] : 0.0) - mx) / den;
    }
  return y;
}

void check_softmax(int64_t outer, int64_t n, int64_t inner, float scale, bool with_mask, double range) {
  SCOPED_TRACE(testing::Message() << "outer=" << outer << " n=" << n << " inner=" << inner << " mask=" << with_mask);
  std::mt19937_64 rng(uint64_t(outer * 1000 + n * 10 + inner));
  std::vector<float> x = random_vec(size_t(outer * n * inner), rng, -range, range);
  // The mask: one value per (o, k), broadcast over the inner positions
  // (offsets repeat), so the kernel's offset table is exercised.
  std::vector<float> m = random_vec(size_t(outer * n), rng, -4, 4), full(x.size());
  std::vector<int64_t> offsets;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) offsets.push_back(o * n);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i) full[size_t((o * n + k) * inner + i)] = m[size_t(o * n + k)];
  std::vector<float> y(x.size(), 7.0f);
  SoftmaxMask mask;
  if (with_mask) mask = {m.data(), offsets.data(), 1};
  scaled_masked_softmax_f32(x.data(), y.data(), outer, n, inner, scale, mask);
  std::vector<double> want = naive_softmax(x, with_mask ? &full : nullptr, outer, n, inner, scale);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_NEAR(y[i], want[i], 1e-6 + 1e-5 * want[i]) << "at " << i << " (x = " << x[i] << ")";
}

TEST(SoftmaxKernel, InnerAxisMatchesFp64) {
  for (int64_t n : {1, 5, 16, 17, 100, 1000}) {
    check_softmax(3, n, 1, 1.0f, false, 3);
    check_softmax(3, n, 1, 0.125f, true, 30);
  }
}

TEST(SoftmaxKernel, StridedAxisMatchesFp64) {
  for (int64_t inner : {2, 7, 64, 65, 130}) {
    check_softmax(2, 9, inner, 1.0f, false, 3);
    check_softmax(2, 9, inner, 0.5f, true, 30);
  }
}

TEST(SoftmaxKernel, HugeInputsAndInfinities) {
  // Differences of 1e4: without the maximum subtracted exp overflows.
  check_softmax(4, 33, 1, 1.0f, false, 1e4);
  check_softmax(2, 33, 5, 1.0f, false, 1e4);
  std::vector<float> x = {0, -INFINITY, 1, -INFINITY}, y(4);
  scaled_masked_softmax_f32(x.data(), y.data(), 1, 4, 1);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[2], std::exp(1.0) / (1 + std::exp(1.0)), 1e-7);
  std::vector<float> dead(3, -INFINITY);
  scaled_masked_softmax_f32(dead.data(), dead.data(), 1, 3, 1);  // in place
  EXPECT_TRUE(std::isnan(dead[0]));
}

TEST(SoftmaxKernel, RowPrimitives) {
  std::vector<float> x = {1, 5, -2, 3, 4, 0, 2, 2, 9, -9, 1, 1, 1, 1, 1, 1, 1, -1};
  EXPECT_EQ(row_max_f32(x.data(), int64_t(x.size())), 9.0f);
  EXPECT_EQ(row_max_f32(x.data(), 3), 5.0f);
  EXPECT_EQ(row_max_f32(x.data(), 0), -INFINITY);
  std::vector<float> e = x;
  float s = exp_shift_sum_f32(e.data(), int64_t(e.size()), 9.0f);
  double want = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double w = std::exp(double(x[i]) - 9.0);
    want += w;
    EXPECT_NEAR(e[i], w, 3e-7 * w) << i;
  }
  EXPECT_NEAR(s, want, 1e-6 * want);
  // exp over the range softmax uses: relative error below 3e-7 down to -87.
  for (double t = -87; t <= 0; t += 0.0137) {
    float v = float(t);
    exp_shift_sum_f32(&v, 1, 0.0f);
    EXPECT_NEAR(v, std::exp(double(float(t))), 3e-7 * std::exp(double(float(t)))) << t;
  }
}

}  // namespace
}  // namespace milrt::kernels
