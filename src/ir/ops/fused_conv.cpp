// milrt_conv: a conv (MIL semantics, every conv input as conv reads it)
// followed by its bias and one activation, made only by fuse-conv-epilogue.
//
//   y = act(conv(x, weight) + bias)   act: none, relu, sigmoid, silu, or
//                                      clip: min(max(v, alpha), beta)
#include "ir/op_registry.h"

namespace milrt {
namespace {

void infer_fused_conv(InferCtx& c) {
  // The conv part is conv's own rule, so the two cannot drift apart.
  const OpSchema* conv = find_schema("conv");
  if (!conv) c.fail("internal: conv is not registered");
  conv->infer(c);
  const std::string act = c.has("activation") ? c.const_str("activation").value_or("?") : "none";
  if (act != "none" && act != "relu" && act != "clip" && act != "sigmoid" && act != "silu")
    c.fail("activation must be a constant none, relu, clip, sigmoid or silu, got '" + act + "'");
  for (const char* k : {"alpha", "beta"}) {
    if (act == "clip" && !c.has(k)) c.fail(std::string("clip needs '") + k + "'");
    if (c.has(k) && (!c.type(k).is_scalar() || !c.const_float(k)))
      c.fail(std::string("'") + k + "' must be a constant scalar");
  }
  if (c.has("fused_from") && !c.const_str("fused_from")) c.fail("fused_from must be a constant string");
}

}  // namespace

void register_fused_conv_ops() {
  register_op({"milrt_conv",
               {{"x"}, {"weight"}, {"bias", false}, {"strides", false}, {"pad_type", false}, {"pad", false},
                {"dilations", false}, {"groups", false}, {"activation", false}, {"alpha", false}, {"beta", false},
                {"fused_from", false}},
               1, 1, infer_fused_conv});
}

}  // namespace milrt
