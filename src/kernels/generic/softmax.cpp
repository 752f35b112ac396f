#include "kernels/generic/vec_math.h"
#include "kernels/generic/multiversion.h"
#include "kernels/generic/softmax.h"

#include <bit>
#include <cmath>
#include <limits>

// Each entry point is compiled for AVX-512, AVX2 and the baseline; the loader
// picks the best the CPU runs (GCC function multiversioning), since the build
// targets no particular x86 generation.

namespace milrt::kernels {
namespace {

constexpr int kLanes = 16;  // partial maxima/sums kept apart so the loops vectorize without reassociation
constexpr float kNegInf = -std::numeric_limits<float>::infinity();


inline float max2(float a, float b) { return b > a ? b : a; }

// One contiguous line: y = softmax(scale·x + mask), mask stride 0 or 1.
void softmax_line(const float* x, float* y, int64_t n, float scale, const float* mask, int64_t mstride) {
  if (!mask) {
    for (int64_t j = 0; j < n; ++j) y[j] = scale * x[j];
  } else if (mstride == 0) {
    float mv = mask[0];
    for (int64_t j = 0; j < n; ++j) y[j] = scale * x[j] + mv;
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = scale * x[j] + mask[j * mstride];
  }
  float m = row_max_f32(y, n);
  float s = exp_shift_sum_f32(y, n, m);
  scale_row_f32(y, n, 1.0f / s);
}

}  // namespace

MILRT_CLONES(float, row_max_f32, (const float* x, int64_t n), (x, n)) {
  float acc[kLanes];
  for (float& a : acc) a = kNegInf;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = max2(acc[l], x[j + l]);
  float m = kNegInf;
  for (; j < n; ++j) m = max2(m, x[j]);
  for (float a : acc) m = max2(m, a);
  return m;
}

MILRT_CLONES(float, exp_shift_sum_f32, (float* x, int64_t n, float m), (x, n, m)) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      float e = exp_poly(x[j + l] - m);
      x[j + l] = e;
      acc[l] += e;
    }
  float s = 0;
  for (; j < n; ++j) s += (x[j] = exp_poly(x[j] - m));
  for (float a : acc) s += a;
  return s;
}

MILRT_CLONES(void, scale_row_f32, (float* x, int64_t n, float s), (x, n, s)) {
  for (int64_t j = 0; j < n; ++j) x[j] *= s;
}

MILRT_CLONES(float, dot_row_f32, (const float* a, const float* b, int64_t n), (a, b, n)) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[j + l] * b[j + l];
  float s = 0;
  for (; j < n; ++j) s += a[j] * b[j];
  for (float x : acc) s += x;
  return s;
}

MILRT_CLONES(void, softmax_grad_row_f32, (const float* p, float* g, int64_t n, float d), (p, g, n, d)) {
  for (int64_t j = 0; j < n; ++j) g[j] = p[j] * (g[j] - d);
}

MILRT_CLONES(void, scaled_masked_softmax_f32,
             (const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float scale, const SoftmaxMask& mask),
             (x, y, outer, n, inner, scale, mask)) {
  if (inner == 1) {
    for (int64_t o = 0; o < outer; ++o)
      softmax_line(x + o * n, y + o * n, n, scale, mask.data ? mask.data + mask.offsets[o] : nullptr, mask.stride);
    return;
  }
  // A strided axis: a block of adjacent positions of the inner dims is
  // normalized at once, so every loop runs over contiguous memory.
  constexpr int64_t kBlock = 64;
  float m[kBlock], s[kBlock];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i0 = 0; i0 < inner; i0 += kBlock) {
      int64_t w = inner - i0 < kBlock ? inner - i0 : kBlock;
      for (int64_t c = 0; c < w; ++c) m[c] = kNegInf, s[c] = 0;
      for (int64_t k = 0; k < n; ++k) {
        const float* px = x + (o * n + k) * inner + i0;
        float* py = y + (o * n + k) * inner + i0;
        if (mask.data) {
          const int64_t* off = mask.offsets + o * inner + i0;
          for (int64_t c = 0; c < w; ++c) py[c] = scale * px[c] + mask.data[off[c] + k * mask.stride];
        } else {
          for (int64_t c = 0; c < w; ++c) py[c] = scale * px[c];
        }
        for (int64_t c = 0; c < w; ++c) m[c] = max2(m[c], py[c]);
      }
      for (int64_t k = 0; k < n; ++k) {
        float* py = y + (o * n + k) * inner + i0;
        for (int64_t c = 0; c < w; ++c) {
          py[c] = exp_poly(py[c] - m[c]);
          s[c] += py[c];
        }
      }
      for (int64_t c = 0; c < w; ++c) s[c] = 1.0f / s[c];
      for (int64_t k = 0; k < n; ++k) {
        float* py = y + (o * n + k) * inner + i0;
        for (int64_t c = 0; c < w; ++c) py[c] *= s[c];
      }
    }
}

}  // namespace milrt::kernels
