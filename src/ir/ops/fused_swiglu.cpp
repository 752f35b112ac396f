// Schemas of milrt_silu_mul and its gradient, SwiGLU's gate as the
// transformer builders write it (src/llm/transformer_block.cpp):
//
//   milrt_silu_mul(a, b) -> y              y = silu(a) · b = a · sigmoid(a) · b
//   milrt_silu_mul_grad(a, b, dy) -> da, db
//       da = dy · b · σ(a) · (1 + a · (1 - σ(a))), db = dy · a · σ(a)
//
// a, b and dy: one fp32 tensor type (no broadcast); the results have it.
#include "ir/op_registry.h"

namespace milrt {
namespace {

void require_same_fp32(InferCtx& c, const std::vector<const char*>& keys) {
  const Type& a = c.type(keys[0]);
  if (!a.is_tensor() || a.dtype != DType::FP32) c.fail(std::string(keys[0]) + " must be an fp32 tensor, got " + a.str());
  for (const char* k : keys)
    if (c.type(k) != a) c.fail(std::string(k) + " must be " + a.str() + ", got " + c.type(k).str());
}

void infer_silu_mul(InferCtx& c) {
  require_same_fp32(c, {"a", "b"});
  c.set_out(c.type("a"));
}

void infer_silu_mul_grad(InferCtx& c) {
  require_same_fp32(c, {"a", "b", "dy"});
  c.out = {c.type("a"), c.type("a")};
}

}  // namespace

void register_swiglu_ops() {
  register_op({"milrt_silu_mul", {{"a"}, {"b"}}, 1, 1, infer_silu_mul});
  register_op({"milrt_silu_mul_grad", {{"a"}, {"b"}, {"dy"}}, 2, 2, infer_silu_mul_grad});
}

}  // namespace milrt
