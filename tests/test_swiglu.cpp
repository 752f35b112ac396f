// SwiGLU's gate kernels (kernels/generic/swiglu.h) against fp64 with libm's
// exp, from the definitions y = a·σ(a)·b, db = dy·a·σ(a),
// da = dy·b·(σ(a) + a·σ(a)·(1 - σ(a))); over |a| up to 30 (σ saturating), n
// not a multiple of the vector lanes, in place, and 1 vs 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/generic/swiglu.h"
#include "kernels/threads.h"
#include "support/test_util.h"

namespace milrt::kernels {
namespace {

using test::uniform_floats;

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

TEST(SiluMul, ForwardAndBackwardMatchFp64) {
  for (size_t n : {1, 17, 1000, 100003}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<float> a = uniform_floats(n, 1, -30, 30), b = uniform_floats(n, 2, -2, 2), dy = uniform_floats(n, 3, -1, 1);
    std::vector<float> y(n), da(n), db(n);
    silu_mul_f32(a.data(), b.data(), y.data(), int64_t(n));
    silu_mul_backward_f32(a.data(), b.data(), dy.data(), da.data(), db.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i) {
      const double s = sigmoid(a[i]);
      const double want_y = double(a[i]) * s * b[i], want_db = double(dy[i]) * a[i] * s;
      const double want_da = double(dy[i]) * b[i] * (s + a[i] * s * (1 - s));
      // a few fp32 roundings and exp_poly's ~1 ulp, relative to each factor's magnitude
      ASSERT_NEAR(y[i], want_y, 1e-6 * std::fabs(double(a[i]) * b[i]) + 1e-30) << i;
      ASSERT_NEAR(db[i], want_db, 1e-6 * std::fabs(double(dy[i]) * a[i]) + 1e-30) << i;
      ASSERT_NEAR(da[i], want_da, 2e-6 * std::fabs(double(dy[i]) * b[i]) * (1 + std::fabs(double(a[i])) * s * (1 - s)) + 1e-30)
          << i << " a " << a[i];
    }
  }
}

TEST(SiluMul, InPlaceAndThreadCountsGiveTheSameBits) {
  const size_t n = 256 * 2048;
  std::vector<float> a = uniform_floats(n, 4, -8, 8), b = uniform_floats(n, 5, -2, 2), dy = uniform_floats(n, 6, -1, 1);
  std::vector<float> da1(n), db1(n), da2(n), db2(n);
  const int before = num_threads();
  set_num_threads(1);
  silu_mul_backward_f32(a.data(), b.data(), dy.data(), da1.data(), db1.data(), int64_t(n));
  set_num_threads(2);
  silu_mul_backward_f32(a.data(), b.data(), dy.data(), da2.data(), db2.data(), int64_t(n));
  EXPECT_EQ(da1, da2);
  EXPECT_EQ(db1, db2);
  std::vector<float> g = dy;
  silu_mul_backward_f32(a.data(), b.data(), g.data(), g.data(), db2.data(), int64_t(n));
  EXPECT_EQ(g, da1);
  std::vector<float> y(n), yin = a;
  silu_mul_f32(a.data(), b.data(), y.data(), int64_t(n));
  silu_mul_f32(yin.data(), b.data(), yin.data(), int64_t(n));
  set_num_threads(before);
  EXPECT_EQ(y, yin);
}

}  // namespace
}  // namespace milrt::kernels
