// Pooling: each output row of the innermost spatial dim is computed from the
// clipped window bounds, so the inner loops run over input elements only.
// Upsampling: per-axis source indices and weights, computed once per call.
#include "kernels/generic/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace milrt::kernels {

void pool_f32(const float* x, float* y, const PoolGeometry& g, PoolKind kind, bool exclude_padding) {
  // Pad the geometry to 3 spatial dims (leading dims of size 1).
  int64_t in[3], out[3], k[3], s[3], b[3], a[3];
  const int lead = 3 - g.nsp;
  for (int d = 0; d < 3; ++d) {
    bool real = d >= lead;
    int e = d - lead;
    in[d] = real ? g.in[e] : 1;
    out[d] = real ? g.out[e] : 1;
    k[d] = real ? g.kernel[e] : 1;
    s[d] = real ? g.stride[e] : 1;
    b[d] = real ? g.before[e] : 0;
    a[d] = real ? g.after[e] : 0;
  }
  const int64_t nin = in[0] * in[1] * in[2], nout = out[0] * out[1] * out[2];
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* xp = x + p * nin;
    float* yp = y + p * nout;
    for (int64_t o0 = 0; o0 < out[0]; ++o0) {
      const int64_t s0 = o0 * s[0] - b[0], e0 = s0 + k[0];
      const int64_t lo0 = std::max<int64_t>(s0, 0), hi0 = std::min(e0, in[0]);
      const int64_t pad0 = std::min(e0, in[0] + a[0]) - s0;
      for (int64_t o1 = 0; o1 < out[1]; ++o1) {
        const int64_t s1 = o1 * s[1] - b[1], e1 = s1 + k[1];
        const int64_t lo1 = std::max<int64_t>(s1, 0), hi1 = std::min(e1, in[1]);
        const int64_t pad1 = std::min(e1, in[1] + a[1]) - s1;
        float* yr = yp + (o0 * out[1] + o1) * out[2];
        for (int64_t o2 = 0; o2 < out[2]; ++o2) {
          const int64_t s2 = o2 * s[2] - b[2], e2 = s2 + k[2];
          const int64_t lo2 = std::max<int64_t>(s2, 0), hi2 = std::min(e2, in[2]);
          float acc = kind == PoolKind::Max ? neg_inf : 0.0f;
          for (int64_t i0 = lo0; i0 < hi0; ++i0)
            for (int64_t i1 = lo1; i1 < hi1; ++i1) {
              const float* row = xp + (i0 * in[1] + i1) * in[2];
              if (kind == PoolKind::Max) {
                for (int64_t i2 = lo2; i2 < hi2; ++i2) acc = std::max(acc, row[i2]);
              } else if (kind == PoolKind::Avg) {
                for (int64_t i2 = lo2; i2 < hi2; ++i2) acc += row[i2];
              } else {
                for (int64_t i2 = lo2; i2 < hi2; ++i2) acc += row[i2] * row[i2];
              }
            }
          if (kind == PoolKind::Avg) {
            int64_t count = 0;
            if (exclude_padding)
              count = std::max<int64_t>(0, hi0 - lo0) * std::max<int64_t>(0, hi1 - lo1) *
                      std::max<int64_t>(0, hi2 - lo2);
            else
              count = pad0 * pad1 * (std::min(e2, in[2] + a[2]) - s2);
            acc = count > 0 ? acc / float(count) : 0.0f;
          } else if (kind == PoolKind::L2) {
            acc = std::sqrt(acc);
          }
          yr[o2] = acc;
        }
      }
    }
  }
}

namespace {

// Per output coordinate: the two input indices and the second one's weight.
struct Tap {
  int64_t i0, i1;
  float f;
};

std::vector<Tap> taps(int64_t in, int64_t out, UpsampleMode mode) {
  std::vector<Tap> t(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    if (mode == UpsampleMode::Nearest) {
      int64_t src = std::min(i * in / out, in - 1);
      t[size_t(i)] = {src, src, 0.0f};
      continue;
    }
    double c;
    if (mode == UpsampleMode::AlignCorners) c = out > 1 ? double(i) * double(in - 1) / double(out - 1) : 0.0;
    else if (mode == UpsampleMode::HalfPixel) c = (double(i) + 0.5) * double(in) / double(out) - 0.5;
    else c = double(i) * double(in) / double(out);
    c = std::min(std::max(c, 0.0), double(in - 1));
    int64_t i0 = int64_t(std::floor(c));
    t[size_t(i)] = {i0, std::min(i0 + 1, in - 1), float(c - double(i0))};
  }
  return t;
}

}  // namespace

void upsample_f32(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int64_t ho, int64_t wo,
                  UpsampleMode mode) {
  const std::vector<Tap> ty = taps(h, ho, mode), tx = taps(w, wo, mode);
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = x + p * h * w;
    float* yp = y + p * ho * wo;
    for (int64_t i = 0; i < ho; ++i) {
      const Tap& r = ty[size_t(i)];
      const float* top = xp + r.i0 * w;
      const float* bottom = xp + r.i1 * w;
      float* yr = yp + i * wo;
      if (mode == UpsampleMode::Nearest) {
        for (int64_t j = 0; j < wo; ++j) yr[j] = top[tx[size_t(j)].i0];
        continue;
      }
      for (int64_t j = 0; j < wo; ++j) {
        const Tap& c = tx[size_t(j)];
        float t = top[c.i0] + (top[c.i1] - top[c.i0]) * c.f;
        float b = bottom[c.i0] + (bottom[c.i1] - bottom[c.i0]) * c.f;
        yr[j] = t + (b - t) * r.f;
      }
    }
  }
}

}  // namespace milrt::kernels
