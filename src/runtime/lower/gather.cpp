// Lowering of gather (batch_dims = 0): [outer, n, inner] rows picked by index.
#include <string>

#include "kernels/generic/gather.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

std::unique_ptr<Step> lower_gather(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), idx = ctx.input(op, "indices"), o = ctx.output(op);
  if (ctx.const_int(op, "batch_dims", 0) != 0) throw_op_error(op, "gather with batch_dims is not compiled yet");
  if (idx.dtype != DType::Int32) throw_op_error(op, "gather indices must be integers to compile");
  int64_t rank = int64_t(x.shape.size());
  int64_t axis = norm_axis(op, ctx.const_int(op, "axis", 0), rank);
  int64_t outer, n, inner;
  split_dims(x.shape, axis, axis, outer, n, inner);
  int64_t m = idx.numel();
  size_t elem = dtype_size(x.dtype);
  int ix = x.id, ii = idx.id, io = o.id;
  auto step = make_step("gather", op, [=](const Frame& f) {
    int64_t bad = kernels::gather_rows(f.ptr[size_t(ix)], outer, n, inner, elem, f.at<int32_t>(ii), m, f.ptr[size_t(io)]);
    if (bad >= 0)
      throw Error("error: gather: index " + std::to_string(f.at<int32_t>(ii)[bad]) +
                  " is out of range for a dim of size " + std::to_string(n));
  });
  step->info.bytes = double(o.numel() * 2 + m) * double(elem);
  return step;
}

}  // namespace

void register_gather_lowerings() { register_lowering("gather", lower_gather); }

}  // namespace milrt::rt
