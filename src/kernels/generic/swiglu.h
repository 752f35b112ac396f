// SwiGLU's gate, y = silu(a) · b = a · σ(a) · b, and its gradient, elementwise
// over n values, with σ from exp_poly (kernels/generic/vec_math.h):
//
//   db = dy · a · σ(a)
//   da = dy · b · σ(a) · (1 + a · (1 - σ(a)))
//
// One pass each way where silu, mul and their gradients took five. Elements
// are independent: results do not depend on the threads (pass_threads()).
#pragma once
#include <cstdint>

namespace milrt::kernels {

// y may alias a or b.
void silu_mul_f32(const float* a, const float* b, float* y, int64_t n);

// da and db may alias dy (each element is read before it is written).
void silu_mul_backward_f32(const float* a, const float* b, const float* dy, float* da, float* db, int64_t n);

// The same values rounded to bf16 bits (nearest-even, as milrt::f32_to_bf16)
// where a result only bf16 matrix products read (CompileOptions::
// bf16_operands): y as bf16, and da, db each as bf16 bits (uint16_t) when its
// flag says so, else fp32. No result may overlap an input.
void silu_mul_f32_to_bf16(const float* a, const float* b, uint16_t* y, int64_t n);
void silu_mul_backward(const float* a, const float* b, const float* dy, void* da, bool da_bf16, void* db,
                       bool db_bf16, int64_t n);

}  // namespace milrt::kernels
