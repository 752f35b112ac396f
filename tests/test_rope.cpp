// The rotary-embedding kernel (kernels/generic/rope.h) against fp64 loops
// written from its definition, and the defining property of `transpose`:
// <rope(x), y> = <x, ropeᵀ(y)> for any tables. Awkward sizes: one pair,
// widths not a multiple of the vector lanes, several batches; in place; and
// bit-identical for 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/generic/rope.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// y[i] = x[i]·cos[i] + x[partner]·sin[i or partner], in fp64.
std::vector<double> rope_fp64(const std::vector<float>& x, const std::vector<float>& c, const std::vector<float>& s,
                              int64_t t, int64_t w, bool transpose) {
  std::vector<double> y(x.size());
  for (size_t f = 0; f < x.size(); ++f) {
    const int64_t i = int64_t(f) % w, pos = int64_t(f) / w % t, partner = i % 2 == 0 ? i + 1 : i - 1;
    y[f] = double(x[f]) * c[size_t(pos * w + i)] +
           double(x[f - size_t(i) + size_t(partner)]) * s[size_t(pos * w + (transpose ? partner : i))];
  }
  return y;
}

TEST(Rope, MatchesFp64AndTransposeIsTheAdjoint) {
  for (int64_t batch : {1, 3})
    for (int64_t t : {1, 5})
      for (int64_t w : {2, 6, 34, 128}) {
        SCOPED_TRACE("batch " + std::to_string(batch) + " t " + std::to_string(t) + " w " + std::to_string(w));
        const size_t n = size_t(batch * t * w);
        std::vector<float> x = random_floats(n, 1), y = random_floats(n, 2);
        std::vector<float> c = random_floats(size_t(t * w), 3), s = random_floats(size_t(t * w), 4);
        std::vector<float> rx(n), ry(n);
        rope_f32(x.data(), c.data(), s.data(), rx.data(), batch, t, w, false);
        rope_f32(y.data(), c.data(), s.data(), ry.data(), batch, t, w, true);
        const std::vector<double> want_rx = rope_fp64(x, c, s, t, w, false), want_ry = rope_fp64(y, c, s, t, w, true);
        double lhs = 0, rhs = 0;
        for (size_t i = 0; i < n; ++i) {
          // two products and a sum in fp32: within 2 ulps of the magnitudes
          ASSERT_NEAR(rx[i], want_rx[i], 4e-7) << i;
          ASSERT_NEAR(ry[i], want_ry[i], 4e-7) << i;
          lhs += want_rx[i] * y[i];
          rhs += double(x[i]) * want_ry[i];
        }
        EXPECT_NEAR(lhs, rhs, 1e-9 * double(n));
      }
}

TEST(Rope, InPlaceAndThreadCountsGiveTheSameBits) {
  const int64_t batch = 4, t = 256, w = 768;
  const size_t n = size_t(batch * t * w);
  std::vector<float> x = random_floats(n, 5), c = random_floats(size_t(t * w), 6), s = random_floats(size_t(t * w), 7);
  std::vector<float> one(n), two(n), inplace = x;
  const int before = num_threads();
  set_num_threads(1);
  rope_f32(x.data(), c.data(), s.data(), one.data(), batch, t, w, false);
  set_num_threads(2);
  rope_f32(x.data(), c.data(), s.data(), two.data(), batch, t, w, false);
  rope_f32(inplace.data(), c.data(), s.data(), inplace.data(), batch, t, w, false);
  set_num_threads(before);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, inplace);
}

}  // namespace
}  // namespace milrt::kernels
