// Comparing logit rows in the generation tests: written once here so that
// every storage's test measures its error the same way.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace milrt::test {

inline int32_t argmax(const float* v, int64_t n) { return int32_t(std::max_element(v, v + n) - v); }

inline double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

// max - min of a row: the scale logit errors are stated against.
inline double range_of(const float* v, int64_t n) {
  auto [lo, hi] = std::minmax_element(v, v + n);
  return double(*hi) - double(*lo);
}

}  // namespace milrt::test
