// Lowering of softmax onto the vectorized softmax kernel.
#include "kernels/generic/softmax.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {
std::unique_ptr<Step> lower_softmax(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  int64_t axis = norm_axis(op, ctx.const_int(op, "axis", -1), int64_t(x.shape.size()));
  int64_t outer, n, inner;
  split_dims(x.shape, axis, axis, outer, n, inner);
  int ix = x.id, io = o.id;
  return make_step("softmax", op, [=](const Frame& f) {
    kernels::scaled_masked_softmax_f32(f.at<float>(ix), f.at<float>(io), outer, n, inner);
  });
}

}  // namespace

void register_softmax_lowerings() { register_lowering("softmax", lower_softmax); }

}  // namespace milrt::rt
