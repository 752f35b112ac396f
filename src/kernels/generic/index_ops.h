// Generators and index-shaped data movement: one_hot, fill, tile, band_part,
// cumsum and topk on plain row-major arrays. They know nothing of MIL:
// callers pass resolved shapes, normalized axes and element byte patterns.
#pragma once
#include <cstddef>
#include <cstdint>

namespace milrt::kernels {

// n copies of the `elem_size`-byte element at `value`.
void fill(void* dst, int64_t n, const void* value, size_t elem_size);

// dst[o, d, i] = idx[o, i] == d ? on : off for d < depth; idx is [outer, inner]
// (an index outside [0, depth) gives a row of `off`).
void one_hot(const int32_t* idx, int64_t outer, int64_t inner, int64_t depth, const void* on, const void* off,
             size_t elem_size, void* dst);

// dst (dims[d] * reps[d] along each dim) repeats src (dims) reps[d] times per dim.
void tile(const void* src, int rank, const int64_t* dims, const int64_t* reps, size_t elem_size, void* dst);

// x viewed as [batch, rows, cols]: element (m, n) is kept when
// (lower < 0 || m - n <= lower) && (upper < 0 || n - m <= upper), else zeroed
// (all-zero bytes: 0, 0.0f, false). dst may be src.
void band_part(const void* src, int64_t batch, int64_t rows, int64_t cols, int64_t lower, int64_t upper,
               size_t elem_size, void* dst);

// Running sums along n of x viewed as [outer, n, inner]; exclusive leaves out
// the element itself, reverse runs from the end. Sums accumulate in fp64
// (int64 for integers, saturated to int32) and round once per element.
void cumsum(const float* x, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse, float* dst);
void cumsum(const int32_t* x, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse, int32_t* dst);

// The k largest (or smallest, `ascending`) of each line along n of x viewed as
// [outer, n, inner], best first; ties keep their order along the line and
// NaNs come last. values and indices are [outer, k, inner]; indices (may be
// null) hold positions along n. `scratch` holds n int32s.
void topk(const float* x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool ascending, float* values,
          int32_t* indices, int32_t* scratch);
void topk(const int32_t* x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool ascending, int32_t* values,
          int32_t* indices, int32_t* scratch);

}  // namespace milrt::kernels
