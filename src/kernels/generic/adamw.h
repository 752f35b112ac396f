// The fused AdamW update: one pass over a tensor's parameters, gradients and
// both moments. Element-wise, so results do not depend on the thread count.
#pragma once
#include <cstdint>

namespace milrt::kernels {

struct AdamWStep {
  float beta1, beta2, eps;
  float grad_scale;    // gradient clipping factor (1 = none)
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float decay;         // 1 - lr * weight_decay (1 for no decay)
};

// For each i: g = grad[i]·grad_scale; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
// p = p·decay - step_size · m / (sqrt(v)·inv_sqrt_bc2 + eps)  (PyTorch's AdamW).
void adamw_update_f32(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s);

// Σ x[i]² in fp64 partial sums (the global gradient norm for clipping); the
// result does not depend on the thread count.
double sum_squares_f32(const float* x, int64_t n);

// x[i] = 0 (a step's gradient sums before its first micro-batch adds in;
// NaN and inf from an overflowed step are cleared too) and x[i] *= s (their
// mean, or loss scaling undone). Memory-bound passes over every weight's
// gradient, on num_threads() threads in chunks; element-wise, so the bits do
// not depend on the thread count.
void zero_f32(float* x, int64_t n);
void scale_f32(float* x, float s, int64_t n);

}  // namespace milrt::kernels
