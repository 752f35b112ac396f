// Schema of milrt_rope, the rotary position embedding the transformer
// builders write (src/llm/transformer_block.cpp):
//
//   milrt_rope(x, cos, sin, transpose?) -> y
//
// x [..., T, W] fp32 with W even; cos and sin [T, W] fp32, one row per
// position, the same for every leading index. Over each pair (2i, 2i+1) of
// the last dim, y[2i] = x[2i]·cos[2i] + x[2i+1]·sin[2i] and
// y[2i+1] = x[2i+1]·cos[2i+1] + x[2i]·sin[2i+1]; `transpose` (a constant
// bool, default false) applies the transposed map instead (each element
// takes its partner's sine: the gradient with respect to x). y has x's type.
#include "ir/op_registry.h"

namespace milrt {
namespace {

void infer_rope(InferCtx& c) {
  const Type& x = c.type("x");
  if (!x.is_tensor() || x.dtype != DType::FP32 || x.shape.size() < 2)
    c.fail("x must be an fp32 tensor of rank >= 2, got " + x.str());
  const int64_t t = x.shape[x.shape.size() - 2], w = x.shape.back();
  if (w >= 0 && w % 2 != 0) c.fail("x's last dim must be even (pairs), got " + std::to_string(w));
  auto dim_fits = [](int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; };
  for (const char* key : {"cos", "sin"}) {
    const Type& ty = c.type(key);
    if (!ty.is_tensor() || ty.dtype != DType::FP32 || ty.shape.size() != 2 || !dim_fits(ty.shape[0], t) ||
        !dim_fits(ty.shape[1], w))
      c.fail("input '" + std::string(key) + "' must be " + Type::tensor(DType::FP32, {t, w}).str() + ", got " + ty.str());
  }
  if (c.has("transpose") && !c.const_bool("transpose")) c.fail("transpose must be a constant bool");
  c.set_out(x);
}

}  // namespace

void register_rope_ops() { register_op({"milrt_rope", {{"x"}, {"cos"}, {"sin"}, {"transpose", false}}, 1, 1, infer_rope}); }

}  // namespace milrt
