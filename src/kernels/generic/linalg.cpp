#include "kernels/generic/linalg.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/generic/lanes.h"
#include "kernels/generic/multiversion.h"
#include "kernels/generic/vec_math.h"
#include "kernels/threads.h"

namespace milrt::kernels {

void matmul_f32(const float* a, const float* b, float* c, int64_t batch, int64_t m, int64_t n, int64_t k,
                bool trans_a, bool trans_b, int64_t a_bs, int64_t b_bs) {
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float* A = a + bi * a_bs;
    const float* B = b + bi * b_bs;
    float* C = c + bi * m * n;
    for (int64_t i = 0; i < m * n; ++i) C[i] = 0;
    // i-p-j order: the inner loop runs along a row of B and of C (vectorizable).
    for (int64_t i = 0; i < m; ++i) {
      float* crow = C + i * n;
      for (int64_t p = 0; p < k; ++p) {
        float av = trans_a ? A[p * m + i] : A[i * k + p];
        if (av == 0) continue;
        if (trans_b) {
          for (int64_t j = 0; j < n; ++j) crow[j] += av * B[j * k + p];
        } else {
          const float* brow = B + p * n;
          for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
        }
      }
    }
  }
}

// Σ exp(p[i] − m) over a contiguous run: a vectorized exp (vec_math.h,
// ~1 ulp) instead of libm's call per element, which made log-sum-exp over a
// language model's logits (256 × 32000) cost 34 ms.
MILRT_CLONES(double, exp_shift_sum_run, (const float* p, int64_t n, float m), (p, n, m)) {
  return lanes::sum(p, n, [m](float v) { return exp_poly(v - m); });
}

namespace {

using lanes::kLanes;
using lanes::kTile;

// The largest (or smallest) value; a NaN anywhere makes the result NaN, as
// in NumPy. Lanes keep a plain compare-select and a NaN flag, both floats.
// The lane loop must stay a loop: GCC 12 at -O3 -fno-trapping-math unrolls it
// into sixteen scalar compare-moves (7.9 ms for the max of a [256, 32000]
// array on one thread, 1.1 ms vectorized).
template <bool Max>
[[gnu::always_inline]] inline float extreme(const float* x, int64_t n) {
  constexpr float start = Max ? -INFINITY : INFINITY;
  float m[kLanes], nan[kLanes];
  for (int j = 0; j < kLanes; ++j) m[j] = start, nan[j] = 0;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
#pragma GCC unroll 1
    for (int j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      m[j] = (Max ? m[j] < v : v < m[j]) ? v : m[j];
      nan[j] = v != v ? 1.0f : nan[j];
    }
  float r = start;
  bool any_nan = false;
  for (int j = 0; j < kLanes; ++j) {
    any_nan |= nan[j] != 0;
    r = (Max ? m[j] > r : m[j] < r) ? m[j] : r;
  }
  for (; i < n; ++i) {
    const float v = x[i];
    any_nan |= v != v;
    r = (Max ? v > r : v < r) ? v : r;
  }
  return any_nan ? NAN : r;
}

// The same per column of an [n, stride] block, columns j < w.
template <bool Max>
void column_extremes(const float* x, int64_t n, int64_t stride, int64_t w, double* out) {
  float m[kTile];
  int nan[kTile] = {};
  for (int64_t j = 0; j < w; ++j) m[j] = Max ? -INFINITY : INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * stride;
    for (int64_t j = 0; j < w; ++j) {
      float v = row[j];
      m[j] = (Max ? v > m[j] : v < m[j]) ? v : m[j];
      nan[j] |= v != v;
    }
  }
  for (int64_t j = 0; j < w; ++j) out[j] = nan[j] ? NAN : m[j];
}

// The extremes of a contiguous run, cloned per ISA: 16 lanes wide on AVX-512
// (the template compiled for the baseline takes four).
MILRT_CLONES(float, max_run, (const float* x, int64_t n), (x, n)) { return extreme<true>(x, n); }
MILRT_CLONES(float, min_run, (const float* x, int64_t n), (x, n)) { return extreme<false>(x, n); }

// The accumulated value of a reduction over one contiguous run of n.
double reduce_run(Reduce op, const float* p, int64_t n) {
  switch (op) {
    case Reduce::Max: return max_run(p, n);
    case Reduce::Min: return min_run(p, n);
    case Reduce::Prod: {  // in fp64: fp32 partial products over- and underflow
      double acc = 1;
      for (int64_t i = 0; i < n; ++i) acc *= p[i];
      return acc;
    }
    case Reduce::L1: return lanes::sum(p, n, [](float v) { return std::fabs(v); });
    case Reduce::L2:
    case Reduce::SumSquare: return lanes::sum(p, n, [](float v) { return v * v; });
    case Reduce::LogSumExp: {
      float mx = max_run(p, n);
      return mx + std::log(exp_shift_sum_run(p, n, mx));
    }
    default: return lanes::sum(p, n, [](float v) { return v; });
  }
}

// The same for w <= kTile columns of an [n, stride] block.
void reduce_columns(Reduce op, const float* p, int64_t n, int64_t stride, int64_t w, double* acc) {
  switch (op) {
    case Reduce::Max: return column_extremes<true>(p, n, stride, w, acc);
    case Reduce::Min: return column_extremes<false>(p, n, stride, w, acc);
    case Reduce::Prod:
      for (int64_t j = 0; j < w; ++j) acc[j] = 1;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < w; ++j) acc[j] *= p[i * stride + j];
      return;
    case Reduce::L1: return lanes::column_sums(p, n, stride, w, acc, [](float v, int64_t) { return std::fabs(v); });
    case Reduce::L2:
    case Reduce::SumSquare: return lanes::column_sums(p, n, stride, w, acc, [](float v, int64_t) { return v * v; });
    case Reduce::LogSumExp: {
      double mx[kTile];
      column_extremes<true>(p, n, stride, w, mx);
      float m[kTile];
      for (int64_t j = 0; j < w; ++j) m[j] = float(mx[j]);
      lanes::column_sums(p, n, stride, w, acc, [&m](float v, int64_t j) { return exp_poly(v - m[j]); });
      for (int64_t j = 0; j < w; ++j) acc[j] = mx[j] + std::log(acc[j]);
      return;
    }
    default: return lanes::column_sums(p, n, stride, w, acc, [](float v, int64_t) { return v; });
  }
}

float finish(Reduce op, double acc, int64_t n) {
  if (op == Reduce::Mean) acc /= double(n);
  if (op == Reduce::L2) acc = std::sqrt(acc);
  if (op == Reduce::LogSum) acc = std::log(acc);
  return float(acc);
}

}  // namespace

void reduce_f32(Reduce op, const float* x, float* y, int64_t outer, int64_t n, int64_t inner) {
  // Lines are independent: large reductions run on the threads.
  const int threads = pass_threads(outer * n * inner, outer);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * n * inner;
    if (inner == 1) {
      y[o] = finish(op, reduce_run(op, xo, n), n);
      continue;
    }
    for (int64_t t = 0; t < inner; t += kTile) {
      int64_t w = std::min(kTile, inner - t);
      double acc[kTile];
      reduce_columns(op, xo + t, n, inner, w, acc);
      for (int64_t j = 0; j < w; ++j) y[o * inner + t + j] = finish(op, acc[j], n);
    }
  }
}

void arg_reduce_f32(bool max, const float* x, int32_t* y, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const float* p = x + o * n * inner + in;
      int64_t best = 0;
      for (int64_t i = 1; i < n; ++i) {
        float v = p[i * inner], b = p[best * inner];
        if (std::isnan(b)) break;  // the first NaN wins, as in NumPy
        if (std::isnan(v) || (max ? v > b : v < b)) best = i;
      }
      y[o * inner + in] = int32_t(best);
    }
}

}  // namespace milrt::kernels
