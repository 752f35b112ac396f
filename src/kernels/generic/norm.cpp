#include "kernels/generic/norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/convert_rows.h"
#include "kernels/generic/lanes.h"
#include "kernels/generic/multiversion.h"
#include "kernels/grow_buffer.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

using lanes::kTile;

// y[i] = (x[i] - shift) · scale · gamma[i] + beta[i] along a contiguous row.
void scale_row(const float* x, const float* gamma, const float* beta, float* y, int64_t n, float shift, float scale) {
  if (gamma && beta) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - shift) * scale * gamma[i] + beta[i];
  } else if (gamma) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - shift) * scale * gamma[i];
  } else if (beta) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - shift) * scale + beta[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - shift) * scale;
  }
}

// The same over a tile of w columns of an [n, inner] block: row i scaled
// by gamma[i] (one value for the whole row), column j by its own shift/scale.
void scale_tile(const float* x, const float* gamma, const float* beta, float* y, int64_t n, int64_t inner, int64_t w,
                const float* shift, const float* scale) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * inner;
    float* yr = y + i * inner;
    float g = gamma ? gamma[i] : 1.0f, b = beta ? beta[i] : 0.0f;
    for (int64_t j = 0; j < w; ++j) yr[j] = (xr[j] - shift[j]) * scale[j] * g + b;
  }
}

// One row of rms_norm's backward (see norm.h); adds dy · xn to dw_acc.
// Sums run in 16 fp32 lanes per block of lanes::kBlock, blocks added in fp64,
// as lanes::sum does.
MILRT_CLONES(void, rms_backward_row,
             (const float* x, const float* w, const float* dy, float* dx, float* dw_acc, int64_t n, float eps),
             (x, w, dy, dx, dw_acc, n, eps)) {
  double ss = 0, dot = 0;
  for (int64_t b = 0; b < n; b += lanes::kBlock) {
    const int64_t e = std::min(n, b + lanes::kBlock);
    float sq[lanes::kLanes] = {}, pr[lanes::kLanes] = {};
    int64_t i = b;
    for (; i + lanes::kLanes <= e; i += lanes::kLanes)
      for (int j = 0; j < lanes::kLanes; ++j) {
        const float v = x[i + j], d = w ? dy[i + j] * w[i + j] : dy[i + j];
        sq[j] += v * v;
        pr[j] += d * v;
      }
    for (int j = 0; i < e; ++i, ++j) {
      const float v = x[i], d = w ? dy[i] * w[i] : dy[i];
      sq[j] += v * v;
      pr[j] += d * v;
    }
    for (int j = 0; j < lanes::kLanes; ++j) ss += sq[j], dot += pr[j];
  }
  const double r = 1.0 / std::sqrt(ss / double(n) + double(eps));
  // dx = r·d - xn·r·mean(d·xn) = r·d - x·(r³·Σ d·x / n)
  const float rf = float(r), c = float(r * r * r * dot / double(n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], g = dy[i], d = w ? g * w[i] : g;
    if (dw_acc) dw_acc[i] += g * (v * rf);
    dx[i] = rf * d - c * v;
  }
}

}  // namespace

void rms_norm_backward_f32(const float* x, const float* w, const float* dy, float* dx, float* dw, int64_t rows,
                           int64_t n, float eps) {
  if (rows <= 0 || n <= 0) {
    if (dw) std::fill(dw, dw + std::max<int64_t>(n, 0), 0.0f);
    return;
  }
  // dw's partial sums: one row of n per block of kRows rows, whatever the threads.
  constexpr int64_t kRows = 32;
  const int64_t blocks = (rows + kRows - 1) / kRows;
  thread_local GrowBuffer partial_buf;
  float* partial = dw ? partial_buf.get_as<float>(size_t(blocks * n)) : nullptr;
  const int threads = pass_threads(rows * n, blocks);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* acc = partial ? partial + blk * n : nullptr;
    if (acc) std::fill(acc, acc + n, 0.0f);
    for (int64_t r = blk * kRows; r < std::min(rows, (blk + 1) * kRows); ++r)
      rms_backward_row(x + r * n, w, dy + r * n, dx + r * n, acc, n, eps);
  }
  if (!dw) return;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;  // blocks added in fp64: the error stays that of one block's fp32 sum
    for (int64_t blk = 0; blk < blocks; ++blk) s += partial[blk * n + i];
    dw[i] = float(s);
  }
}

namespace {

// One [n, inner] slice of rms_norm_f32.
void rms_slice(const float* xo, const float* gamma, float* yo, int64_t n, int64_t inner, float eps) {
  if (inner == 1) {
    double ss = lanes::sum(xo, n, [](float v) { return v * v; });
    scale_row(xo, gamma, nullptr, yo, n, 0.0f, float(1.0 / std::sqrt(ss / double(n) + double(eps))));
    return;
  }
  for (int64_t t = 0; t < inner; t += kTile) {
    int64_t w = std::min(kTile, inner - t);
    double ss[kTile];
    lanes::column_sums(xo + t, n, inner, w, ss, [](float v, int64_t) { return v * v; });
    float zero[kTile] = {}, scale[kTile];
    for (int64_t j = 0; j < w; ++j) scale[j] = float(1.0 / std::sqrt(ss[j] / double(n) + double(eps)));
    scale_tile(xo + t, gamma, nullptr, yo + t, n, inner, w, zero, scale);
  }
}

}  // namespace

void rms_norm_f32(const float* x, const float* gamma, float* y, int64_t outer, int64_t n, int64_t inner, float eps) {
  if (n <= 0) return;
  // Slices are independent: split them over threads (the same bits for any split).
  const int threads = pass_threads(outer * n * inner, outer);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t o = 0; o < outer; ++o) rms_slice(x + o * n * inner, gamma, y + o * n * inner, n, inner, eps);
}

void rms_norm_f32_to_bf16(const float* x, const float* gamma, uint16_t* y, int64_t outer, int64_t n, int64_t inner,
                          float eps) {
  if (n <= 0) return;
  const int threads = pass_threads(outer * n * inner, outer);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t o = 0; o < outer; ++o) {
    thread_local GrowBuffer slice;  // the fp32 slice, in cache when rounded
    float* tmp = slice.get_as<float>(size_t(n * inner));
    rms_slice(x + o * n * inner, gamma, tmp, n, inner, eps);
    f32_to_bf16_row(tmp, y + o * n * inner, n * inner);
  }
}

void layer_norm_f32(const float* x, const float* gamma, const float* beta, float* y, int64_t outer, int64_t n,
                    int64_t inner, float eps) {
  if (n <= 0) return;
  // Rows are independent: split them over threads (the same bits for any split).
  const int threads = pass_threads(outer * n * inner, outer);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * n * inner;
    float* yo = y + o * n * inner;
    if (inner == 1) {
      float mean = float(lanes::sum(xo, n, [](float v) { return v; }) / double(n));
      double var = lanes::sum(xo, n, [mean](float v) {
                     float d = v - mean;
                     return d * d;
                   }) / double(n);
      scale_row(xo, gamma, beta, yo, n, mean, float(1.0 / std::sqrt(var + double(eps))));
      continue;
    }
    for (int64_t t = 0; t < inner; t += kTile) {
      int64_t w = std::min(kTile, inner - t);
      double s[kTile];
      float mean[kTile], scale[kTile];
      lanes::column_sums(xo + t, n, inner, w, s, [](float v, int64_t) { return v; });
      for (int64_t j = 0; j < w; ++j) mean[j] = float(s[j] / double(n));
      lanes::column_sums(xo + t, n, inner, w, s, [&mean](float v, int64_t j) {
        float d = v - mean[j];
        return d * d;
      });
      for (int64_t j = 0; j < w; ++j) scale[j] = float(1.0 / std::sqrt(s[j] / double(n) + double(eps)));
      scale_tile(xo + t, gamma, beta, yo + t, n, inner, w, mean, scale);
    }
  }
}

}  // namespace milrt::kernels
