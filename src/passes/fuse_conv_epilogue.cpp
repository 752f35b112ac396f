// fuse-conv-epilogue: a conv and what directly follows it,
//
//   conv -> [add of a per-channel constant, when the conv has no bias]
//        -> [relu | sigmoid | silu | clip | relu then clip]
//
// become one milrt_conv that computes the bias and activation on the conv's
// accumulator before writing anything. relu then clip(alpha, beta) is
// clip(max(alpha, 0), beta). An intermediate is absorbed only when the next op
// of the pattern is its one reader and it is not a function output; clip
// bounds and the bias must be compile-time constants. The fused op takes the
// last absorbed op's output (name, type) and `name`, and records the replaced
// outputs in `fused_from`.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt::passes {
namespace {

struct FuncView {
  std::map<std::string, std::shared_ptr<const Literal>> consts;   // outputs of `const` ops
  std::map<std::string, int> reads;                               // op inputs reading each value
  std::map<std::string, size_t> reader;                           // the (last) op reading it
  std::set<std::string> outputs;

  explicit FuncView(const Function& f) : outputs(f.outputs.begin(), f.outputs.end()) {
    for (size_t i = 0; i < f.ops.size(); ++i) {
      const Op& op = f.ops[i];
      if (op.type == "const" && op.outputs.size() == 1)
        if (const Arg* v = op.arg("val"); v && v->kind == Arg::Kind::Const) consts[op.outputs[0].name] = v->lit;
      for (const Input& in : op.inputs)
        for_each_var(in.arg, [&](const std::string& name) {
          ++reads[name];
          reader[name] = i;
        });
    }
  }

  // The op that alone reads `value`, when `value` may be absorbed into it.
  std::optional<size_t> sole_reader(const std::string& value) const {
    auto it = reads.find(value);
    if (it == reads.end() || it->second != 1 || outputs.count(value)) return std::nullopt;
    return reader.at(value);
  }

  const Literal* constant(const Arg* a) const {
    if (!a) return nullptr;
    if (a->kind == Arg::Kind::Const) return a->lit.get();
    if (a->kind == Arg::Kind::Var)
      if (auto it = consts.find(a->var); it != consts.end()) return it->second.get();
    return nullptr;
  }
};

bool reads_var(const Op& op, const std::string& key, const std::string& v) {
  const Arg* a = op.arg(key);
  return a && a->kind == Arg::Kind::Var && a->var == v;
}

// A constant that adds one value per channel to a conv output `out`: shape,
// right-aligned, all ones but the channel dim (dim 1 of `out`).
bool per_channel(const Literal& l, DType dtype, const Shape& out) {
  const Shape& s = l.type.shape;
  if (l.value.empty() || l.type.dtype != dtype || out.size() < 2 || s.size() > out.size() || s.size() + 1 < out.size())
    return false;
  const size_t lead = out.size() - s.size();   // 0 or 1 missing leading dims
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t d = i + lead;
    if (d == 1 ? s[i] != out[1] : s[i] != 1) return false;
  }
  return true;
}

std::optional<double> scalar_value(const Literal* l) {
  if (!l || l->value.empty() || l->value.numel() != 1 || l->value.dtype() == DType::String) return std::nullopt;
  return l->value.at(0);
}

struct Fusion {
  std::vector<size_t> ops;          // absorbed ops in program order, conv first
  std::optional<Arg> bias;          // a bias taken from an add
  std::string act = "none";
  double alpha = 0, beta = 0;
};

// What can be fused after the conv at `i`.
Fusion match(const Function& f, const FuncView& view, size_t i) {
  Fusion m;
  m.ops.push_back(i);
  const Op& conv = f.ops[i];
  const DType dt = conv.outputs[0].type.dtype;
  std::string cur = conv.outputs[0].name;
  auto next = [&]() -> const Op* {
    auto j = view.sole_reader(cur);
    return j ? &f.ops[*j] : nullptr;
  };
  const Op* op = next();
  if (op && op->type == "add" && !conv.has("bias") && op->outputs[0].type == conv.outputs[0].type) {
    const bool on_x = reads_var(*op, "x", cur);
    const Literal* other = view.constant(op->arg(on_x ? "y" : "x"));
    if ((on_x || reads_var(*op, "y", cur)) && other && per_channel(*other, dt, conv.outputs[0].type.shape)) {
      Literal b = *other;
      b.type.shape = {conv.outputs[0].type.shape[1]};
      b.value = b.value.reshaped(b.type.shape);
      m.bias = Arg::of_const(std::move(b));
      m.ops.push_back(size_t(op - f.ops.data()));
      cur = op->outputs[0].name;
      op = next();
    }
  }
  if (!op || !reads_var(*op, "x", cur) || op->outputs[0].type != conv.outputs[0].type) return m;
  auto take = [&](const std::string& act) {
    m.act = act;
    m.ops.push_back(size_t(op - f.ops.data()));
    cur = op->outputs[0].name;
  };
  auto clip_bounds = [&](const Op& c, double floor) {
    auto a = scalar_value(view.constant(c.arg("alpha"))), b = scalar_value(view.constant(c.arg("beta")));
    if (!a || !b) return false;
    m.alpha = std::max(*a, floor);
    m.beta = *b;
    return true;
  };
  if (op->type == "relu") {
    take("relu");
    const Op* c = next();
    if (c && c->type == "clip" && reads_var(*c, "x", cur) && c->outputs[0].type == conv.outputs[0].type &&
        clip_bounds(*c, 0.0)) {
      op = c;
      take("clip");
    }
  } else if (op->type == "sigmoid" || op->type == "silu") {
    take(op->type);
  } else if (op->type == "clip" && clip_bounds(*op, -HUGE_VAL)) {
    take("clip");
  }
  return m;
}

Op fused_op(const Function& f, const Fusion& m, bool bare) {
  const Op& conv = f.ops[m.ops.front()];
  const Op& last = f.ops[m.ops.back()];
  const DType dt = conv.outputs[0].type.dtype;
  Op out;
  out.type = "milrt_conv";
  out.loc = conv.loc;
  out.name = last.name;
  out.outputs = last.outputs;
  for (const Input& in : conv.inputs) out.inputs.push_back(in);
  if (m.bias) out.set("bias", *m.bias);
  out.set("activation", passes::string_literal(m.act, bare));
  if (m.act == "clip") {
    out.set("alpha", passes::scalar_literal(dt, m.alpha, bare));
    out.set("beta", passes::scalar_literal(dt, m.beta, bare));
  }
  std::vector<std::string> from;
  for (size_t k : m.ops) from.push_back(f.ops[k].outputs[0].name);
  passes::set_fused_from(out, from, bare);
  return out;
}

void fuse_function(Function& f, bool bare) {
  const std::set<std::string> read_before = names_read(f);
  FuncView view(f);
  std::vector<bool> drop(f.ops.size(), false);
  std::map<size_t, Op> place;   // fused op written at its last absorbed op's position
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    if (op.type != "conv" || op.outputs.size() != 1 || drop[i]) continue;
    const DType dt = op.outputs[0].type.dtype;
    if (dt != DType::FP32 && dt != DType::FP16) continue;
    Fusion m = match(f, view, i);
    if (m.ops.size() < 2) continue;
    for (size_t k : m.ops) drop[k] = true;
    place.emplace(m.ops.back(), fused_op(f, m, bare));
  }
  if (place.empty()) return;
  std::vector<Op> ops;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    if (auto it = place.find(i); it != place.end()) ops.push_back(std::move(it->second));
    else if (!drop[i]) ops.push_back(std::move(f.ops[i]));
  }
  f.ops = std::move(ops);
  drop_orphaned_consts(f, read_before);
}

}  // namespace

void fuse_conv_epilogue(Program& p) {
  for (Function& f : p.functions) fuse_function(f, p.version == "1.3");
}

}  // namespace milrt::passes
