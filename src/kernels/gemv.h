// The one-row product of token-by-token decoding, y = A[1,K]·Wᵀ with W [N,K]
// row-major fp32 (a weight as llama2.c stores it, bound as a plan input):
// each weight row is streamed once and dotted with the row of A. gemm()
// takes this path for such calls instead of packing B, which for one row
// would read and write the whole weight once more per call.
#pragma once
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"

namespace milrt::kernels {

// y[j] = act(alpha · Σ_k x[k]·w[j·ldw + k] + bias[j]) + residual[j], j < N,
// all fp32 (bias and residual may be null). Rows are split over
// num_threads(); each y[j] is summed in one fixed order, so the bits do not
// depend on the thread count.
void gemv_rows_f32(int64_t N, int64_t K, const float* x, const float* w, int64_t ldw, float* y, const Epilogue& ep,
                   Isa isa = current_isa());

// The same product with B stored [K, N] row-major (attention's probabilities
// times V in decoding, one query row): y[j] = act(alpha · Σ_k x[k]·b[k·ldb + j]
// + bias[j]) + residual[j], each y[j] summed over k in order, so again the
// bits do not depend on the thread count (columns are split over threads).
// gemm() takes this path too, instead of packing a B it reads once.
void gemv_cols_f32(int64_t N, int64_t K, const float* x, const float* b, int64_t ldb, float* y, const Epilogue& ep);

}  // namespace milrt::kernels
