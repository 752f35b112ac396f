// Reverse-mode differentiation of one function (see include/milrt/autodiff.h).
//
// The derived function starts as a copy of the forward one; the backward half
// is appended with the builder, walking the forward ops in reverse, so every
// forward value a rule reads is already defined (those are the "taps").
// Gradients are kept per value as a list of contributions and summed when
// the value's producer is reached: by then, in reverse program order, every
// consumer has contributed.
#include "milrt/autodiff.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/grad_rule.h"
#include "milrt/builder.h"
#include "milrt/error.h"

namespace milrt {
namespace {

using autodiff::GradRule;
using autodiff::RuleContext;

bool carries_gradient(const Type& t) {
  return t.kind == Type::Kind::Tensor && (t.dtype == DType::FP16 || t.dtype == DType::FP32);
}

void collect_vars(const Arg& a, std::vector<std::string>& out) {
  if (a.kind == Arg::Kind::Var) out.push_back(a.var);
  for (const Arg& e : a.elems) collect_vars(e, out);
}

std::vector<std::string> vars_of(const Op& op) {
  std::vector<std::string> v;
  for (const Input& in : op.inputs) collect_vars(in.arg, v);
  return v;
}

// A rule's key for an input: "x", or for a tuple input the element, as
// "values[1]" (also accepted: "values.1").
struct InputSlot {
  std::string key;   // as the rule returns it
  std::string var;   // the forward value it is the gradient of
};

std::vector<InputSlot> input_slots(const Op& op) {
  std::vector<InputSlot> r;
  for (const Input& in : op.inputs) {
    if (in.arg.kind == Arg::Kind::Var) r.push_back({in.key, in.arg.var});
    if (in.arg.kind == Arg::Kind::Tuple)
      for (size_t i = 0; i < in.arg.elems.size(); ++i)
        if (in.arg.elems[i].kind == Arg::Kind::Var)
          r.push_back({in.key + "[" + std::to_string(i) + "]", in.arg.elems[i].var});
  }
  return r;
}

// The op's place, for errors: "file:line:col: TYPE 'out'" (position when known).
std::string describe(const Op& op) {
  std::string loc = op.loc.str();
  return (loc.empty() ? "" : loc + ": ") + op.type + " '" + (op.outputs.empty() ? op.name : op.outputs[0].name) + "'";
}

// Keeps only the ops the outputs need (state updates always stay, as in dce).
void drop_dead_ops(Function& f) {
  std::unordered_set<std::string> live(f.outputs.begin(), f.outputs.end());
  std::vector<bool> keep(f.ops.size(), false);
  for (size_t i = f.ops.size(); i-- > 0;) {
    const Op& op = f.ops[i];
    keep[i] = op.type == "coreml_update_state";
    for (const Output& o : op.outputs) keep[i] = keep[i] || live.count(o.name) > 0;
    if (!keep[i]) continue;
    for (const std::string& v : vars_of(op)) live.insert(v);
  }
  std::vector<Op> ops;
  for (size_t i = 0; i < f.ops.size(); ++i)
    if (keep[i]) ops.push_back(std::move(f.ops[i]));
  f.ops = std::move(ops);
}

// A tensor of `shape` filled with `v`, the last op named `name`: a constant
// when small; else a [1, ..., 1] constant stretched by one multiply per dim
// with ones of that dim's size, so a zero gradient for a large weight (or the
// seed of a large loss) costs a few small literals, not a tensor of its size.
Value filled(FunctionBuilder& b, const std::string& name, DType dt, const Shape& shape, double v) {
  constexpr int64_t kOneConstant = 4096;
  auto full = [&](const Shape& s, double x) {
    Tensor t(dt, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), x);
    return t;
  };
  if (shape_numel(shape) <= kOneConstant) return b.constant(name, full(shape, v));
  Value cur = b.constant(b.fresh_name(name + "_one"), full(Shape(shape.size(), 1), v));
  std::vector<size_t> dims;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) dims.push_back(i);
  for (size_t k = 0; k < dims.size(); ++k) {
    Shape s(shape.size(), 1);
    s[dims[k]] = shape[dims[k]];
    std::string out = k + 1 == dims.size() ? name : b.fresh_name(name + "_bcast");
    cur = b.op("mul", out, {{"x", cur}, {"y", lit(full(s, 1.0))}});
  }
  return cur;
}

// The ops recompute may repeat: one output, elementwise, cheap.
bool recomputable(const Op& op) {
  static const std::unordered_set<std::string> kCheap = {
      "add", "sub", "mul", "real_div", "maximum", "minimum", "exp", "log", "sqrt", "rsqrt", "inverse", "square",
      "abs", "tanh", "sigmoid", "relu", "silu", "gelu", "softplus", "erf", "sin", "cos", "clip", "cast",
      "leaky_relu", "elu", "select"};
  return op.outputs.size() == 1 && kCheap.count(op.type) > 0;
}

void rename_uses(Arg& a, const std::string& from, const std::string& to) {
  if (a.kind == Arg::Kind::Var && a.var == from) a.var = to;
  for (Arg& e : a.elems) rename_uses(e, from, to);
}

// GradOptions::recompute on a derived function whose first `n_forward` ops
// are the forward pass: a cheap forward value the backward half reads is
// computed again just before its first backward use, from inputs the
// backward half keeps anyway (parameters, constants, other taps), and the
// backward uses read the copy. Function outputs are left alone.
void recompute_cheap_values(Function& f, size_t n_forward) {
  std::unordered_set<std::string> params, consts, outputs(f.outputs.begin(), f.outputs.end());
  for (const Param& p : f.params) params.insert(p.name);
  std::unordered_map<std::string, size_t> first_backward_use;
  for (size_t i = n_forward; i < f.ops.size(); ++i)
    for (const std::string& v : vars_of(f.ops[i])) first_backward_use.emplace(v, i);
  for (size_t i = 0; i < n_forward; ++i)
    if (f.ops[i].type == "const") consts.insert(f.ops[i].outputs[0].name);
  auto kept_anyway = [&](const std::string& v) { return params.count(v) || consts.count(v) || first_backward_use.count(v); };

  std::vector<std::pair<size_t, Op>> inserts;  // (before index, op)
  for (size_t i = 0; i < n_forward; ++i) {
    const Op& op = f.ops[i];
    if (!recomputable(op)) continue;
    const std::string& name = op.outputs[0].name;
    auto use = first_backward_use.find(name);
    if (use == first_backward_use.end() || outputs.count(name)) continue;
    std::vector<std::string> ins = vars_of(op);
    if (!std::all_of(ins.begin(), ins.end(), [&](const std::string& v) { return v != name && kept_anyway(v); })) continue;
    Op copy = op;
    copy.outputs[0].name = name + "_recomputed";
    copy.name = copy.outputs[0].name;
    // The copy reads the forward values themselves (kept, by the test above).
    inserts.emplace_back(use->second, std::move(copy));
    for (size_t j = n_forward; j < f.ops.size(); ++j)
      for (Input& in : f.ops[j].inputs) rename_uses(in.arg, name, name + "_recomputed");
  }
  // Insert in order of position (stable: forward order at equal positions).
  std::stable_sort(inserts.begin(), inserts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Op> ops;
  size_t k = 0;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    while (k < inserts.size() && inserts[k].first == i) ops.push_back(std::move(inserts[k++].second));
    ops.push_back(std::move(f.ops[i]));
  }
  f.ops = std::move(ops);
}

class Differentiator {
 public:
  Differentiator(const Function& fn, const GradOptions& o) : fn_(fn), o_(o), b_(fn) {}

  Function run() {
    check_names();
    mark_paths();
    FunctionBuilder& b = b_;
    const Type& lt = type_of(o_.loss);
    // d(sum loss)/d loss = ones of the loss's shape: a non-scalar loss is summed.
    if (active_.count(o_.loss))
      contrib_[o_.loss].push_back(filled(b, b.fresh_name(o_.loss + "_grad_seed"), lt.dtype, lt.shape, 1.0));

    for (size_t i = fn_.ops.size(); i-- > 0;) backprop(fn_.ops[i]);

    std::vector<std::string> outs{o_.loss};
    for (const std::string& w : o_.wrt) {
      std::string name = w + "_grad";
      if (b.has_value(name))
        throw Error("differentiate: the gradient's name '" + name + "' is already taken in function " + fn_.name);
      std::optional<Value> g = gradient(w);
      const Type& wt = type_of(w);
      if (g) {
        b.op("identity", name, {{"x", *g}});
      } else {
        filled(b, name, wt.dtype, wt.shape, 0.0);   // the loss does not depend on it
      }
      outs.push_back(name);
    }
    if (o_.keep_outputs)
      for (const std::string& out : fn_.outputs)
        if (out != o_.loss) outs.push_back(out);

    Function f = b.build();
    f.name = o_.out_function.empty() ? fn_.name + "_grad" : o_.out_function;
    f.outputs = outs;
    drop_dead_ops(f);
    if (o_.recompute) {
      std::unordered_set<std::string> forward;
      for (const Op& op : fn_.ops)
        for (const Output& out : op.outputs) forward.insert(out.name);
      size_t n_forward = 0;
      while (n_forward < f.ops.size() && !f.ops[n_forward].outputs.empty() &&
             forward.count(f.ops[n_forward].outputs[0].name))
        ++n_forward;
      recompute_cheap_values(f, n_forward);
    }
    return f;
  }

 private:
  const Function& fn_;
  const GradOptions& o_;
  FunctionBuilder b_;
  std::unordered_map<std::string, const Type*> types_;
  std::unordered_set<std::string> active_;   // float values on a path from a wrt input to the loss
  std::unordered_map<std::string, std::vector<Value>> contrib_;
  std::unordered_map<std::string, Value> summed_;

  const Type& type_of(const std::string& v) const { return *types_.at(v); }

  void check_names() {
    for (const Param& p : fn_.params) types_[p.name] = &p.type;
    for (const Op& op : fn_.ops)
      for (const Output& out : op.outputs) types_[out.name] = &out.type;
    auto it = types_.find(o_.loss);
    if (o_.loss.empty()) throw Error("differentiate: no loss given");
    if (it == types_.end()) throw Error("differentiate: no value named '" + o_.loss + "' (the loss) in function " + fn_.name);
    if (!carries_gradient(*it->second))
      throw Error("differentiate: the loss '" + o_.loss + "' must be an fp16 or fp32 tensor, got " + it->second->str());
    if (o_.wrt.empty()) throw Error("differentiate: no input to differentiate with respect to (wrt)");
    std::set<std::string> seen;
    for (const std::string& w : o_.wrt) {
      const Param* p = fn_.param(w);
      if (!p) throw Error("differentiate: '" + w + "' is not an input of function " + fn_.name);
      if (!carries_gradient(p->type))
        throw Error("differentiate: input '" + w + "' must be an fp16 or fp32 tensor to have a gradient, got " +
                    p->type.str());
      if (!seen.insert(w).second) throw Error("differentiate: input '" + w + "' is named twice in wrt");
    }
  }

  // active = (depends on some wrt input) and (the loss depends on it), float only.
  void mark_paths() {
    std::unordered_set<std::string> from_wrt(o_.wrt.begin(), o_.wrt.end());
    for (const Op& op : fn_.ops) {
      bool dep = false;
      for (const std::string& v : vars_of(op)) dep = dep || from_wrt.count(v);
      if (!dep) continue;
      for (const Output& out : op.outputs)
        if (carries_gradient(out.type)) from_wrt.insert(out.name);
    }
    std::unordered_set<std::string> to_loss{o_.loss};
    for (size_t i = fn_.ops.size(); i-- > 0;) {
      const Op& op = fn_.ops[i];
      bool reaches = false;
      for (const Output& out : op.outputs) reaches = reaches || to_loss.count(out.name);
      if (!reaches) continue;
      for (const std::string& v : vars_of(op)) to_loss.insert(v);
    }
    for (const std::string& v : from_wrt)
      if (to_loss.count(v)) active_.insert(v);
  }

  // The summed gradient of `v`, or nullopt when none flows into it.
  std::optional<Value> gradient(const std::string& v) {
    if (auto it = summed_.find(v); it != summed_.end()) return it->second;
    auto it = contrib_.find(v);
    if (it == contrib_.end() || it->second.empty()) return std::nullopt;
    Value g = it->second[0];
    for (size_t i = 1; i < it->second.size(); ++i)
      g = b_.op("add", b_.fresh_name(v + "_grad_acc"), {{"x", g}, {"y", it->second[i]}});
    summed_.emplace(v, g);
    return g;
  }

  void backprop(const Op& op) {
    std::vector<std::optional<Value>> dout;
    bool any_out = false;
    for (const Output& out : op.outputs) {
      dout.push_back(active_.count(out.name) ? gradient(out.name) : std::nullopt);
      any_out = any_out || dout.back().has_value();
    }
    if (!any_out) return;
    std::vector<InputSlot> slots = input_slots(op);
    bool any_in = false;
    for (const InputSlot& s : slots) any_in = any_in || active_.count(s.var);
    if (!any_in) return;

    const GradRule* rule = autodiff::find_grad_rule(op.type);
    if (!rule)
      throw Error(describe(op) + ": no gradient rule for op type '" + op.type +
                  "' (it lies between a wrt input and the loss)");
    RuleContext ctx{b_, op, dout};
    std::map<std::string, Value> grads = (*rule)(ctx);
    for (const InputSlot& s : slots) {
      if (!active_.count(s.var)) continue;
      auto it = grads.find(s.key);
      if (it == grads.end() && s.key.back() == ']') {
        // "values[1]" may also come back as "values.1".
        std::string alt = s.key;
        alt.replace(alt.find('['), 1, ".");
        alt.pop_back();
        it = grads.find(alt);
      }
      if (it == grads.end()) continue;
      const Type& want = type_of(s.var);
      const Type& got = it->second.type;
      if (got.dtype != want.dtype || got.shape != want.shape)
        throw Error(describe(op) + ": gradient rule gave " + got.str() + " for input '" + s.key + "' of type " +
                    want.str() + " (a bug in the rule)");
      contrib_[s.var].push_back(it->second);
    }
  }
};

}  // namespace

Program differentiate(const Program& p, const GradOptions& options) {
  const Function* fn = p.function(options.function);
  if (!fn) throw Error("differentiate: no function named '" + options.function + "'");
  std::string out_name = options.out_function.empty() ? options.function + "_grad" : options.out_function;
  if (p.function(out_name)) throw Error("differentiate: the program already has a function named '" + out_name + "'");
  for (const Param& prm : fn->params)
    if (prm.type.has_unknown_dims())
      throw Error("differentiate: input '" + prm.name + "' has a flexible shape " + prm.type.str() +
                  "; give it a static shape first");
  // Refused outright, not only on the path to the loss: a block's captures are
  // no inputs of its op, so a gradient through them would be silently lost.
  for (const Op& op : fn->ops)
    if (!op.blocks.empty())
      throw_op_error(op, "differentiate: control flow (cond, while_loop) has no gradient rules; milrt does not "
                         "differentiate programs with nested blocks");
  Differentiator d(*fn, options);
  Program r = p;
  r.functions.push_back(d.run());
  return r;
}

std::vector<std::string> differentiable_ops() { return autodiff::registered_grad_rules(); }

}  // namespace milrt
