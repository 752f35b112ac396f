// Data movement: strided copies (transpose, slices, concatenation pieces).
#pragma once
#include <cstdint>

namespace milrt::kernels {

// Copies a rank-`rank` block of `dims` elements of `bytes` size each from
// `src` (element strides `src_stride`) to `dst` (element strides `dst_stride`).
void strided_copy(const void* src, void* dst, int rank, const int64_t* dims, const int64_t* src_stride,
                  const int64_t* dst_stride, int bytes);

}  // namespace milrt::kernels
