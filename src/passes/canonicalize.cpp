// Pass: bring GEMM-like ops and layout chains to one form, so later fusion
// has fewer patterns to match.
//
//  - linear(x, W, b)          -> matmul(x, W, transpose_y = true) [+ add(b)]
//  - 1x1 conv (stride 1, no dilation, one group, no padding) on [N, C, L]
//    or [N, C, H, W]          -> matmul(W as [Cout, Cin], x as [N, C, L])
//                                [+ add(b as [Cout, 1])] [-> reshape to 4-D]
//  - squeeze / expand_dims with a static result -> reshape
//  - pow(x, 2) with a constant exponent of 2 -> mul(x, x): the same value
//    (exactly rounded where libm's pow is not always), one instruction in a
//    fused elementwise loop instead of a call per element (Silero's STFT
//    magnitude: 27% of its one-thread run)
//  - reshape of a reshape     -> one reshape; reshape to x's own shape -> x
//  - transpose of a transpose -> one transpose (composed perm); identity
//    perm -> x; identity      -> x
//
// Legality: an op that produces a function output is never removed (its name
// is the output's). A transpose feeding several ops is not merged into its
// users, which would duplicate real data movement (unless the composition is
// the identity, when the user disappears); reshapes are free views, so a
// reshape reading another one is always rewired to the original input.
// Every rewrite computes the same values; a linear or conv with a bias
// rounds once more as matmul + add (before the add) than as one op.
#include <algorithm>
#include <map>
#include <set>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

using passes::Inputs;
using passes::int_vector;
using passes::Replacement;

// Input `key` as constant ints: `def` when absent, nullopt when not constant.
std::optional<std::vector<int64_t>> ints_or(const Replacement& r, const Op& op, const std::string& key,
                                            std::vector<int64_t> def) {
  if (!op.has(key)) return def;
  return passes::const_ints(r, op, key);
}

bool all_equal(const std::optional<std::vector<int64_t>>& v, int64_t want) {
  return v && std::all_of(v->begin(), v->end(), [want](int64_t d) { return d == want; });
}

// matmul takes operands of one dtype, except that a constant one may differ
// (the result taking the other's dtype, which is what linear/conv give).
bool matmul_accepts(const ValueInfo& x, const ValueInfo& w) {
  return x.type.dtype == w.type.dtype || (w.value && !x.value);
}

// linear(x, W, b) = x W^T + b
bool linear(const Op& op, Replacement& r) {
  const Arg& x = *op.arg("x");
  const Arg& w = *op.arg("weight");
  ValueInfo xi = r.info(x);
  if (!matmul_accepts(xi, r.info(w))) return false;
  if (op.has("bias") && r.info(*op.arg("bias")).type.dtype != xi.type.dtype) return false;
  Inputs mm = {{"x", x}, {"y", w}, {"transpose_y", r.boolean(true)}};
  if (!op.has("bias")) {
    r.finish("matmul", mm);
    return true;
  }
  Arg y = r.emit("matmul", "matmul", mm);
  r.finish("add", {{"x", y}, {"y", *op.arg("bias")}});
  return true;
}

// Whether a conv's parameters make a 1x1 kernel a plain channel mix: unit
// strides and dilations, one group, no padding. "same" pads a 1-wide kernel
// at stride 1 by nothing.
bool pointwise_params(const Op& op, const Replacement& r, size_t spatial) {
  std::vector<int64_t> ones(spatial, 1);
  if (!all_equal(ints_or(r, op, "strides", ones), 1) || !all_equal(ints_or(r, op, "dilations", ones), 1) ||
      !all_equal(ints_or(r, op, "groups", {1}), 1))
    return false;
  std::string pad_type = "valid";
  if (op.has("pad_type")) {
    auto t = passes::const_str(r, op, "pad_type");
    if (!t) return false;
    pad_type = *t;
  }
  if (pad_type == "custom") return all_equal(ints_or(r, op, "pad", std::vector<int64_t>(2 * spatial, 0)), 0);
  return pad_type == "valid" || pad_type == "same" || pad_type == "same_lower";
}

// A 1x1 conv on [N, C, L] is W [Cout, Cin] times x, batched over N; on
// [N, C, H, W] the same after flattening H, W.
bool pointwise_conv(const Op& op, Replacement& r) {
  const Arg& x = *op.arg("x");
  const Arg& w = *op.arg("weight");
  ValueInfo xi = r.info(x), wi = r.info(w);
  const Shape& xs = xi.type.shape;
  const Shape& ws = wi.type.shape;
  size_t rank = xs.size();
  if ((rank != 3 && rank != 4) || ws.size() != rank || wi.type.has_unknown_dims()) return false;
  for (size_t i = 2; i < rank; ++i)
    if (ws[i] != 1) return false;
  if (!pointwise_params(op, r, rank - 2)) return false;
  if (rank == 4 && xi.type.has_unknown_dims()) return false;
  if (!matmul_accepts(xi, wi)) return false;
  bool bias = op.has("bias");
  if (bias && r.info(*op.arg("bias")).type.dtype != xi.type.dtype) return false;

  int64_t cout = ws[0], cin = ws[1];
  // A constant weight stays constant (a new const); matmul_accepts relied on that.
  Arg w2 = r.as_operand(w, wi.type.dtype, {cout, cin}, "weight");
  Arg b = bias ? r.as_operand(*op.arg("bias"), xi.type.dtype, {cout, 1}, "bias") : Arg{};
  if (rank == 3) {
    Inputs mm = {{"x", w2}, {"y", x}};
    if (!bias) {
      r.finish("matmul", mm);
      return true;
    }
    r.finish("add", {{"x", r.emit("matmul", "matmul", mm)}, {"y", b}});
    return true;
  }
  Arg flat = r.emit("reshape", "flat", {{"x", x}, {"shape", r.ints({xs[0], xs[1], xs[2] * xs[3]})}});
  Arg y = r.emit("matmul", "matmul", {{"x", w2}, {"y", flat}});
  if (bias) y = r.emit("add", "biased", {{"x", y}, {"y", b}});
  r.finish("reshape", {{"x", y}, {"shape", r.ints({xs[0], cout, xs[2], xs[3]})}});
  return true;
}

// A static shape without zeros: a reshape to it needs no help from x's shape
// (a 0 in reshape's `shape` means "copy x's dim" from iOS17 on).
bool literal_shape(const Type& t) {
  return t.is_tensor() && !t.has_unknown_dims() && std::find(t.shape.begin(), t.shape.end(), 0) == t.shape.end();
}

// squeeze and expand_dims only move size-1 dims: a reshape.
bool to_reshape(const Op& op, Replacement& r) {
  const Type& t = op.outputs[0].type;
  if (!literal_shape(t)) return false;
  r.finish("reshape", {{"x", *op.arg("x")}, {"shape", r.ints(t.shape)}});
  return true;
}

// pow(x, 2) = x·x when the exponent is a constant 2 everywhere and does not
// broadcast x to a larger shape.
bool square_pow(const Op& op, Replacement& r) {
  if (!op.has("y")) return false;
  const ValueInfo x = r.info(*op.arg("x")), y = r.info(*op.arg("y"));
  if (!y.value || y.type.dtype != x.type.dtype || op.outputs[0].type.shape != x.type.shape) return false;
  for (size_t i = 0, n = size_t(y.value->numel()); i < n; ++i)
    if (y.value->at(i) != 2) return false;
  r.finish("mul", {{"x", *op.arg("x")}, {"y", *op.arg("x")}});
  return true;
}

bool expand(const Op& op, Replacement& r) {
  if (op.outputs.size() != 1 || !op.has("x") || op.arg("x")->kind == Arg::Kind::Tuple) return false;
  if (op.type == "linear") return linear(op, r);
  if (op.type == "conv") return pointwise_conv(op, r);
  if (op.type == "squeeze" || op.type == "expand_dims") return to_reshape(op, r);
  if (op.type == "pow") return square_pow(op, r);
  return false;
}

// ---- chains of data movement ------------------------------------------------

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != int64_t(i)) return false;
  return true;
}

// One forward sweep over a function's ops, merging and removing reshapes,
// transposes and identities. Uses are counted up front and kept exact as ops
// are rewired, so "used only here" stays true to the current program.
class ChainSimplifier {
 public:
  explicit ChainSimplifier(Function& f) : f_(f), dead_(f.ops.size(), false) {
    ValueTable values = param_table(f);
    for (size_t i = 0; i < f.ops.size(); ++i) {
      define_outputs(f.ops[i], values);
      for (auto& o : f.ops[i].outputs) producer_[o.name] = i;
    }
    uses_ = passes::count_uses(f);
    outputs_.insert(f.outputs.begin(), f.outputs.end());
    values_ = std::move(values);
  }

  // Returns whether anything changed.
  bool run() {
    bool changed = false;
    for (size_t i = 0; i < f_.ops.size(); ++i) {
      Op& op = f_.ops[i];
      for (auto& input : op.inputs)
        passes::for_each_var(input.arg, [&](std::string& v) {
          if (auto it = alias_.find(v); it != alias_.end()) v = it->second;
        });
      const Arg* in = op.arg("x");
      if (op.outputs.size() != 1 || !in || in->kind != Arg::Kind::Var) continue;
      if (op.type == "identity") changed |= remove(i);
      else if (op.type == "reshape") changed |= reshape(i);
      else if (op.type == "transpose") changed |= transpose(i);
    }
    std::vector<Op> live;
    for (size_t i = 0; i < f_.ops.size(); ++i)
      if (!dead_[i]) live.push_back(std::move(f_.ops[i]));
    f_.ops = std::move(live);
    return changed;
  }

 private:
  const std::string& out(size_t i) const { return f_.ops[i].outputs[0].name; }
  const std::string& x(size_t i) const { return f_.ops[i].arg("x")->var; }
  bool is_output(const std::string& v) const { return outputs_.count(v) > 0; }

  // Transpose i's perm with negative axes normalized; nullopt if not constant.
  std::optional<std::vector<int64_t>> perm(size_t i) const {
    const Arg* a = f_.ops[i].arg("perm");
    const Tensor* t = nullptr;
    if (a && a->kind == Arg::Kind::Const) t = &a->lit->value;
    if (a && a->kind == Arg::Kind::Var)
      if (auto it = values_.find(a->var); it != values_.end()) t = it->second.value;
    if (!t || !dtype_is_int(t->dtype())) return std::nullopt;
    std::vector<int64_t> p;
    int64_t n = t->numel();
    for (int64_t k = 0; k < n; ++k) {
      auto v = int64_t(t->at(size_t(k)));
      p.push_back(v < 0 ? v + n : v);
    }
    return p;
  }

  // The live op of type `type` producing `v`, reading a variable x.
  std::optional<size_t> producer(const std::string& v, const std::string& type) const {
    auto it = producer_.find(v);
    if (it == producer_.end() || dead_[it->second]) return std::nullopt;
    const Op& op = f_.ops[it->second];
    const Arg* a = op.arg("x");
    if (op.type != type || op.outputs.size() != 1 || !a || a->kind != Arg::Kind::Var) return std::nullopt;
    return it->second;
  }

  // Drops op i, whose output becomes another name for `to` (default: its x).
  bool remove(size_t i, std::optional<std::string> to = std::nullopt) {
    if (is_output(out(i))) return false;
    std::string target = to.value_or(x(i));
    uses_[target] += uses_[out(i)];  // before unuse, which must not retire the target
    unuse(x(i));
    uses_[out(i)] = 0;
    alias_[out(i)] = target;
    dead_[i] = true;
    return true;
  }

  // Op i reads `from` instead of its x.
  void rewire(size_t i, const std::string& from) {
    ++uses_[from];
    unuse(x(i));
    f_.ops[i].set("x", Arg::of_var(from));
  }

  // One use of v is gone; a reshape/transpose left without uses goes too.
  void unuse(const std::string& v) {
    if (--uses_[v] > 0) return;  // function outputs count as uses
    auto it = producer_.find(v);
    if (it == producer_.end() || dead_[it->second]) return;
    const Op& op = f_.ops[it->second];
    if (op.type != "reshape" && op.type != "transpose") return;
    dead_[it->second] = true;
    if (const Arg* a = op.arg("x"); a && a->kind == Arg::Kind::Var) unuse(a->var);
  }

  bool reshape(size_t i) {
    bool changed = false;
    const Type& t = f_.ops[i].outputs[0].type;
    bool static_out = literal_shape(t);
    if (auto prev = producer(x(i), "reshape"); prev && static_out) {
      rewire(i, x(*prev));
      f_.ops[i].set("shape", int_vector(t.shape));
      changed = true;
    }
    const Type& xt = values_.at(x(i)).type;
    if (static_out && !xt.has_unknown_dims() && xt.shape == t.shape) changed |= remove(i);
    return changed;
  }

  bool transpose(size_t i) {
    auto second = perm(i);
    if (!second) return false;
    bool changed = false;
    if (auto prev = producer(x(i), "transpose")) {
      auto first = perm(*prev);
      if (first && first->size() == second->size()) {
        // Output dim k is the first transpose's dim second[k], i.e. x's dim first[second[k]].
        std::vector<int64_t> composed;
        for (int64_t k : *second) composed.push_back((*first)[size_t(k)]);
        if (is_identity(composed) && !is_output(out(i))) return remove(i, x(*prev));
        if (uses_[out(*prev)] == 1 && !is_output(out(*prev))) {
          rewire(i, x(*prev));
          f_.ops[i].set("perm", int_vector(composed));
          second = composed;
          changed = true;
        }
      }
    }
    if (is_identity(*second)) changed |= remove(i);
    return changed;
  }

  Function& f_;
  std::vector<bool> dead_;
  ValueTable values_;
  std::map<std::string, size_t> producer_;
  std::unordered_map<std::string, int> uses_;
  std::map<std::string, std::string> alias_;
  std::set<std::string> outputs_;
};

}  // namespace

namespace passes {
void canonicalize(Program& p) {
  for (auto& f : p.functions) {
    std::set<std::string> read_before = names_read(f);
    rewrite_ops(f, p.version == "1.3", expand);
    while (ChainSimplifier(f).run()) {
    }
    // A conv's 4-D weight once its 2-D copy took over, squeeze axes, perms
    // of merged transposes.
    drop_orphaned_consts(f, read_before);
  }
}
}  // namespace passes

}  // namespace milrt
