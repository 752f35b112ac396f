// Timing for the kernel benchmarks: one untimed warm-up call (thread pools,
// per-thread scratch, page faults), then the median of several timed calls.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <vector>

namespace milrt::kernels::bench {

// Evicts the operands of a memory-bound kernel between repetitions (reads
// 64 MiB), so each call streams from DRAM as it would in a model step and as
// the measured bandwidth ceilings do (a [2048, 768] weight would otherwise
// sit in L3 and beat them).
class CacheFlush {
 public:
  CacheFlush() : buf_(size_t(64) << 20 >> 2, 1.0f) {}
  void operator()() {
    float s = 0;
    for (size_t i = 0; i < buf_.size(); i += 16) s += buf_[i];
    buf_[0] = s * 0 + 1;
  }

 private:
  std::vector<float> buf_;
};

// Repetitions: `fixed` when positive, else enough to fill about `target_s`
// judging by the warm-up's duration, within [3, 500].
inline int reps_for(int fixed, double warmup_s, double target_s) {
  if (fixed > 0) return fixed;
  double n = std::ceil(target_s / std::max(warmup_s, 1e-7));
  return int(std::clamp(n, 3.0, 500.0));
}

struct Timing {
  double median, best;  // seconds
};

// f() timed `reps` times (at least once) after one untimed warm-up call;
// before() runs untimed ahead of every call (e.g. to evict the caches).
template <class F, class Before>
Timing time_runs(int reps, F f, Before before, bool warm_up = true) {
  using Clock = std::chrono::steady_clock;
  if (warm_up) before(), f();
  std::vector<double> t;
  t.reserve(size_t(std::max(reps, 1)));
  for (int r = 0; r < std::max(reps, 1); ++r) {
    before();
    auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

template <class F>
Timing time_runs(int reps, F f) {
  return time_runs(reps, f, [] {});
}

// Median seconds of f() over the repetitions (fixed, or as many as fill
// target_s judging by the warm-up call); before() as for time_runs.
template <class F, class Before>
double median_seconds(int fixed_reps, double target_s, F f, Before before) {
  using Clock = std::chrono::steady_clock;
  before();
  auto w = Clock::now();
  f();
  const int reps = reps_for(fixed_reps, std::chrono::duration<double>(Clock::now() - w).count(), target_s);
  return time_runs(reps, f, before, /*warm_up=*/false).median;
}

template <class F>
double median_seconds(int fixed_reps, double target_s, F f) {
  return median_seconds(fixed_reps, target_s, f, [] {});
}

}  // namespace milrt::kernels::bench
