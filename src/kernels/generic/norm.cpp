#include "kernels/generic/norm.h"

#include <cmath>

#include "kernels/generic/lanes.h"

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

}  // namespace

void rms_norm_f32(const float* x, const float* gamma, float* y, int64_t outer, int64_t n, int64_t inner, float eps) {
  if (n <= 0) return;
  for (int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * n * inner;
    float* yo = y + o * n * inner;
    if (inner == 1) {
      double ss = lanes::sum(xo, n, [](float v) { return v * v; });
      scale_row(xo, gamma, nullptr, yo, n, 0.0f, float(1.0 / std::sqrt(ss / double(n) + double(eps))));
      continue;
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
}

void layer_norm_f32(const float* x, const float* gamma, const float* beta, float* y, int64_t outer, int64_t n,
                    int64_t inner, float eps) {
  if (n <= 0) return;
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
