// Small pieces shared by the kernel benchmark sections (kernel_bench.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/bench/kernel_bench.h"

namespace milrt::kernels::bench {

// Seconds of timed repetitions per figure when --reps is not given.
inline double target_seconds(const Options& o) { return o.quick ? 0.02 : 0.3; }

// {unit: value, "fraction": value / ceiling}.
inline nlohmann::json figure(const char* unit, double value, double ceiling) {
  return {{unit, value}, {"fraction", ceiling > 0 ? value / ceiling : 0.0}};
}

// A ceiling of the report's "ceilings" section at t threads.
inline double ceiling_at(const nlohmann::json& ceilings, int t, const char* key) {
  return ceilings.at(std::to_string(t)).at(key).get<double>();
}

// figure(largest thread count) / figure(smallest) of one entry of a row's
// "threads" object (`column` empty: the entry itself), null when either is
// missing or only one thread count ran.
inline nlohmann::json scaling(const nlohmann::json& by_threads, const Options& o, const std::string& column,
                              const char* unit) {
  if (o.threads.size() < 2) return nullptr;
  auto at = [&](int t) -> nlohmann::json {
    const nlohmann::json& e = by_threads.at(std::to_string(t));
    return column.empty() ? e : e.at(column);
  };
  nlohmann::json lo = at(o.threads.front()), hi = at(o.threads.back());
  if (lo.is_null() || hi.is_null()) return nullptr;
  return hi.at(unit).get<double>() / lo.at(unit).get<double>();
}

// Deterministic values in [-1, 1) (cheaper than <random> for 100M elements).
inline void fill_uniform(float* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = float(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}

}  // namespace milrt::kernels::bench
