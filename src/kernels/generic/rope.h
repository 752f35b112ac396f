// Rotary position embedding over pairs of the last dim, for rows of width w
// (even): with c = cos and s = sin rows of the position's table,
//
//   y[2i]   = x[2i]   · c[2i]   + x[2i+1] · s[2i]
//   y[2i+1] = x[2i+1] · c[2i+1] + x[2i]   · s[2i+1]
//
// and, `transpose`, the transposed linear map (the gradient with respect to
// x): each pair takes its partner's sine,
//
//   y[2i]   = x[2i]   · c[2i]   + x[2i+1] · s[2i+1]
//   y[2i+1] = x[2i+1] · c[2i+1] + x[2i]   · s[2i].
//
// With llama2.c's tables (s[2i] = -sin θ, s[2i+1] = +sin θ) the first is the
// rotation by θ and the second the rotation by -θ.
#pragma once
#include <cstdint>

namespace milrt::kernels {

// x and y: [batch, t, w]; cos and sin: [t, w], the same rows for every batch.
// y may alias x. Rows run on up to pass_threads() threads.
void rope_f32(const float* x, const float* cos, const float* sin, float* y, int64_t batch, int64_t t, int64_t w,
              bool transpose);

}  // namespace milrt::kernels
