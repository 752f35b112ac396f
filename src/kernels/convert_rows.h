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

// fp16 bits <-> fp32 rows, rounding as milrt::f32_to_f16 (nearest-even): a
// plan's fp16 inputs and outputs, and fp16 numerics' rounding. F16C on the
// AVX2 path and above.
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n);

// Two fp32 rows to the 32-bit words of a bf16 pair panel (gemm_micro.h's
// bf16_pairs B layout): dst[j] = bf16(r0[j]) | bf16(r1[j]) << 16. r1 null
// stands for a row of zeros (the padding row of an odd K). Packing a weight
// gradient's B operand (activations [T, N], per call) element by element
// took a third of the product's time on AMX.
void f32_row_pair_to_bf16_words(const float* r0, const float* r1, uint32_t* dst, int64_t n);

// `width` bf16 rows of K values (ld elements apart) to a bf16 pair panel nr
// words wide: words[q·nr + j] = (row j [2q], row j [2q + 1]) for q <
// ceil(K / 2), zero for the odd K's last high half and for columns [width,
// nr). A row's pairs are its own 32-bit words, so this is a transpose of
// words (16×16 blocks on AVX-512): a prefill's weight panel, widened to bf16,
// packed element by element had cost over a quarter of the product on AMX.
// The bf16 attention kernels lay out Kᵀ and Vᵀ with it too (nr: their row
// length along keys).
void bf16_rows_to_pair_panel(const uint16_t* src, int64_t ld, int64_t width, int64_t K, int64_t nr, uint32_t* words);

}  // namespace milrt::kernels
