#include "ir/verifier.h"

#include <set>

#include "ir/control_flow.h"
#include "ir/op_registry.h"
#include "milrt/error.h"
#include "milrt/mil.h"

namespace milrt {
namespace {

[[noreturn]] void fail_op(const Op& op, const std::string& msg) { throw_op_error(op, msg); }

InferInput infer_input(const Op& op, const Arg& a, const ValueTable& values) {
  InferInput in;
  switch (a.kind) {
    case Arg::Kind::Var: {
      auto it = values.find(a.var);
      if (it == values.end()) fail_op(op, "uses undefined value '" + a.var + "'");
      in.type = it->second.type;
      in.value = it->second.value;
      break;
    }
    case Arg::Kind::Const:
      in.type = a.lit->type;
      in.value = a.lit->value.empty() ? nullptr : &a.lit->value;
      break;
    case Arg::Kind::Tuple:
      in.is_tuple = true;
      for (auto& e : a.elems) in.elems.push_back(infer_input(op, e, values));
      break;
  }
  return in;
}
}  // namespace

std::vector<Type> infer_op(const Op& op, const ValueTable& values, const std::string& opset) {
  if (!op.blocks.empty() || op.type == "while_loop" || op.type == "cond") {
    return infer_control_flow(op, values, opset);
  }
  const OpSchema* s = find_schema(op.type);
  if (!s) fail_op(op, "unknown op '" + op.type + "' (see `milrt check --ops` for the supported set)");
  std::set<std::string> known;
  for (auto& i : s->inputs) known.insert(i.name);
  for (auto& in : op.inputs)
    if (!known.count(in.key)) fail_op(op, "unknown input '" + in.key + "'");
  for (auto& i : s->inputs)
    if (i.required && !op.has(i.name)) fail_op(op, "missing required input '" + i.name + "'");
  if (int(op.outputs.size()) < s->min_outputs || int(op.outputs.size()) > s->max_outputs)
    fail_op(op, "declares " + std::to_string(op.outputs.size()) + " outputs; the op has " +
                    (s->min_outputs == s->max_outputs ? std::to_string(s->min_outputs)
                                                      : std::to_string(s->min_outputs) + " to " +
                                                            std::to_string(s->max_outputs)));
  std::vector<std::pair<std::string, InferInput>> inputs;
  for (auto& in : op.inputs) inputs.emplace_back(in.key, infer_input(op, in.arg, values));
  // As in coremltools, only the state ops accept a state<...> value (StateInputType).
  if (op.type != "read_state" && op.type != "coreml_update_state")
    for (auto& [key, in] : inputs)
      if (in.type.kind == Type::Kind::State)
        fail_op(op, "input '" + key + "' is a state: read it with read_state first");
  InferCtx ctx(op, std::move(inputs), opset);
  s->infer(ctx);
  if (ctx.out.size() < op.outputs.size()) fail_op(op, "internal: inference produced too few outputs");
  ctx.out.resize(op.outputs.size());
  return ctx.out;
}

bool type_admits(const Type& inferred, const Type& declared) {
  if (inferred.kind != declared.kind) return false;
  if (inferred.kind != Type::Kind::Tensor) {
    if (inferred.elems.size() != declared.elems.size()) return false;
    for (size_t i = 0; i < inferred.elems.size(); ++i)
      if (!type_admits(inferred.elems[i], declared.elems[i])) return false;
    return true;
  }
  if (inferred.dtype != declared.dtype) return false;
  if (inferred.unknown_rank) return true;
  if (inferred.shape.size() != declared.shape.size()) return false;
  for (size_t i = 0; i < inferred.shape.size(); ++i)
    if (inferred.shape[i] >= 0 && declared.shape[i] >= 0 && inferred.shape[i] != declared.shape[i]) return false;
  return true;
}

void define_outputs(const Op& op, ValueTable& values) {
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    ValueInfo v{op.outputs[i].type, nullptr};
    if (op.type == "const" && i == 0) {
      const Arg* val = op.arg("val");
      if (val && val->kind == Arg::Kind::Const && !val->lit->value.empty()) v.value = &val->lit->value;
    }
    values[op.outputs[i].name] = v;
  }
}

ValueTable param_table(const Function& f) {
  ValueTable t;
  for (auto& p : f.params) {
    // A state<tensor<...>> parameter reads as its wrapped tensor type in ops.
    Type ty = p.type.kind == Type::Kind::State ? p.type : p.type;
    t[p.name] = {ty, nullptr};
  }
  return t;
}

void specialize_input_shapes(Function& f, const std::map<std::string, Shape>& shapes) {
  for (auto& prm : f.params) {
    auto it = shapes.find(prm.name);
    if (it == shapes.end()) continue;
    if (it->second.size() != prm.type.shape.size())
      throw Error("error: input '" + prm.name + "': shape " + shape_str(it->second) + " has the wrong rank for " +
                  prm.type.str());
    for (size_t i = 0; i < it->second.size(); ++i)
      if (prm.type.shape[i] >= 0 && prm.type.shape[i] != it->second[i])
        throw Error("error: input '" + prm.name + "': shape " + shape_str(it->second) + " contradicts " +
                    prm.type.str());
    prm.type.shape = it->second;
  }
  ValueTable values = param_table(f);
  for (Op& op : f.ops) {
    bool unknown = false;
    for (const Output& o : op.outputs) unknown |= o.type.is_tensor() && o.type.has_unknown_dims();
    if (unknown) {
      std::vector<Type> inferred = infer_op(op, values, f.opset);
      for (size_t k = 0; k < op.outputs.size() && k < inferred.size(); ++k) {
        Type& t = op.outputs[k].type;
        if (!t.is_tensor() || inferred[k].shape.size() != t.shape.size()) continue;
        for (size_t d = 0; d < t.shape.size(); ++d)
          if (t.shape[d] < 0) t.shape[d] = inferred[k].shape[d];
      }
    }
    define_outputs(op, values);
  }
}

std::vector<std::string> verify(const Program& p) {
  std::vector<std::string> notes;
  for (auto& f : p.functions) {
    ValueTable values = param_table(f);
    std::set<std::string> seen;
    for (auto& prm : f.params)
      if (!seen.insert(prm.name).second)
        throw Error(prm.loc.str() + ": error: parameter '" + prm.name + "' is declared twice");
    for (auto& op : f.ops) {
      for (auto& o : op.outputs)
        if (!seen.insert(o.name).second) fail_op(op, "redefines value '" + o.name + "'");
      std::vector<Type> inferred = infer_op(op, values, f.opset);
      for (size_t i = 0; i < op.outputs.size(); ++i)
        if (!type_admits(inferred[i], op.outputs[i].type))
          fail_op(op, "output '" + op.outputs[i].name + "' is declared " + op.outputs[i].type.str() +
                          " but the op gives " + inferred[i].str());
      define_outputs(op, values);
    }
    for (auto& o : f.outputs)
      if (!values.count(o))
        throw Error(f.loc.str() + ": error: function '" + f.name + "' returns undefined value '" + o + "'");
  }
  return notes;
}

const Tensor* constant_of(const Arg& a, const ValueTable& values) {
  const Tensor* t = nullptr;
  if (a.kind == Arg::Kind::Const) {
    t = &a.lit->value;
  } else if (a.kind == Arg::Kind::Var) {
    auto it = values.find(a.var);
    if (it != values.end()) t = it->second.value;
  }
  return t && !t->empty() ? t : nullptr;
}

}  // namespace milrt
