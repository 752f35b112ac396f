// Pass: common subexpression elimination.
//
// Two ops compute the same values when they have the same type, the same
// inputs (the same variables, equal literals, whatever the order or block
// they were written in) and the same output types; `const` ops with equal
// values are the commonest case. Walking the SSA order, each op is first
// rewritten to use the survivors of earlier merges, then compared with the
// ops already kept: a duplicate is dropped and the uses of its outputs read
// the first op's outputs instead. One sweep suffices, since an op's inputs
// are final by the time it is reached.
//
// Function outputs keep their names: a duplicate defining a function output
// stays when it is a `const` or an `identity` (nothing to save), and
// otherwise becomes `identity` ops of the first op's outputs.
//
// Ops that are not functions of their inputs (random_* draws, state reads and
// updates of iOS18) are never merged, nor are autodiff's recomputed copies
// (outputs named `*_recomputed`, GradOptions::recompute): they repeat a forward
// op on purpose, so that the forward value need not live until the backward pass.
#include <algorithm>
#include <set>
#include <unordered_map>

#include "passes/pass_registry.h"

namespace milrt {
namespace {

bool recomputed_copy(const Op& op) {
  static const std::string kSuffix = "_recomputed";
  const std::string& n = op.outputs.empty() ? op.name : op.outputs[0].name;
  return n.size() >= kSuffix.size() && n.compare(n.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

bool mergeable(const Op& op) {
  // Ops with blocks are never merged: their inputs do not say what their blocks compute.
  return op.type.rfind("random_", 0) != 0 && op.type != "read_state" && op.type != "coreml_update_state" &&
         op.blocks.empty() && !recomputed_copy(op);
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t literal_hash(const Literal& l) {
  const Tensor& v = l.value;
  if (v.empty()) return 0;
  if (v.dtype() != DType::String) return fnv1a(v.data(), v.nbytes());
  uint64_t h = fnv1a(nullptr, 0);
  for (const std::string& s : v.strings()) h = fnv1a(s.data(), s.size() + 1, h);  // + 1: the terminator separates
  return h;
}

// A key equal for equal args (it may also collide; equality is checked after).
std::string arg_key(const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Var: return "%" + a.var;
    case Arg::Kind::Const: {
      std::string s = "=";  // (appended piecewise: GCC 12 warns falsely on "=" + str + ...)
      s += a.lit->type.str();
      s += '#';
      s += std::to_string(literal_hash(*a.lit));
      return s;
    }
    case Arg::Kind::Tuple: {
      std::string s = "(";
      for (const Arg& e : a.elems) s += arg_key(e) + ",";
      return s + ")";
    }
  }
  return "";
}

std::vector<const Input*> sorted_inputs(const Op& op) {
  std::vector<const Input*> r;
  for (const Input& in : op.inputs) r.push_back(&in);
  std::sort(r.begin(), r.end(), [](const Input* a, const Input* b) { return a->key < b->key; });
  return r;
}

std::string signature(const Op& op) {
  std::string s = op.type + "(";
  for (const Input* in : sorted_inputs(op)) s += in->key + ":" + arg_key(in->arg) + ";";
  s += ")->";
  for (const Output& o : op.outputs) s += o.type.str() + ";";
  return s;
}

bool same_computation(const Op& a, const Op& b) {
  if (a.type != b.type || a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size()) return false;
  const auto ia = sorted_inputs(a), ib = sorted_inputs(b);
  for (size_t i = 0; i < ia.size(); ++i)
    if (ia[i]->key != ib[i]->key || !(ia[i]->arg == ib[i]->arg)) return false;
  for (size_t i = 0; i < a.outputs.size(); ++i)
    if (a.outputs[i].type != b.outputs[i].type) return false;
  return true;
}

void rename_uses(Arg& a, const std::unordered_map<std::string, std::string>& to) {
  if (a.kind == Arg::Kind::Var) {
    auto it = to.find(a.var);
    if (it != to.end()) a.var = it->second;
  }
  for (Arg& e : a.elems) rename_uses(e, to);
}

Op make_identity(const Op& dup, const Output& out, const std::string& source) {
  Op id;
  id.type = "identity";
  id.name = out.name;
  id.loc = dup.loc;
  id.inputs.push_back({"x", Arg::of_var(source), false});
  id.outputs.push_back(out);
  return id;
}

void cse_function(Function& f) {
  const std::set<std::string> fn_outputs(f.outputs.begin(), f.outputs.end());
  std::unordered_map<std::string, std::string> survivor;        // dropped value -> value replacing it
  std::unordered_map<std::string, std::vector<size_t>> by_sig;  // signature -> positions in `ops`
  std::vector<Op> ops;
  ops.reserve(f.ops.size());
  for (Op& op : f.ops) {
    for (Input& in : op.inputs) rename_uses(in.arg, survivor);
    if (!mergeable(op)) {
      ops.push_back(std::move(op));
      continue;
    }
    std::vector<size_t>& same_sig = by_sig[signature(op)];
    auto first = std::find_if(same_sig.begin(), same_sig.end(),
                              [&](size_t i) { return same_computation(ops[i], op); });
    if (first == same_sig.end()) {
      same_sig.push_back(ops.size());
      ops.push_back(std::move(op));
      continue;
    }
    std::vector<std::string> kept;  // names, not a reference: `ops` grows below
    for (const Output& o : ops[*first].outputs) kept.push_back(o.name);
    bool defines_output = false;
    for (const Output& o : op.outputs) defines_output = defines_output || fn_outputs.count(o.name) > 0;
    if (defines_output && (op.type == "const" || op.type == "identity")) {
      ops.push_back(std::move(op));
      continue;
    }
    std::vector<Op> identities;
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      if (fn_outputs.count(op.outputs[k].name))
        identities.push_back(make_identity(op, op.outputs[k], kept[k]));
      else
        survivor[op.outputs[k].name] = kept[k];
    }
    for (Op& id : identities) ops.push_back(std::move(id));
  }
  f.ops = std::move(ops);
}

}  // namespace

namespace passes {
void cse(Program& p) {
  for (Function& f : p.functions) cse_function(f);
}
}  // namespace passes

}  // namespace milrt
