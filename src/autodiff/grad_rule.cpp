// The gradient-rule registry and the helpers every rule family shares.
#include "autodiff/grad_rule.h"

#include <algorithm>
#include <mutex>

#include "milrt/error.h"

namespace milrt::autodiff {
namespace {

std::map<std::string, GradRule>& rule_table() {
  static std::map<std::string, GradRule> t;
  return t;
}

// Registers every family once, on first use (as the lowerings are), so no
// static-initialization order is involved.
void ensure_grad_rules_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_grad_rules();
    register_linalg_grad_rules();
    register_tensor_grad_rules();
    register_nn_grad_rules();
  });
}

}  // namespace

void register_grad_rule(const std::string& op_type, GradRule rule) { rule_table()[op_type] = std::move(rule); }

const GradRule* find_grad_rule(const std::string& op_type) {
  ensure_grad_rules_registered();
  auto it = rule_table().find(op_type);
  return it == rule_table().end() ? nullptr : &it->second;
}

std::vector<std::string> registered_grad_rules() {
  ensure_grad_rules_registered();
  std::vector<std::string> r;
  for (auto& [k, v] : rule_table()) r.push_back(k);
  return r;
}

Value RuleContext::in(const std::string& key) const {
  const Arg* a = op.arg(key);
  if (!a) throw_op_error(op, "gradient rule: no input '" + key + "'");
  if (a->kind != Arg::Kind::Var) throw_op_error(op, "gradient rule: input '" + key + "' is not a variable");
  return b.value(a->var);
}

Value RuleContext::out(size_t i) const {
  if (i >= op.outputs.size()) throw_op_error(op, "gradient rule: no output " + std::to_string(i));
  return b.value(op.outputs[i].name);
}

std::string RuleContext::name(const std::string& what) const {
  std::string base = op.outputs.empty() ? op.type : op.outputs[0].name;
  return b.fresh_name(base + "_grad_" + what);
}

Value RuleContext::emit(const std::string& type, const std::string& what,
                        const std::vector<std::pair<std::string, Operand>>& inputs) const {
  return b.op(type, name(what), inputs);
}

Value sum_to_shape(const RuleContext& c, const Value& g, const Shape& shape) {
  const Shape& gs = g.type.shape;
  if (gs == shape) return g;
  if (gs.size() < shape.size())
    throw_op_error(c.op, "gradient rule: cannot sum " + g.type.str() + " to " + shape_str(shape));
  size_t lead = gs.size() - shape.size();
  std::vector<int64_t> axes;   // axes broadcasting added (leading) or stretched (size 1 in `shape`)
  for (size_t i = 0; i < gs.size(); ++i) {
    if (i >= lead && gs[i] == shape[i - lead]) continue;
    if (i >= lead && shape[i - lead] != 1)
      throw_op_error(c.op, "gradient rule: cannot sum " + g.type.str() + " to " + shape_str(shape));
    if (gs[i] != 1) axes.push_back(int64_t(i));   // size-1 axes need no sum, only the reshape
  }
  if (shape.empty()) {
    // One reduction of every axis gives the scalar directly.
    return c.emit("reduce_sum", "sum", {{"x", g}, {"keep_dims", lit_bool(false)}});
  }
  // The compiled reduction takes one run of adjacent axes, so each run gets
  // its own reduce_sum (keep_dims keeps the others' positions).
  Value cur = g;
  for (size_t i = 0; i < axes.size();) {
    size_t j = i + 1;
    while (j < axes.size() && axes[j] == axes[j - 1] + 1) ++j;
    std::vector<int64_t> run(axes.begin() + long(i), axes.begin() + long(j));
    cur = c.emit("reduce_sum", "sum", {{"x", cur}, {"axes", lit_i32s(run)}, {"keep_dims", lit_bool(true)}});
    i = j;
  }
  if (cur.type.shape != shape) cur = c.emit("reshape", "sum", {{"x", cur}, {"shape", lit_i32s(shape)}});
  return cur;
}

Arg scalar_of(DType dt, double v) {
  if (dt == DType::FP32) return lit_f32(v);
  if (dt == DType::FP16) return lit_f16(v);
  throw Error("gradient rule: no float scalar of dtype " + std::string(dtype_name(dt)));
}

}  // namespace milrt::autodiff
