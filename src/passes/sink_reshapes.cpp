// Pass: sink reshapes below elementwise ops.
//
// Reshapes only relabel a buffer, but between a producer and its elementwise
// consumers they hide the chain from fusion: canonicalize turns a 1x1 conv
// into matmul + reshape, so conv → sigmoid → mul → residual add arrives as
// matmul → reshape → sigmoid → … . Elementwise ops commute with reshapes, so
//
//   u(reshape(a))                      -> reshape(u(a))
//   b(reshape(a), reshape(c))          -> reshape(b(a, c))   (a, c of one shape, reshaped alike)
//   b(reshape(a), s), b(s, reshape(a)) -> reshape(b(a, s))   (s one element, rank <= a's)
//   reshape(reshape(a))                -> reshape(a)
//
// repeated until nothing changes; the reshapes end up after the chain, where
// fusion no longer sees them and a plan treats them as views. Values are
// unchanged (the same elements meet the same ops); the old reshapes stay
// while other ops read them (dce removes the rest).
#include <map>
#include <set>
#include <string>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

using passes::Inputs;
using passes::Replacement;

const std::set<std::string>& unary_ops() {
  static const std::set<std::string> s = {
      "abs", "acos", "asin", "atan", "atanh", "ceil", "clip", "cos", "cosh", "erf", "exp", "exp2", "floor",
      "inverse", "log", "relu", "relu6", "round", "rsqrt", "sigmoid", "sigmoid_hard", "sign", "silu", "sin",
      "sinh", "softplus", "softsign", "sqrt", "square", "tan", "tanh", "leaky_relu", "elu", "gelu", "threshold",
      "scaled_tanh", "linear_activation", "thresholded_relu", "clamped_relu"};
  return s;
}

const std::set<std::string>& binary_ops() {
  static const std::set<std::string> s = {"add", "sub", "mul", "real_div", "maximum", "minimum", "pow"};
  return s;
}

struct ReshapeOf {
  std::string source;  // the reshaped value
  Shape source_shape;
};

using ReshapeMap = std::map<std::string, ReshapeOf>;

const ReshapeOf* reshape_of(const ReshapeMap& m, const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  if (!a || a->kind != Arg::Kind::Var) return nullptr;
  auto it = m.find(a->var);
  return it == m.end() ? nullptr : &it->second;
}

// The op with `replaced` inputs, then reshaped to the original output shape.
bool rebuild(const Op& op, Replacement& r, const std::map<std::string, std::string>& replaced) {
  Inputs in;
  for (const Input& i : op.inputs) {
    if (i.key == "name") continue;
    auto it = replaced.find(i.key);
    in.push_back({i.key, it == replaced.end() ? i.arg : Arg::of_var(it->second)});
  }
  Arg inner = r.emit(op.type, "presink", in);
  r.finish("reshape", {{"x", inner}, {"shape", r.ints(op.outputs.at(0).type.shape)}});
  return true;
}

bool sink(const Op& op, Replacement& r, const ReshapeMap& m) {
  if (op.outputs.size() != 1 || op.outputs[0].type.has_unknown_dims()) return false;
  if (op.type == "reshape") {
    const ReshapeOf* in = reshape_of(m, op, "x");
    if (!in) return false;
    r.finish("reshape", {{"x", Arg::of_var(in->source)}, {"shape", r.ints(op.outputs[0].type.shape)}});
    return true;
  }
  if (unary_ops().count(op.type)) {
    const ReshapeOf* in = reshape_of(m, op, "x");
    return in && rebuild(op, r, {{"x", in->source}});
  }
  if (!binary_ops().count(op.type)) return false;
  const ReshapeOf* x = reshape_of(m, op, "x");
  const ReshapeOf* y = reshape_of(m, op, "y");
  if (x && y) {
    Type tx = r.info(*op.arg("x")).type, ty = r.info(*op.arg("y")).type;
    if (tx.shape != ty.shape || x->source_shape != y->source_shape) return false;
    return rebuild(op, r, {{"x", x->source}, {"y", y->source}});
  }
  const ReshapeOf* one = x ? x : y;
  if (!one) return false;
  const std::string other_key = x ? "y" : "x";
  Type other = r.info(*op.arg(other_key)).type;
  if (!other.is_tensor() || other.has_unknown_dims() || shape_numel(other.shape) != 1 ||
      other.shape.size() > one->source_shape.size())
    return false;
  return rebuild(op, r, {{x ? "x" : "y", one->source}});
}

ReshapeMap reshapes(const Function& f) {
  std::map<std::string, Type> types;
  for (const Param& p : f.params) types[p.name] = p.type;
  for (const Op& op : f.ops)
    for (const Output& o : op.outputs) types[o.name] = o.type;
  ReshapeMap m;
  for (const Op& op : f.ops) {
    if (op.type != "reshape") continue;
    const Arg* x = op.arg("x");
    if (!x || x->kind != Arg::Kind::Var) continue;
    auto it = types.find(x->var);
    if (it == types.end() || !it->second.is_tensor() || it->second.has_unknown_dims()) continue;
    m[op.outputs[0].name] = {x->var, it->second.shape};
  }
  return m;
}

}  // namespace

namespace passes {
void sink_reshapes(Program& p) {
  for (Function& f : p.functions) {
    // Each round moves every reshape at least one op down; chains are short.
    for (int round = 0; round < 64; ++round) {
      ReshapeMap m = reshapes(f);
      bool changed = false;
      rewrite_ops(f, p.version == "1.3", [&](const Op& op, Replacement& r) {
        bool done = sink(op, r, m);
        changed |= done;
        return done;
      });
      if (!changed) break;
    }
  }
}
}  // namespace passes

}  // namespace milrt
