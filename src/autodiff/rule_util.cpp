#include "autodiff/rule_util.h"

#include <algorithm>

#include "milrt/error.h"

namespace milrt::autodiff {

std::optional<Tensor> const_input(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  if (!a) return std::nullopt;
  if (a->kind == Arg::Kind::Const) return a->lit->value;
  if (a->kind != Arg::Kind::Var) return std::nullopt;
  // The builder keeps no public table of constant values, so look for the
  // defining `const` op; only rules with a parameter bound to a variable pay.
  Function f = c.b.build();
  for (const Op& op : f.ops) {
    if (op.outputs.empty() || op.outputs[0].name != a->var) continue;
    const Arg* val = op.arg("val");
    if (op.type == "const" && val && val->kind == Arg::Kind::Const) return val->lit->value;
    return std::nullopt;
  }
  return std::nullopt;
}

namespace {
Tensor need_const(const RuleContext& c, const std::string& key) {
  std::optional<Tensor> t = const_input(c, key);
  if (!t) throw_op_error(c.op, "gradient rule: input '" + key + "' must be a compile-time constant");
  return *t;
}
}  // namespace

std::optional<std::vector<int64_t>> ints_opt(const RuleContext& c, const std::string& key) {
  if (!c.op.has(key)) return std::nullopt;
  Tensor t = need_const(c, key);
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(int64_t(t.at(size_t(i))));
  return v;
}

std::vector<int64_t> ints_or(const RuleContext& c, const std::string& key, const std::vector<int64_t>& def) {
  auto v = ints_opt(c, key);
  return v ? *v : def;
}

int64_t int_or(const RuleContext& c, const std::string& key, int64_t def) {
  if (!c.op.has(key)) return def;
  Tensor t = need_const(c, key);
  if (t.numel() != 1) throw_op_error(c.op, "gradient rule: input '" + key + "' must be a scalar");
  return int64_t(t.at(0));
}

double float_or(const RuleContext& c, const std::string& key, double def) {
  if (!c.op.has(key)) return def;
  Tensor t = need_const(c, key);
  if (t.numel() != 1) throw_op_error(c.op, "gradient rule: input '" + key + "' must be a scalar");
  return t.at(0);
}

bool bool_or(const RuleContext& c, const std::string& key, bool def) { return float_or(c, key, def ? 1 : 0) != 0; }

std::string str_or(const RuleContext& c, const std::string& key, const std::string& def) {
  if (!c.op.has(key)) return def;
  Tensor t = need_const(c, key);
  if (t.dtype() != DType::String || t.strings().size() != 1)
    throw_op_error(c.op, "gradient rule: input '" + key + "' must be a string");
  return t.strings()[0];
}

Type input_type(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  if (!a) throw_op_error(c.op, "gradient rule: no input '" + key + "'");
  if (a->kind == Arg::Kind::Const) return a->lit->type;
  if (a->kind == Arg::Kind::Var) return c.b.value(a->var).type;
  throw_op_error(c.op, "gradient rule: input '" + key + "' is a tuple");
}

bool is_var_input(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  return a && a->kind == Arg::Kind::Var;
}

int64_t norm_axis(const RuleContext& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    throw_op_error(c.op, "gradient rule: axis " + std::to_string(axis) + " is out of range for rank " +
                             std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Value zeros(const RuleContext& c, const Type& t, const std::string& what) {
  return c.emit("fill", what, {{"shape", lit_i32s(t.shape)}, {"value", scalar_of(t.dtype, 0.0)}});
}

Value reshape_to(const RuleContext& c, const Value& v, const Shape& shape, const std::string& what) {
  if (v.type.shape == shape) return v;
  return c.emit("reshape", what, {{"x", v}, {"shape", lit_i32s(shape)}});
}

Value reduce_keep(const RuleContext& c, const std::string& type, const Value& v, std::vector<int64_t> axes,
                  const std::string& what) {
  const Shape& s = v.type.shape;
  std::vector<int64_t> real;   // size-1 axes need no reduction
  for (int64_t a : axes) {
    int64_t n = norm_axis(c, a, int64_t(s.size()));
    if (s[size_t(n)] != 1) real.push_back(n);
  }
  std::sort(real.begin(), real.end());
  real.erase(std::unique(real.begin(), real.end()), real.end());
  Value cur = v;
  for (size_t i = 0; i < real.size();) {
    size_t j = i + 1;
    while (j < real.size() && real[j] == real[j - 1] + 1) ++j;
    std::vector<int64_t> run(real.begin() + long(i), real.begin() + long(j));
    cur = c.emit(type, what, {{"x", cur}, {"axes", lit_i32s(run)}, {"keep_dims", lit_bool(true)}});
    i = j;
  }
  return cur;
}

}  // namespace milrt::autodiff
