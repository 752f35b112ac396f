#include "passes/rewriter.h"

#include "milrt/error.h"

namespace milrt::passes {

NameTable::NameTable(const Function& f) {
  for (auto& p : f.params) used_.insert(p.name);
  // Names inside nested blocks too: a new value must not shadow one there.
  walk_ops(f.ops, [&](const Op& op) {
    for (auto& o : op.outputs) used_.insert(o.name);
    for (auto& b : op.blocks)
      for (auto& prm : b.inputs) used_.insert(prm.name);
  });
}

std::string NameTable::fresh(const std::string& base) {
  std::string name = base;
  for (int n = 2; used_.count(name); ++n) name = base + "_" + std::to_string(n);
  used_.insert(name);
  return name;
}

Scope::Scope(const Function& f, bool bare_scalars)
    : values(param_table(f)), names(f), opset(f.opset), bare(bare_scalars) {}

void Scope::define(const Op& op) {
  define_outputs(op, values);
  const Arg* val = op.type == "const" ? op.arg("val") : nullptr;
  if (val && val->kind == Arg::Kind::Const && !op.outputs.empty()) literals[op.outputs[0].name] = val->lit;
}

Op Replacement::make(const std::string& type, const Inputs& inputs) const {
  Op op;
  op.type = type;
  op.loc = orig_.loc;
  for (auto& [key, arg] : inputs) op.inputs.push_back({key, arg, false});
  return op;
}

std::string Replacement::fresh(const std::string& tag) {
  std::string base = orig_.outputs.empty() ? orig_.type : orig_.outputs[0].name;
  return scope_.names.fresh(base + "__" + tag);
}

void Replacement::add(Op op) {
  scope_.define(op);
  ops_.push_back(std::move(op));
}

Arg Replacement::emit(const std::string& type, const std::string& tag, const Inputs& inputs) {
  Op op = make(type, inputs);
  op.name = fresh(tag);
  op.outputs.push_back({op.name, Type{}});
  op.outputs[0].type = infer_op(op, scope_.values, scope_.opset).at(0);
  add(op);
  return Arg::of_var(op.name);
}

void Replacement::finish(const std::string& type, const Inputs& inputs) {
  Op op = make(type, inputs);
  op.name = orig_.name;
  op.outputs.push_back(orig_.outputs.at(0));
  Type inferred = infer_op(op, scope_.values, scope_.opset).at(0);
  if (!type_admits(inferred, op.outputs[0].type))
    throw_op_error(orig_, "internal: its replacement by " + type + " gives " + inferred.str() + ", not the declared " +
                              op.outputs[0].type.str());
  add(std::move(op));
}

Arg Replacement::add_const(Literal l, const std::string& tag) {
  Op op = make("const", {});
  op.name = fresh(tag);
  op.outputs.push_back({op.name, l.type});
  op.inputs.push_back({"val", Arg::of_const(std::move(l)), true});
  add(op);
  return Arg::of_var(op.name);
}

Arg Replacement::constant(Tensor value, const std::string& tag) {
  Literal l;
  l.type = Type::tensor(value.dtype(), value.shape());
  l.value = std::move(value);
  return add_const(std::move(l), tag);
}

Arg Replacement::as_operand(const Arg& a, DType dtype, const Shape& shape, const std::string& tag) {
  ValueInfo v = info(a);
  if (v.type.dtype == dtype && v.type.shape == shape) return a;
  if (v.value) {
    Literal l;
    l.type = Type::tensor(dtype, shape);
    l.value = v.value->cast(dtype).reshaped(shape);
    // A reshaped blob is the same bytes: keep referring to them rather than
    // printing the whole tensor inline.
    const Literal* src = nullptr;
    if (a.kind == Arg::Kind::Const) src = a.lit.get();
    else if (auto it = scope_.literals.find(a.var); it != scope_.literals.end()) src = it->second.get();
    if (src && !src->blob_path.empty() && v.type.dtype == dtype) {
      l.blob_path = src->blob_path;
      l.blob_offset = src->blob_offset;
    }
    return add_const(std::move(l), tag);
  }
  Arg r = a;
  if (v.type.dtype != dtype) r = emit("cast", tag + "_cast", {{"x", r}, {"dtype", str(std::string(dtype_name(dtype)))}});
  if (v.type.shape != shape) r = emit("reshape", tag, {{"x", r}, {"shape", ints(shape)}});
  return r;
}

Arg scalar_literal(DType dtype, double v, bool bare) {
  Literal l;
  l.type = Type::scalar(dtype, bare);
  l.value = Tensor::scalar(dtype, v);
  return Arg::of_const(std::move(l));
}

Arg string_literal(const std::string& s, bool bare) {
  Literal l;
  l.type = Type::scalar(DType::String, bare);
  l.value = Tensor::from_strings({}, {s});
  return Arg::of_const(std::move(l));
}

void set_fused_from(Op& fused, const std::vector<std::string>& replaced, bool bare) {
  std::string from;
  for (const std::string& n : replaced) from += (from.empty() ? "" : " ") + n;
  fused.set("fused_from", string_literal(from, bare), /*attr_block=*/true);
}

Arg Replacement::scalar(DType dtype, double v) const { return scalar_literal(dtype, v, scope_.bare); }

Arg int_vector(const std::vector<int64_t>& v) {
  Literal l;
  l.type = Type::tensor(DType::Int32, {int64_t(v.size())});
  l.value = Tensor(DType::Int32, l.type.shape);
  for (size_t i = 0; i < v.size(); ++i) l.value.set(i, double(v[i]));
  return Arg::of_const(std::move(l));
}

Arg Replacement::str(const std::string& s) const { return string_literal(s, scope_.bare); }

ValueInfo Replacement::info(const Arg& a) const {
  if (a.kind == Arg::Kind::Const) return {a.lit->type, a.lit->value.empty() ? nullptr : &a.lit->value};
  if (a.kind == Arg::Kind::Var) {
    auto it = scope_.values.find(a.var);
    if (it != scope_.values.end()) return it->second;
  }
  throw_op_error(orig_, "internal: operand is neither a known value nor a literal");
}

void rewrite_ops(Function& f, bool bare_scalars, const std::function<bool(const Op&, Replacement&)>& rewrite) {
  Scope scope(f, bare_scalars);
  std::vector<Op> out;
  out.reserve(f.ops.size());
  for (const Op& op : f.ops) {
    Replacement r(op, scope);
    if (rewrite(op, r)) {
      for (Op& n : r.ops()) out.push_back(std::move(n));
    } else {
      scope.define(op);
      out.push_back(op);
    }
  }
  f.ops = std::move(out);
}

void for_each_var(Arg& a, const std::function<void(std::string&)>& fn) {
  if (a.kind == Arg::Kind::Var) fn(a.var);
  for (Arg& e : a.elems) for_each_var(e, fn);
}

void for_each_var(const Arg& a, const std::function<void(const std::string&)>& fn) {
  if (a.kind == Arg::Kind::Var) fn(a.var);
  for (const Arg& e : a.elems) for_each_var(e, fn);
}

std::unordered_map<std::string, int> count_uses(const Function& f) {
  std::unordered_map<std::string, int> uses;
  for (const Op& op : f.ops)
    for (const Input& in : op.inputs) for_each_var(in.arg, [&](const std::string& v) { ++uses[v]; });
  for (const std::string& o : f.outputs) ++uses[o];
  return uses;
}

std::set<std::string> names_read(const Function& f) {
  std::set<std::string> read(f.outputs.begin(), f.outputs.end());
  for (const Op& op : f.ops)
    for (const Input& in : op.inputs) for_each_var(in.arg, [&](const std::string& v) { read.insert(v); });
  return read;
}

void drop_orphaned_consts(Function& f, const std::set<std::string>& read_before) {
  std::set<std::string> read = names_read(f);
  std::erase_if(f.ops, [&](const Op& op) {
    if (op.type != "const" || op.outputs.size() != 1) return false;
    const std::string& v = op.outputs[0].name;
    return read_before.count(v) && !read.count(v);
  });
}

std::optional<std::vector<int64_t>> const_ints(const Replacement& r, const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  if (!a || a->kind == Arg::Kind::Tuple) return std::nullopt;
  const Tensor* t = r.info(*a).value;
  if (!t || !dtype_is_int(t->dtype())) return std::nullopt;
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t->numel(); ++i) v.push_back(int64_t(t->at(size_t(i))));
  return v;
}

std::optional<std::string> const_str(const Replacement& r, const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  if (!a || a->kind == Arg::Kind::Tuple) return std::nullopt;
  const Tensor* t = r.info(*a).value;
  if (!t || t->dtype() != DType::String || t->strings().size() != 1) return std::nullopt;
  return t->strings()[0];
}

}  // namespace milrt::passes
