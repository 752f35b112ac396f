#include "milrt/builder.h"

#include "ir/verifier.h"
#include "milrt/error.h"

namespace milrt {
namespace {
Arg scalar_lit(DType dt, double v) {
  Literal l;
  l.type = Type::scalar(dt);
  l.value = Tensor::scalar(dt, v);
  return Arg::of_const(std::move(l));
}
ValueTable& table(void* p) { return *static_cast<ValueTable*>(p); }
}  // namespace

Arg lit(const Tensor& t) {
  Literal l;
  l.type = Type::tensor(t.dtype(), t.shape());
  l.value = t;
  return Arg::of_const(std::move(l));
}
Arg lit_bool(bool v) { return scalar_lit(DType::Bool, v); }
Arg lit_i32(int64_t v) { return scalar_lit(DType::Int32, double(v)); }
Arg lit_f32(double v) { return scalar_lit(DType::FP32, v); }
Arg lit_f16(double v) { return scalar_lit(DType::FP16, v); }
Arg lit_str(const std::string& s) {
  Literal l;
  l.type = Type::scalar(DType::String);
  l.value = Tensor::from_strings({}, {s});
  return Arg::of_const(std::move(l));
}
Arg lit_i32s(const std::vector<int64_t>& v) {
  Tensor t(DType::Int32, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set(i, double(v[i]));
  return lit(t);
}
Arg tuple(const std::vector<Operand>& elems) {
  std::vector<Arg> a;
  for (auto& e : elems) a.push_back(e.arg);
  return Arg::of_tuple(std::move(a));
}

FunctionBuilder::FunctionBuilder(std::string name, std::string opset) {
  fn_.name = std::move(name);
  fn_.opset = std::move(opset);
  auto owner = std::make_shared<ValueTable>();
  values_ = owner.get();
  values_owner_ = owner;
}

FunctionBuilder::FunctionBuilder(const Function& existing) : fn_(existing) {
  auto owner = std::make_shared<ValueTable>(param_table(existing));
  for (const Op& op : fn_.ops) define_outputs(op, *owner);  // literals are shared_ptr-held: stable
  values_ = owner.get();
  values_owner_ = owner;
}

Value FunctionBuilder::value(const std::string& name) const {
  auto it = table(values_).find(name);
  if (it == table(values_).end()) throw Error("builder: no value named '" + name + "' in function " + fn_.name);
  return {name, it->second.type};
}

bool FunctionBuilder::has_value(const std::string& name) const { return table(values_).count(name) > 0; }

std::string FunctionBuilder::fresh_name(const std::string& prefix) const {
  if (!has_value(prefix)) return prefix;
  for (int i = 1;; ++i) {
    std::string n = prefix + "_" + std::to_string(i);
    if (!has_value(n)) return n;
  }
}

Value FunctionBuilder::input(const std::string& name, Type type) {
  fn_.params.push_back({name, type, {}});
  table(values_)[name] = {type, nullptr};
  return {name, type};
}

Value FunctionBuilder::constant(const std::string& name, const Tensor& value) {
  Op op;
  op.type = "const";
  op.name = name;
  Type t = Type::tensor(value.dtype(), value.shape());
  if (value.shape().empty()) t.bare = true;
  Literal l;
  l.type = t;
  l.value = value;
  op.inputs.push_back({"val", Arg::of_const(std::move(l)), true});
  op.outputs.push_back({name, t});
  define_outputs(op, table(values_));
  fn_.ops.push_back(std::move(op));
  return {name, t};
}

std::vector<Value> FunctionBuilder::op_n(const std::string& type, const std::vector<std::string>& outs,
                                         const std::vector<std::pair<std::string, Operand>>& inputs) {
  Op op;
  op.type = type;
  op.name = outs.empty() ? type : outs[0];
  for (auto& [k, v] : inputs) op.inputs.push_back({k, v.arg, false});
  for (auto& o : outs) op.outputs.push_back({o, Type{}});
  std::vector<Type> types = infer_op(op, table(values_), fn_.opset);
  std::vector<Value> result;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (types[i].has_unknown_dims())
      throw Error("builder: " + type + " '" + outs[i] + "': output shape " + types[i].str() +
                  " is not known at build time");
    if (types[i].shape.empty()) types[i].bare = true;
    op.outputs[i].type = types[i];
    result.push_back({outs[i], types[i]});
  }
  define_outputs(op, table(values_));
  fn_.ops.push_back(std::move(op));
  return result;
}

Value FunctionBuilder::op(const std::string& type, const std::string& out,
                          const std::vector<std::pair<std::string, Operand>>& inputs) {
  return op_n(type, {out}, inputs)[0];
}

void FunctionBuilder::output(const Value& v) { fn_.outputs.push_back(v.name); }

Program make_program(std::vector<Function> functions, std::string version) {
  Program p;
  p.version = std::move(version);
  p.functions = std::move(functions);
  p.path = "<built>";
  p.base_dir = ".";
  return p;
}

}  // namespace milrt
