// Data-movement kernels: permutes, strided slices, concatenation and dtype
// conversion on plain row-major arrays. They know nothing of MIL: callers
// pass pointers, shapes, element sizes and parameters already resolved
// (normalized axes, explicit starts and steps).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "milrt/dtype.h"
#include "milrt/tensor.h"

namespace milrt::kernels {

// The one loop under every data movement: copies a rank-`rank` block of
// `dims` elements of `bytes` size from `src` (element strides `src_stride`)
// to `dst` (element strides `dst_stride`). Allocates nothing: plans call it
// on their hot path with strides computed at compile time.
void strided_copy(const void* src, void* dst, int rank, const int64_t* dims, const int64_t* src_stride,
                  const int64_t* dst_stride, int bytes);

// The same copy from fp32 elements to bf16 bits (nearest-even, as
// milrt::f32_to_bf16): a transpose whose result only bf16 matrix products
// read (CompileOptions::bf16_operands).
void strided_copy_f32_to_bf16(const float* src, uint16_t* dst, int rank, const int64_t* dims,
                              const int64_t* src_stride, const int64_t* dst_stride);

// dst = src with its dims permuted: dim d of dst is dim perm[d] of src.
void permute(const void* src, const Shape& src_shape, const std::vector<int64_t>& perm, size_t elem_size, void* dst);

// dst[i_0, ..., i_r] = src[start_0 + i_0 * step_0, ..., start_r + i_r * step_r]
// for every index of `dst_shape` (same rank as src; steps may be negative).
// Every position read must lie inside src.
void slice_copy(const void* src, const Shape& src_shape, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& step, const Shape& dst_shape, size_t elem_size, void* dst);

// Concatenates arrays of equal rank along `axis` (all other dims equal).
// With `interleave`, every source has the same shape and dst's position p
// along the axis comes from source p % n at position p / n.
void concat(const std::vector<const void*>& srcs, const std::vector<Shape>& shapes, int64_t axis, bool interleave,
            size_t elem_size, void* dst);

// Converts n elements, rounding as a cast does: floats to nearest-even,
// integers truncated toward zero then saturated, bool as non-zero.
void convert(const void* src, DType from, int64_t n, void* dst, DType to);

}  // namespace milrt::kernels
