// Lowering of the normalizations with kernels of their own (kernels/generic/
// norm.h): milrt_rms_norm (from fuse-norms), MIL's layer_norm and milrt's
// rms_norm extension op. Each normalizes one run of dims, seen as the middle
// of an [outer, n, inner] view; gamma and beta are read as n values in
// row-major order of the normalized dims.
#include <vector>

#include "kernels/generic/norm.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

struct NormView {
  int64_t outer = 1, n = 1, inner = 1;
};

// The [outer, n, inner] view of x normalized over `axes`; they must form one
// run up to size-1 dims between them.
NormView view_of(const Op& op, const Shape& xs, const std::vector<int64_t>& axes) {
  int64_t rank = int64_t(xs.size());
  std::vector<bool> normed(size_t(rank), false);
  for (int64_t a : axes) {
    int64_t k = norm_axis(op, a, rank);
    if (normed[size_t(k)]) throw_op_error(op, "axis " + std::to_string(a) + " is given twice");
    normed[size_t(k)] = true;
  }
  int64_t first = -1, last = -1;
  for (int64_t i = 0; i < rank; ++i)
    if (normed[size_t(i)]) {
      if (first < 0) first = i;
      last = i;
    }
  NormView v;
  if (first < 0) throw_op_error(op, "no axes to normalize over");
  for (int64_t i = first; i <= last; ++i)
    if (!normed[size_t(i)] && xs[size_t(i)] != 1)
      throw_op_error(op, "normalizing non-adjacent axes is not compiled (dim " + std::to_string(i) + " lies between)");
  split_dims(xs, first, last, v.outer, v.n, v.inner);
  return v;
}

// An optional per-element parameter (gamma, beta, w): its value id, or -1.
int param(const Op& op, LowerCtx& ctx, const std::string& key, int64_t n) {
  if (!ctx.has(op, key)) return -1;
  ValueRef p = ctx.input(op, key);
  if (p.dtype != DType::FP32) throw_op_error(op, "input '" + key + "' must be a float tensor");
  if (p.numel() != n)
    throw_op_error(op, "input '" + key + "' has " + std::to_string(p.numel()) + " elements, the normalized dims " +
                           std::to_string(n));
  return p.id;
}

std::unique_ptr<Step> rms_step(const Op& op, LowerCtx& ctx, const NormView& v, const std::string& gamma_key,
                               double eps) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32) throw_op_error(op, "only float inputs compile");
  int ig = param(op, ctx, gamma_key, v.n), ix = x.id, io = o.id;
  float e = float(eps);
  std::unique_ptr<Step> step;
  if (o.dtype == DType::BF16) {  // read only by bf16 products (CompileOptions::bf16_operands)
    step = make_step("rms_norm[to bf16]", op, [=](const Frame& f) {
      kernels::rms_norm_f32_to_bf16(f.at<float>(ix), ig < 0 ? nullptr : f.at<float>(ig), f.at<uint16_t>(io),
                                    v.outer, v.n, v.inner, e);
    });
  } else {
    step = make_step("rms_norm", op, [=](const Frame& f) {
      kernels::rms_norm_f32(f.at<float>(ix), ig < 0 ? nullptr : f.at<float>(ig), f.at<float>(io), v.outer, v.n,
                            v.inner, e);
    });
  }
  step->info.flops = 4.0 * double(x.numel());
  step->info.bytes = double(x.numel() + (ig < 0 ? 0 : v.n)) * 4 + double(x.numel() * dtype_size(o.dtype));
  return step;
}

std::unique_ptr<Step> lower_milrt_rms_norm(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x");
  return rms_step(op, ctx, view_of(op, x.shape, ctx.const_ints(op, "axes")), "gamma", ctx.const_float(op, "eps"));
}

// milrt's rms_norm: dim 1 of rank-4 x (the seeds' [1, C, 1, S]), the last dim otherwise.
std::unique_ptr<Step> lower_rms_norm(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x");
  int64_t rank = int64_t(x.shape.size());
  if (rank == 0) throw_op_error(op, "x must have rank >= 1");
  return rms_step(op, ctx, view_of(op, x.shape, {rank == 4 ? 1 : rank - 1}), "w", ctx.const_float(op, "eps", 1e-5));
}

// milrt_rms_norm_grad: rows of x's last dim (ir/ops/fused_norm.cpp).
std::unique_ptr<Step> lower_milrt_rms_norm_grad(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), dy = ctx.input(op, "dy"), dx = ctx.output(op, 0), dw = ctx.output(op, 1);
  if (x.dtype != DType::FP32 || x.shape.empty() || dy.shape != x.shape) throw_op_error(op, "x and dy must be one fp32 shape");
  const int64_t n = x.shape.back(), rows = n > 0 ? x.numel() / n : 0;
  const int iw = param(op, ctx, "w", n), ix = x.id, idy = dy.id, idx = dx.id, idw = dw.id;
  const float e = float(ctx.const_float(op, "eps"));
  auto step = make_step("rms_norm_grad", op, [=](const Frame& f) {
    kernels::rms_norm_backward_f32(f.at<float>(ix), f.at<float>(iw), f.at<float>(idy), f.at<float>(idx),
                                   f.at<float>(idw), rows, n, e);
  });
  step->info.flops = 10.0 * double(x.numel());
  step->info.bytes = double(3 * x.numel() + 2 * n) * 4;
  return step;
}

std::unique_ptr<Step> lower_layer_norm(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32) throw_op_error(op, "only float inputs compile");
  std::vector<int64_t> all;
  for (int64_t i = 0; i < int64_t(x.shape.size()); ++i) all.push_back(i);
  NormView v = view_of(op, x.shape, ctx.const_ints(op, "axes", all));
  int ig = param(op, ctx, "gamma", v.n), ib = param(op, ctx, "beta", v.n), ix = x.id, io = o.id;
  float e = float(ctx.const_float(op, "epsilon", 1e-5));
  auto step = make_step("layer_norm", op, [=](const Frame& f) {
    kernels::layer_norm_f32(f.at<float>(ix), ig < 0 ? nullptr : f.at<float>(ig), ib < 0 ? nullptr : f.at<float>(ib),
                            f.at<float>(io), v.outer, v.n, v.inner, e);
  });
  step->info.flops = 7.0 * double(x.numel());
  step->info.bytes = double(2 * x.numel() + (ig < 0 ? 0 : v.n) + (ib < 0 ? 0 : v.n)) * 4;
  return step;
}

}  // namespace

void register_fused_norm_lowerings() {
  register_lowering("milrt_rms_norm", lower_milrt_rms_norm);
  register_lowering("rms_norm", lower_rms_norm);
  register_lowering("milrt_rms_norm_grad", lower_milrt_rms_norm_grad);
  register_lowering("layer_norm", lower_layer_norm);
}

}  // namespace milrt::rt
