// Lowering of milrt_silu_mul and milrt_silu_mul_grad (ir/ops/fused_swiglu.cpp)
// onto kernels/generic/swiglu.h.
#include "kernels/generic/swiglu.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

void require_one_fp32_shape(const Op& op, const std::vector<ValueRef>& vs) {
  for (const ValueRef& v : vs)
    if (v.dtype != DType::FP32 || v.shape != vs[0].shape) throw_op_error(op, "operands must be one fp32 shape");
}

std::unique_ptr<Step> lower_silu_mul(const Op& op, LowerCtx& ctx) {
  ValueRef a = ctx.input(op, "a"), b = ctx.input(op, "b"), y = ctx.output(op);
  require_one_fp32_shape(op, {a, b, y});
  const int ia = a.id, ib = b.id, iy = y.id;
  const int64_t n = a.numel();
  auto step = make_step("silu_mul", op, [=](const Frame& f) {
    kernels::silu_mul_f32(f.at<float>(ia), f.at<float>(ib), f.at<float>(iy), n);
  });
  step->info.bytes = double(3 * n) * 4;
  return step;
}

std::unique_ptr<Step> lower_silu_mul_grad(const Op& op, LowerCtx& ctx) {
  ValueRef a = ctx.input(op, "a"), b = ctx.input(op, "b"), dy = ctx.input(op, "dy");
  ValueRef da = ctx.output(op, 0), db = ctx.output(op, 1);
  require_one_fp32_shape(op, {a, b, dy, da, db});
  const int ia = a.id, ib = b.id, idy = dy.id, ida = da.id, idb = db.id;
  const int64_t n = a.numel();
  auto step = make_step("silu_mul_grad", op, [=](const Frame& f) {
    kernels::silu_mul_backward_f32(f.at<float>(ia), f.at<float>(ib), f.at<float>(idy), f.at<float>(ida),
                                   f.at<float>(idb), n);
  });
  step->info.bytes = double(5 * n) * 4;
  return step;
}

}  // namespace

void register_swiglu_lowerings() {
  register_lowering("milrt_silu_mul", lower_silu_mul);
  register_lowering("milrt_silu_mul_grad", lower_silu_mul_grad);
}

}  // namespace milrt::rt
