// Timing for the kernel benchmarks: one untimed warm-up call (thread pools,
// per-thread scratch, page faults), then the median of several timed calls.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace milrt::kernels::bench {

// Repetitions: `fixed` when positive, else enough to fill about `target_s`
// judging by the warm-up's duration, within [3, 500].
inline int reps_for(int fixed, double warmup_s, double target_s) {
  if (fixed > 0) return fixed;
  double n = std::ceil(target_s / std::max(warmup_s, 1e-7));
  return int(std::clamp(n, 3.0, 500.0));
}

// Median seconds of f() over the repetitions; before() runs untimed ahead of
// every call (e.g. to evict the caches).
template <class F, class Before>
double median_seconds(int fixed_reps, double target_s, F f, Before before) {
  using Clock = std::chrono::steady_clock;
  before();
  auto w = Clock::now();
  f();
  const int reps = reps_for(fixed_reps, std::chrono::duration<double>(Clock::now() - w).count(), target_s);
  std::vector<double> t;
  t.reserve(size_t(reps));
  for (int r = 0; r < reps; ++r) {
    before();
    auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[size_t(reps / 2)];
}

template <class F>
double median_seconds(int fixed_reps, double target_s, F f) {
  return median_seconds(fixed_reps, target_s, f, [] {});
}

}  // namespace milrt::kernels::bench
