#include "kernels/generic/swiglu.h"

#include <omp.h>

#include "kernels/generic/multiversion.h"
#include "kernels/generic/vec_math.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

MILRT_CLONES
void forward_run(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i], s = 1.0f / (1.0f + exp_poly(-v));
    y[i] = v * s * b[i];
  }
}

MILRT_CLONES
void backward_run(const float* a, const float* b, const float* dy, float* da, float* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i], g = dy[i], u = b[i], s = 1.0f / (1.0f + exp_poly(-v));
    db[i] = g * v * s;
    da[i] = g * u * s * (1.0f + v * (1.0f - s));
  }
}

}  // namespace

void silu_mul_f32(const float* a, const float* b, float* y, int64_t n) {
  for_each_chunk(n, [&](int64_t s, int64_t e) { forward_run(a + s, b + s, y + s, e - s); });
}

void silu_mul_backward_f32(const float* a, const float* b, const float* dy, float* da, float* db, int64_t n) {
  for_each_chunk(n, [&](int64_t s, int64_t e) { backward_run(a + s, b + s, dy + s, da + s, db + s, e - s); });
}

}  // namespace milrt::kernels
