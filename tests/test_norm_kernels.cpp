// The norm kernels (rms_norm_f32, layer_norm_f32) and the reductions
// (reduce_f32) against plain fp64 loops written here, over [outer, n, inner]
// views of awkward sizes: n = 1, 15, 17, 33, 768 and 3000 (past one fp32
// accumulation block of 1024 elements / 256 rows), inner = 1, 3, 64, 70 (past
// one 64-column tile), outer = 2.
//
// Tolerances (|got - want| <= bound, printed per family as "[norm-kernels]"):
//  - rms_norm: the sum of squares has only positive terms; each fp32 lane or
//    column adds at most 256 terms before its partial sum goes to fp64, so
//    its relative error is below 256 · 2^-24 = 1.5e-5 in the worst case and
//    ~sqrt(256) · 2^-24 = 1e-6 typically; the scale takes half of it, the two
//    products add 2 ulps. Bound: 1e-5 relative to |want| plus 1e-7.
//  - layer_norm: the mean is rounded to fp32 before centering, an error of
//    2^-24 |mean| that normalizing divides by the standard deviation, so
//    the error follows k = max|x| / std of the group. Bound: 2e-6 · (1 + k)
//    relative to max(1, |want|). Inputs with mean 100 and spread 1 (k ~ 170)
//    show that the variance comes from centered values (one pass over
//    E[x²] - mean² would lose all digits there).
//  - sums (sum, mean, l1, sum of squares, l2, log-sum, log-sum-exp):
//    1e-5 relative to the sum of magnitudes, as above. max/min: exact; prod
//    (accumulated in fp64): 1e-6 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/generic/linalg.h"
#include "kernels/generic/norm.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

struct Dims {
  int64_t outer, n, inner;
  int64_t size() const { return outer * n * inner; }
};

std::vector<Dims> awkward_dims() {
  std::vector<Dims> r;
  for (int64_t n : {1, 15, 17, 33, 768, 3000})
    for (int64_t inner : {1, 3, 64, 70}) {
      if (n * inner > 100000) continue;
      r.push_back({2, n, inner});
    }
  return r;
}

std::vector<float> random_floats(int64_t count, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& f : v) f = float(u(rng));
  return v;
}

// Element (o, i, j) of an [outer, n, inner] array.
size_t at(const Dims& d, int64_t o, int64_t i, int64_t j) { return size_t((o * d.n + i) * d.inner + j); }

std::string what(const Dims& d) {
  return "[" + std::to_string(d.outer) + ", " + std::to_string(d.n) + ", " + std::to_string(d.inner) + "]";
}

TEST(NormKernels, RmsNormMatchesFp64) {
  double worst = 0;
  for (const Dims& d : awkward_dims())
    for (bool with_gamma : {true, false}) {
      SCOPED_TRACE(what(d) + (with_gamma ? " gamma" : ""));
      std::vector<float> x = random_floats(d.size(), uint64_t(d.n * 100 + d.inner), -2, 2);
      std::vector<float> gamma = random_floats(d.n, 7, 0.5, 1.5), y(x.size());
      const float eps = 1e-5f;
      rms_norm_f32(x.data(), with_gamma ? gamma.data() : nullptr, y.data(), d.outer, d.n, d.inner, eps);
      for (int64_t o = 0; o < d.outer; ++o)
        for (int64_t j = 0; j < d.inner; ++j) {
          double ss = 0;
          for (int64_t i = 0; i < d.n; ++i) ss += double(x[at(d, o, i, j)]) * x[at(d, o, i, j)];
          double r = 1 / std::sqrt(ss / double(d.n) + double(eps));
          for (int64_t i = 0; i < d.n; ++i) {
            double want = x[at(d, o, i, j)] * r * (with_gamma ? gamma[size_t(i)] : 1.0);
            double diff = std::fabs(y[at(d, o, i, j)] - want);
            ASSERT_LE(diff, 1e-5 * std::fabs(want) + 1e-7) << "o " << o << " i " << i << " j " << j;
            worst = std::max(worst, diff / (std::fabs(want) + 1e-7));
          }
        }
    }
  std::printf("[norm-kernels] rms_norm: max |diff| / (|want| + 1e-7) = %.3g\n", worst);
}

// In place (y == x), as a memory plan may arrange.
TEST(NormKernels, RmsNormInPlace) {
  Dims d{3, 33, 5};
  std::vector<float> x = random_floats(d.size(), 3, -1, 1), y(x.size()), gamma = random_floats(d.n, 4, -1, 1);
  rms_norm_f32(x.data(), gamma.data(), y.data(), d.outer, d.n, d.inner, 1e-6f);
  rms_norm_f32(x.data(), gamma.data(), x.data(), d.outer, d.n, d.inner, 1e-6f);
  EXPECT_EQ(x, y);
  std::vector<float> a = random_floats(d.size(), 5, -1, 1), b(a.size()), c = random_floats(d.n, 6, -1, 1);
  layer_norm_f32(a.data(), c.data(), c.data(), b.data(), d.outer, d.n, d.inner, 1e-6f);
  layer_norm_f32(a.data(), c.data(), c.data(), a.data(), d.outer, d.n, d.inner, 1e-6f);
  EXPECT_EQ(a, b);
}

// rms_norm's backward against the Jacobian written out in fp64:
// ∂y_j/∂x_i = w_j · r · (δ_ij - x_i · x_j · r² / n), dw_j = Σ_rows dy_j · x_j · r.
// dx = r·d - x·c cancels: the bound is relative to the magnitudes of both
// terms (fp32 lane sums of at most 64 terms each, 1e-5 relative), dw's to
// Σ|dy · xn| (blocks of 32 rows in fp32, added in fp64).
TEST(NormKernels, RmsNormBackwardMatchesFp64Jacobian) {
  double worst = 0;
  for (int64_t rows : {1, 5, 70})
    for (int64_t n : {1, 15, 17, 768, 1030}) {
      if (rows * n > 60000) continue;
      SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n));
      std::vector<float> x = random_floats(rows * n, uint64_t(rows * 1000 + n), -2, 2);
      std::vector<float> w = random_floats(n, 11, -1.5, 1.5), dy = random_floats(rows * n, 12, -1, 1);
      std::vector<float> dx(x.size()), dw(static_cast<size_t>(n));
      const float eps = 1e-5f;
      rms_norm_backward_f32(x.data(), w.data(), dy.data(), dx.data(), dw.data(), rows, n, eps);
      std::vector<double> dw_want(static_cast<size_t>(n)), dw_mag(static_cast<size_t>(n));
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * n;
        const float* gr = dy.data() + r * n;
        double ss = 0, dot_mag = 0;
        for (int64_t j = 0; j < n; ++j) ss += double(xr[j]) * xr[j];
        const double rr = 1 / std::sqrt(ss / double(n) + double(eps));
        for (int64_t j = 0; j < n; ++j) dot_mag += std::fabs(double(gr[j]) * w[size_t(j)] * xr[j]);
        for (int64_t i = 0; i < n; ++i) {
          double want = 0;
          for (int64_t j = 0; j < n; ++j)
            want += double(gr[j]) * w[size_t(j)] * rr * ((i == j ? 1.0 : 0.0) - double(xr[i]) * xr[j] * rr * rr / double(n));
          const double mag = rr * std::fabs(double(gr[i]) * w[size_t(i)]) + std::fabs(double(xr[i])) * rr * rr * rr * dot_mag / double(n);
          const double diff = std::fabs(dx[size_t(r * n + i)] - want);
          ASSERT_LE(diff, 1e-5 * mag + 1e-7) << "row " << r << " i " << i;
          worst = std::max(worst, diff / (mag + 1e-7));
          dw_want[size_t(i)] += double(gr[i]) * xr[i] * rr;
          dw_mag[size_t(i)] += std::fabs(double(gr[i]) * xr[i] * rr);
        }
      }
      for (int64_t i = 0; i < n; ++i)
        ASSERT_LE(std::fabs(dw[size_t(i)] - dw_want[size_t(i)]), 1e-5 * dw_mag[size_t(i)] + 1e-7) << "dw " << i;
    }
  std::printf("[norm-kernels] rms_norm backward: max |diff| / magnitude = %.3g\n", worst);
}

// The bits do not depend on the thread count; dx may be dy's memory; dw may be skipped.
TEST(NormKernels, RmsNormBackwardThreadsAliasAndNoDw) {
  const int64_t rows = 300, n = 768;
  std::vector<float> x = random_floats(rows * n, 21, -2, 2), w = random_floats(n, 22, -1, 1);
  std::vector<float> dy = random_floats(rows * n, 23, -1, 1), dx1(x.size()), dx2(x.size()), dw1(static_cast<size_t>(n)), dw2(static_cast<size_t>(n));
  const int before = num_threads();
  set_num_threads(1);
  rms_norm_backward_f32(x.data(), w.data(), dy.data(), dx1.data(), dw1.data(), rows, n, 1e-5f);
  set_num_threads(2);
  rms_norm_backward_f32(x.data(), w.data(), dy.data(), dx2.data(), dw2.data(), rows, n, 1e-5f);
  set_num_threads(before);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dw1, dw2);
  std::vector<float> inplace = dy;
  rms_norm_backward_f32(x.data(), w.data(), inplace.data(), inplace.data(), nullptr, rows, n, 1e-5f);
  EXPECT_EQ(inplace, dx1);
}

// The forward kernels split rows over threads above 2^16 elements: the bits
// must not depend on the split (the fp64 tests above cover the values).
TEST(NormKernels, ForwardRowsSplitOverThreadsGiveTheSameBits) {
  const int64_t rows = 301, n = 768;
  std::vector<float> x = random_floats(rows * n, 31, -2, 2), w = random_floats(n, 32, 0.5, 1.5);
  std::vector<float> b = random_floats(n, 33, -1, 1);
  std::vector<float> rms1(x.size()), rms2(x.size()), ln1(x.size()), ln2(x.size());
  const int before = num_threads();
  set_num_threads(1);
  rms_norm_f32(x.data(), w.data(), rms1.data(), rows, n, 1, 1e-5f);
  layer_norm_f32(x.data(), w.data(), b.data(), ln1.data(), rows, n, 1, 1e-5f);
  set_num_threads(2);
  rms_norm_f32(x.data(), w.data(), rms2.data(), rows, n, 1, 1e-5f);
  layer_norm_f32(x.data(), w.data(), b.data(), ln2.data(), rows, n, 1, 1e-5f);
  set_num_threads(before);
  EXPECT_EQ(rms1, rms2);
  EXPECT_EQ(ln1, ln2);
  // Row 300 (the last, in the second thread's part) against fp64.
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(300 * n + i)]) * x[size_t(300 * n + i)];
  const double r = 1 / std::sqrt(ss / double(n) + 1e-5);
  for (int64_t i = 0; i < n; ++i) {
    const double want = x[size_t(300 * n + i)] * r * w[size_t(i)];
    ASSERT_NEAR(rms2[size_t(300 * n + i)], want, 1e-5 * std::fabs(want) + 1e-7) << i;
  }
}

void check_layer_norm(double center, double spread, double& worst, double& worst_k) {
  for (const Dims& d : awkward_dims())
    for (int affine = 0; affine < 4; ++affine) {
      bool g = affine & 1, b = affine & 2;
      SCOPED_TRACE(what(d) + " center " + std::to_string(center) + " gamma " + std::to_string(g) + " beta " +
                   std::to_string(b));
      std::vector<float> x = random_floats(d.size(), uint64_t(d.n * 31 + d.inner), center - spread, center + spread);
      std::vector<float> gamma = random_floats(d.n, 8, 0.5, 1.5), beta = random_floats(d.n, 9, -1, 1), y(x.size());
      const float eps = 1e-5f;
      layer_norm_f32(x.data(), g ? gamma.data() : nullptr, b ? beta.data() : nullptr, y.data(), d.outer, d.n, d.inner,
                     eps);
      for (int64_t o = 0; o < d.outer; ++o)
        for (int64_t j = 0; j < d.inner; ++j) {
          double mean = 0, var = 0, mx = 0;
          for (int64_t i = 0; i < d.n; ++i) mean += x[at(d, o, i, j)], mx = std::max(mx, std::fabs(double(x[at(d, o, i, j)])));
          mean /= double(d.n);
          for (int64_t i = 0; i < d.n; ++i) var += (x[at(d, o, i, j)] - mean) * (x[at(d, o, i, j)] - mean);
          var /= double(d.n);
          double sd = std::sqrt(var + double(eps)), k = mx / sd;
          for (int64_t i = 0; i < d.n; ++i) {
            double want = (x[at(d, o, i, j)] - mean) / sd * (g ? gamma[size_t(i)] : 1.0) + (b ? beta[size_t(i)] : 0.0);
            double diff = std::fabs(y[at(d, o, i, j)] - want), scale = std::max(1.0, std::fabs(want));
            ASSERT_LE(diff, 2e-6 * (1 + k) * scale) << "o " << o << " i " << i << " j " << j << " k " << k;
            if (diff / ((1 + k) * scale) > worst) worst = diff / ((1 + k) * scale), worst_k = k;
          }
        }
    }
}

TEST(NormKernels, LayerNormMatchesFp64) {
  double worst = 0, k = 0;
  check_layer_norm(0, 1, worst, k);
  std::printf("[norm-kernels] layer_norm around 0: max |diff| / ((1 + k) max(1, |want|)) = %.3g (k %.3g)\n", worst, k);
}

TEST(NormKernels, LayerNormFarFromZeroKeepsItsDigits) {
  double worst = 0, k = 0;
  check_layer_norm(100, 1, worst, k);
  std::printf("[norm-kernels] layer_norm around 100: max |diff| / ((1 + k) max(1, |want|)) = %.3g (k %.3g)\n", worst,
              k);
}

// A group of equal values has variance 0: the result is (x - mean) · rsqrt(eps) = 0, not NaN.
TEST(NormKernels, ConstantGroupsGiveZeroNotNaN) {
  std::vector<float> x(2 * 17 * 3, 0.75f), y(x.size(), -1);
  layer_norm_f32(x.data(), nullptr, nullptr, y.data(), 2, 17, 3, 1e-5f);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  std::vector<float> z(x.size(), 0.0f);
  rms_norm_f32(z.data(), nullptr, y.data(), 2, 17, 3, 1e-5f);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// ---- reductions --------------------------------------------------------------

double reduce_fp64(Reduce op, const std::vector<double>& v) {
  double acc = 0;
  switch (op) {
    case Reduce::Max: acc = -INFINITY; for (double e : v) acc = std::isnan(e) || std::isnan(acc) ? NAN : std::max(acc, e); return acc;
    case Reduce::Min: acc = INFINITY; for (double e : v) acc = std::isnan(e) || std::isnan(acc) ? NAN : std::min(acc, e); return acc;
    case Reduce::Prod: acc = 1; for (double e : v) acc *= e; return acc;
    case Reduce::L1: for (double e : v) acc += std::fabs(e); return acc;
    case Reduce::L2: for (double e : v) acc += e * e; return std::sqrt(acc);
    case Reduce::SumSquare: for (double e : v) acc += e * e; return acc;
    case Reduce::LogSum: for (double e : v) acc += e; return std::log(acc);
    case Reduce::LogSumExp: for (double e : v) acc += std::exp(e); return std::log(acc);
    case Reduce::Mean: for (double e : v) acc += e; return acc / double(v.size());
    case Reduce::Sum: for (double e : v) acc += e; return acc;
  }
  return NAN;
}

// The bound for one result: relative to the sum of magnitudes the kernel adds.
double reduce_bound(Reduce op, const std::vector<double>& v, double want) {
  double mag = 0;
  for (double e : v) mag += op == Reduce::L2 || op == Reduce::SumSquare ? e * e : std::fabs(e);
  switch (op) {
    case Reduce::Max:
    case Reduce::Min: return 0;
    case Reduce::Prod: return 1e-6 * std::fabs(want);
    case Reduce::Mean: return 1e-5 * mag / double(v.size()) + 1e-30;
    case Reduce::L2: return 1e-5 * std::sqrt(mag) + 1e-30;
    case Reduce::LogSum: return 1e-5 + 1e-6 * std::fabs(want);   // d log(s) = ds / s, s > 0 here
    case Reduce::LogSumExp: return 1e-5 + 1e-6 * std::fabs(want);
    default: return 1e-5 * mag + 1e-30;
  }
}

TEST(ReduceKernels, EveryKindMatchesFp64) {
  const std::vector<std::pair<Reduce, const char*>> kinds = {
      {Reduce::Sum, "sum"},   {Reduce::Mean, "mean"}, {Reduce::Max, "max"},       {Reduce::Min, "min"},
      {Reduce::Prod, "prod"}, {Reduce::L1, "l1"},     {Reduce::L2, "l2"},         {Reduce::SumSquare, "sum_square"},
      {Reduce::LogSum, "log_sum"}, {Reduce::LogSumExp, "log_sum_exp"}};
  for (auto [op, name] : kinds) {
    double worst = 0;
    for (const Dims& d : awkward_dims()) {
      SCOPED_TRACE(std::string(name) + " " + what(d));
      // prod near 1 (no over/underflow), log_sum of positives, others signed.
      double lo = op == Reduce::Prod ? 0.9 : op == Reduce::LogSum ? 0.1 : -3;
      double hi = op == Reduce::Prod ? 1.1 : 3;
      std::vector<float> x = random_floats(d.size(), uint64_t(d.n + d.inner * 7), lo, hi);
      std::vector<float> y(size_t(d.outer * d.inner));
      reduce_f32(op, x.data(), y.data(), d.outer, d.n, d.inner);
      for (int64_t o = 0; o < d.outer; ++o)
        for (int64_t j = 0; j < d.inner; ++j) {
          std::vector<double> v;
          for (int64_t i = 0; i < d.n; ++i) v.push_back(x[at(d, o, i, j)]);
          double want = reduce_fp64(op, v), got = y[size_t(o * d.inner + j)];
          double bound = reduce_bound(op, v, want) + std::fabs(want) * 6e-8;  // the final fp32 rounding
          ASSERT_LE(std::fabs(got - want), bound) << "o " << o << " j " << j << ": got " << got << ", want " << want;
          if (bound > 0) worst = std::max(worst, std::fabs(got - want) / bound);
        }
    }
    std::printf("[norm-kernels] reduce %-12s max |diff| / bound = %.3g\n", name, worst);
  }
}

// A language model's log-sum-exp over its logits (rows of 32000, enough
// values that the lines run on several threads) and a column reduction of
// the same size, against fp64.
TEST(ReduceKernels, LogitSizedReductionsMatchFp64) {
  for (const Dims& d : {Dims{24, 32000, 1}, Dims{3, 200, 1500}}) {
    for (Reduce op : {Reduce::LogSumExp, Reduce::Sum, Reduce::Max}) {
      SCOPED_TRACE(what(d) + " op " + std::to_string(int(op)));
      std::vector<float> x = random_floats(d.size(), uint64_t(d.n), -8, 8);
      std::vector<float> y(size_t(d.outer * d.inner), std::numeric_limits<float>::quiet_NaN());
      reduce_f32(op, x.data(), y.data(), d.outer, d.n, d.inner);
      for (int64_t o = 0; o < d.outer; ++o)
        for (int64_t j = 0; j < d.inner; ++j) {
          std::vector<double> v;
          for (int64_t i = 0; i < d.n; ++i) v.push_back(x[at(d, o, i, j)]);
          const double want = reduce_fp64(op, v), got = y[size_t(o * d.inner + j)];
          ASSERT_LE(std::fabs(got - want), reduce_bound(op, v, want) + std::fabs(want) * 6e-8)
              << "o " << o << " j " << j << ": got " << got << ", want " << want;
        }
    }
  }
}

// max/min propagate NaN wherever it lies in the run (lane, tail, column), as
// NumPy and the reference do; infinities are ordinary values.
TEST(ReduceKernels, MaxAndMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t inner : {1, 3, 70})
    for (int64_t pos : {0, 5, 16, 32}) {
      Dims d{1, 33, inner};
      std::vector<float> x = random_floats(d.size(), 1, -1, 1), y(static_cast<size_t>(inner));
      x[at(d, 0, pos, inner - 1)] = nan;
      x[at(d, 0, 3, 0)] = inf;
      x[at(d, 0, 4, 0)] = -inf;
      for (Reduce op : {Reduce::Max, Reduce::Min}) {
        reduce_f32(op, x.data(), y.data(), 1, d.n, inner);
        EXPECT_TRUE(std::isnan(y[size_t(inner - 1)])) << "inner " << inner << " pos " << pos;
        if (inner > 1) {
          EXPECT_EQ(y[0], op == Reduce::Max ? inf : -inf) << "inner " << inner;
        }
      }
    }
}

// The result does not depend on how a long sum is split into blocks beyond
// rounding: a run of 1e6 ones sums to exactly 1e6 (fp32 would stall at 2^24
// in one accumulator only much later, but blocks keep every partial small).
TEST(ReduceKernels, LongSumsStayExactForIntegers) {
  std::vector<float> x(1000000, 1.0f);
  float y = 0;
  reduce_f32(Reduce::Sum, x.data(), &y, 1, int64_t(x.size()), 1);
  EXPECT_EQ(y, 1e6f);
  std::vector<float> col(3 * 100000, 1.0f), ys(3);
  reduce_f32(Reduce::Sum, col.data(), ys.data(), 1, 100000, 3);
  for (float v : ys) EXPECT_EQ(v, 1e5f);
}

}  // namespace
}  // namespace milrt::kernels
