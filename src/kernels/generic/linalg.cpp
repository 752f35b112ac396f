#include "kernels/generic/linalg.h"

#include <cmath>
#include <limits>
#include <vector>

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

void softmax_f32(const float* x, float* y, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const float* px = x + o * n * inner + in;
      float* py = y + o * n * inner + in;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, px[i * inner]);
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        float e = std::exp(px[i * inner] - mx);
        py[i * inner] = e;
        sum += e;
      }
      float inv = float(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) py[i * inner] *= inv;
    }
}

void reduce_f32(Reduce op, const float* x, float* y, int64_t outer, int64_t n, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const float* p = x + o * n * inner + in;
      double acc;
      switch (op) {
        case Reduce::Max: acc = -INFINITY; for (int64_t i = 0; i < n; ++i) acc = std::fmax(acc, p[i * inner]); break;
        case Reduce::Min: acc = INFINITY; for (int64_t i = 0; i < n; ++i) acc = std::fmin(acc, p[i * inner]); break;
        case Reduce::Prod: acc = 1; for (int64_t i = 0; i < n; ++i) acc *= p[i * inner]; break;
        case Reduce::L1: acc = 0; for (int64_t i = 0; i < n; ++i) acc += std::fabs(p[i * inner]); break;
        case Reduce::L2:
        case Reduce::SumSquare: acc = 0; for (int64_t i = 0; i < n; ++i) acc += double(p[i * inner]) * p[i * inner]; break;
        case Reduce::LogSumExp: {
          double mx = -INFINITY;
          for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, p[i * inner]);
          acc = 0;
          for (int64_t i = 0; i < n; ++i) acc += std::exp(p[i * inner] - mx);
          acc = mx + std::log(acc);
          break;
        }
        default: acc = 0; for (int64_t i = 0; i < n; ++i) acc += p[i * inner]; break;
      }
      if (op == Reduce::Mean) acc /= double(n);
      if (op == Reduce::L2) acc = std::sqrt(acc);
      if (op == Reduce::LogSum) acc = std::log(acc);
      y[o * inner + in] = float(acc);
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
