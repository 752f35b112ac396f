// Contiguous rows of fp32 to bf16 bits and back, on the widest vector unit
// the run-time ISA allows (current_isa()). Every bf16 GEMM whose operand is
// fp32 (a training step's activations and gradients) converts it per call;
// compiled for the baseline ISA, that loop ran at a third of the AVX-512
// speed and cost a third of a millisecond per operand of the seed layer.
// Bits are those of milrt::f32_to_bf16 on every path: nearest-even, a NaN
// stays a quiet NaN, subnormals are rounded like any other value (AVX-512
// BF16's vcvtneps2bf16 would flush them, so it is not used).
#pragma once
#include <cstdint>

namespace milrt::kernels {

void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n);

}  // namespace milrt::kernels
