// Schemas and type inference of the const op family: const and the
// compile-time decompression ops (constexpr_*), per coremltools'
// iOS16/constexpr_ops.py and iOS18/compression.py.
//
// constexpr_lut_to_dense and constexpr_sparse_to_dense exist in two forms
// under one name; the iOS16 form is the one with a `shape` input.
#include <algorithm>
#include <initializer_list>

#include "ir/op_registry.h"

namespace milrt {
namespace {

using DTypes = std::initializer_list<DType>;

const DTypes kQuantSrc = {DType::UInt8, DType::Int8};
const DTypes kFloatDst = {DType::FP16, DType::FP32};
const DTypes kLutValues = {DType::Int8, DType::UInt8, DType::FP16, DType::FP32};
const DTypes kShiftScaleSrc = {DType::Int4, DType::UInt4, DType::Int8, DType::UInt8, DType::FP16, DType::FP32};
const DTypes kLutIndices = {DType::UInt1, DType::UInt2, DType::UInt3, DType::UInt4, DType::UInt6, DType::UInt8};

void require_dtype(const InferCtx& ctx, const std::string& key, DTypes allowed) {
  DType t = ctx.dtype(key);
  if (std::find(allowed.begin(), allowed.end(), t) != allowed.end()) return;
  std::string names;
  for (DType a : allowed) names += (names.empty() ? "" : ", ") + std::string(dtype_name(a));
  ctx.fail("input '" + key + "' must be one of {" + names + "}, got " + ctx.type(key).str());
}

const Tensor& require_const(const InferCtx& ctx, const std::string& key) {
  const Tensor* t = ctx.const_value(key);
  if (!t) ctx.fail("input '" + key + "' must be a compile-time constant");
  return *t;
}

int64_t const_scalar_int(const InferCtx& ctx, const std::string& key) {
  ctx.require_rank(key, 0);
  require_const(ctx, key);
  return *ctx.const_int(key);
}

// Product of dims, or -1 when any is unknown.
int64_t known_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) { if (d < 0) return -1; n *= d; }
  return n;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An iOS16 `shape` input: a constant uint32 vector of non-negative dims.
Shape const_shape(const InferCtx& ctx) {
  require_dtype(ctx, "shape", {DType::UInt32});
  ctx.require_rank("shape", 1);
  require_const(ctx, "shape");
  Shape s = *ctx.const_ints("shape");
  for (int64_t d : s) if (d < 0) ctx.fail("input 'shape' has a negative dim");
  return s;
}

int bits_of_palette(const InferCtx& ctx, int64_t n) {
  for (int b : {1, 2, 4, 6, 8}) if (n == (int64_t(1) << b)) return b;
  ctx.fail("input 'lut' must have 2, 4, 16, 64 or 256 entries, got " + std::to_string(n));
}

// coremltools' constexpr_blockwise_shift_scale._validate_shift_scale_inputs.
void check_shift_scale(const InferCtx& ctx, const Shape& data_shape, DType data_dtype) {
  require_dtype(ctx, "scale", kFloatDst);
  const Shape& scale = ctx.shape("scale");
  if (data_shape.size() != scale.size())
    ctx.fail("data and 'scale' must have the same rank, got " + shape_str(data_shape) + " and " + shape_str(scale));
  if (data_shape.empty()) ctx.fail("data must have rank >= 1");
  for (size_t i = 0; i < scale.size(); ++i) {
    if (scale[i] == 0) ctx.fail("input 'scale' has a zero dim");
    if (data_shape[i] >= 0 && scale[i] > 0 && data_shape[i] % scale[i] != 0)
      ctx.fail("number of scales along each dim must divide the data dim; at dim " + std::to_string(i) +
               " data has " + std::to_string(data_shape[i]) + ", 'scale' has " + std::to_string(scale[i]));
  }
  if (!ctx.has("offset")) return;
  require_dtype(ctx, "offset", kShiftScaleSrc);
  if (ctx.shape("offset") != scale)
    ctx.fail("input 'offset' must have the shape of 'scale', got " + shape_str(ctx.shape("offset")) + " and " +
             shape_str(scale));
  if (!dtype_is_float(ctx.dtype("offset")) && ctx.dtype("offset") != data_dtype)
    ctx.fail("an integer 'offset' must have the data's dtype " + std::string(dtype_name(data_dtype)) + ", got " +
             ctx.type("offset").str());
}

// coremltools' iOS18 constexpr_lut_to_dense._validate_lut_inputs; returns
// the output shape (the indices' shape, times VECTOR_SIZE on vector_axis).
Shape check_lut(const InferCtx& ctx, const Shape& indices_shape, DType indices_dtype) {
  require_dtype(ctx, "lut", kLutValues);
  const Shape& lut = ctx.shape("lut");
  const size_t k = indices_shape.size();
  if (k < 1) ctx.fail("indices must have rank >= 1");
  if (lut.size() != k + 2)
    ctx.fail("input 'lut' must have rank " + std::to_string(k + 2) + " (indices rank + 2), got " + ctx.type("lut").str());
  for (size_t i = 0; i < k; ++i) {
    if (lut[i] == 0) ctx.fail("input 'lut' has a zero dim");
    if (indices_shape[i] >= 0 && lut[i] > 0 && indices_shape[i] % lut[i] != 0)
      ctx.fail("each indices dim must be divisible by the lut's; at dim " + std::to_string(i) + " indices has " +
               std::to_string(indices_shape[i]) + ", 'lut' has " + std::to_string(lut[i]));
  }
  const int nbits = dtype_bits(indices_dtype);
  if (lut[k] >= 0 && lut[k] != (int64_t(1) << nbits))
    ctx.fail("input 'lut' must have 2^" + std::to_string(nbits) + " = " + std::to_string(1 << nbits) +
             " palettes for " + std::string(dtype_name(indices_dtype)) + " indices, got " + std::to_string(lut[k]));
  const int64_t vsize = lut[k + 1];
  Shape out = indices_shape;
  if (ctx.has("vector_axis")) {
    int64_t axis = normalize_axis(ctx, const_scalar_int(ctx, "vector_axis"), int64_t(k));
    if (vsize < 0) out[size_t(axis)] = -1;
    else if (out[size_t(axis)] >= 0) out[size_t(axis)] *= vsize;
  } else if (vsize != 1) {
    ctx.fail("input 'vector_axis' is required when the lut's VECTOR_SIZE (last dim) is not 1");
  }
  return out;
}

// coremltools' iOS18 constexpr_sparse_to_dense._validate_sparse_inputs.
void check_sparse(const InferCtx& ctx, const std::string& data_key, const std::string& mask_key) {
  require_dtype(ctx, mask_key, {DType::UInt1});
  ctx.require_rank(data_key, 1);
  if (const Tensor* mask = ctx.const_value(mask_key)) {
    int64_t ones = 0;
    for (int64_t i = 0; i < mask->numel(); ++i) ones += mask->at(size_t(i)) != 0;
    int64_t d = ctx.shape(data_key)[0];
    if (d >= 0 && ones != d)
      ctx.fail("the mask has " + std::to_string(ones) + " set bits but '" + data_key + "' has " + std::to_string(d) +
               " elements");
  }
}

void infer_const(InferCtx& ctx) {
  const InferInput& val = ctx.input("val");
  if (val.type.is_tensor() && !val.value) ctx.fail("input 'val' must be a literal");
  ctx.set_out(val.type);
}

void infer_affine_dequantize(InferCtx& ctx) {
  require_dtype(ctx, "quantized_data", kQuantSrc);
  require_dtype(ctx, "zero_point", {DType::UInt8, DType::Int8, DType::FP32});
  require_dtype(ctx, "scale", kFloatDst);
  require_dtype(ctx, "axis", {DType::Int32});
  const Shape& q = ctx.shape("quantized_data");
  if (q.empty()) ctx.fail("input 'quantized_data' must have rank >= 1");
  const int64_t axis = normalize_axis(ctx, const_scalar_int(ctx, "axis"), int64_t(q.size()));
  for (const char* key : {"scale", "zero_point"}) {
    const Shape& s = ctx.shape(key);
    if (s.size() > 1) ctx.fail(std::string("input '") + key + "' must be a scalar or a vector, got " + ctx.type(key).str());
    if (s.size() == 1 && s[0] >= 0 && q[size_t(axis)] >= 0 && s[0] != q[size_t(axis)])
      ctx.fail(std::string("input '") + key + "' has " + std::to_string(s[0]) + " elements but quantized_data has " +
               std::to_string(q[size_t(axis)]) + " along axis " + std::to_string(axis));
  }
  ctx.set_out(Type::tensor(ctx.dtype("scale"), q));
}

void infer_blockwise_shift_scale(InferCtx& ctx) {
  require_dtype(ctx, "data", kShiftScaleSrc);
  check_shift_scale(ctx, ctx.shape("data"), ctx.dtype("data"));
  ctx.set_out(Type::tensor(ctx.dtype("scale"), ctx.shape("data")));
}

void infer_lut_to_dense_ios16(InferCtx& ctx) {
  if (ctx.has("vector_axis")) ctx.fail("input 'vector_axis' belongs to the iOS18 form, which has no 'shape'");
  require_dtype(ctx, "indices", {DType::UInt8});
  require_dtype(ctx, "lut", kLutValues);
  ctx.require_rank("indices", 1);
  ctx.require_rank("lut", 1);
  const Shape shape = const_shape(ctx);
  const int64_t palettes = ctx.shape("lut")[0];
  const int nbits = palettes < 0 ? -1 : bits_of_palette(ctx, palettes);
  const int64_t m = ctx.shape("indices")[0], n = known_numel(shape);
  if (nbits > 0 && m >= 0 && m != ceil_div(n * nbits, 8))
    ctx.fail("input 'indices' must have ceil(" + std::to_string(nbits) + " * " + std::to_string(n) + " / 8) = " +
             std::to_string(ceil_div(n * nbits, 8)) + " bytes, got " + std::to_string(m));
  ctx.set_out(Type::tensor(ctx.dtype("lut"), shape));
}

void infer_lut_to_dense(InferCtx& ctx) {
  if (ctx.has("shape")) return infer_lut_to_dense_ios16(ctx);
  require_dtype(ctx, "indices", kLutIndices);
  Shape out = check_lut(ctx, ctx.shape("indices"), ctx.dtype("indices"));
  ctx.set_out(Type::tensor(ctx.dtype("lut"), out));
}

void infer_sparse_to_dense_ios16(InferCtx& ctx) {
  require_dtype(ctx, "nonzero_data", kLutValues);
  require_dtype(ctx, "mask", {DType::UInt8});
  ctx.require_rank("nonzero_data", 1);
  ctx.require_rank("mask", 1);
  const Shape shape = const_shape(ctx);
  const int64_t n = known_numel(shape), m = ctx.shape("mask")[0];
  if (m >= 0 && m != ceil_div(n, 8))
    ctx.fail("input 'mask' must have ceil(" + std::to_string(n) + " / 8) = " + std::to_string(ceil_div(n, 8)) +
             " bytes, got " + std::to_string(m));
  if (const Tensor* mask = ctx.const_value("mask")) {
    int64_t ones = 0;
    for (int64_t i = 0; i < mask->numel(); ++i) {
      const unsigned byte = unsigned(mask->at(size_t(i)));
      for (int b = 0; b < 8; ++b) {
        if (!((byte >> b) & 1)) continue;
        if (i * 8 + b >= n) ctx.fail("padding bits of 'mask' (past the shape's element count) must be zero");
        ++ones;
      }
    }
    const int64_t d = ctx.shape("nonzero_data")[0];
    if (d >= 0 && ones != d)
      ctx.fail("the mask has " + std::to_string(ones) + " set bits but 'nonzero_data' has " + std::to_string(d) +
               " elements");
  }
  ctx.set_out(Type::tensor(ctx.dtype("nonzero_data"), shape));
}

void infer_sparse_to_dense(InferCtx& ctx) {
  if (ctx.has("shape")) return infer_sparse_to_dense_ios16(ctx);
  require_dtype(ctx, "nonzero_data", kShiftScaleSrc);
  check_sparse(ctx, "nonzero_data", "mask");
  ctx.set_out(Type::tensor(ctx.dtype("nonzero_data"), ctx.shape("mask")));
}

void infer_cast(InferCtx& ctx) {
  require_dtype(ctx, "source_val", {DType::FP16});
  require_const(ctx, "output_dtype");
  std::optional<std::string> to = ctx.const_str("output_dtype");
  if (!to) ctx.fail("input 'output_dtype' must be a string");
  if (*to != "fp32") ctx.fail("only output_dtype = \"fp32\" is supported, got \"" + *to + "\"");
  ctx.set_out(Type::tensor(DType::FP32, ctx.shape("source_val")));
}

void infer_lut_to_sparse(InferCtx& ctx) {
  require_dtype(ctx, "indices_nonzero_data", kLutIndices);
  check_sparse(ctx, "indices_nonzero_data", "indices_mask");
  const Shape& mask = ctx.shape("indices_mask");
  Shape out_mask = check_lut(ctx, mask, ctx.dtype("indices_nonzero_data"));
  const int64_t vsize = ctx.shape("lut").back();
  int64_t d = ctx.shape("indices_nonzero_data")[0];
  if (d >= 0) d = vsize < 0 ? -1 : d * vsize;
  ctx.out = {Type::tensor(DType::UInt1, out_mask), Type::tensor(ctx.dtype("lut"), {d})};
}

void infer_sparse_blockwise_shift_scale(InferCtx& ctx) {
  require_dtype(ctx, "nonzero_data", kShiftScaleSrc);
  check_sparse(ctx, "nonzero_data", "data_mask");
  check_shift_scale(ctx, ctx.shape("data_mask"), ctx.dtype("nonzero_data"));
  ctx.out = {Type::tensor(DType::UInt1, ctx.shape("data_mask")),
             Type::tensor(ctx.dtype("scale"), ctx.shape("nonzero_data"))};
}

}  // namespace

void register_const_ops() {
  register_op({"const", {{"val"}}, 1, 1, infer_const});
  register_op({"constexpr_affine_dequantize",
               {{"quantized_data"}, {"zero_point"}, {"scale"}, {"axis"}}, 1, 1, infer_affine_dequantize});
  register_op({"constexpr_blockwise_shift_scale", {{"data"}, {"scale"}, {"offset", false}}, 1, 1,
               infer_blockwise_shift_scale});
  register_op({"constexpr_lut_to_dense", {{"indices"}, {"lut"}, {"shape", false}, {"vector_axis", false}}, 1, 1,
               infer_lut_to_dense});
  register_op({"constexpr_sparse_to_dense", {{"nonzero_data"}, {"mask"}, {"shape", false}}, 1, 1,
               infer_sparse_to_dense});
  register_op({"constexpr_cast", {{"source_val"}, {"output_dtype"}}, 1, 1, infer_cast});
  register_op({"constexpr_lut_to_sparse",
               {{"indices_mask"}, {"indices_nonzero_data"}, {"lut"}, {"vector_axis", false}}, 2, 2,
               infer_lut_to_sparse});
  register_op({"constexpr_sparse_blockwise_shift_scale",
               {{"data_mask"}, {"nonzero_data"}, {"scale"}, {"offset", false}}, 2, 2,
               infer_sparse_blockwise_shift_scale});
}

}  // namespace milrt
