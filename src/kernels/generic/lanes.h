// Sums for the reduction and normalization kernels, written so the compiler
// vectorizes them without reassociating anything: independent fp32 lanes
// (a contiguous run) or one accumulator per column (a strided [n, inner]
// block), each restarted every block of rows and the block sums added in
// fp64. The error then stays that of a short fp32 sum whatever n is.
#pragma once
#include <algorithm>
#include <cstdint>

namespace milrt::kernels::lanes {

constexpr int kLanes = 16;
constexpr int64_t kBlock = 1024;     // contiguous elements per fp32 partial sum (64 per lane)
constexpr int64_t kBlockRows = 256;  // rows per fp32 partial sum of a column
constexpr int64_t kTile = 64;        // columns handled at once

// Σ f(x[i]) over i < n, x contiguous.
template <class F>
inline double sum(const float* x, int64_t n, F f) {
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t e = std::min(n, b + kBlock);
    float acc[kLanes] = {};
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] += f(x[i + j]);
    for (int j = 0; i < e; ++i, ++j) acc[j] += f(x[i]);
    double s = 0;
    for (int j = 0; j < kLanes; ++j) s += acc[j];
    total += s;
  }
  return total;
}

// out[j] = Σ_i f(x[i·stride + j], j) over rows i < n, for columns j < w <= kTile.
template <class F>
inline void column_sums(const float* x, int64_t n, int64_t stride, int64_t w, double* out, F f) {
  for (int64_t j = 0; j < w; ++j) out[j] = 0;
  for (int64_t b = 0; b < n; b += kBlockRows) {
    int64_t e = std::min(n, b + kBlockRows);
    float acc[kTile] = {};
    for (int64_t i = b; i < e; ++i) {
      const float* row = x + i * stride;
      for (int64_t j = 0; j < w; ++j) acc[j] += f(row[j], j);
    }
    for (int64_t j = 0; j < w; ++j) out[j] += acc[j];
  }
}

}  // namespace milrt::kernels::lanes
