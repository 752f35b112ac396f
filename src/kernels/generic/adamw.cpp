#include "kernels/generic/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/generic/lanes.h"
#include "kernels/threads.h"

namespace milrt::kernels {

#if defined(__x86_64__)
void adamw_update_f32_avx512(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);
void adamw_update_f32_avx2(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);
#endif

namespace {

// Below this a tensor is updated on one thread: the fork costs more than it saves.
constexpr int64_t kChunk = int64_t(1) << 16;

// The portable path. It stays scalar (std::sqrt sets errno, so the compiler
// will not vectorize it); x86/adamw_avx512.cpp and x86/adamw_avx2.cpp are the
// fast paths, same bits.
void update_generic(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                    int64_t n, const AdamWStep& s) {
  const float b1 = s.beta1, c1 = 1.0f - s.beta1, b2 = s.beta2, c2 = 1.0f - s.beta2;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * s.grad_scale;
    float mi = b1 * m[i] + c1 * gi;
    float vi = b2 * v[i] + c2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * s.decay - s.step_size * mi / (std::sqrt(vi) * s.inv_sqrt_bc2 + s.eps);
  }
}

using UpdateFn = void (*)(float*, const float*, float*, float*, int64_t, const AdamWStep&);

UpdateFn update_for_isa() {
#if defined(__x86_64__)
  if (current_isa() >= Isa::avx512) return adamw_update_f32_avx512;
  if (current_isa() == Isa::avx2) return adamw_update_f32_avx2;
#endif
  return update_generic;
}

}  // namespace

namespace {

// fn(begin, length) over [0, n) in kChunk pieces, on as many threads as
// there are pieces (up to num_threads()).
template <class Fn>
void for_chunks(int64_t n, Fn fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = int(std::min<int64_t>(num_threads(), chunks));
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

}  // namespace

void adamw_update_f32(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s) {
  UpdateFn update_range = update_for_isa();
  for_chunks(n, [&](int64_t b, int64_t len) { update_range(param + b, grad + b, m + b, v + b, len, s); });
}

void zero_f32(float* x, int64_t n) {
  for_chunks(n, [&](int64_t b, int64_t len) { std::memset(x + b, 0, size_t(len) * sizeof(float)); });
}

void scale_f32(float* x, float s, int64_t n) {
  for_chunks(n, [&](int64_t b, int64_t len) {
    float* __restrict d = x + b;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) d[i] *= s;
  });
}

double sum_squares_f32(const float* x, int64_t n) {
  int64_t chunks = (n + kChunk - 1) / kChunk;
  int threads = int(std::min<int64_t>(num_threads(), chunks));
  auto sq = [](float a) { return a * a; };
  if (threads <= 1 || chunks <= 1) {
    // Same chunking as the threaded path, so the sum is identical.
    double total = 0;
    for (int64_t c = 0; c < chunks; ++c) total += lanes::sum(x + c * kChunk, std::min(kChunk, n - c * kChunk), sq);
    return total;
  }
  std::vector<double> partial(size_t(chunks), 0.0);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    partial[size_t(c)] = lanes::sum(x + c * kChunk, std::min(kChunk, n - c * kChunk), sq);
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace milrt::kernels
