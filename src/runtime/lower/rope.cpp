// Lowering of milrt_rope (ir/ops/fused_rope.cpp) onto kernels/generic/rope.h:
// one pass over x where the primitives took a reshape, two slices, a concat,
// two products and a sum.
#include "kernels/generic/rope.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

std::unique_ptr<Step> lower_milrt_rope(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), cs = ctx.input(op, "cos"), sn = ctx.input(op, "sin"), y = ctx.output(op);
  if (x.dtype != DType::FP32 || x.shape.size() < 2) throw_op_error(op, "x must be an fp32 tensor of rank >= 2");
  const int64_t t = x.shape[x.shape.size() - 2], w = x.shape.back();
  for (const ValueRef* table : {&cs, &sn})
    if (table->dtype != DType::FP32 || table->shape != Shape{t, w}) throw_op_error(op, "cos and sin must be fp32 [T, W]");
  if (w % 2 != 0) throw_op_error(op, "x's last dim must be even");
  const int64_t batch = t * w > 0 ? x.numel() / (t * w) : 0;
  const bool transpose = ctx.const_bool(op, "transpose", false);
  const int ix = x.id, ic = cs.id, is = sn.id, iy = y.id;
  auto step = make_step("rope", op, [=](const Frame& f) {
    kernels::rope_f32(f.at<float>(ix), f.at<float>(ic), f.at<float>(is), f.at<float>(iy), batch, t, w, transpose);
  });
  step->info.flops = 3.0 * double(x.numel());
  step->info.bytes = double(2 * x.numel() + 2 * t * w) * 4;
  return step;
}

}  // namespace

void register_rope_lowerings() { register_lowering("milrt_rope", lower_milrt_rope); }

}  // namespace milrt::rt
