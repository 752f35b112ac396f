// milrt_elementwise(inputs = (a, b, ...), expr = "...")[fused_from = "..."]:
// a tree of elementwise ops (see ir/elementwise_expr.h) computed in one pass
// over the inputs broadcast together. Made only by the fuse-elementwise pass.
#include "ir/elementwise_expr.h"
#include "ir/op_registry.h"

namespace milrt {
namespace {

void infer_elementwise(InferCtx& ctx) {
  std::vector<const InferInput*> ins = ctx.tuple("inputs");
  if (ins.empty()) ctx.fail("input 'inputs' must name at least one tensor");
  Shape s;
  for (size_t k = 0; k < ins.size(); ++k) {
    const Type& t = ins[k]->type;
    if (ins[k]->is_tuple || !t.is_tensor() || (t.dtype != DType::FP16 && t.dtype != DType::FP32))
      ctx.fail("inputs[" + std::to_string(k) + "] must be a tensor of fp16 or fp32, got " + t.str());
    s = broadcast_shapes(ctx, s, t.shape);
  }
  std::optional<std::string> text = ctx.const_str("expr");
  if (!text) ctx.fail("input 'expr' must be a constant string");
  try {
    ew::parse_expr(*text, int(ins.size()));
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  if (ctx.has("fused_from") && !ctx.const_str("fused_from")) ctx.fail("input 'fused_from' must be a constant string");
  Type out = ins[0]->type;
  out.shape = s;
  out.bare = out.bare && s.empty();
  ctx.set_out(out);
}

}  // namespace

void register_fused_elementwise_ops() {
  register_op({"milrt_elementwise", {{"inputs"}, {"expr"}, {"fused_from", false}}, 1, 1, infer_elementwise});
}

}  // namespace milrt
