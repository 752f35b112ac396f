// Pass fuse-norms: the RMSNorm idiom becomes one milrt_rms_norm op.
//
//   sq  = mul(x, x) | square(x) | pow(x, 2)
//   ms  = reduce_mean(sq, axes, keep_dims = true)
//       | mul(reduce_sum(sq, axes, keep_dims = true), 1/n)   (either operand order)
//       | real_div(reduce_sum(sq, axes, keep_dims = true), n)
//   v   = add(ms, eps) (either order; eps a constant scalar) | ms
//   nx  = mul(x, pow(v, -0.5)) | mul(x, rsqrt(v, epsilon)) | real_div(x, sqrt(v))
//   out = mul(nx, gamma)   (optional; either order)
//
// as the second seed writes it in [1, C, 1, S] channel-first layout
// (src/llm/seed_kernels.cpp) and as PyTorch-style exports write it over the
// last dim. n is the element count of the reduced dims; a scale constant
// counts as 1/n when it is 1/n rounded to its dtype. rsqrt's epsilon
// (default 1e-12) adds to eps. gamma is fused when it varies only along the
// normalized dims (broadcast over the others); it is reshaped to those dims.
//
// Every intermediate must have exactly one consumer (the next op of the
// pattern) and not be a function output; gamma's mul is left alone when the
// normalized value has other uses. The reduced axes must form one run of
// dims (size-1 dims may lie between), as the kernel's [outer, n, inner] view
// needs. The fused op computes in one step what the chain rounded after every
// op: fp16 programs change by a few ulps, and no longer overflow in x·x for
// |x| >= 256.
#include <cmath>
#include <map>
#include <optional>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

using passes::Replacement;
using passes::Scope;

struct Match {
  std::vector<size_t> ops;   // indices of the replaced ops
  Arg x;
  std::optional<Arg> gamma;
  Shape gamma_shape;         // x's normalized dims
  std::vector<int64_t> axes;
  double eps = 0;
};

class Matcher {
 public:
  explicit Matcher(const Function& f) : f_(f), scope_(f, false) {
    for (size_t i = 0; i < f.ops.size(); ++i) {
      scope_.define(f.ops[i]);
      for (const Output& o : f.ops[i].outputs) producer_[o.name] = i;
    }
    uses_ = passes::count_uses(f);
    for (const std::string& o : f.outputs) uses_[o] += 1000;  // never absorbed
  }

  // The pattern ending at op `i` (gamma's mul, or the normalizing op itself).
  std::optional<Match> at(size_t i) const {
    const Op& op = f_.ops[i];
    if (op.type == "mul" && op.outputs.size() == 1) {
      for (auto [a, b] : {std::pair{"x", "y"}, std::pair{"y", "x"}}) {
        std::optional<size_t> c = absorbable(*op.arg(a));
        if (!c) continue;
        std::optional<Match> m = core(*c);
        if (m && with_gamma(op, *op.arg(b), *m)) {
          m->ops.push_back(i);
          return m;
        }
      }
    }
    return core(i);
  }

 private:
  const Type& type_of(const Arg& a) const {
    static const Type none;
    if (a.kind == Arg::Kind::Const) return a.lit->type;
    auto it = scope_.values.find(a.var);
    return it == scope_.values.end() ? none : it->second.type;
  }
  std::optional<double> scalar(const Arg* a) const {
    if (!a || a->kind == Arg::Kind::Tuple) return std::nullopt;
    const Tensor* t = nullptr;
    if (a->kind == Arg::Kind::Const) t = a->lit->value.empty() ? nullptr : &a->lit->value;
    else if (auto it = scope_.values.find(a->var); it != scope_.values.end()) t = it->second.value;
    if (!t || t->numel() != 1 || (!dtype_is_float(t->dtype()) && !dtype_is_int(t->dtype()) && t->dtype() != DType::Bool))
      return std::nullopt;
    return t->at(0);
  }
  // The op defining `a` when `a` is a value read only once (by the pattern).
  std::optional<size_t> absorbable(const Arg& a) const {
    if (a.kind != Arg::Kind::Var) return std::nullopt;
    auto u = uses_.find(a.var);
    auto p = producer_.find(a.var);
    if (u == uses_.end() || u->second != 1 || p == producer_.end()) return std::nullopt;
    if (f_.ops[p->second].outputs.size() != 1) return std::nullopt;
    return p->second;
  }
  static bool same_var(const Arg& a, const Arg& b) {
    return a.kind == Arg::Kind::Var && b.kind == Arg::Kind::Var && a.var == b.var;
  }

  // nx = x · v^-1/2 (or x / sqrt(v)) at op i.
  std::optional<Match> core(size_t i) const {
    const Op& op = f_.ops[i];
    if (op.outputs.size() != 1) return std::nullopt;
    std::vector<std::pair<const Arg*, const Arg*>> tries;  // (x, the inverse root)
    if (op.type == "mul" && op.has("x") && op.has("y")) tries = {{op.arg("x"), op.arg("y")}, {op.arg("y"), op.arg("x")}};
    else if (op.type == "real_div" && op.has("x") && op.has("y")) tries = {{op.arg("x"), op.arg("y")}};
    for (auto [x, r] : tries) {
      std::optional<size_t> ri = absorbable(*r);
      if (!ri || x->kind != Arg::Kind::Var) continue;
      const Op& root = f_.ops[*ri];
      double extra = 0;
      if (op.type == "real_div") {
        if (root.type != "sqrt") continue;
      } else if (root.type == "rsqrt") {
        std::optional<double> e = root.has("epsilon") ? scalar(root.arg("epsilon")) : 1e-12;
        if (!e) continue;
        extra = *e;
      } else if (root.type == "pow") {
        if (scalar(root.arg("y")) != -0.5) continue;
      } else {
        continue;
      }
      std::optional<Match> m = denominator(*root.arg("x"), *x);
      if (!m) continue;
      const Type& xt = type_of(*x);
      if (op.outputs[0].type.dtype != xt.dtype || op.outputs[0].type.shape != xt.shape) continue;
      m->eps += extra;
      m->ops.push_back(*ri);
      m->ops.push_back(i);
      return m;
    }
    return std::nullopt;
  }

  // v = ms + eps, or ms.
  std::optional<Match> denominator(const Arg& v, const Arg& x) const {
    std::optional<size_t> vi = absorbable(v);
    if (!vi) return std::nullopt;
    const Op& add = f_.ops[*vi];
    if (add.type == "add") {
      for (auto [a, b] : {std::pair{"x", "y"}, std::pair{"y", "x"}}) {
        std::optional<double> eps = scalar(add.arg(b));
        std::optional<size_t> mi = absorbable(*add.arg(a));
        if (!eps || !mi) continue;
        std::optional<Match> m = mean_square(*mi, x);
        if (!m) continue;
        m->eps = *eps;
        m->ops.push_back(*vi);
        return m;
      }
      return std::nullopt;
    }
    return mean_square(*vi, x);
  }

  // ms = mean(x², axes) at op i.
  std::optional<Match> mean_square(size_t i, const Arg& x) const {
    const Op& op = f_.ops[i];
    std::optional<size_t> ri;
    std::optional<double> scale;  // of the sum: must be 1/n
    if (op.type == "reduce_mean") {
      ri = i;
    } else if (op.type == "mul" || op.type == "real_div") {
      for (auto [a, b] : {std::pair{"x", "y"}, std::pair{"y", "x"}}) {
        if (op.type == "real_div" && std::string(a) == "y") break;
        std::optional<double> k = scalar(op.arg(b));
        std::optional<size_t> r = absorbable(*op.arg(a));
        if (!k || !r || f_.ops[*r].type != "reduce_sum") continue;
        ri = r, scale = op.type == "mul" ? *k : 1 / *k;
        break;
      }
    }
    if (!ri) return std::nullopt;
    const Op& red = f_.ops[*ri];
    std::optional<size_t> si = absorbable(*red.arg("x"));
    if (!si || !squares(f_.ops[*si], x)) return std::nullopt;
    auto axes = passes_const_ints(red.arg("axes"));
    if (!axes || !red.has("keep_dims") || scalar(red.arg("keep_dims")) != 1) return std::nullopt;
    const Type& xt = type_of(x);
    if (!xt.is_tensor() || xt.has_unknown_dims() || !dtype_is_float(xt.dtype)) return std::nullopt;
    int64_t rank = int64_t(xt.shape.size()), n = 1;
    std::vector<bool> normed(size_t(rank), false);
    for (int64_t a : *axes) {
      if (a < -rank || a >= rank) return std::nullopt;
      int64_t k = a < 0 ? a + rank : a;
      if (normed[size_t(k)]) return std::nullopt;
      normed[size_t(k)] = true;
      n *= xt.shape[size_t(k)];
    }
    if (axes->empty() || n < 1 || !one_run(xt.shape, normed)) return std::nullopt;
    // A 1/n constant rounded to its dtype (fp16: 2^-11 relative) counts as 1/n.
    if (scale && std::fabs(*scale * double(n) - 1) > 1.0 / 1024) return std::nullopt;
    Match m;
    m.x = x;
    for (int64_t k = 0; k < rank; ++k)
      if (normed[size_t(k)]) m.axes.push_back(k), m.gamma_shape.push_back(xt.shape[size_t(k)]);
    m.ops = {*si, *ri};
    if (*ri != i) m.ops.push_back(i);
    return m;
  }

  bool squares(const Op& sq, const Arg& x) const {
    if (sq.type == "square") return same_var(*sq.arg("x"), x);
    if (sq.type == "mul") return same_var(*sq.arg("x"), x) && same_var(*sq.arg("y"), x);
    if (sq.type == "pow") return same_var(*sq.arg("x"), x) && scalar(sq.arg("y")) == 2;
    return false;
  }

  std::optional<std::vector<int64_t>> passes_const_ints(const Arg* a) const {
    if (!a || a->kind == Arg::Kind::Tuple) return std::nullopt;
    const Tensor* t = a->kind == Arg::Kind::Const ? &a->lit->value : nullptr;
    if (a->kind == Arg::Kind::Var)
      if (auto it = scope_.values.find(a->var); it != scope_.values.end()) t = it->second.value;
    if (!t || !dtype_is_int(t->dtype())) return std::nullopt;
    std::vector<int64_t> v;
    for (int64_t k = 0; k < t->numel(); ++k) v.push_back(int64_t(t->at(size_t(k))));
    return v;
  }

  static bool one_run(const Shape& s, const std::vector<bool>& normed) {
    int64_t first = -1, last = -1;
    for (int64_t i = 0; i < int64_t(s.size()); ++i)
      if (normed[size_t(i)]) {
        if (first < 0) first = i;
        last = i;
      }
    for (int64_t i = first; i <= last; ++i)
      if (!normed[size_t(i)] && s[size_t(i)] != 1) return false;
    return true;
  }

  // out = nx · g: g must vary only along the normalized dims, with all of them.
  bool with_gamma(const Op& op, const Arg& g, Match& m) const {
    const Type& xt = type_of(m.x);
    const Type& gt = type_of(g);
    if (!gt.is_tensor() || gt.has_unknown_dims() || gt.shape.size() > xt.shape.size()) return false;
    if (op.outputs[0].type.shape != xt.shape || op.outputs[0].type.dtype != xt.dtype) return false;
    size_t off = xt.shape.size() - gt.shape.size();
    for (size_t k = 0; k < xt.shape.size(); ++k) {
      int64_t gd = k < off ? 1 : gt.shape[k - off];
      bool normed = std::find(m.axes.begin(), m.axes.end(), int64_t(k)) != m.axes.end();
      if (gd != (normed ? xt.shape[k] : 1)) return false;
    }
    m.gamma = g;
    return true;
  }

  const Function& f_;
  Scope scope_;
  std::map<std::string, size_t> producer_;
  std::unordered_map<std::string, int> uses_;
};

void fuse_function(Function& f, bool bare) {
  std::map<size_t, Match> at_end;  // by the index of the op whose output the fused op takes over
  std::vector<bool> absorbed(f.ops.size(), false);
  {
    Matcher matcher(f);
    // From the last op back, so gamma's mul claims its pattern before the
    // normalizing op could match on its own.
    for (size_t i = f.ops.size(); i-- > 0;) {
      if (absorbed[i]) continue;
      std::optional<Match> m = matcher.at(i);
      if (!m) continue;
      bool free = true;
      for (size_t k : m->ops) free = free && !absorbed[k];
      if (!free) continue;
      for (size_t k : m->ops) absorbed[k] = true;
      std::sort(m->ops.begin(), m->ops.end());
      at_end[i] = std::move(*m);
    }
  }
  if (at_end.empty()) return;
  std::set<std::string> read_before = passes::names_read(f);
  Scope scope(f, bare);
  std::vector<Op> out;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    auto it = at_end.find(i);
    if (it == at_end.end()) {
      if (absorbed[i]) continue;
      scope.define(op);
      out.push_back(op);
      continue;
    }
    const Match& m = it->second;
    Replacement r(op, scope);
    passes::Inputs in = {{"x", m.x}};
    if (m.gamma) in.push_back({"gamma", r.as_operand(*m.gamma, r.info(*m.gamma).type.dtype, m.gamma_shape, "gamma")});
    in.push_back({"axes", r.ints(m.axes)});
    in.push_back({"eps", r.scalar(DType::FP32, m.eps)});
    r.finish("milrt_rms_norm", in);
    std::vector<std::string> from;
    for (size_t k : m.ops) from.push_back(f.ops[k].outputs[0].name);
    passes::set_fused_from(r.ops().back(), from, r.bare());
    for (Op& n : r.ops()) out.push_back(std::move(n));
  }
  f.ops = std::move(out);
  passes::drop_orphaned_consts(f, read_before);  // eps, 1/n, axes, -0.5 once read by the chain
}

}  // namespace

namespace passes {
void fuse_norms(Program& p) {
  for (auto& f : p.functions) fuse_function(f, p.version == "1.3");
}
}  // namespace passes

}  // namespace milrt
