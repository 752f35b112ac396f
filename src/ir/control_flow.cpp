#include "ir/control_flow.h"

#include <functional>
#include <set>

#include "ir/op_registry.h"
#include "milrt/error.h"

namespace milrt {
namespace {

[[noreturn]] void fail_at(const Op& owner, const SourceLoc& loc, const std::string& msg) {
  std::string where = loc.str();
  if (where.empty()) where = owner.loc.str();
  std::string who = owner.type + (owner.outputs.empty() ? "" : " '" + owner.outputs[0].name + "'");
  throw Error((where.empty() ? "" : where + ": ") + "error: " + who + ": " + msg);
}

void vars_of(const Arg& a, const std::function<void(const std::string&)>& fn) {
  if (a.kind == Arg::Kind::Var) fn(a.var);
  for (auto& e : a.elems) vars_of(e, fn);
}

void rename_vars(Arg& a, const std::string& from, const std::string& to) {
  if (a.kind == Arg::Kind::Var && a.var == from) a.var = to;
  for (auto& e : a.elems) rename_vars(e, from, to);
}

// Renames the free occurrences of `from` in block b (names b defines are not free).
void rename_free(Block& b, const std::string& from, const std::string& to) {
  for (auto& prm : b.inputs)
    if (prm.name == from) return;
  for (Op& op : b.ops) {
    for (Input& in : op.inputs) rename_vars(in.arg, from, to);
    for (Block& inner : op.blocks) rename_free(inner, from, to);
    for (auto& o : op.outputs)
      if (o.name == from) return;  // defined from here on (the verifier refuses this)
  }
  for (auto& o : b.outputs)
    if (o == from) o = to;
}

std::string type_list(const std::vector<Type>& ts) {
  std::string r = "(";
  for (size_t i = 0; i < ts.size(); ++i) r += (i ? ", " : "") + ts[i].str();
  return r + ")";
}

// Same dtype and rank, no contradicting known dims.
bool compatible(const Type& a, const Type& b) { return type_admits(a, b) && type_admits(b, a); }

// The type that admits both: unknown where the dims differ.
Type merged(const Type& a, const Type& b) {
  Type t = a;
  if (t.is_tensor() && b.is_tensor() && a.shape.size() == b.shape.size())
    for (size_t i = 0; i < t.shape.size(); ++i)
      if (a.shape[i] != b.shape[i]) t.shape[i] = -1;
  return t;
}

Type arg_type(const Op& op, const Arg& a, const ValueTable& values) {
  if (a.kind == Arg::Kind::Const) return a.lit->type;
  if (a.kind == Arg::Kind::Tuple) throw_op_error(op, "a loop variable cannot be a tuple");
  auto it = values.find(a.var);
  if (it == values.end()) throw_op_error(op, "uses undefined value '" + a.var + "'");
  return it->second.type;
}

void check_inputs(const Op& op, std::initializer_list<const char*> keys) {
  for (const Input& in : op.inputs) {
    bool ok = in.key == kCapturesKey;
    for (const char* k : keys) ok |= in.key == k;
    if (!ok) throw_op_error(op, "unknown input '" + in.key + "'");
  }
  for (const char* k : keys)
    if (!op.has(k)) throw_op_error(op, std::string("missing required input '") + k + "'");
}

}  // namespace

bool is_predicate_type(const Type& t) {
  if (!t.is_tensor() || t.dtype != DType::Bool) return false;
  for (int64_t d : t.shape)
    if (d != 1) return false;
  return true;
}

std::vector<std::string> captured_values(const Op& op) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::function<void(const Block&, std::set<std::string>)> walk = [&](const Block& b, std::set<std::string> defined) {
    auto read = [&](const std::string& v) {
      if (!defined.count(v) && seen.insert(v).second) out.push_back(v);
    };
    for (auto& prm : b.inputs) defined.insert(prm.name);
    for (const Op& inner : b.ops) {
      for (const Input& in : inner.inputs) vars_of(in.arg, read);
      for (const Block& nb : inner.blocks) walk(nb, defined);  // names defined around `inner` are no captures
      for (auto& o : inner.outputs) defined.insert(o.name);
    }
    for (auto& o : b.outputs) read(o);
  };
  for (const Block& b : op.blocks) walk(b, {});
  return out;
}

void expose_captures(Function& f) {
  for (Op& op : f.ops) {
    if (op.blocks.empty() || op.has(kCapturesKey)) continue;
    std::vector<Arg> elems;
    for (auto& v : captured_values(op)) elems.push_back(Arg::of_var(v));
    op.inputs.push_back({kCapturesKey, Arg::of_tuple(std::move(elems)), false});
  }
}

void hide_captures(Function& f) {
  for (Op& op : f.ops) {
    const Arg* caps = op.arg(kCapturesKey);
    if (!caps) continue;
    const std::vector<std::string> names = captured_values(op);
    if (caps->kind != Arg::Kind::Tuple || caps->elems.size() != names.size())
      throw_op_error(op, "internal: a pass changed the captured values of the op's blocks");
    for (size_t i = 0; i < names.size(); ++i) {
      const Arg& e = caps->elems[i];
      if (e.kind != Arg::Kind::Var) throw_op_error(op, "internal: a pass replaced captured value '" + names[i] + "' by a literal");
      if (e.var == names[i]) continue;
      for (Block& b : op.blocks) rename_free(b, names[i], e.var);
    }
    op.erase(kCapturesKey);
  }
}

std::vector<Type> verify_block(const Op& owner, const Block& b, const ValueTable& values, const std::string& opset) {
  ValueTable scope = values;
  for (auto& prm : b.inputs) {
    if (scope.count(prm.name))
      fail_at(owner, prm.loc.file.empty() ? b.loc : prm.loc, "block parameter '" + prm.name + "' redefines a visible value");
    scope[prm.name] = {prm.type, nullptr};
  }
  for (const Op& op : b.ops) {
    for (auto& o : op.outputs)
      if (scope.count(o.name)) throw_op_error(op, "redefines value '" + o.name + "'");
    std::vector<Type> inferred = infer_op(op, scope, opset);
    for (size_t i = 0; i < op.outputs.size(); ++i)
      if (!type_admits(inferred[i], op.outputs[i].type))
        throw_op_error(op, "output '" + op.outputs[i].name + "' is declared " + op.outputs[i].type.str() +
                               " but the op gives " + inferred[i].str());
    define_outputs(op, scope);
  }
  std::vector<Type> out;
  for (auto& o : b.outputs) {
    auto it = scope.find(o);
    if (it == scope.end()) fail_at(owner, b.loc, "block returns undefined value '" + o + "'");
    out.push_back(it->second.type);
  }
  return out;
}

std::vector<Type> infer_control_flow(const Op& op, const ValueTable& values, const std::string& opset) {
  if (op.type == "while_loop") {
    check_inputs(op, {"loop_vars"});
    if (op.blocks.size() != 2) throw_op_error(op, "needs two blocks (cond, body), has " + std::to_string(op.blocks.size()));
    const Arg& lv = *op.arg("loop_vars");
    std::vector<Type> vars;
    if (lv.kind == Arg::Kind::Tuple) for (auto& e : lv.elems) vars.push_back(arg_type(op, e, values));
    else vars.push_back(arg_type(op, lv, values));
    if (vars.empty()) throw_op_error(op, "has no loop variables");
    for (size_t k = 0; k < 2; ++k) {
      const Block& b = op.blocks[k];
      const char* what = k == 0 ? "cond block" : "body";
      if (b.inputs.size() != vars.size())
        fail_at(op, b.loc, std::string(what) + " takes " + std::to_string(b.inputs.size()) + " parameters for " +
                               std::to_string(vars.size()) + " loop variables");
      for (size_t i = 0; i < vars.size(); ++i)
        if (!type_admits(vars[i], b.inputs[i].type))
          fail_at(op, b.loc, std::string(what) + " parameter '" + b.inputs[i].name + "' is " + b.inputs[i].type.str() +
                                 " but loop variable " + std::to_string(i) + " is " + vars[i].str());
    }
    std::vector<Type> c = verify_block(op, op.blocks[0], values, opset);
    if (c.size() != 1 || !is_predicate_type(c[0]))
      fail_at(op, op.blocks[0].loc, "the cond block must return one bool with one element, not " + type_list(c));
    std::vector<Type> body = verify_block(op, op.blocks[1], values, opset);
    if (body.size() != vars.size())
      fail_at(op, op.blocks[1].loc, "the body returns " + std::to_string(body.size()) + " values for " +
                                        std::to_string(vars.size()) + " loop variables");
    std::vector<Type> out;
    for (size_t i = 0; i < vars.size(); ++i) {
      const Type& carried = op.blocks[1].inputs[i].type;
      if (!compatible(body[i], carried))
        fail_at(op, op.blocks[1].loc, "the body returns " + body[i].str() + " for loop variable '" +
                                          op.blocks[1].inputs[i].name + "' of type " + carried.str());
      out.push_back(merged(merged(carried, vars[i]), body[i]));
    }
    if (op.outputs.size() != vars.size())
      throw_op_error(op, "declares " + std::to_string(op.outputs.size()) + " outputs for " +
                             std::to_string(vars.size()) + " loop variables");
    return out;
  }
  if (op.type == "cond") {
    check_inputs(op, {"pred"});
    if (op.blocks.size() != 2)
      throw_op_error(op, "needs two blocks (true and false branches), has " + std::to_string(op.blocks.size()));
    const Arg& pred = *op.arg("pred");
    if (pred.kind == Arg::Kind::Tuple) throw_op_error(op, "'pred' cannot be a tuple");
    Type pt = arg_type(op, pred, values);
    if (!is_predicate_type(pt)) throw_op_error(op, "'pred' must be a bool with one element, not " + pt.str());
    std::vector<Type> br[2];
    for (size_t k = 0; k < 2; ++k) {
      if (!op.blocks[k].inputs.empty()) fail_at(op, op.blocks[k].loc, "a branch of cond takes no parameters");
      br[k] = verify_block(op, op.blocks[k], values, opset);
    }
    if (br[0].size() != br[1].size())
      fail_at(op, op.blocks[1].loc, "the branches return " + type_list(br[0]) + " and " + type_list(br[1]));
    std::vector<Type> out;
    for (size_t i = 0; i < br[0].size(); ++i) {
      if (!br[0][i].is_tensor() || !compatible(br[0][i], br[1][i]))
        fail_at(op, op.blocks[1].loc, "the branches return " + type_list(br[0]) + " and " + type_list(br[1]) +
                                          " (output " + std::to_string(i) + " differs)");
      out.push_back(merged(br[0][i], br[1][i]));
    }
    if (op.outputs.size() != out.size())
      throw_op_error(op, "declares " + std::to_string(op.outputs.size()) + " outputs; its branches return " +
                             std::to_string(out.size()));
    return out;
  }
  throw_op_error(op, "has nested blocks, which only cond and while_loop have");
}

void register_control_flow_ops() {
  // Typed by infer_control_flow (infer_op dispatches there): these schemas list
  // the ops for `milrt check --ops` and are never asked to infer.
  auto never = [](InferCtx& ctx) { ctx.fail("internal: control flow is typed with its blocks"); };
  register_op({"while_loop", {{"loop_vars"}}, 1, 1 << 16, never});
  register_op({"cond", {{"pred"}}, 0, 1 << 16, never});
}

}  // namespace milrt
