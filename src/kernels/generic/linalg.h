// Plain fp32 kernels for matrix products, softmax, normalization and
// reductions. The GEMM here is the portable fallback; ISA-specific GEMMs
// (kernels/gemm.h) replace it where available.
#pragma once
#include <cstdint>

namespace milrt::kernels {

// C[b] = op(A[b]) · op(B[b]) for `batch` matrices; A is M×K (or K×M when
// trans_a), B is K×N (or N×K when trans_b); batch strides in elements (0 to
// broadcast one matrix over the batch). C is dense M×N per batch.
void matmul_f32(const float* a, const float* b, float* c, int64_t batch, int64_t m, int64_t n, int64_t k,
                bool trans_a, bool trans_b, int64_t a_batch_stride, int64_t b_batch_stride);

enum class Reduce { Sum, Mean, Max, Min, Prod, L1, L2, SumSquare, LogSum, LogSumExp };
// Reduces the middle dim of an [outer, n, inner] view into [outer, inner].
void reduce_f32(Reduce op, const float* x, float* y, int64_t outer, int64_t n, int64_t inner);
// Index of the first max (or min) along the middle dim, as int32.
void arg_reduce_f32(bool max, const float* x, int32_t* y, int64_t outer, int64_t n, int64_t inner);

}  // namespace milrt::kernels
