// Pass: fold the elementwise ops that follow a matmul into one milrt_gemm
// (src/ir/ops/fused_gemm.cpp), whose kernel applies them to the accumulator
// before C is stored:
//
//   z = matmul(x, y)
//   z = mul(z, c) | real_div(z, c)        c a scalar constant     -> alpha
//   z = add(z, b) | add(b, z)             b [N] or [1, .., N]     -> bias
//   z = relu | sigmoid | silu (z), mul(z, sigmoid(z)),
//       gelu(z, mode = TANH_APPROXIMATION) or decompose's expansion
//       of it                                                     -> activation
//   z = add(z, r) | add(r, z)             r of z's type           -> residual
//
// The chain may also start at a milrt_gemm on int8 weights that
// fuse-quantized-weights made (y_scale set, no epilogue yet): it keeps y_scale.
//
// in that order, each step optional. Legality: every absorbed value has
// exactly one consumer (the next op of the chain; for mul(z, sigmoid(z)) the
// sigmoid and the mul) and is not a function output, and every op keeps z's
// type (no broadcasting that grows it). The fused op takes the place of the
// chain's last op, so the bias and the residual are defined before it; it
// keeps that op's output name, declared type and `name`, and lists the
// replaced ops in `fused_from`.
//
// Numerics: the chain rounded after every op; the fused op rounds once.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

using passes::Inputs;
using passes::Replacement;

struct Fusion {
  size_t matmul = 0;
  std::vector<size_t> absorbed;   // op indices, matmul first, tail last
  double alpha = 1;
  std::optional<Arg> bias, residual;
  std::string act = "none";
};

class Matcher {
 public:
  Matcher(const Function& f, bool bare) : f_(f) {
    passes::Scope scope(f, bare);
    for (size_t i = 0; i < f.ops.size(); ++i) {
      scope.define(f.ops[i]);
      for (const Input& in : f.ops[i].inputs)
        passes::for_each_var(in.arg, [&](const std::string& v) { users_[v].push_back(i); });
    }
    values_ = std::move(scope.values);
    uses_ = passes::count_uses(f);
    outputs_.insert(f.outputs.begin(), f.outputs.end());
  }

  std::optional<Fusion> match(size_t i) const {
    const Op& mm = f_.ops[i];
    const bool quantized = mm.type == "milrt_gemm" && mm.has("y_scale") && !mm.has("bias") && !mm.has("residual") &&
                           !mm.has("alpha") && !mm.has("activation");
    if ((mm.type != "matmul" && !quantized) || mm.outputs.size() != 1) return std::nullopt;
    const Type& t = mm.outputs[0].type;
    if (!t.is_tensor() || t.shape.empty() || t.has_unknown_dims()) return std::nullopt;
    if (t.dtype != DType::FP32 && t.dtype != DType::FP16) return std::nullopt;
    const ValueInfo* y = info(*mm.arg("y"));
    if (!y || y->type.shape.size() < 2) return std::nullopt;  // N must be the result's last dim
    Fusion fu;
    fu.matmul = i;
    fu.absorbed.push_back(i);
    std::string cur = mm.outputs[0].name;
    const int64_t n = t.shape.back();

    // alpha
    if (auto j = sole_user(cur); j && keeps_type(*j, t) && (f_.ops[*j].type == "mul" || f_.ops[*j].type == "real_div")) {
      const Op& op = f_.ops[*j];
      const bool div = op.type == "real_div";
      std::optional<double> c;
      if (is_var(op, "x", cur)) c = scalar_const(*op.arg("y"));
      else if (!div && is_var(op, "y", cur)) c = scalar_const(*op.arg("x"));
      if (c && std::isfinite(*c) && (!div || *c != 0)) {
        fu.alpha = div ? 1 / *c : *c;
        cur = advance(fu, *j);
      }
    }
    // bias
    if (auto j = sole_user(cur); j && keeps_type(*j, t) && f_.ops[*j].type == "add") {
      const Op& op = f_.ops[*j];
      const Arg* other = other_operand(op, cur);
      const ValueInfo* b = other ? info(*other) : nullptr;
      if (b && b->type.dtype == t.dtype && is_row_vector(b->type.shape, n, t.shape.size())) {
        fu.bias = *other;
        cur = advance(fu, *j);
      }
    }
    // activation
    if (auto j = sole_user(cur); j && keeps_type(*j, t)) {
      const Op& op = f_.ops[*j];
      std::string act;
      if ((op.type == "relu" || op.type == "sigmoid" || op.type == "silu") && is_var(op, "x", cur)) act = op.type;
      if (op.type == "gelu" && is_var(op, "x", cur) && const_string(op, "mode") == "TANH_APPROXIMATION")
        act = "gelu_tanh";
      if (!act.empty()) {
        fu.act = act;
        cur = advance(fu, *j);
      }
    } else if (auto sw = swish(cur, t)) {
      fu.act = "silu";
      fu.absorbed.push_back(sw->first);
      cur = advance(fu, sw->second);
    } else if (auto gl = gelu_tanh_expansion(cur, t)) {
      fu.act = "gelu_tanh";
      fu.absorbed.insert(fu.absorbed.end(), gl->begin(), gl->end() - 1);
      cur = advance(fu, gl->back());
    }
    // residual
    if (auto j = sole_user(cur); j && keeps_type(*j, t) && f_.ops[*j].type == "add") {
      const Op& op = f_.ops[*j];
      const Arg* other = other_operand(op, cur);
      const ValueInfo* r = other ? info(*other) : nullptr;
      if (r && r->type.is_tensor() && r->type.dtype == t.dtype && r->type.shape == t.shape) {
        fu.residual = *other;
        cur = advance(fu, *j);
      }
    }
    if (fu.absorbed.size() == 1) return std::nullopt;
    return fu;
  }

 private:
  // The one op reading `v` (once), when v is no function output.
  std::optional<size_t> sole_user(const std::string& v) const {
    auto it = uses_.find(v);
    if (it == uses_.end() || it->second != 1 || outputs_.count(v)) return std::nullopt;
    return users_.at(v)[0];
  }

  // mul(z, sigmoid(z)) in either operand order: the sigmoid's and the mul's indices.
  std::optional<std::pair<size_t, size_t>> swish(const std::string& z, const Type& t) const {
    auto it = uses_.find(z);
    if (it == uses_.end() || it->second != 2 || outputs_.count(z)) return std::nullopt;
    const std::vector<size_t>& u = users_.at(z);
    if (u.size() != 2 || u[0] == u[1]) return std::nullopt;
    size_t s = u[0], m = u[1];
    if (f_.ops[s].type != "sigmoid") std::swap(s, m);
    const Op& sig = f_.ops[s];
    const Op& mul = f_.ops[m];
    if (sig.type != "sigmoid" || mul.type != "mul" || !is_var(sig, "x", z) || sig.outputs.size() != 1) return std::nullopt;
    const std::string& sv = sig.outputs[0].name;
    if (sole_user(sv) != m || !keeps_type(s, t) || !keeps_type(m, t)) return std::nullopt;
    if (!((is_var(mul, "x", z) && is_var(mul, "y", sv)) || (is_var(mul, "y", z) && is_var(mul, "x", sv))))
      return std::nullopt;
    return std::make_pair(s, m);
  }

  // decompose's TANH_APPROXIMATION gelu of z, op by op:
  //   x2 = mul(z, z); x3 = mul(x2, z); c = mul(x3, 0.044715); s = add(z, c);
  //   t = mul(s, sqrt(2/pi)); h = tanh(t); p = add(h, 1); hx = mul(z, 0.5); out = mul(hx, p)
  // (operands of mul/add in either order, constants as rounded to the dtype).
  // Returns the nine op indices, `out` last.
  std::optional<std::vector<size_t>> gelu_tanh_expansion(const std::string& z, const Type& t) const {
    auto it = uses_.find(z);
    if (it == uses_.end() || it->second != 5 || outputs_.count(z)) return std::nullopt;
    std::set<size_t> users(users_.at(z).begin(), users_.at(z).end());
    if (users.size() != 4) return std::nullopt;
    std::optional<size_t> x2, x3, sum, half;
    for (size_t u : users) {
      const Op& op = f_.ops[u];
      if (!keeps_type(u, t)) return std::nullopt;
      if (op.type == "mul" && is_var(op, "x", z) && is_var(op, "y", z)) x2 = u;
      else if (op.type == "mul" && near(const_other(op, z), 0.5)) half = u;
      else if (op.type == "add") sum = u;
      else if (op.type == "mul") x3 = u;
    }
    if (!x2 || !x3 || !sum || !half) return std::nullopt;
    auto out_of = [&](size_t i) { return f_.ops[i].outputs[0].name; };
    // x3 = mul(x2, z)
    if (sole_user(out_of(*x2)) != x3 || !other_operand(f_.ops[*x3], z) ||
        other_operand(f_.ops[*x3], z)->var != out_of(*x2))
      return std::nullopt;
    auto next = [&](size_t i, const char* type, double c) -> std::optional<size_t> {
      auto j = sole_user(out_of(i));
      if (!j || f_.ops[*j].type != type || !keeps_type(*j, t) || !near(const_other(f_.ops[*j], out_of(i)), c))
        return std::nullopt;
      return j;
    };
    auto c = next(*x3, "mul", 0.044715);
    if (!c || sole_user(out_of(*c)) != sum || !other_operand(f_.ops[*sum], z) ||
        other_operand(f_.ops[*sum], z)->var != out_of(*c))
      return std::nullopt;
    auto tt = next(*sum, "mul", 0.7978845608028654);
    if (!tt) return std::nullopt;
    auto h = sole_user(out_of(*tt));
    if (!h || f_.ops[*h].type != "tanh" || !keeps_type(*h, t)) return std::nullopt;
    auto p = next(*h, "add", 1.0);
    if (!p) return std::nullopt;
    auto out = sole_user(out_of(*p));
    if (!out || sole_user(out_of(*half)) != out || f_.ops[*out].type != "mul" || !keeps_type(*out, t) ||
        !other_operand(f_.ops[*out], out_of(*p)) || other_operand(f_.ops[*out], out_of(*p))->var != out_of(*half))
      return std::nullopt;
    std::vector<size_t> r = {*x2, *x3, *c, *sum, *tt, *h, *p, *half};
    std::sort(r.begin(), r.end());
    if (r.back() > *out) return std::nullopt;
    r.push_back(*out);
    return r;
  }

  // The scalar constant that binary `op` combines with variable v.
  std::optional<double> const_other(const Op& op, const std::string& v) const {
    const Arg* o = other_operand(op, v);
    return o ? scalar_const(*o) : std::nullopt;
  }

  // Equal up to fp16 rounding of the constant.
  static bool near(std::optional<double> c, double want) {
    return c && std::fabs(*c - want) <= 1e-3 * std::fabs(want);
  }

  std::string advance(Fusion& fu, size_t j) const {
    fu.absorbed.push_back(j);
    return f_.ops[j].outputs[0].name;
  }

  bool keeps_type(size_t j, const Type& t) const {
    const Op& op = f_.ops[j];
    return op.outputs.size() == 1 && op.outputs[0].type == t;
  }

  static bool is_var(const Op& op, const std::string& key, const std::string& v) {
    const Arg* a = op.arg(key);
    return a && a->kind == Arg::Kind::Var && a->var == v;
  }

  // The operand of binary `op` that is not variable `v` (nullptr unless exactly one is v).
  static const Arg* other_operand(const Op& op, const std::string& v) {
    const bool x = is_var(op, "x", v), y = is_var(op, "y", v);
    if (x == y) return nullptr;
    return op.arg(x ? "y" : "x");
  }

  const ValueInfo* info(const Arg& a) const {
    if (a.kind == Arg::Kind::Const) {
      tmp_ = ValueInfo{a.lit->type, a.lit->value.empty() ? nullptr : &a.lit->value};
      return &tmp_;
    }
    if (a.kind != Arg::Kind::Var) return nullptr;
    auto it = values_.find(a.var);
    return it == values_.end() ? nullptr : &it->second;
  }

  std::optional<double> scalar_const(const Arg& a) const {
    const ValueInfo* v = info(a);
    if (!v || !v->value || v->value->numel() != 1 || !dtype_is_float(v->value->dtype())) return std::nullopt;
    return v->value->at(0);
  }

  std::string const_string(const Op& op, const std::string& key) const {
    const Arg* a = op.arg(key);
    const ValueInfo* v = a ? info(*a) : nullptr;
    if (!v || !v->value || v->value->dtype() != DType::String || v->value->strings().size() != 1) return "";
    return v->value->strings()[0];
  }

  // [N] or [1, .., 1, N] of rank <= the result's: adds the same row to every row.
  static bool is_row_vector(const Shape& s, int64_t n, size_t rank) {
    if (s.empty() || s.size() > rank || s.back() != n) return false;
    return std::all_of(s.begin(), s.end() - 1, [](int64_t d) { return d == 1; });
  }

  const Function& f_;
  ValueTable values_;
  std::unordered_map<std::string, int> uses_;
  std::map<std::string, std::vector<size_t>> users_;
  std::set<std::string> outputs_;
  mutable ValueInfo tmp_;
};

void fuse_function(Function& f, bool bare) {
  const Matcher m(f, bare);
  std::map<size_t, Fusion> by_tail;   // keyed by the chain's last op
  std::set<size_t> taken;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    auto fu = m.match(i);
    if (!fu) continue;
    std::sort(fu->absorbed.begin(), fu->absorbed.end());
    // add(matmul, matmul): both chains would claim the add; the first keeps it.
    if (std::any_of(fu->absorbed.begin(), fu->absorbed.end(), [&](size_t j) { return taken.count(j) > 0; })) continue;
    for (size_t j : fu->absorbed) taken.insert(j);
    by_tail[fu->absorbed.back()] = *fu;
  }
  if (by_tail.empty()) return;

  std::set<std::string> read_before = passes::names_read(f);
  std::set<std::string> absorbed_names;
  std::map<std::string, Fusion> tails;
  for (auto& [tail, fu] : by_tail) {
    tails[f.ops[tail].outputs[0].name] = fu;
    for (size_t j : fu.absorbed)
      if (j != tail) absorbed_names.insert(f.ops[j].outputs[0].name);
  }
  std::vector<Op> ops = f.ops;
  passes::rewrite_ops(f, bare, [&](const Op& op, Replacement& r) {
    if (op.outputs.empty()) return false;
    auto it = tails.find(op.outputs[0].name);
    if (it == tails.end()) return false;
    const Fusion& fu = it->second;
    const Op& mm = ops[fu.matmul];
    const Type& t = mm.outputs[0].type;
    Inputs in = {{"x", *mm.arg("x")}, {"y", *mm.arg("y")}};
    if (const Arg* a = mm.arg("transpose_x")) in.push_back({"transpose_x", *a});
    if (const Arg* a = mm.arg("transpose_y")) in.push_back({"transpose_y", *a});
    if (const Arg* a = mm.arg("y_scale")) in.push_back({"y_scale", *a});
    if (fu.bias) in.push_back({"bias", r.as_operand(*fu.bias, t.dtype, {t.shape.back()}, "bias")});
    if (fu.residual) in.push_back({"residual", *fu.residual});
    if (fu.alpha != 1) in.push_back({"alpha", r.scalar(DType::FP32, fu.alpha)});
    if (fu.act != "none") in.push_back({"activation", r.str(fu.act)});
    r.finish("milrt_gemm", in);
    std::vector<std::string> from;
    for (size_t j : fu.absorbed) from.push_back(ops[j].outputs[0].name);
    passes::set_fused_from(r.ops().back(), from, r.bare());
    return true;
  });
  std::erase_if(f.ops, [&](const Op& op) { return op.outputs.size() == 1 && absorbed_names.count(op.outputs[0].name); });
  passes::drop_orphaned_consts(f, read_before);
}

}  // namespace

namespace passes {
void fuse_gemm_epilogue(Program& p) {
  for (Function& f : p.functions) fuse_function(f, p.version == "1.3");
}
}  // namespace passes

}  // namespace milrt
