// MILRT_CLONES (kernels/generic/multiversion.h): the generic kernels' clones
// follow the kernel path (MILRT_ISA, set_isa), so every clone the CPU can run
// is tested here, not only the one the CPU would pick: each path's
// clone_level against the mapping written here and the CPU's own support,
// and cloned kernels (SwiGLU, softmax, reductions, RMSNorm backward, the
// vectorized unary ops) against fp64 on every usable path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kernels/cpu_features.h"
#include "kernels/generic/elementwise.h"
#include "kernels/generic/linalg.h"
#include "kernels/generic/multiversion.h"
#include "kernels/generic/norm.h"
#include "kernels/generic/softmax.h"
#include "kernels/generic/swiglu.h"
#include "support/test_util.h"

namespace milrt::kernels {
namespace {

// Restores the default path when a test ends.
struct IsaScope {
  ~IsaScope() { set_isa(std::nullopt); }
};

int cpu_level() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  return __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3 : 1;
#else
  return 1;
#endif
}

TEST(Multiversion, CloneLevelFollowsTheKernelPath) {
  IsaScope restore;
  int checked = 0;
  for (Isa isa : usable_isas()) {
    set_isa(isa);
    const int want = isa == Isa::generic ? 1 : isa == Isa::avx2 ? 3 : 4;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    EXPECT_EQ(detail::clone_level(), std::min(want, cpu_level())) << isa_name(isa);
#else
    EXPECT_EQ(detail::clone_level(), 1) << isa_name(isa);
#endif
    ++checked;
  }
  std::printf("[multiversion] %d paths usable here; the CPU supports clone level %d\n", checked, cpu_level());
  set_isa(Isa::generic);
  EXPECT_EQ(detail::clone_level(), 1) << "MILRT_ISA=generic must run the baseline clones";
}

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

TEST(Multiversion, ClonedKernelsMatchFp64OnEveryPath) {
  IsaScope restore;
  const int64_t n = 4099;
  const std::vector<float> a = test::uniform_floats(size_t(n), 1, -8, 8), b = test::uniform_floats(size_t(n), 2, -2, 2),
                           dy = test::uniform_floats(size_t(n), 3, -1, 1);
  for (Isa isa : usable_isas()) {
    set_isa(isa);
    SCOPED_TRACE(std::string(isa_name(isa)) + ", clone level " + std::to_string(detail::clone_level()));
    // SwiGLU and its gradient (exp_poly: relative error below 3e-7).
    std::vector<float> y(static_cast<size_t>(n)), da(y.size()), db(y.size());
    silu_mul_f32(a.data(), b.data(), y.data(), n);
    silu_mul_backward_f32(a.data(), b.data(), dy.data(), da.data(), db.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = a[size_t(i)], u = b[size_t(i)], g = dy[size_t(i)], s = sigmoid(v);
      ASSERT_NEAR(y[size_t(i)], v * s * u, 2e-6 * (1 + std::fabs(v * s * u))) << i;
      ASSERT_NEAR(db[size_t(i)], g * v * s, 2e-6 * (1 + std::fabs(g * v * s))) << i;
      const double want_da = g * u * s * (1 + v * (1 - s));
      ASSERT_NEAR(da[size_t(i)], want_da, 2e-6 * (1 + std::fabs(want_da))) << i;
    }
    // Vectorized unary ops.
    std::vector<float> sg(y.size());
    unary_f32(Unary::Sigmoid, a.data(), sg.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(sg[size_t(i)], sigmoid(a[size_t(i)]), 1e-6) << i;
    // Softmax over rows of 4099, and the max and log-sum-exp reductions.
    std::vector<float> p(y.size());
    scaled_masked_softmax_f32(a.data(), p.data(), 1, n, 1, 0.5f);
    double mx = -1e300, z = 0;
    for (float v : a) mx = std::max(mx, 0.5 * v);
    for (float v : a) z += std::exp(0.5 * v - mx);
    for (int64_t i = 0; i < n; i += 7) {
      const double want = std::exp(0.5 * a[size_t(i)] - mx) / z;
      ASSERT_NEAR(p[size_t(i)], want, 1e-5 * want + 1e-9) << i;
    }
    float got_max = 0, got_lse = 0;
    reduce_f32(Reduce::Max, a.data(), &got_max, 1, n, 1);
    reduce_f32(Reduce::LogSumExp, a.data(), &got_lse, 1, n, 1);
    double amax = -1e300, s = 0;
    for (float v : a) amax = std::max(amax, double(v));
    for (float v : a) s += std::exp(double(v) - amax);
    EXPECT_EQ(double(got_max), amax);
    EXPECT_NEAR(got_lse, amax + std::log(s), 1e-5);
    // RMSNorm backward of one row: dx against the Jacobian in fp64.
    const int64_t m = 768;
    std::vector<float> dx(static_cast<size_t>(m)), dw(static_cast<size_t>(m));
    rms_norm_backward_f32(a.data(), b.data(), dy.data(), dx.data(), dw.data(), 1, m, 1e-5f);
    double ss = 0, c = 0;
    for (int64_t i = 0; i < m; ++i) ss += double(a[size_t(i)]) * a[size_t(i)];
    const double r = 1 / std::sqrt(ss / double(m) + 1e-5);
    for (int64_t i = 0; i < m; ++i) c += double(dy[size_t(i)]) * b[size_t(i)] * a[size_t(i)];
    c *= r * r * r / double(m);
    for (int64_t i = 0; i < m; ++i) {
      const double want = r * dy[size_t(i)] * b[size_t(i)] - a[size_t(i)] * c;
      ASSERT_NEAR(dx[size_t(i)], want, 1e-5 * (std::fabs(r * dy[size_t(i)] * b[size_t(i)]) + std::fabs(a[size_t(i)] * c)) + 1e-7)
          << i;
    }
  }
}

}  // namespace
}  // namespace milrt::kernels
