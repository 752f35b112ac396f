// scaled_dot_product_attention with an attn_mask, written out as the ops it
// stands for: Q·Kᵀ, times 1/√E, plus the mask, softmax over the keys, ·V.
// The Neural Engine's fused attention ignores attn_mask (docs), while the
// explicit form runs there (the docs' stories_mil.h does exactly this), so
// the Neural Engine's pipeline runs this pass; the CPU pipeline fuses the op
// into milrt_attention instead.
//
// A bool mask (true: the key takes part) becomes an additive one: 0 where
// true, the dtype's lowest finite value where false (fp16: -65504, as the
// second seed's causal mask), computed at compile time when the mask is a
// constant and by a select op (a host step on the engine) otherwise. The
// lowest finite value rather than -inf keeps fp16 arithmetic finite; the only
// difference from the op's definition is a row masked out entirely, which
// comes out as the mean of the values instead of NaN.
#include <cmath>
#include <limits>
#include <set>

#include "milrt/passes.h"
#include "passes/rewriter.h"

namespace milrt::passes {
namespace {

double lowest(DType dt) {
  return dt == DType::FP16 ? -65504.0 : double(std::numeric_limits<float>::lowest());
}

bool expand(const Op& op, Replacement& r) {
  if (op.type != "scaled_dot_product_attention" || !op.has("attn_mask")) return false;
  const Arg& q = *op.arg("query");
  const Arg& mask = *op.arg("attn_mask");
  const Type qt = r.info(q).type;
  if (qt.shape.empty() || qt.shape.back() <= 0) return false;
  const DType dt = qt.dtype;
  Arg scores = r.emit("matmul", "scores",
                      {{"x", q}, {"y", *op.arg("key")}, {"transpose_x", r.boolean(false)}, {"transpose_y", r.boolean(true)}});
  Arg scaled = r.emit("mul", "scaled", {{"x", scores}, {"y", r.scalar(dt, 1.0 / std::sqrt(double(qt.shape.back())))}});
  Arg additive = mask;
  const ValueInfo m = r.info(mask);
  if (m.type.dtype == DType::Bool) {
    if (m.value) {
      Tensor t(dt, m.type.shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), m.value->at(size_t(i)) != 0 ? 0.0 : lowest(dt));
      additive = r.constant(std::move(t), "mask");
    } else {
      additive = r.emit("select", "mask", {{"cond", mask}, {"a", r.scalar(dt, 0)}, {"b", r.scalar(dt, lowest(dt))}});
    }
  } else if (m.type.dtype != dt) {
    additive = r.as_operand(mask, dt, m.type.shape, "mask");
  }
  Arg masked = r.emit("add", "masked", {{"x", scaled}, {"y", additive}});
  Arg probs = r.emit("softmax", "probs", {{"x", masked}, {"axis", r.scalar(DType::Int32, -1)}});
  r.finish("matmul", {{"x", probs}, {"y", *op.arg("value")}, {"transpose_x", r.boolean(false)}, {"transpose_y", r.boolean(false)}});
  return true;
}

}  // namespace

void expand_masked_attention(Program& p) {
  for (auto& f : p.functions) {
    const std::set<std::string> read_before = names_read(f);
    rewrite_ops(f, p.version == "1.3", expand);
    drop_orphaned_consts(f, read_before);  // a bool mask folded into its additive form
  }
}

}  // namespace milrt::passes
