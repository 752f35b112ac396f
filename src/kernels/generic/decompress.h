// Weight decompression kernels: the arithmetic of Core ML's compressed weight
// formats (affine and block-wise quantization, palettization, sparsity) on
// plain arrays. They know nothing of MIL: callers pass pointers, shapes,
// dtypes and parameters. Sub-byte dtypes (int4, uint1 ... uint6) are held one
// element per byte, as milrt keeps them in memory; bit-packed storage is
// unpacked with unpack_bits first.
//
// Results are rounded the way coremltools' numpy decompress() functions
// evaluate them, intermediate precision included, so a decompressed weight
// is the exact tensor Core ML's converter means.
#pragma once
#include <cstddef>
#include <cstdint>

#include "milrt/dtype.h"
#include "milrt/tensor.h"

namespace milrt::kernels {

// A read-only row-major array of `dtype` elements.
struct ArrayRef {
  const void* data = nullptr;
  DType dtype = DType::FP32;
  Shape shape;
};

// out = (float(q) - float(zero_point[c])) * float(scale[c]), evaluated in
// fp32 and written as `out_dtype`; c is the element's index along `axis`.
// zero_point and scale hold either one value or one per index along `axis`.
void affine_dequantize(const ArrayRef& q, int64_t axis, const ArrayRef& zero_point, const ArrayRef& scale,
                       void* out, DType out_dtype);

// out = scale[b] * (data - offset[b]) written as `out_dtype`, where b is the
// block of the element: scale (and offset, may be null) have data's rank and
// each of their dims divides data's, cutting it into equal blocks. data is
// first converted to scale's dtype; the difference and the product are
// rounded to scale's dtype, or to fp32 when an fp32 offset meets an fp16 scale.
void blockwise_shift_scale(const ArrayRef& data, const ArrayRef& scale, const ArrayRef* offset, void* out,
                           DType out_dtype);

// Unpacks `n` unsigned values of `nbits` bits each, packed LSB-first (value i
// occupies bits [i * nbits, (i + 1) * nbits) of the byte stream), one per byte.
void unpack_bits(const uint8_t* packed, int64_t n, int nbits, uint8_t* out);

// Palettized lookup. `lut` has shape [blocks..., P, V] for indices of rank K
// (K block dims dividing the indices' dims, P palette entries, vectors of V
// elements). Each index selects a V-vector from its block's palette; the
// vector is laid along `vector_axis` (0 <= vector_axis < K; -1 when V == 1),
// so the output has the indices' shape with that dim multiplied by V. Values
// are copied as they are (out has lut's dtype). Every index must be < P.
void lut_lookup(const ArrayRef& indices, const ArrayRef& lut, int64_t vector_axis, void* out);

// Dense from sparse: out (n elements of `elem_size` bytes) is zero except at
// the positions where mask[i] != 0, which receive values[0], values[1], ...
// in order. Throws Error unless the mask has exactly `num_values` set positions.
void scatter_masked(const void* values, int64_t num_values, const uint8_t* mask, int64_t n, size_t elem_size,
                    void* out);

// Sparse from dense: copies the elements of `dense` at the set positions of
// mask (n entries) to out, in order.
void gather_masked(const void* dense, const uint8_t* mask, int64_t n, size_t elem_size, void* out);

// Sparse palettized lookup: indices given at the set positions of `mask`
// (one byte per element, non-zero = set) are looked up as lut_lookup does.
// out_mask gets the mask repeated V times along `vector_axis` (the output's
// shape) and out_values the looked-up values at its set positions.
void sparse_lut_lookup(const ArrayRef& mask, const ArrayRef& nonzero_indices, const ArrayRef& lut,
                       int64_t vector_axis, uint8_t* out_mask, void* out_values);

// Sparse block-wise dequantization: `nonzero_data` sits at the set positions
// of `mask`; out_values gets blockwise_shift_scale of each of them, the block
// taken from the element's position in the dense shape of the mask.
void sparse_blockwise_shift_scale(const ArrayRef& mask, const ArrayRef& nonzero_data, const ArrayRef& scale,
                                  const ArrayRef* offset, void* out_values, DType out_dtype);

}  // namespace milrt::kernels
