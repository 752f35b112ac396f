#include "kernels/generic/rope.h"

#include <omp.h>

#include "kernels/generic/multiversion.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

MILRT_CLONES(void, rope_row,
             (const float* x, const float* c, const float* s, float* y, int64_t w, bool transpose),
             (x, c, s, y, w, transpose)) {
  // Both elements of a pair are read before either is written: y may be x.
  for (int64_t i = 0; i + 1 < w; i += 2) {
    const float a = x[i], b = x[i + 1];
    const float sa = transpose ? s[i + 1] : s[i], sb = transpose ? s[i] : s[i + 1];
    y[i] = a * c[i] + b * sa;
    y[i + 1] = b * c[i + 1] + a * sb;
  }
}

}  // namespace

void rope_f32(const float* x, const float* cos, const float* sin, float* y, int64_t batch, int64_t t, int64_t w,
              bool transpose) {
  const int64_t rows = batch * t;
  const int threads = pass_threads(rows * w, rows);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = r % t;
    rope_row(x + r * w, cos + pos * w, sin + pos * w, y + r * w, w, transpose);
  }
}

}  // namespace milrt::kernels
