// Softmax kernels and the row primitives the attention kernel shares with
// them. fp32 in and out; every loop is written to vectorize, and the files
// are compiled for several ISAs at once (the fastest runs, chosen at load).
#pragma once
#include <cstdint>

namespace milrt::kernels {

// An additive mask read beside an [outer, n, inner] view: the value for
// element (o, k, i) is data[offsets[o·inner + i] + k·stride] (stride 0: one
// value for the whole softmax axis). No data: no mask.
struct SoftmaxMask {
  const float* data = nullptr;
  const int64_t* offsets = nullptr;  // outer·inner entries
  int64_t stride = 0;
};

// y = softmax(scale·x + mask) over the middle dim of an [outer, n, inner]
// view. The maximum is subtracted before exponentiating, so no finite input
// overflows; a line whose values are all -inf gives NaN (0/0), as the
// reference does. y may alias x. Allocates nothing.
void scaled_masked_softmax_f32(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, float scale = 1,
                               const SoftmaxMask& mask = {});

// The largest of x[0, n) (-inf when n = 0; NaN inputs are skipped).
float row_max_f32(const float* x, int64_t n);
// x[j] = exp(x[j] - m) for j in [0, n); returns the sum of the new values.
// Exact zero for -inf inputs; max relative error of exp about 2e-7.
float exp_shift_sum_f32(float* x, int64_t n, float m);
// x[j] *= s for j in [0, n).
void scale_row_f32(float* x, int64_t n, float s);
// Σ a[j]·b[j] over [0, n).
float dot_row_f32(const float* a, const float* b, int64_t n);
// g[j] = p[j]·(g[j] − d): softmax's Jacobian applied to g, d = Σ p·g.
void softmax_grad_row_f32(const float* p, float* g, int64_t n, float d);

}  // namespace milrt::kernels
