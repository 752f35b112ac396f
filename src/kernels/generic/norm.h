// Normalization kernels over the middle dim of an [outer, n, inner] view:
// inner == 1 is the row-major case (normalize each contiguous row of n),
// inner > 1 the channel-first one ([1, C, 1, S]: n = C strided by inner = S),
// vectorized across inner. Statistics accumulate in fp32 lanes over blocks of
// rows, the block sums in fp64, so the rounding error does not grow with n.
#pragma once
#include <cstdint>

namespace milrt::kernels {

// y = x / sqrt(mean(x²) + eps) · gamma[i] (gamma: n values, or nullptr for 1).
// y may alias x.
void rms_norm_f32(const float* x, const float* gamma, float* y, int64_t outer, int64_t n, int64_t inner, float eps);
// The same values rounded to bf16 bits (nearest-even, as milrt::f32_to_bf16):
// a normed activation that only bf16 matrix products read
// (CompileOptions::bf16_operands). y must not overlap x.
void rms_norm_f32_to_bf16(const float* x, const float* gamma, uint16_t* y, int64_t outer, int64_t n, int64_t inner,
                          float eps);

// The backward of y = rms_norm(x) · w over contiguous rows of n (inner == 1):
//   r = 1 / sqrt(mean(x²) + eps), xn = x · r, d = dy · w
//   dx = r · (d - xn · mean(d · xn))          (rows × n)
//   dw = Σ_rows dy · xn                          (n; skipped when dw is null)
// One pass per row with the row in cache. Rows run on up to pass_threads()
// threads; dw is summed per fixed block of rows and the blocks added in
// order, so the bits do not depend on the thread count. dx may alias dy.
void rms_norm_backward_f32(const float* x, const float* w, const float* dy, float* dx, float* dw, int64_t rows,
                           int64_t n, float eps);

// y = (x - mean) / sqrt(var + eps) · gamma[i] + beta[i], var the biased
// variance computed from the centered values (two passes, no cancellation).
// gamma and beta: n values each, or nullptr. y may alias x.
void layer_norm_f32(const float* x, const float* gamma, const float* beta, float* y, int64_t outer, int64_t n,
                    int64_t inner, float eps);

}  // namespace milrt::kernels
