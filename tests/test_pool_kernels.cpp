// The pooling and upsampling kernels (kernels/generic/pool.h) against plain
// fp64 loops written here: max/avg/l2 pooling over 1, 2 and 3 spatial dims
// of awkward sizes (1, 7, 13, 31), kernels 1 to 4, strides 1 to 3, padding
// before and after (ceil_mode-style geometries whose last window passes the
// padded extent included), exclude_padding on and off; nearest and the three
// bilinear modes for integer and fractional scales, up and down.
//
// Tolerances: max and nearest are exact (they copy an input). Avg and l2 sum
// at most 64 fp32 terms: bound 1e-6 · (1 + sum of |terms|) relative to the
// divisor, i.e. 1e-6 · (1 + max|x|) after dividing. Bilinear: three fp32
// lerps of inputs in [-2, 2] with fp32 weights (2^-24 relative): 1e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/generic/pool.h"

namespace milrt::kernels {
namespace {

struct Dims {
  std::vector<int64_t> in, k, s, before, after;
};

// Output size per dim (the caller's rule: floor, or ceil when `ceil`, last
// window kept only when it starts inside the input or the leading padding).
std::vector<int64_t> out_dims(const Dims& d, bool ceil) {
  std::vector<int64_t> o;
  for (size_t i = 0; i < d.in.size(); ++i) {
    int64_t span = d.in[i] + d.before[i] + d.after[i] - d.k[i];
    int64_t n = (ceil ? (span + d.s[i] - 1) / d.s[i] : span / d.s[i]) + 1;
    if (ceil && (n - 1) * d.s[i] >= d.in[i] + d.before[i]) --n;
    o.push_back(n);
  }
  return o;
}

// The fp64 oracle: every window position of the padded grid visited.
std::vector<double> pool_ref(const std::vector<float>& x, int64_t planes, const Dims& d,
                             const std::vector<int64_t>& out, PoolKind kind, bool exclude) {
  const size_t n = d.in.size();
  int64_t nin = 1, nout = 1;
  for (size_t i = 0; i < n; ++i) nin *= d.in[i], nout *= out[i];
  std::vector<double> y(size_t(planes * nout));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t f = 0; f < nout; ++f) {
      std::vector<int64_t> o(n), w(n, 0);
      for (size_t i = n, r = size_t(f); i-- > 0; r /= size_t(out[i])) o[i] = int64_t(r % size_t(out[i]));
      double acc = kind == PoolKind::Max ? -INFINITY : 0.0;
      int64_t count = 0, padded = 0;
      for (bool more = true; more;) {
        bool in_input = true, in_padded = true;
        int64_t flat = 0;
        for (size_t i = 0; i < n; ++i) {
          int64_t pos = o[i] * d.s[i] - d.before[i] + w[i];
          in_input = in_input && pos >= 0 && pos < d.in[i];
          in_padded = in_padded && pos < d.in[i] + d.after[i];
          flat = flat * d.in[i] + pos;
        }
        if (in_padded) ++padded;
        if (in_input) {
          double v = x[size_t(p * nin + flat)];
          ++count;
          acc = kind == PoolKind::Max ? std::max(acc, v) : acc + (kind == PoolKind::L2 ? v * v : v);
        }
        more = false;
        for (size_t i = n; i-- > 0;) {
          if (++w[i] < d.k[i]) { more = true; break; }
          w[i] = 0;
        }
      }
      if (kind == PoolKind::Avg) acc = (exclude ? count : padded) ? acc / double(exclude ? count : padded) : 0.0;
      if (kind == PoolKind::L2) acc = std::sqrt(acc);
      y[size_t(p * nout + f)] = acc;
    }
  return y;
}

TEST(PoolKernels, MatchFp64Loops) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-2, 2);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
  const int64_t sizes[] = {1, 7, 13, 31};
  double worst = 0;
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int nsp = int(pick(1, 3));
    const bool ceil = pick(0, 1) == 1;
    Dims d;
    for (int i = 0; i < nsp; ++i) {
      int64_t in = sizes[pick(0, nsp == 3 ? 2 : 3)];
      int64_t k = std::min<int64_t>(pick(1, 4), in + 1);
      int64_t b = pick(0, k / 2);
      d.in.push_back(in), d.k.push_back(k), d.s.push_back(pick(1, 3)), d.before.push_back(b);
      d.after.push_back(ceil ? b : pick(0, k / 2));
    }
    bool ok = true;
    for (int i = 0; i < nsp; ++i) ok = ok && d.in[size_t(i)] + d.before[size_t(i)] + d.after[size_t(i)] >= d.k[size_t(i)];
    if (!ok) continue;
    std::vector<int64_t> out = out_dims(d, ceil);
    const int64_t planes = pick(1, 3);
    int64_t nin = 1, nout = 1;
    for (int i = 0; i < nsp; ++i) nin *= d.in[size_t(i)], nout *= out[size_t(i)];
    std::vector<float> x(size_t(planes * nin));
    for (float& v : x) v = u(rng);
    PoolGeometry g;
    g.planes = planes;
    g.nsp = nsp;
    for (int i = 0; i < nsp; ++i) {
      g.in[i] = d.in[size_t(i)], g.out[i] = out[size_t(i)], g.kernel[i] = d.k[size_t(i)];
      g.stride[i] = d.s[size_t(i)], g.before[i] = d.before[size_t(i)], g.after[i] = d.after[size_t(i)];
    }
    for (PoolKind kind : {PoolKind::Max, PoolKind::Avg, PoolKind::L2})
      for (bool exclude : {false, true}) {
        if (exclude && kind != PoolKind::Avg) continue;
        std::vector<float> y(size_t(planes * nout), NAN);
        pool_f32(x.data(), y.data(), g, kind, exclude);
        std::vector<double> want = pool_ref(x, planes, d, out, kind, exclude);
        const double bound = kind == PoolKind::Max ? 0.0 : 1e-6 * 3;
        for (size_t i = 0; i < want.size(); ++i) {
          double err = std::fabs(double(y[i]) - want[i]);
          worst = kind == PoolKind::Max ? worst : std::max(worst, err);
          ASSERT_LE(err, bound) << "trial " << trial << " kind " << int(kind) << " exclude " << exclude << " nsp "
                                << nsp << " ceil " << ceil << " at " << i << ": got " << y[i] << " want " << want[i];
        }
        ++cases;
      }
  }
  std::printf("[pool-kernels] %d pooling cases, worst avg/l2 error %.3g\n", cases, worst);
}

// The fp64 oracle of upsampling: source coordinates by the documented rules.
double coord(int64_t i, int64_t in, int64_t out, UpsampleMode m) {
  double c = m == UpsampleMode::AlignCorners ? (out > 1 ? i * double(in - 1) / double(out - 1) : 0.0)
             : m == UpsampleMode::HalfPixel  ? (i + 0.5) * double(in) / double(out) - 0.5
                                             : i * double(in) / double(out);
  return std::clamp(c, 0.0, double(in - 1));
}

TEST(PoolKernels, UpsampleMatchesFp64Loops) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-2, 2);
  const int64_t sizes[] = {1, 2, 5, 7, 13};
  const double scales[] = {0.5, 1.0, 1.5, 2.0, 3.0, 2.5};
  int cases = 0;
  for (int64_t h : sizes)
    for (int64_t w : sizes)
      for (double sh : scales) {
        double sw = scales[size_t(cases) % 6];
        int64_t ho = int64_t(std::floor(double(h) * sh)), wo = int64_t(std::floor(double(w) * sw));
        if (ho < 1 || wo < 1) continue;
        const int64_t planes = 2;
        std::vector<float> x(size_t(planes * h * w));
        for (float& v : x) v = u(rng);
        for (UpsampleMode m : {UpsampleMode::Nearest, UpsampleMode::AlignCorners, UpsampleMode::HalfPixel,
                               UpsampleMode::Asymmetric}) {
          std::vector<float> y(size_t(planes * ho * wo), NAN);
          upsample_f32(x.data(), y.data(), planes, h, w, ho, wo, m);
          for (int64_t p = 0; p < planes; ++p)
            for (int64_t i = 0; i < ho; ++i)
              for (int64_t j = 0; j < wo; ++j) {
                const float* s = x.data() + p * h * w;
                double want;
                if (m == UpsampleMode::Nearest) {
                  want = s[std::min(h - 1, int64_t(std::floor(double(i) * double(h) / double(ho)))) * w +
                           std::min(w - 1, int64_t(std::floor(double(j) * double(w) / double(wo))))];
                } else {
                  double cy = coord(i, h, ho, m), cx = coord(j, w, wo, m);
                  int64_t y0 = int64_t(cy), x0 = int64_t(cx);
                  int64_t y1 = std::min(y0 + 1, h - 1), x1 = std::min(x0 + 1, w - 1);
                  double fy = cy - double(y0), fx = cx - double(x0);
                  want = (1 - fy) * ((1 - fx) * s[y0 * w + x0] + fx * s[y0 * w + x1]) +
                         fy * ((1 - fx) * s[y1 * w + x0] + fx * s[y1 * w + x1]);
                }
                double got = y[size_t((p * ho + i) * wo + j)];
                ASSERT_LE(std::fabs(got - want), m == UpsampleMode::Nearest ? 0.0 : 1e-6)
                    << "mode " << int(m) << " " << h << "x" << w << " -> " << ho << "x" << wo << " at " << p << ","
                    << i << "," << j;
              }
          ++cases;
        }
      }
  std::printf("[pool-kernels] %d upsampling cases\n", cases);
}

// Known values: a 2x2 max/avg pool and a 2x upsample of a 2x2 image, by hand.
TEST(PoolKernels, HandComputedValues) {
  const float x[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  PoolGeometry g;
  g.nsp = 2;
  g.in[0] = g.in[1] = 4, g.out[0] = g.out[1] = 2, g.kernel[0] = g.kernel[1] = 2, g.stride[0] = g.stride[1] = 2;
  float y[4];
  pool_f32(x, y, g, PoolKind::Max, false);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{6, 8, 14, 16}));
  pool_f32(x, y, g, PoolKind::Avg, false);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{3.5f, 5.5f, 11.5f, 13.5f}));
  // 3x3 windows, stride 2, padding 1 each side: the corner window holds 4
  // inputs of 9 positions.
  g.kernel[0] = g.kernel[1] = 3, g.before[0] = g.before[1] = 1, g.after[0] = g.after[1] = 1;
  pool_f32(x, y, g, PoolKind::Avg, false);
  EXPECT_FLOAT_EQ(y[0], (1 + 2 + 5 + 6) / 9.0f);
  pool_f32(x, y, g, PoolKind::Avg, true);
  EXPECT_FLOAT_EQ(y[0], (1 + 2 + 5 + 6) / 4.0f);
  const float s[4] = {0, 1, 2, 3};
  float u[16];
  upsample_f32(s, u, 1, 2, 2, 4, 4, UpsampleMode::Nearest);
  EXPECT_EQ(std::vector<float>(u, u + 4), (std::vector<float>{0, 0, 1, 1}));
  upsample_f32(s, u, 1, 2, 2, 4, 4, UpsampleMode::HalfPixel);  // PyTorch align_corners=False
  EXPECT_EQ(std::vector<float>(u, u + 4), (std::vector<float>{0, 0.25f, 0.75f, 1}));
  upsample_f32(s, u, 1, 2, 2, 4, 4, UpsampleMode::AlignCorners);
  EXPECT_FLOAT_EQ(u[1], 1.0f / 3);
  EXPECT_FLOAT_EQ(u[15], 3);
}

}  // namespace
}  // namespace milrt::kernels
