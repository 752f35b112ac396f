#include "runtime/views.h"

#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

bool is_view(const Op& op, const std::map<std::string, Type>& types) {
  if (op.outputs.size() != 1 || !op.outputs[0].type.is_tensor() || op.outputs[0].type.has_unknown_dims()) return false;
  const Arg* x = op.arg("x");
  if (!x || x->kind != Arg::Kind::Var) return false;
  auto it = types.find(x->var);
  if (it == types.end() || !it->second.is_tensor() || it->second.dtype == DType::String) return false;
  const Type& in = it->second;
  const Type& out = op.outputs[0].type;
  if (shape_numel(in.shape) != shape_numel(out.shape) || out.dtype == DType::String) return false;
  if (op.type == "reshape" || op.type == "identity") return in.dtype == out.dtype;
  // A cast to fp16 rounds (and overflows to inf, which fp16 loss scaling
  // detects), so it is a step of its own; widening casts are exact views.
  if (op.type == "cast")
    return storage_dtype(in.dtype) == storage_dtype(out.dtype) && !(out.dtype == DType::FP16 && in.dtype != DType::FP16);
  return false;
}

}  // namespace

std::map<std::string, std::string> find_views(const Function& f) {
  std::map<std::string, Type> types;
  for (const Param& p : f.params) types[p.name] = p.type;
  std::map<std::string, std::string> root;
  for (const Op& op : f.ops) {
    for (const Output& o : op.outputs) types[o.name] = o.type;
    if (!is_view(op, types)) continue;
    const std::string& src = op.arg("x")->var;
    auto it = root.find(src);
    root[op.outputs[0].name] = it == root.end() ? src : it->second;
  }
  return root;
}

Function without_views(const Function& f, const std::map<std::string, std::string>& views) {
  auto rename = [&](std::string& v) {
    auto it = views.find(v);
    if (it != views.end()) v = it->second;
  };
  Function g = f;
  g.ops.clear();
  for (const Op& op : f.ops) {
    if (op.outputs.size() == 1 && views.count(op.outputs[0].name)) continue;
    Op copy = op;
    for (Input& in : copy.inputs) {
      if (in.arg.kind == Arg::Kind::Var) rename(in.arg.var);
      for (Arg& e : in.arg.elems)
        if (e.kind == Arg::Kind::Var) rename(e.var);
    }
    g.ops.push_back(std::move(copy));
  }
  for (std::string& o : g.outputs) rename(o);
  return g;
}

}  // namespace milrt::rt
