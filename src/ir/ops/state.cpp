// Schemas of the iOS18 state ops, per coremltools iOS18/states.py and
// coreml/states.py: read_state(input: state<T>) -> T and
// coreml_update_state(state: state<T>, value: T) -> T (the value, after it was
// written into the state). T must be a tensor.
#include <algorithm>
#include <initializer_list>

#include "ir/op_registry.h"

namespace milrt {
namespace {

// The tensor type wrapped by state input `key`; fails unless it is a state<tensor>.
const Type& wrapped_tensor(const InferCtx& ctx, const std::string& key) {
  const Type& t = ctx.type(key);
  if (t.kind != Type::Kind::State || t.elems.size() != 1)
    ctx.fail("input '" + key + "' must be a state<tensor<...>> value, got " + t.str());
  if (!t.elems[0].is_tensor()) ctx.fail("input '" + key + "': a state can only wrap a tensor, got " + t.str());
  return t.elems[0];
}

void require_ios18(const InferCtx& ctx) {
  if (!ctx.opset_at_least("ios18")) ctx.fail("state ops need opset ios18, the function is " + ctx.opset());
}

// Same dtype and rank, and every dim equal where both are known.
bool same_tensor_type(const Type& a, const Type& b) {
  if (a.dtype != b.dtype || a.shape.size() != b.shape.size()) return false;
  for (size_t i = 0; i < a.shape.size(); ++i)
    if (a.shape[i] >= 0 && b.shape[i] >= 0 && a.shape[i] != b.shape[i]) return false;
  return true;
}

void infer_read_state(InferCtx& ctx) {
  require_ios18(ctx);
  ctx.set_out(wrapped_tensor(ctx, "input"));
}

void infer_update_state(InferCtx& ctx) {
  require_ios18(ctx);
  const Type& wrapped = wrapped_tensor(ctx, "state");
  const Type& value = ctx.type("value");
  if (!value.is_tensor()) ctx.fail("input 'value' must be a tensor, got " + value.str());
  static const std::initializer_list<DType> allowed = {DType::FP16,  DType::FP32,  DType::Int8,   DType::Int16,
                                                       DType::Int32, DType::UInt8, DType::UInt16, DType::Bool};
  if (std::find(allowed.begin(), allowed.end(), value.dtype) == allowed.end())
    ctx.fail("input 'value' has dtype " + std::string(dtype_name(value.dtype)) +
             "; a state holds fp16, fp32, int8, int16, int32, uint8, uint16 or bool");
  if (!same_tensor_type(wrapped, value))
    ctx.fail("input 'value' is " + value.str() + " but the state holds " + wrapped.str());
  ctx.set_out(value);
}

}  // namespace

void register_state_ops() {
  register_op({"read_state", {{"input"}}, 1, 1, infer_read_state});
  register_op({"coreml_update_state", {{"state"}, {"value"}}, 1, 1, infer_update_state});
}

}  // namespace milrt
