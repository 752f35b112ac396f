// Schemas and type inference of the pooling and upsampling ops: max_pool,
// avg_pool, l2_pool, upsample_nearest_neighbor and upsample_bilinear.
//
// Rules follow coremltools (ops/defs/iOS15/pool.py, iOS15/image_resizing.py,
// iOS16/image_resizing.py; defs/_utils.py spatial_dimensions_out_shape):
//  - pooling: x [n, C, *D] with 1 to 3 spatial dims (l2_pool 1 or 2);
//    kernel_sizes, strides, pad_type, pad, ceil_mode compile-time constants.
//    D_out = floor((D + P - K) / S) + 1, or with ceil_mode
//    floor((D + P - K + S - 1) / S) + 1, less one when that last window
//    starts at or past D + P / 2 and P > 0 (PyTorch's rule). ceil_mode needs
//    at most 2 spatial dims, a pad_type other than same, symmetric pads.
//  - upsampling: x of rank >= 3, the last two dims scaled by
//    scale_factor_height / _width (int32 or fp32 constants, default 1):
//    H2 = floor(H1 * scale). upsample_bilinear's half_pixel_centers is iOS16+.
#include <algorithm>
#include <cmath>

#include "ir/op_registry.h"

namespace milrt {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

void require_float_x(const InferCtx& c) {
  const Type& t = c.type("x");
  if (!t.is_tensor() || (t.dtype != DType::FP16 && t.dtype != DType::FP32))
    c.fail("input 'x' must be a tensor of fp16, fp32, got " + t.str());
}

std::vector<int64_t> ints_or(const InferCtx& c, const std::string& key, std::vector<int64_t> def) {
  if (!c.has(key)) return def;
  if (!dtype_is_int(c.dtype(key))) c.fail("input '" + key + "' must be integers, got " + c.type(key).str());
  auto v = c.const_ints(key);
  if (!v) c.fail("input '" + key + "' must be a compile-time constant");
  return *v;
}

bool bool_or(const InferCtx& c, const std::string& key, bool def) {
  if (!c.has(key)) return def;
  if (c.dtype(key) != DType::Bool) c.fail("input '" + key + "' must be a bool, got " + c.type(key).str());
  auto v = c.const_bool(key);
  if (!v) c.fail("input '" + key + "' must be a compile-time constant");
  return *v;
}

void infer_pool(InferCtx& c, int max_spatial) {
  require_float_x(c);
  const Shape& xs = c.shape("x");
  if (xs.size() < 3 || xs.size() > size_t(max_spatial) + 2)
    c.fail("input 'x' must have rank 3 to " + str(max_spatial + 2) + " ([n, C, spatial...]), got " +
           c.type("x").str());
  const size_t n = xs.size() - 2;
  if (!c.has("kernel_sizes")) c.fail("missing required input 'kernel_sizes'");
  std::vector<int64_t> k = ints_or(c, "kernel_sizes", {});
  std::vector<int64_t> s = ints_or(c, "strides", std::vector<int64_t>(n, 1));
  std::string pad_type = "valid";
  if (c.has("pad_type")) {
    auto v = c.const_str("pad_type");
    if (!v) c.fail("input 'pad_type' must be a compile-time constant string");
    pad_type = *v;
  }
  if (pad_type != "valid" && pad_type != "same" && pad_type != "same_lower" && pad_type != "custom")
    c.fail("pad_type must be valid, same, same_lower or custom, got '" + pad_type + "'");
  std::vector<int64_t> pad =
      pad_type == "custom" ? ints_or(c, "pad", std::vector<int64_t>(2 * n, 0)) : std::vector<int64_t>(2 * n, 0);
  bool ceil = bool_or(c, "ceil_mode", false);
  bool_or(c, "exclude_padding_from_average", false);
  if (k.size() != n) c.fail("kernel_sizes must have " + str(int64_t(n)) + " values (one per spatial dim)");
  if (s.size() != n) c.fail("strides must have " + str(int64_t(n)) + " values (one per spatial dim)");
  if (pad.size() != 2 * n) c.fail("pad must have " + str(int64_t(2 * n)) + " values (before, after per spatial dim)");
  for (size_t i = 0; i < n; ++i)
    if (k[i] < 1 || s[i] < 1) c.fail("kernel_sizes and strides must be >= 1");
  for (int64_t v : pad)
    if (v < 0) c.fail("pad values must be >= 0");
  if (ceil) {
    if (n > 2) c.fail("ceil_mode is only supported for 1-D or 2-D pooling");
    if (pad_type == "same") c.fail("ceil_mode must be false when pad_type is same");
    for (size_t i = 0; i < n; ++i)
      if (pad[2 * i] != pad[2 * i + 1]) c.fail("padding must be symmetric when ceil_mode is true");
  }
  Shape out = {xs[0], xs[1]};
  for (size_t i = 0; i < n; ++i) {
    int64_t in = xs[i + 2];
    if (in < 0) { out.push_back(-1); continue; }
    int64_t total = pad[2 * i] + pad[2 * i + 1];
    if (pad_type == "same" || pad_type == "same_lower")
      total = std::max<int64_t>(0, s[i] * ((in + s[i] - 1) / s[i]) - in + k[i] - s[i]);
    int64_t num = in + total - k[i] + (ceil ? s[i] - 1 : 0);
    int64_t o = (num >= 0 ? num / s[i] : -((-num + s[i] - 1) / s[i])) + 1;
    if (ceil && total > 0 && 2 * (o - 1) * s[i] >= 2 * in + total) --o;
    if (o <= 0)
      c.fail("spatial dim " + str(int64_t(i)) + " gets output size " + str(o) + " (input " + str(in) + ", kernel " +
             str(k[i]) + ", padding " + str(total) + ")");
    out.push_back(o);
  }
  c.set_out(Type::tensor(c.dtype("x"), out));
}

// A scale factor: an int32 or fp32 compile-time scalar, default 1.
double scale_or_one(const InferCtx& c, const std::string& key) {
  if (!c.has(key)) return 1.0;
  DType d = c.dtype(key);
  if (d != DType::Int32 && d != DType::FP32 && d != DType::FP16)
    c.fail("input '" + key + "' must be an int32 or fp32 scalar, got " + c.type(key).str());
  if (shape_numel(c.shape(key)) != 1) c.fail("input '" + key + "' must be a scalar, got " + c.type(key).str());
  auto v = c.const_float(key);
  if (!v) c.fail("input '" + key + "' must be a compile-time constant");
  if (!(*v > 0)) c.fail("input '" + key + "' must be positive");
  return *v;
}

void infer_upsample(InferCtx& c, bool bilinear) {
  require_float_x(c);
  const Shape& xs = c.shape("x");
  if (xs.size() < 3) c.fail("input 'x' must have rank >= 3, got " + c.type("x").str());
  double sh = scale_or_one(c, "scale_factor_height"), sw = scale_or_one(c, "scale_factor_width");
  if (bilinear) {
    bool align = bool_or(c, "align_corners", true);
    if (c.has("half_pixel_centers")) {
      if (!c.opset_at_least("ios16")) c.fail("half_pixel_centers needs opset ios16 or later");
      if (bool_or(c, "half_pixel_centers", !align) && align)
        c.fail("align_corners and half_pixel_centers cannot both be true");
    }
  }
  Shape out = xs;
  size_t r = xs.size();
  for (auto [d, f] : {std::pair<size_t, double>{r - 2, sh}, {r - 1, sw}}) {
    if (out[d] < 0) continue;
    int64_t o = int64_t(std::floor(double(out[d]) * f));
    if (o < 1) c.fail("dim " + str(int64_t(d)) + " of size " + str(out[d]) + " scales to " + str(o));
    out[d] = o;
  }
  c.set_out(Type::tensor(c.dtype("x"), out));
}

}  // namespace

void register_pool_ops() {
  const std::vector<InputSpec> common = {{"x"}, {"kernel_sizes"}, {"strides", false}, {"pad_type", false},
                                         {"pad", false}, {"ceil_mode", false}};
  std::vector<InputSpec> avg = common;
  avg.push_back({"exclude_padding_from_average", false});
  register_op({"max_pool", common, 1, 1, [](InferCtx& c) { infer_pool(c, 3); }});
  register_op({"avg_pool", avg, 1, 1, [](InferCtx& c) { infer_pool(c, 3); }});
  register_op({"l2_pool", common, 1, 1, [](InferCtx& c) { infer_pool(c, 2); }});
  register_op({"upsample_nearest_neighbor", {{"x"}, {"scale_factor_height", false}, {"scale_factor_width", false}},
               1, 1, [](InferCtx& c) { infer_upsample(c, false); }});
  register_op({"upsample_bilinear",
               {{"x"}, {"scale_factor_height", false}, {"scale_factor_width", false}, {"align_corners", false},
                {"half_pixel_centers", false}},
               1, 1, [](InferCtx& c) { infer_upsample(c, true); }});
}

}  // namespace milrt
