// Lowering of the iOS18 state ops onto the plan's persistent state buffers
// (see plan.h). compile() decides where values live: the result of a
// read_state or coreml_update_state consumed before the next update of its
// state is given the state's own buffer, so the step finds source and
// destination equal and copies nothing.
#include <cstring>

#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes) std::memcpy(dst, src, bytes);
}

std::unique_ptr<Step> lower_read_state(const Op& op, LowerCtx& ctx) {
  ValueRef s = ctx.input(op, "input"), o = ctx.output(op);
  if (s.shape != o.shape || s.dtype != o.dtype) throw_op_error(op, "the state and the result differ in type");
  int is = s.id, io = o.id;
  size_t bytes = size_t(o.numel()) * dtype_size(o.dtype);
  auto step = make_step("read_state", op, [=](const Frame& f) { copy_if_distinct(f.ptr[size_t(io)], f.ptr[size_t(is)], bytes); });
  step->info.bytes = double(bytes);
  return step;
}

// Writes the value into the state buffer at this point of the program, and
// gives the value back as the op's result.
std::unique_ptr<Step> lower_update_state(const Op& op, LowerCtx& ctx) {
  ValueRef s = ctx.input(op, "state"), v = ctx.input(op, "value"), o = ctx.output(op);
  if (s.shape != v.shape || s.dtype != v.dtype) throw_op_error(op, "the state and the value differ in type");
  int is = s.id, iv = v.id, io = o.id;
  size_t bytes = size_t(v.numel()) * dtype_size(v.dtype);
  auto step = make_step("coreml_update_state", op, [=](const Frame& f) {
    copy_if_distinct(f.ptr[size_t(is)], f.ptr[size_t(iv)], bytes);
    copy_if_distinct(f.ptr[size_t(io)], f.ptr[size_t(is)], bytes);  // nothing when the result lives in the state
  });
  step->info.bytes = double(bytes) * 2;
  return step;
}

}  // namespace

void register_state_lowerings() {
  register_lowering("read_state", lower_read_state);
  register_lowering("coreml_update_state", lower_update_state);
}

}  // namespace milrt::rt
