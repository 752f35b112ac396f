// Pass: dead code elimination.
//
// MIL ops are pure functions of their inputs, so an op none of whose outputs
// reaches a function output (directly or through other ops) can go. One
// backward sweep over the SSA order finds the live ops: the producers of the
// outputs, then the producers of every input of a live op.
//
// The exception is an op that changes state (iOS18 coreml_update_state): its
// effect is the point even when its result is unused, so it always stays.
#include <unordered_set>

#include "passes/pass_registry.h"

namespace milrt {
namespace {

// A state update has an effect, also inside a block of a control-flow op.
bool has_effect(const Op& op) {
  bool effect = op.type == "coreml_update_state";
  for (const Block& b : op.blocks)
    for (const Op& inner : b.ops) effect = effect || has_effect(inner);
  return effect;
}

void mark_used(const Arg& a, std::unordered_set<std::string>& live) {
  if (a.kind == Arg::Kind::Var) live.insert(a.var);
  for (const Arg& e : a.elems) mark_used(e, live);
}

void dce_function(Function& f) {
  std::unordered_set<std::string> live(f.outputs.begin(), f.outputs.end());
  std::vector<bool> keep(f.ops.size(), false);
  for (size_t i = f.ops.size(); i-- > 0;) {
    const Op& op = f.ops[i];
    keep[i] = has_effect(op);
    for (const Output& o : op.outputs) keep[i] = keep[i] || live.count(o.name) > 0;
    if (!keep[i]) continue;
    for (const Input& in : op.inputs) mark_used(in.arg, live);
  }
  std::vector<Op> ops;
  for (size_t i = 0; i < f.ops.size(); ++i)
    if (keep[i]) ops.push_back(std::move(f.ops[i]));
  f.ops = std::move(ops);
}

}  // namespace

namespace passes {
void dce(Program& p) {
  for (Function& f : p.functions) dce_function(f);
}
}  // namespace passes

}  // namespace milrt
