// Reference implementations of the const op family, following the numpy
// decompress() functions of coremltools' iOS16/constexpr_ops.py and
// iOS18/compression.py, including their intermediate precision.
#include <cmath>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

// v rounded to dtype t, as a numpy array of that dtype would hold it.
double round_to(DType t, double v) {
  alignas(8) uint8_t buf[8];
  store_from_double(buf, t, 0, v);
  return load_as_double(buf, t, 0);
}

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

int64_t axis_in_range(const RefCtx& c, const std::string& key, int64_t rank) {
  int64_t a = c.i64(key);
  if (a < -rank || a >= rank)
    c.fail("'" + key + "' " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return a < 0 ? a + rank : a;
}

// The block of `sub`-shaped parameters (scale, lut, ...) that element `idx`
// of a `full`-shaped tensor falls into: block size = full dim / sub dim.
int64_t block_of(const std::vector<int64_t>& idx, const Shape& full, const Shape& sub) {
  int64_t flat = 0;
  for (size_t d = 0; d < sub.size(); ++d) flat = flat * sub[d] + idx[d] / (full[d] / sub[d]);
  return flat;
}

void require_blocks(const RefCtx& c, const Shape& full, const Shape& sub, const std::string& what) {
  bool ok = sub.size() == full.size();
  for (size_t d = 0; ok && d < full.size(); ++d) ok = sub[d] > 0 && full[d] % sub[d] == 0;
  if (!ok) c.fail(what + " " + shape_str(sub) + " does not tile " + shape_str(full) + " into whole blocks");
}

// Indices packed LSB-first, `nbits` each, in a uint8 vector (iOS16 form).
std::vector<int64_t> unpack_indices(const RefCtx& c, const Tensor& packed, int nbits, int64_t n) {
  if (packed.rank() != 1 || packed.numel() != (n * nbits + 7) / 8)
    c.fail("packed input of " + std::to_string(packed.numel()) + " bytes does not hold " + std::to_string(n) + " " +
           std::to_string(nbits) + "-bit values (needs " + std::to_string((n * nbits + 7) / 8) + ")");
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = 0;
    for (int b = 0; b < nbits; ++b) {
      int64_t bit = i * nbits + b;
      int64_t byte = int64_t(packed.at(size_t(bit / 8)));
      v |= ((byte >> (bit % 8)) & 1) << b;
    }
    out[size_t(i)] = v;
  }
  return out;
}

Shape shape_input(const RefCtx& c) {
  Shape s = c.ints("shape");
  for (int64_t d : s) if (d < 0) c.fail("'shape' has a negative dim");
  return s;
}

// Scatters `values` (in row-major order) to the set positions of `mask`.
NdArray scatter(const RefCtx& c, const NdArray& values, const std::vector<bool>& mask, Shape shape) {
  int64_t ones = 0;
  for (bool m : mask) ones += m;
  if (values.rank() != 1 || values.numel() != ones)
    c.fail("the mask has " + std::to_string(ones) + " set bits but the nonzero data has " +
           std::to_string(values.numel()) + " elements");
  NdArray out(std::move(shape));
  int64_t k = 0;
  for (size_t i = 0; i < mask.size(); ++i) if (mask[i]) out.v[i] = values.v[size_t(k++)];
  return out;
}

std::vector<bool> mask_bits(const NdArray& m) {
  std::vector<bool> r(m.v.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = m.v[i] != 0;
  return r;
}

// scale · (data − offset) blockwise, as numpy evaluates it in decompress():
// data cast to the scale's dtype, the difference and the product rounded to
// the promoted dtype (fp32 when an fp32 offset meets an fp16 scale).
NdArray shift_scale(const RefCtx& c, const NdArray& data) {
  const Tensor& scale_t = c.in("scale");
  const NdArray scale = to_nd(scale_t);
  const DType sdt = scale_t.dtype();
  if (scale.rank() != data.rank() || data.rank() < 1)
    c.fail("data " + shape_str(data.shape) + " and 'scale' " + shape_str(scale.shape) + " must have the same rank >= 1");
  require_blocks(c, data.shape, scale.shape, "'scale'");
  NdArray offset;
  DType work = sdt;
  const bool has_offset = c.has("offset");
  if (has_offset) {
    offset = c.nd("offset");
    if (offset.shape != scale.shape)
      c.fail("'offset' " + shape_str(offset.shape) + " must have the shape of 'scale' " + shape_str(scale.shape));
    if (c.in("offset").dtype() == DType::FP32) work = DType::FP32;
  }
  NdArray out(data.shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t b = block_of(unravel(i, data.shape), data.shape, scale.shape);
    double x = round_to(sdt, data.v[size_t(i)]);
    if (has_offset) x = round_to(work, x - offset.v[size_t(b)]);
    out.v[size_t(i)] = round_to(work, scale.v[size_t(b)] * x);
  }
  return out;
}

// Dense lookup of iOS18 indices (one index per element, any shape) in a lut
// of shape [blocks..., 2^nbits, VECTOR_SIZE]; vector_axis spreads each
// looked-up vector along that axis of the output.
NdArray lut_lookup(const RefCtx& c, const NdArray& indices, int nbits) {
  const NdArray lut = c.nd("lut");
  const size_t k = size_t(indices.rank());
  if (k < 1 || size_t(lut.rank()) != k + 2)
    c.fail("'lut' " + shape_str(lut.shape) + " must have the indices' rank + 2 (indices " + shape_str(indices.shape) + ")");
  const Shape blocks(lut.shape.begin(), lut.shape.begin() + long(k));
  require_blocks(c, indices.shape, blocks, "'lut' blocks");
  const int64_t palettes = lut.shape[k], vsize = lut.shape[k + 1];
  if (palettes != (int64_t(1) << nbits))
    c.fail("'lut' has " + std::to_string(palettes) + " palettes but the indices have " + std::to_string(nbits) + " bits");
  int64_t axis = -1;
  if (c.has("vector_axis")) axis = axis_in_range(c, "vector_axis", int64_t(k));
  else if (vsize != 1) c.fail("'vector_axis' is required when the lut's VECTOR_SIZE is " + std::to_string(vsize));
  Shape out_shape = indices.shape;
  if (axis >= 0) out_shape[size_t(axis)] *= vsize;
  NdArray out(out_shape);
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> idx = unravel(o, out_shape);
    int64_t lane = 0;
    if (axis >= 0) {
      lane = idx[size_t(axis)] % vsize;
      idx[size_t(axis)] /= vsize;
    }
    const int64_t key = int64_t(indices.v[size_t(ravel(idx, indices.shape))]);
    if (key < 0 || key >= palettes) c.fail("index " + std::to_string(key) + " is outside the lut");
    const int64_t block = block_of(idx, indices.shape, blocks);
    out.v[size_t(o)] = lut.v[size_t((block * palettes + key) * vsize + lane)];
  }
  return out;
}

void ref_const(RefCtx& c) { c.set_out(0, c.in("val")); }

void ref_affine_dequantize(RefCtx& c) {
  const NdArray q = c.nd("quantized_data"), zp = c.nd("zero_point"), scale = c.nd("scale");
  if (q.rank() < 1) c.fail("'quantized_data' must have rank >= 1");
  const int64_t axis = axis_in_range(c, "axis", q.rank());
  const int64_t dim = q.shape[size_t(axis)], stride = strides_of(q.shape)[size_t(axis)];
  for (const auto* p : {&zp, &scale})
    if (p->rank() > 1 || (p->rank() == 1 && p->numel() != dim))
      c.fail("'scale' and 'zero_point' must be scalars or vectors of " + std::to_string(dim) + " elements, got " +
             shape_str(p->shape));
  NdArray out(q.shape);
  for (int64_t i = 0; i < q.numel(); ++i) {
    const size_t a = size_t((i / stride) % dim);
    const double z = zp.rank() ? zp.v[a] : zp.v[0], s = scale.rank() ? scale.v[a] : scale.v[0];
    // coremltools dequantizes in fp32: (float(q) - float(zp)) * scale, then casts.
    const float diff = float(q.v[size_t(i)]) - float(z);
    out.v[size_t(i)] = double(diff * float(s));
  }
  c.set_nd(0, out);
}

void ref_blockwise_shift_scale(RefCtx& c) { c.set_nd(0, shift_scale(c, c.nd("data"))); }

void ref_lut_to_dense(RefCtx& c) {
  if (!c.has("shape")) {
    const Tensor& indices = c.in("indices");
    c.set_nd(0, lut_lookup(c, to_nd(indices), dtype_bits(indices.dtype())));
    return;
  }
  // iOS16: a flat lut of 2^nbits entries and packed uint8 indices.
  const NdArray lut = c.nd("lut");
  const Shape shape = shape_input(c);
  int nbits = 0;
  while (nbits <= 8 && (int64_t(1) << nbits) != lut.numel()) ++nbits;
  if (lut.rank() != 1 || nbits < 1 || nbits > 8 || nbits == 3 || nbits == 5 || nbits == 7)
    c.fail("'lut' must be a vector of 2, 4, 16, 64 or 256 entries, got " + shape_str(lut.shape));
  const int64_t n = shape_numel(shape);
  const std::vector<int64_t> keys = unpack_indices(c, c.in("indices"), nbits, n);
  NdArray out(shape);
  for (int64_t i = 0; i < n; ++i) out.v[size_t(i)] = lut.v[size_t(keys[size_t(i)])];
  c.set_nd(0, out);
}

void ref_sparse_to_dense(RefCtx& c) {
  const NdArray values = c.nd("nonzero_data");
  if (!c.has("shape")) {
    const NdArray mask = c.nd("mask");
    c.set_nd(0, scatter(c, values, mask_bits(mask), mask.shape));
    return;
  }
  // iOS16: the mask is packed LSB-first in uint8 bytes; padding bits must be 0.
  const Shape shape = shape_input(c);
  const int64_t n = shape_numel(shape);
  const Tensor& packed = c.in("mask");
  const std::vector<int64_t> all = unpack_indices(c, packed, 1, packed.numel() * 8);
  if (packed.numel() != (n + 7) / 8)
    c.fail("'mask' has " + std::to_string(packed.numel()) + " bytes; " + std::to_string(n) + " elements need " +
           std::to_string((n + 7) / 8));
  for (int64_t i = n; i < int64_t(all.size()); ++i)
    if (all[size_t(i)]) c.fail("padding bits of 'mask' must be zero");
  c.set_nd(0, scatter(c, values, std::vector<bool>(all.begin(), all.begin() + long(n)), shape));
}

void ref_cast(RefCtx& c) {
  if (c.str("output_dtype") != "fp32") c.fail("only output_dtype = \"fp32\" is supported");
  c.set_nd(0, c.nd("source_val"));
}

void ref_lut_to_sparse(RefCtx& c) {
  const NdArray mask = c.nd("indices_mask");
  const Tensor& nz = c.in("indices_nonzero_data");
  const NdArray dense = lut_lookup(c, scatter(c, to_nd(nz), mask_bits(mask), mask.shape), dtype_bits(nz.dtype()));
  // The output mask repeats each mask element VECTOR_SIZE times along vector_axis.
  NdArray out_mask(dense.shape);
  const int64_t vsize = c.in("lut").shape().back();
  const int64_t axis = c.has("vector_axis") ? axis_in_range(c, "vector_axis", mask.rank()) : -1;
  NdArray values(Shape{0});
  for (int64_t o = 0; o < dense.numel(); ++o) {
    std::vector<int64_t> idx = unravel(o, dense.shape);
    if (axis >= 0) idx[size_t(axis)] /= vsize;
    const bool set = mask.v[size_t(ravel(idx, mask.shape))] != 0;
    out_mask.v[size_t(o)] = set;
    if (set) values.v.push_back(dense.v[size_t(o)]);
  }
  values.shape = {values.numel()};
  c.set_nd(0, out_mask);
  c.set_nd(1, values);
}

void ref_sparse_blockwise_shift_scale(RefCtx& c) {
  const NdArray mask = c.nd("data_mask");
  const std::vector<bool> bits = mask_bits(mask);
  const NdArray dense = shift_scale(c, scatter(c, c.nd("nonzero_data"), bits, mask.shape));
  NdArray values(Shape{0});
  for (size_t i = 0; i < bits.size(); ++i) if (bits[i]) values.v.push_back(dense.v[i]);
  values.shape = {values.numel()};
  c.set_nd(0, mask);
  c.set_nd(1, values);
}

}  // namespace

void register_ref_const_ops() {
  register_ref("const", ref_const);
  register_ref("constexpr_affine_dequantize", ref_affine_dequantize);
  register_ref("constexpr_blockwise_shift_scale", ref_blockwise_shift_scale);
  register_ref("constexpr_lut_to_dense", ref_lut_to_dense);
  register_ref("constexpr_sparse_to_dense", ref_sparse_to_dense);
  register_ref("constexpr_cast", ref_cast);
  register_ref("constexpr_lut_to_sparse", ref_lut_to_sparse);
  register_ref("constexpr_sparse_blockwise_shift_scale", ref_sparse_blockwise_shift_scale);
}

}  // namespace milrt::ref
