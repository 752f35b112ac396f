// Lowering of max_pool, avg_pool, l2_pool, upsample_nearest_neighbor and
// upsample_bilinear: padding, output sizes and sampling modes are resolved
// here, at compile time, as the reference (src/reference/ops/pool.cpp)
// resolves them; the kernels (kernels/generic/pool.h) see only geometry.
#include <algorithm>
#include <cmath>

#include "kernels/generic/pool.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

std::unique_ptr<Step> lower_pool(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32) throw_op_error(op, "only float " + op.type + " compiles");
  const size_t rank = x.shape.size();
  if (rank < 3 || rank > 5) throw_op_error(op, "x must have rank 3 to 5");
  const size_t n = rank - 2;
  const kernels::PoolKind kind = op.type == "max_pool"   ? kernels::PoolKind::Max
                                 : op.type == "avg_pool" ? kernels::PoolKind::Avg
                                                         : kernels::PoolKind::L2;
  std::vector<int64_t> k = ctx.const_ints(op, "kernel_sizes");
  std::vector<int64_t> s = ctx.const_ints(op, "strides", std::vector<int64_t>(n, 1));
  std::string pad_type = ctx.const_str(op, "pad_type", "valid");
  std::vector<int64_t> pad = pad_type == "custom" ? ctx.const_ints(op, "pad", std::vector<int64_t>(2 * n, 0))
                                                  : std::vector<int64_t>(2 * n, 0);
  const bool ceil = ctx.const_bool(op, "ceil_mode", false);
  const bool exclude = kind == kernels::PoolKind::Avg && ctx.const_bool(op, "exclude_padding_from_average", false);
  if (k.size() != n || s.size() != n || pad.size() != 2 * n)
    throw_op_error(op, "kernel_sizes, strides and pad must have one (pad: two) value per spatial dim");
  kernels::PoolGeometry g;
  g.planes = x.shape[0] * x.shape[1];
  g.nsp = int(n);
  Shape out = {x.shape[0], x.shape[1]};
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = x.shape[i + 2];
    if (k[i] < 1 || s[i] < 1) throw_op_error(op, "kernel_sizes and strides must be >= 1");
    const auto [total, before] = spatial_pad(op, pad_type, pad, i, in, s[i], k[i]);
    const int64_t num = in + total - k[i] + (ceil ? s[i] - 1 : 0);
    int64_t od = (num >= 0 ? num / s[i] : -((-num + s[i] - 1) / s[i])) + 1;
    if (ceil && total > 0 && 2 * (od - 1) * s[i] >= 2 * in + total) --od;
    g.in[i] = in;
    g.out[i] = od;
    g.kernel[i] = k[i];
    g.stride[i] = s[i];
    g.before[i] = before;
    g.after[i] = total - before;
    out.push_back(od);
  }
  if (out != o.shape)
    throw_op_error(op, "pooling gives shape " + shape_str(out) + " but the output is declared " + shape_str(o.shape));
  const int ix = x.id, io = o.id;
  auto step = make_step(op.type, op, [=](const Frame& f) {
    kernels::pool_f32(f.at<float>(ix), f.at<float>(io), g, kind, exclude);
  });
  int64_t window = 1;
  for (size_t i = 0; i < n; ++i) window *= k[i];
  step->info.flops = double(o.numel() * window);
  step->info.bytes = double((x.numel() + o.numel()) * 4);
  return step;
}

double scale_factor(const Op& op, LowerCtx& ctx, const std::string& key) {
  return ctx.has(op, key) ? ctx.const_float(op, key) : 1.0;
}

std::unique_ptr<Step> lower_upsample(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32) throw_op_error(op, "only float " + op.type + " compiles");
  const size_t r = x.shape.size();
  if (r < 3) throw_op_error(op, "x must have rank >= 3");
  const int64_t h = x.shape[r - 2], w = x.shape[r - 1];
  const int64_t ho = int64_t(std::floor(double(h) * scale_factor(op, ctx, "scale_factor_height")));
  const int64_t wo = int64_t(std::floor(double(w) * scale_factor(op, ctx, "scale_factor_width")));
  Shape out = x.shape;
  out[r - 2] = ho;
  out[r - 1] = wo;
  if (out != o.shape || ho < 1 || wo < 1)
    throw_op_error(op, "upsampling gives shape " + shape_str(out) + " but the output is declared " +
                           shape_str(o.shape));
  kernels::UpsampleMode mode = kernels::UpsampleMode::Nearest;
  std::string name = "upsample:nearest";
  if (op.type == "upsample_bilinear") {
    const bool align = ctx.const_bool(op, "align_corners", true);
    const bool half = ctx.const_bool(op, "half_pixel_centers", !align);
    if (align && half) throw_op_error(op, "align_corners and half_pixel_centers cannot both be true");
    mode = align ? kernels::UpsampleMode::AlignCorners
           : half ? kernels::UpsampleMode::HalfPixel
                  : kernels::UpsampleMode::Asymmetric;
    name = align ? "upsample:bilinear_align_corners" : half ? "upsample:bilinear_half_pixel" : "upsample:bilinear";
  }
  const int64_t planes = h * w > 0 ? x.numel() / (h * w) : 0;
  const int ix = x.id, io = o.id;
  auto step = make_step(name, op, [=](const Frame& f) {
    kernels::upsample_f32(f.at<float>(ix), f.at<float>(io), planes, h, w, ho, wo, mode);
  });
  step->info.flops = mode == kernels::UpsampleMode::Nearest ? 0.0 : double(o.numel() * 6);
  step->info.bytes = double((x.numel() + o.numel()) * 4);
  return step;
}

}  // namespace

void register_pool_lowerings() {
  for (const char* t : {"max_pool", "avg_pool", "l2_pool"}) register_lowering(t, lower_pool);
  for (const char* t : {"upsample_nearest_neighbor", "upsample_bilinear"}) register_lowering(t, lower_upsample);
}

}  // namespace milrt::rt
