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

// A result stored in bf16 (CompileOptions::bf16_operands) is checked as the
// fp32 value it rounds; true when it is one.
bool bf16_result(ValueRef& v) {
  if (v.dtype != DType::BF16) return false;
  v.dtype = DType::FP32;
  return true;
}

std::unique_ptr<Step> lower_silu_mul(const Op& op, LowerCtx& ctx) {
  ValueRef a = ctx.input(op, "a"), b = ctx.input(op, "b"), y = ctx.output(op);
  const bool y16 = bf16_result(y);
  require_one_fp32_shape(op, {a, b, y});
  const int ia = a.id, ib = b.id, iy = y.id;
  const int64_t n = a.numel();
  auto step = y16 ? make_step("silu_mul[to bf16]", op, [=](const Frame& f) {
    kernels::silu_mul_f32_to_bf16(f.at<float>(ia), f.at<float>(ib), f.at<uint16_t>(iy), n);
  })
                  : make_step("silu_mul", op, [=](const Frame& f) {
    kernels::silu_mul_f32(f.at<float>(ia), f.at<float>(ib), f.at<float>(iy), n);
  });
  step->info.bytes = double(n) * (8 + (y16 ? 2 : 4));
  return step;
}

std::unique_ptr<Step> lower_silu_mul_grad(const Op& op, LowerCtx& ctx) {
  ValueRef a = ctx.input(op, "a"), b = ctx.input(op, "b"), dy = ctx.input(op, "dy");
  ValueRef da = ctx.output(op, 0), db = ctx.output(op, 1);
  const bool da16 = bf16_result(da), db16 = bf16_result(db);
  require_one_fp32_shape(op, {a, b, dy, da, db});
  const int ia = a.id, ib = b.id, idy = dy.id, ida = da.id, idb = db.id;
  const int64_t n = a.numel();
  if (da16 || db16) {
    auto step = make_step("silu_mul_grad[to bf16]", op, [=](const Frame& f) {
      kernels::silu_mul_backward(f.at<float>(ia), f.at<float>(ib), f.at<float>(idy), f.ptr[size_t(ida)], da16,
                                 f.ptr[size_t(idb)], db16, n);
    });
    step->info.bytes = double(n) * (12 + (da16 ? 2 : 4) + (db16 ? 2 : 4));
    return step;
  }
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
