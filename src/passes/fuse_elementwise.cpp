// Pass: chains and trees of float elementwise ops into one milrt_elementwise
// op, computed in one loop (ir/elementwise_expr.h describes its expression).
//
// Groups: a float elementwise op (binary arithmetic, unary math, activation,
// with constant scalar parameters) is absorbed into its consumer when its
// value has exactly one use, that use is an operand of another such op, and
// the value is not a function output. A group is then a tree of ops rooted at
// one whose value is used elsewhere (or several times); a group of one op
// stays as it is. The fused op takes the root's place, output name, declared
// type and name; its inputs (the values the tree reads from outside, each
// once) are all defined before the root, which is the tree's last op.
//
// Reshapes: a reshape inside a group (a view in row-major order) is absorbed
// when every value its subtree reads has the reshape's result shape up to
// leading 1s, so that subtree's elements line up with the result's without
// any index change (the seeds' layout idioms put such reshapes between a
// SiLU and its consumer, and around residual adds). Otherwise the reshape is
// left out and the grouping is redone without it.
//
// Operands: a constant with one element becomes a literal of the expression
// (its exact value in the program's dtype) unless its rank would widen the
// result; other constants and values become inputs. MIL's default epsilons
// are written out, rounded to the op's dtype as MIL rounds them.
//
// Numerics: the reference executor rounds a fused group once instead of after
// every op; compiled plans compute in fp32 either way.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "ir/elementwise_expr.h"
#include "ir/verifier.h"
#include "milrt/error.h"
#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

// Programs the kernel takes comfortably (see kernels/generic/elementwise_program).
constexpr int kMaxCalls = 200;
constexpr size_t kMaxInputs = 32;

struct Spec {
  bool binary = false;
  std::vector<const char*> params;   // required scalar parameters, in MIL order
  double eps_default = -1;           // >= 0: optional `epsilon` with this default
};

const std::map<std::string, Spec>& specs() {
  static const std::map<std::string, Spec> m = [] {
    std::map<std::string, Spec> r;
    for (const char* b : {"add", "sub", "mul", "real_div", "maximum", "minimum", "pow", "floor_div", "mod"})
      r[b] = {true, {}};
    for (const char* u : {"abs", "exp", "exp2", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "atanh",
                          "sinh", "cosh", "tanh", "erf", "floor", "ceil", "round", "sign", "square", "relu",
                          "relu6", "sigmoid", "silu", "softplus", "softsign", "gelu"})
      r[u] = {false, {}};
    r["log"] = {false, {}, 1e-45};
    r["rsqrt"] = {false, {}, 1e-12};
    r["inverse"] = {false, {}, 1e-4};
    for (const char* u : {"leaky_relu", "elu", "thresholded_relu", "threshold"}) r[u] = {false, {"alpha"}};
    for (const char* u : {"clip", "sigmoid_hard", "scaled_tanh", "linear_activation", "clamped_relu"})
      r[u] = {false, {"alpha", "beta"}};
    return r;
  }();
  return m;
}

bool is_float(DType t) { return t == DType::FP16 || t == DType::FP32; }

class Fuser {
 public:
  Fuser(Function& f, bool bare) : f_(f), bare_(bare), values_(param_table(f)) {
    for (size_t i = 0; i < f.ops.size(); ++i) {
      define_outputs(f.ops[i], values_);
      for (const Output& o : f.ops[i].outputs) producer_[o.name] = i;
    }
    uses_ = passes::count_uses(f);
    outputs_.insert(f.outputs.begin(), f.outputs.end());
  }

  void run() {
    // A reshape whose subtree does not line up is excluded and the groups
    // formed again; each round excludes one more, so this ends.
    while (!attempt()) {
    }
  }

 private:
  bool attempt() {
    const size_t n = f_.ops.size();
    std::vector<bool> cand(n);
    for (size_t i = 0; i < n; ++i) cand[i] = candidate(f_.ops[i]) && !excluded_.count(i);
    // parent_[i]: the op that absorbs op i.
    parent_.assign(n, -1);
    std::vector<bool> has_child(n, false);
    for (size_t i = 0; i < n; ++i) {
      const Op& c = f_.ops[i];
      if (!cand[i]) continue;
      for (const char* key : {"x", "y"}) {
        if (c.type == "reshape" && std::string(key) == "y") continue;
        const Arg* a = c.arg(key);
        if (!a || a->kind != Arg::Kind::Var) continue;
        auto p = producer_.find(a->var);
        if (p == producer_.end() || !cand[p->second] || uses_[a->var] != 1 || outputs_.count(a->var)) continue;
        parent_[p->second] = int(i);
        has_child[i] = true;
      }
    }
    std::set<std::string> read_before = passes::names_read(f_);
    std::vector<Op> out;
    std::vector<bool> drop(n, false);
    std::vector<std::optional<Op>> fused(n);
    for (size_t i = 0; i < n; ++i) {
      if (!has_child[i] || parent_[i] >= 0) continue;
      bad_reshape_.reset();
      fused[i] = fuse(i, drop);
      if (bad_reshape_) {
        excluded_.insert(*bad_reshape_);
        return false;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (drop[i]) continue;
      out.push_back(fused[i] ? std::move(*fused[i]) : std::move(f_.ops[i]));
    }
    f_.ops = std::move(out);
    passes::drop_orphaned_consts(f_, read_before);
    return true;
  }

  // The compile-time value of an operand, if constant.
  const Tensor* const_of(const Arg& a) const {
    if (a.kind == Arg::Kind::Const) return a.lit->value.empty() ? nullptr : &a.lit->value;
    if (a.kind != Arg::Kind::Var) return nullptr;
    auto it = values_.find(a.var);
    return it == values_.end() ? nullptr : it->second.value;
  }
  const Type* type_of(const Arg& a) const {
    if (a.kind == Arg::Kind::Const) return &a.lit->type;
    if (a.kind != Arg::Kind::Var) return nullptr;
    auto it = values_.find(a.var);
    return it == values_.end() ? nullptr : &it->second.type;
  }
  std::optional<double> scalar_of(const Arg* a) const {
    if (!a) return std::nullopt;
    const Tensor* t = const_of(*a);
    if (!t || t->numel() != 1 || !dtype_is_float(t->dtype())) return std::nullopt;
    return t->at(0);
  }

  bool candidate(const Op& op) const {
    if (op.type == "reshape") {
      const Arg* x = op.arg("x");
      if (!x || x->kind != Arg::Kind::Var || op.outputs.size() != 1) return false;
      const Type* t = type_of(*x);
      return t && t->is_tensor() && is_float(t->dtype) &&
             t->dtype == op.outputs[0].type.dtype && !op.outputs[0].type.has_unknown_dims() && !t->has_unknown_dims();
    }
    auto it = specs().find(op.type);
    if (it == specs().end() || op.outputs.size() != 1) return false;
    const Type& out = op.outputs[0].type;
    if (!out.is_tensor() || !is_float(out.dtype)) return false;
    const Spec& s = it->second;
    for (const char* key : s.binary ? std::vector<const char*>{"x", "y"} : std::vector<const char*>{"x"}) {
      const Arg* a = op.arg(key);
      if (!a || a->kind == Arg::Kind::Tuple) return false;
      const Type* t = type_of(*a);
      if (!t || !t->is_tensor() || t->dtype != out.dtype) return false;
    }
    for (const char* p : s.params)
      if (!scalar_of(op.arg(p))) return false;
    if (s.eps_default >= 0 && op.has("epsilon") && !scalar_of(op.arg("epsilon"))) return false;
    if (op.type == "gelu" && op.has("mode")) {
      const Tensor* m = const_of(*op.arg("mode"));
      if (!m || m->dtype() != DType::String || m->strings().size() != 1) return false;
    }
    // Only the inputs the schema knows (x, y, parameters) and nothing else.
    for (const Input& in : op.inputs) {
      const std::string& k = in.key;
      bool known = k == "x" || (s.binary && k == "y") || (s.eps_default >= 0 && k == "epsilon") ||
                   (op.type == "gelu" && k == "mode");
      for (const char* p : s.params) known = known || k == p;
      if (!known) return false;
    }
    return true;
  }

  // The group's tree below op `i`, as an expression; collects inputs and members.
  struct Build {
    std::vector<Arg> inputs;
    std::unordered_map<std::string, int> by_name;
    std::vector<size_t> members;
    std::vector<Shape> leaves;   // the shape of every value read, in order (repeats included)
    size_t out_rank = 0;
  };

  ew::Expr operand(const Arg& a, Build& b, size_t consumer) {
    if (a.kind == Arg::Kind::Var) {
      auto p = producer_.find(a.var);
      if (p != producer_.end() && parent_[p->second] == int(consumer)) return tree(p->second, b);
    }
    const Tensor* t = const_of(a);
    const Type* ty = type_of(a);
    if (!ty) throw Error("internal: fuse-elementwise: operand of unknown type");
    if (t && t->numel() == 1 && ty->shape.size() <= b.out_rank) return ew::Expr::of_literal(t->at(0));
    b.leaves.push_back(ty->shape);
    if (a.kind == Arg::Kind::Var) {
      auto [it, fresh] = b.by_name.try_emplace(a.var, int(b.inputs.size()));
      if (fresh) b.inputs.push_back(a);
      return ew::Expr::of_input(it->second);
    }
    b.inputs.push_back(a);
    return ew::Expr::of_input(int(b.inputs.size()) - 1);
  }

  ew::Expr tree(size_t i, Build& b) {
    const Op& op = f_.ops[i];
    b.members.push_back(i);
    if (op.type == "reshape") {
      size_t first = b.leaves.size();
      ew::Expr e = operand(*op.arg("x"), b, i);
      Shape s = without_leading_ones(op.outputs[0].type.shape);
      for (size_t k = first; k < b.leaves.size(); ++k)
        if (without_leading_ones(b.leaves[k]) != s) bad_reshape_ = i;
      return e;
    }
    const Spec& s = specs().at(op.type);
    std::vector<ew::Expr> args;
    args.push_back(operand(*op.arg("x"), b, i));
    if (s.binary) args.push_back(operand(*op.arg("y"), b, i));
    for (const char* p : s.params) args.push_back(ew::Expr::of_literal(*scalar_of(op.arg(p))));
    std::string fn = op.type;
    if (s.eps_default >= 0) {
      std::optional<double> eps = scalar_of(op.arg("epsilon"));
      // MIL materializes the default in x's dtype (1e-45 is 0 in fp16).
      args.push_back(ew::Expr::of_literal(eps ? *eps : Tensor::scalar(op.outputs[0].type.dtype, s.eps_default).at(0)));
    }
    if (op.type == "gelu" && op.has("mode")) {
      const std::string& mode = const_of(*op.arg("mode"))->strings()[0];
      if (mode == "TANH_APPROXIMATION") fn = "gelu_tanh";
      else if (mode == "SIGMOID_APPROXIMATION") fn = "gelu_sigmoid";
    }
    return ew::Expr::call(fn, std::move(args));
  }

  static Shape without_leading_ones(const Shape& s) {
    size_t k = 0;
    while (k < s.size() && s[k] == 1) ++k;
    return Shape(s.begin() + std::ptrdiff_t(k), s.end());
  }

  // The fused op replacing root `r`'s group, or nullopt when the group
  // cannot be expressed (then nothing changes).
  std::optional<Op> fuse(size_t r, std::vector<bool>& drop) {
    const Op& root = f_.ops[r];
    Build b;
    b.out_rank = root.outputs[0].type.shape.size();
    ew::Expr e = tree(r, b);
    if (b.inputs.empty() || b.inputs.size() > kMaxInputs || ew::count_calls(e) > kMaxCalls) return std::nullopt;
    if (bad_reshape_) return std::nullopt;
    std::sort(b.members.begin(), b.members.end());
    bool computes = false;
    for (size_t m : b.members) computes |= f_.ops[m].type != "reshape";
    if (!computes) return std::nullopt;
    std::vector<std::string> from;
    for (size_t m : b.members) from.push_back(f_.ops[m].outputs[0].name);
    Op op;
    op.type = "milrt_elementwise";
    op.name = root.name;
    op.loc = root.loc;
    op.inputs.push_back({"inputs", Arg::of_tuple(b.inputs), false});
    op.inputs.push_back({"expr", passes::string_literal(ew::print_expr(e), bare_), false});
    passes::set_fused_from(op, from, bare_);
    op.outputs = root.outputs;
    // The inputs must broadcast to exactly the root's type, in its dtype.
    try {
      std::vector<Type> t = infer_op(op, values_, f_.opset);
      if (t.size() != 1 || !type_admits(t[0], op.outputs[0].type) || t[0].dtype != op.outputs[0].type.dtype) {
        if (root.type == "reshape") bad_reshape_ = r;  // then the group below it may still fuse
        return std::nullopt;
      }
    } catch (const Error&) {
      return std::nullopt;
    }
    for (size_t m : b.members)
      if (m != r) drop[m] = true;
    return op;
  }

  Function& f_;
  bool bare_;
  ValueTable values_;
  std::unordered_map<std::string, size_t> producer_;
  std::unordered_map<std::string, int> uses_;
  std::set<std::string> outputs_;
  std::vector<int> parent_;
  std::set<size_t> excluded_;            // reshapes that do not line up
  std::optional<size_t> bad_reshape_;    // found while building the current group
};

}  // namespace

namespace passes {
void fuse_elementwise(Program& p) {
  for (Function& f : p.functions) Fuser(f, p.version == "1.3").run();
}
}  // namespace passes

}  // namespace milrt
