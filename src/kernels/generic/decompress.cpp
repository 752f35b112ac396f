#include "kernels/generic/decompress.h"

#include <cstring>
#include <string>
#include <vector>

#include "milrt/error.h"

namespace milrt::kernels {
namespace {

using Index = std::vector<int64_t>;

// Calls fn(i, idx) for every element of shape `s` in row-major order, idx
// being the element's multi-index.
template <class F>
void for_each_index(const Shape& s, F fn) {
  const int64_t n = shape_numel(s);
  Index idx(s.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    fn(i, idx);
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t ravel(const Index& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

// Flat index in `blocks` of the block holding element `idx` of `full`, where
// each dim of `blocks` divides the matching dim of `full`.
int64_t block_of(const Index& idx, const Shape& full, const Shape& blocks) {
  int64_t flat = 0;
  for (size_t d = 0; d < blocks.size(); ++d) flat = flat * blocks[d] + idx[d] / (full[d] / blocks[d]);
  return flat;
}

void require_blocks(const Shape& full, const Shape& blocks, const char* what) {
  bool ok = blocks.size() == full.size();
  for (size_t d = 0; ok && d < full.size(); ++d) ok = blocks[d] > 0 && full[d] % blocks[d] == 0;
  if (!ok) throw Error(std::string(what) + " " + shape_str(blocks) + " does not tile " + shape_str(full) + " into whole blocks");
}

double load(const ArrayRef& a, int64_t i) { return load_as_double(a.data, a.dtype, size_t(i)); }

// v as a value of dtype t holds it (numpy's astype / result rounding).
double round_to(DType t, double v) {
  alignas(8) uint8_t buf[8];
  store_from_double(buf, t, 0, v);
  return load_as_double(buf, t, 0);
}

const uint8_t* bytes(const void* p) { return static_cast<const uint8_t*>(p); }
uint8_t* bytes(void* p) { return static_cast<uint8_t*>(p); }

}  // namespace

void affine_dequantize(const ArrayRef& q, int64_t axis, const ArrayRef& zero_point, const ArrayRef& scale,
                       void* out, DType out_dtype) {
  if (axis < 0 || axis >= int64_t(q.shape.size())) throw Error("affine_dequantize: axis out of range");
  const int64_t dim = q.shape[size_t(axis)];
  const int64_t inner = shape_numel(Shape(q.shape.begin() + axis + 1, q.shape.end()));
  const int64_t nz = shape_numel(zero_point.shape), ns = shape_numel(scale.shape);
  if ((nz != 1 && nz != dim) || (ns != 1 && ns != dim))
    throw Error("affine_dequantize: scale and zero_point need 1 or " + std::to_string(dim) + " values");
  const int64_t n = shape_numel(q.shape);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = (i / inner) % dim;
    const float z = float(load(zero_point, nz == 1 ? 0 : c)), s = float(load(scale, ns == 1 ? 0 : c));
    const float diff = float(load(q, i)) - z;
    store_from_double(out, out_dtype, size_t(i), double(diff * s));
  }
}

void blockwise_shift_scale(const ArrayRef& data, const ArrayRef& scale, const ArrayRef* offset, void* out,
                           DType out_dtype) {
  require_blocks(data.shape, scale.shape, "scale");
  if (offset && offset->shape != scale.shape) throw Error("blockwise_shift_scale: offset and scale differ in shape");
  // numpy: data.astype(scale.dtype) - offset promotes to fp32 only for an fp32 offset.
  const DType work = offset && offset->dtype == DType::FP32 ? DType::FP32 : scale.dtype;
  for_each_index(data.shape, [&](int64_t i, const Index& idx) {
    const int64_t b = block_of(idx, data.shape, scale.shape);
    double x = round_to(scale.dtype, load(data, i));
    if (offset) x = round_to(work, x - load(*offset, b));
    store_from_double(out, out_dtype, size_t(i), round_to(work, load(scale, b) * x));
  });
}

void unpack_bits(const uint8_t* packed, int64_t n, int nbits, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    unsigned v = 0;
    for (int b = 0; b < nbits; ++b) {
      const int64_t bit = i * nbits + b;
      v |= unsigned((packed[bit / 8] >> (bit % 8)) & 1) << b;
    }
    out[i] = uint8_t(v);
  }
}

void lut_lookup(const ArrayRef& indices, const ArrayRef& lut, int64_t vector_axis, void* out) {
  const size_t k = indices.shape.size();
  if (k < 1 || lut.shape.size() != k + 2) throw Error("lut_lookup: the lut must have the indices' rank + 2");
  const Shape blocks(lut.shape.begin(), lut.shape.begin() + long(k));
  require_blocks(indices.shape, blocks, "lut blocks");
  const int64_t palettes = lut.shape[k], vsize = lut.shape[k + 1];
  if (vector_axis >= int64_t(k) || (vector_axis < 0 && vsize != 1))
    throw Error("lut_lookup: vector_axis out of range");
  Shape out_shape = indices.shape;
  if (vector_axis >= 0) out_shape[size_t(vector_axis)] *= vsize;
  const size_t es = dtype_size(lut.dtype);
  for_each_index(indices.shape, [&](int64_t i, const Index& idx) {
    const double key = load(indices, i);
    if (key < 0 || key >= double(palettes)) throw Error("lut_lookup: index " + std::to_string(key) + " outside the lut");
    const int64_t block = block_of(idx, indices.shape, blocks);
    const uint8_t* vec = bytes(lut.data) + size_t((block * palettes + int64_t(key)) * vsize) * es;
    if (vsize == 1) {
      std::memcpy(bytes(out) + size_t(i) * es, vec, es);
      return;
    }
    Index o = idx;
    o[size_t(vector_axis)] *= vsize;
    int64_t flat = ravel(o, out_shape);
    const int64_t step = shape_numel(Shape(out_shape.begin() + vector_axis + 1, out_shape.end()));
    for (int64_t lane = 0; lane < vsize; ++lane, flat += step)
      std::memcpy(bytes(out) + size_t(flat) * es, vec + size_t(lane) * es, es);
  });
}

void scatter_masked(const void* values, int64_t num_values, const uint8_t* mask, int64_t n, size_t elem_size,
                    void* out) {
  int64_t set = 0;
  for (int64_t i = 0; i < n; ++i) set += mask[i] != 0;
  if (set != num_values)
    throw Error("the mask has " + std::to_string(set) + " set positions for " + std::to_string(num_values) + " values");
  std::memset(out, 0, size_t(n) * elem_size);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i)
    if (mask[i]) std::memcpy(bytes(out) + size_t(i) * elem_size, bytes(values) + size_t(k++) * elem_size, elem_size);
}

void gather_masked(const void* dense, const uint8_t* mask, int64_t n, size_t elem_size, void* out) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i)
    if (mask[i]) std::memcpy(bytes(out) + size_t(k++) * elem_size, bytes(dense) + size_t(i) * elem_size, elem_size);
}

void sparse_lut_lookup(const ArrayRef& mask, const ArrayRef& nonzero_indices, const ArrayRef& lut,
                       int64_t vector_axis, uint8_t* out_mask, void* out_values) {
  const int64_t n = shape_numel(mask.shape);
  // Unset positions get index 0, a valid palette entry whose value is dropped below.
  std::vector<uint8_t> dense_indices(static_cast<size_t>(n));
  scatter_masked(nonzero_indices.data, shape_numel(nonzero_indices.shape), bytes(mask.data), n, 1,
                 dense_indices.data());
  const int64_t vsize = lut.shape.back();
  Shape out_shape = mask.shape;
  if (vector_axis >= 0) out_shape[size_t(vector_axis)] *= vsize;
  const size_t es = dtype_size(lut.dtype);
  std::vector<uint8_t> dense(size_t(shape_numel(out_shape)) * es);
  lut_lookup({dense_indices.data(), nonzero_indices.dtype, mask.shape}, lut, vector_axis, dense.data());
  for_each_index(out_shape, [&](int64_t i, const Index& idx) {
    Index m = idx;
    if (vector_axis >= 0) m[size_t(vector_axis)] /= vsize;
    out_mask[i] = bytes(mask.data)[ravel(m, mask.shape)] != 0;
  });
  gather_masked(dense.data(), out_mask, shape_numel(out_shape), es, out_values);
}

void sparse_blockwise_shift_scale(const ArrayRef& mask, const ArrayRef& nonzero_data, const ArrayRef& scale,
                                  const ArrayRef* offset, void* out_values, DType out_dtype) {
  const int64_t n = shape_numel(mask.shape);
  const size_t in_es = dtype_size(nonzero_data.dtype), out_es = dtype_size(out_dtype);
  std::vector<uint8_t> dense_in(size_t(n) * in_es), dense_out(size_t(n) * out_es);
  scatter_masked(nonzero_data.data, shape_numel(nonzero_data.shape), bytes(mask.data), n, in_es, dense_in.data());
  blockwise_shift_scale({dense_in.data(), nonzero_data.dtype, mask.shape}, scale, offset, dense_out.data(), out_dtype);
  gather_masked(dense_out.data(), bytes(mask.data), n, out_es, out_values);
}

}  // namespace milrt::kernels
