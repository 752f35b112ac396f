// Pass fold-scatter-add: adding a scatter-add of zeros scatters into the addend.
//
//   z = fill(shape, 0) | const(all zeros)
//   s = scatter(data = z, indices, updates, mode = "add")   (or scatter_along_axis, scatter_nd)
//   y = add(a, s) | add(s, a)
// becomes
//   y = scatter(data = a, indices, updates, mode = "add")
//
// Reverse-mode autodiff writes exactly this where a gathered value has other
// uses too: a tied embedding table (the rows the tokens gathered, plus the
// classifier's dense gradient), or the target logit of a cross-entropy loss
// picked with gather_along_axis (plus the softmax's gradient). Before, the
// step filled a table-sized tensor with zeros, copied it into the scatter's
// output and added it to `a`: three passes over memory for a few rows. After,
// the runtime scatters into `a` in place when `a` has no other reader.
//
// And a scatter-add into anything else moves out of an add:
//
//   y = add(a, scatter(data = d, indices, updates, mode = "add"))
// becomes
//   y = scatter(data = add(a, d), indices, updates, mode = "add")
//
// so that add(a, d) can fuse with d's producer (a GEMM takes a as its
// residual): a tied embedding's gradient accumulated over micro-steps
// (CompileOptions::accumulate_outputs) becomes the classifier's GEMM adding
// into the sum, then the embedding rows scattered into it, both in the
// output's memory. The rewrites repeat until none applies; the ops they
// leave unused are removed (as dce would).
//
// Only fp32 values, with the add's output, `a`, `s` (and `d`) all of one type
// (no broadcast), and `s` read by the add alone. Values change by rounding
// only where an index repeats or the additions reorder: a + (u1 + u2)
// becomes (a + u1) + u2.
#include <unordered_map>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

bool is_scatter(const std::string& type) {
  return type == "scatter" || type == "scatter_along_axis" || type == "scatter_nd";
}

bool all_zero(const Tensor& t) {
  for (size_t i = 0; i < size_t(t.numel()); ++i)
    if (t.at(i) != 0) return false;
  return true;
}

// Is `v` a tensor of zeros: a zero fill, or a constant whose elements are all zero?
bool is_zeros(const std::string& v, const std::unordered_map<std::string, const Op*>& producer,
              const passes::Replacement& r) {
  auto it = producer.find(v);
  if (it == producer.end()) return false;
  const Op& op = *it->second;
  if (op.type == "const") {
    const Arg* val = op.arg("val");
    return val && val->kind == Arg::Kind::Const && all_zero(val->lit->value);
  }
  if (op.type != "fill") return false;
  const Arg* value = op.arg("value");
  if (!value) return true;  // fill's value defaults to 0
  const ValueInfo info = r.info(*value);
  return info.value && info.value->numel() == 1 && info.value->at(0) == 0;
}

// One sweep over f; true when something was rewritten.
bool fold_function(Function& f, bool bare) {
  const std::unordered_map<std::string, int> uses = passes::count_uses(f);
  const Function original = f;  // producer points into it while f.ops is rebuilt
  std::unordered_map<std::string, const Op*> producer;
  for (const Op& op : original.ops)
    for (const Output& o : op.outputs) producer[o.name] = &op;

  bool changed = false;
  passes::rewrite_ops(f, bare, [&](const Op& op, passes::Replacement& r) {
    if (op.type != "add" || op.outputs.size() != 1) return false;
    const Type& out = op.outputs[0].type;
    if (!out.is_tensor() || out.dtype != DType::FP32) return false;
    const Arg* x = op.arg("x");
    const Arg* y = op.arg("y");
    if (!x || !y || x->kind != Arg::Kind::Var || y->kind != Arg::Kind::Var) return false;
    for (const auto& [s_arg, a_arg] : {std::pair{x, y}, std::pair{y, x}}) {
      auto p = producer.find(s_arg->var);
      if (p == producer.end() || !is_scatter(p->second->type)) continue;
      const Op& scatter = *p->second;
      auto u = uses.find(scatter.outputs[0].name);
      if (u == uses.end() || u->second != 1 || scatter.outputs[0].type != out) continue;
      if (r.info(*a_arg).type != out) continue;
      const Arg* data = scatter.arg("data");
      if (!data || data->kind != Arg::Kind::Var || r.info(*data).type != out) continue;
      // MIL's scatters add when no mode is given.
      if (scatter.has("mode")) {
        const auto mode = passes::const_str(r, scatter, "mode");
        if (!mode || *mode != "add") continue;
      }
      const Arg into = is_zeros(data->var, producer, r) ? *a_arg : r.emit("add", "sum", {{"x", *a_arg}, {"y", *data}});
      passes::Inputs in;
      for (const Input& i : scatter.inputs) in.push_back({i.key, i.key == "data" ? into : i.arg});
      r.finish(scatter.type, in);
      changed = true;
      return true;
    }
    return false;
  });
  return changed;
}

}  // namespace

namespace passes {
void fold_scatter_add(Program& p) {
  // Each rewrite moves one scatter outward past one add: a program has
  // finitely many, so this ends; the bound only guards against a mistake.
  for (int round = 0; round < 64; ++round) {
    bool changed = false;
    for (Function& f : p.functions) changed |= fold_function(f, p.version == "1.3");
    if (!changed) return;
    dce(p);  // the folded scatters and their zeros, which would count as readers next round
  }
}
}  // namespace passes

}  // namespace milrt
