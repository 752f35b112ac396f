// Pass: make the first seed's Neural Engine layout idioms well-typed MIL.
//
// The Neural Engine stores [1, C, 1, 1], [1, 1, 1, C] and [C] alike, so the
// seed's programs mix them freely (a matmul of a [1, 64, 1, 1] activation by a
// [128, 64] weight "gives" [1, 1, 1, 128]). For an op that fails inference,
// or whose declared result disagrees with it, this pass looks for operand
// shapes that differ from the written ones only in where size-1 dims sit and
// that make inference give the declared result up to the same freedom. When
// one is found, explicit reshapes are inserted around the op, so every later
// stage sees ordinary MIL. Anything else is left untouched for verify().
//
// Several reinterpretations can fit (an outer product written as
// matmul(a^T, b) of two channel vectors also fits transposed), so the search
// order is part of the meaning: operands are tried as written first, then
// squeezed, then as a row, then as a column, the first operand keeping its
// written shape longest; the first fit wins. This order reproduces the
// seed's intended math, which tests/test_seed_graph.cpp checks value by value.
#include <algorithm>
#include <functional>
#include <set>

#include "ir/verifier.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "passes/pass_registry.h"

namespace milrt {
namespace {

// Ops whose meaning survives moving size-1 dims: matmul and elementwise ops.
// Ops whose axis depends on rank or layout (rms_norm, softmax, reductions,
// conv, ...) are never reinterpreted: a reshape would change what they compute.
bool layout_agnostic(const std::string& type) {
  static const std::set<std::string> ops = {
      "matmul", "add", "sub", "mul", "real_div", "pow", "maximum", "minimum",
      "sigmoid", "tanh", "relu", "silu", "exp", "sqrt", "rsqrt", "square", "abs", "inverse",
      "gelu", "erf", "sin", "cos", "log"};
  return ops.count(type) > 0;
}

Shape squeezed(const Shape& s) {
  Shape r;
  for (int64_t d : s) if (d != 1) r.push_back(d);
  return r;
}

bool same_modulo_ones(const Type& a, const Type& b) {
  return a.kind == Type::Kind::Tensor && b.kind == Type::Kind::Tensor && a.dtype == b.dtype &&
         !a.has_unknown_dims() && !b.has_unknown_dims() && squeezed(a.shape) == squeezed(b.shape);
}

// Alternative shapes for a value: as written, squeezed, and a squeezed vector
// as a row or a column.
std::vector<Shape> candidates(const Shape& s) {
  std::vector<Shape> c{s};
  Shape q = squeezed(s);
  auto add = [&](Shape x) { if (std::find(c.begin(), c.end(), x) == c.end()) c.push_back(std::move(x)); };
  add(q);
  if (q.size() == 1) { add({1, q[0]}); add({q[0], 1}); }
  return c;
}

std::optional<std::vector<Type>> try_infer(const Op& op, const ValueTable& values, const std::string& opset) {
  try {
    return infer_op(op, values, opset);
  } catch (const Error&) {
    return std::nullopt;
  }
}

bool fits(const std::vector<Type>& inferred, const Op& op, bool exact) {
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    if (exact ? !type_admits(inferred[i], op.outputs[i].type)
              : !same_modulo_ones(inferred[i], op.outputs[i].type))
      return false;
  }
  return true;
}

Op make_reshape(const std::string& in, const std::string& out, const Type& out_type, const Op& at) {
  Op r;
  r.type = "reshape";
  r.name = out;
  r.loc = at.loc;
  r.outputs.push_back({out, out_type});
  Literal shape;
  shape.type = Type::tensor(DType::Int32, {int64_t(out_type.shape.size())});
  shape.value = Tensor(DType::Int32, shape.type.shape);
  for (size_t i = 0; i < out_type.shape.size(); ++i) shape.value.set(i, double(out_type.shape[i]));
  r.inputs.push_back({"x", Arg::of_var(in), false});
  r.inputs.push_back({"shape", Arg::of_const(std::move(shape)), false});
  return r;
}

// Rewrites one op if a size-1 reinterpretation fits; appends the resulting ops.
bool legalize_op(const Op& op, const ValueTable& values, const std::string& opset, std::vector<Op>& out, std::vector<std::string>& notes) {
  // Var operands that are tensors with a known shape can be reinterpreted.
  std::vector<const Input*> movable;
  for (auto& in : op.inputs) {
    if (in.arg.kind != Arg::Kind::Var) continue;
    auto it = values.find(in.arg.var);
    if (it == values.end() || !it->second.type.is_tensor() || it->second.type.has_unknown_dims()) continue;
    if (it->second.type.shape.empty()) continue;
    movable.push_back(&in);
  }
  std::vector<std::vector<Shape>> options;
  for (auto* in : movable) options.push_back(candidates(values.at(in->arg.var).type.shape));

  std::vector<size_t> pick(movable.size(), 0);
  std::function<bool(size_t)> search = [&](size_t k) -> bool {
    if (k < movable.size()) {
      for (pick[k] = 0; pick[k] < options[k].size(); ++pick[k])
        if (search(k + 1)) return true;
      return false;
    }
    ValueTable trial = values;
    for (size_t i = 0; i < movable.size(); ++i) trial[movable[i]->arg.var].type.shape = options[i][pick[i]];
    auto inferred = try_infer(op, trial, opset);
    if (!inferred || !fits(*inferred, op, false)) return false;
    // Found: reshape operands, run the op at the inferred shapes, reshape results.
    Op core = op;
    std::string tag = op.outputs.empty() ? op.type : op.outputs[0].name;
    for (size_t i = 0; i < movable.size(); ++i) {
      const Shape& want = options[i][pick[i]];
      const ValueInfo& v = values.at(movable[i]->arg.var);
      if (want == v.type.shape) continue;
      std::string name = movable[i]->arg.var + "__as_" + tag;
      Type t = v.type;
      t.shape = want;
      t.bare = false;
      out.push_back(make_reshape(movable[i]->arg.var, name, t, op));
      core.set(movable[i]->key, Arg::of_var(name), movable[i]->in_attr_block);
    }
    std::vector<Op> after;
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      if (type_admits((*inferred)[i], op.outputs[i].type)) continue;
      std::string raw = op.outputs[i].name + "__raw";
      Type t = (*inferred)[i];
      core.outputs[i] = {raw, t};
      after.push_back(make_reshape(raw, op.outputs[i].name, op.outputs[i].type, op));
    }
    out.push_back(core);
    for (auto& a : after) out.push_back(std::move(a));
    notes.push_back(op.loc.str() + ": note: " + op.type + " '" + tag +
                    "': operand/result layouts differ from the shape rules only in size-1 dims "
                    "(a Neural Engine idiom); taken as explicit reshapes");
    return true;
  };
  return search(0);
}
}  // namespace

std::vector<std::string> legalize_layout_idioms(Program& p) {
  std::vector<std::string> notes;
  for (auto& f : p.functions) {
    ValueTable values = param_table(f);
    std::vector<Op> ops;
    for (auto& op : f.ops) {
      auto inferred = try_infer(op, values, f.opset);
      if (inferred && fits(*inferred, op, true)) {
        ops.push_back(op);
      } else {
        std::vector<Op> replaced;
        if (layout_agnostic(op.type) && legalize_op(op, values, f.opset, replaced, notes)) {
          for (auto& r : replaced) {
            define_outputs(r, values);
            ops.push_back(std::move(r));
          }
          continue;
        }
        ops.push_back(op);  // verify() will report it
      }
      define_outputs(op, values);
    }
    f.ops = std::move(ops);
  }
  return notes;
}

namespace passes {
void legalize_layout_idioms(Program& p) { milrt::legalize_layout_idioms(p); }
}  // namespace passes

}  // namespace milrt
