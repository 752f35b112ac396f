// Pass fuse-attention: attention written out op by op becomes one
// milrt_attention, so the flash kernel never materializes the scores.
//
//   s = matmul(q, k, transpose_y = true)    or matmul(q, transpose(k')) with
//                                           a transpose of k' used only here
//   s = mul(s, c) | real_div(s, c)          optional; c a constant scalar
//   s = add(s, mask)                        optional; mask broadcasts into s
//   p = softmax(s, axis = -1)
//   o = matmul(p, v)
//     -> o = milrt_attention(q, k, v, mask?, scale, causal)
//
// A constant mask that is exactly causal (0 on and below the diagonal
// shifted by Tk - Tq, <= -1e4 or -inf above) becomes causal = true without a
// mask input. When p has another use (a tap output), or the chain does not
// start at a matmul, only scale + mask + softmax become milrt_softmax (if
// there is a scale or a mask to absorb). ios18 scaled_dot_product_attention
// becomes milrt_attention with scale 1/sqrt(D).
//
// Legality: every absorbed intermediate has exactly one use (the next op of
// the pattern) and is not a function output; an op belongs to at most one
// fused op. Scaling before the mask instead of rounding after each op
// changes results only by rounding (one rounding instead of four).
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

using passes::Inputs;

struct Plan {
  std::string type;          // milrt_attention or milrt_softmax
  Inputs inputs;             // without scale (added as a literal) and fused_from
  double scale = 1;
  std::vector<std::string> fused_from;
  std::optional<std::pair<Arg, std::vector<int64_t>>> k_transpose;  // k = transpose(arg, perm), emitted
};

class Matcher {
 public:
  explicit Matcher(const Function& f) : f_(f), values_(param_table(f)) {
    for (size_t i = 0; i < f.ops.size(); ++i) {
      define_outputs(f.ops[i], values_);
      for (auto& o : f.ops[i].outputs) producer_[o.name] = i;
    }
    uses_ = passes::count_uses(f);
    outputs_.insert(f.outputs.begin(), f.outputs.end());
  }

  void run() {
    for (const Op& op : f_.ops) {
      if (op.outputs.size() != 1) continue;
      if (op.type == "softmax") match_softmax(op);
      else if (op.type == "scaled_dot_product_attention") match_sdpa(op);
    }
  }

  std::map<std::string, Plan> plans;   // by the output of the op the fused op replaces
  std::set<std::string> absorbed;      // outputs of the ops that disappear

 private:
  static const std::string& out(const Op& op) { return op.outputs[0].name; }
  int uses(const std::string& v) const {
    auto it = uses_.find(v);
    return it == uses_.end() ? 0 : it->second;
  }

  ValueInfo info(const Arg& a) const {
    if (a.kind == Arg::Kind::Const) return {a.lit->type, a.lit->value.empty() ? nullptr : &a.lit->value};
    if (a.kind == Arg::Kind::Var)
      if (auto it = values_.find(a.var); it != values_.end()) return it->second;
    return {};
  }
  const Tensor* const_of(const Op& op, const std::string& key) const {
    const Arg* a = op.arg(key);
    return a && a->kind != Arg::Kind::Tuple ? info(*a).value : nullptr;
  }
  bool flag(const Op& op, const std::string& key, bool& v) const {
    if (!op.has(key)) return v = false, true;
    const Tensor* t = const_of(op, key);
    if (!t || t->numel() != 1) return false;
    v = t->at(0) != 0;
    return true;
  }

  // The op producing variable `a` if it may be absorbed: one use, not a
  // function output, not yet part of a fused op.
  const Op* absorbable(const Arg* a, const std::string& type) const {
    if (!a || a->kind != Arg::Kind::Var) return nullptr;
    auto it = producer_.find(a->var);
    if (it == producer_.end()) return nullptr;
    const Op& p = f_.ops[it->second];
    if (p.type != type || p.outputs.size() != 1 || claimed_.count(a->var) || outputs_.count(a->var)) return nullptr;
    if (uses(a->var) != 1) return nullptr;
    return &p;
  }
  const Op* absorbable(const Arg* a, std::initializer_list<const char*> types) const {
    for (const char* t : types)
      if (const Op* p = absorbable(a, t)) return p;
    return nullptr;
  }

  // A constant scalar (any shape of one element) that broadcasting into
  // `shape` leaves unchanged.
  std::optional<double> scalar_const(const Arg& a, const Shape& shape) const {
    ValueInfo v = info(a);
    if (!v.value || v.value->numel() != 1 || !dtype_is_float(v.value->dtype()) || v.type.shape.size() > shape.size())
      return std::nullopt;
    return v.value->at(0);
  }

  // A mask operand: float, broadcasting into `s` without growing it.
  bool mask_fits(const Arg& m, const Type& s) const {
    ValueInfo v = info(m);
    if (!v.type.is_tensor() || !dtype_is_float(v.type.dtype) || v.type.shape.size() > s.shape.size()) return false;
    for (size_t i = 0; i < v.type.shape.size(); ++i) {
      int64_t d = v.type.shape[i], t = s.shape[i + s.shape.size() - v.type.shape.size()];
      if (d != 1 && d != t) return false;
      if (d < 0 || t < 0) return false;
    }
    return true;
  }

  // Is the constant mask (last dims [Tq, Tk], leading dims 1) exactly
  // causal? Bool masks keep on and below the shifted diagonal; float ones
  // add 0 there and <= -1e4 above.
  bool causal_const(const Arg& m, int64_t tq, int64_t tk) const {
    ValueInfo v = info(m);
    const Shape& s = v.type.shape;
    if (!v.value || s.size() < 2 || s[s.size() - 2] != tq || s[s.size() - 1] != tk || tk < tq) return false;
    for (size_t i = 0; i + 2 < s.size(); ++i)
      if (s[i] != 1) return false;
    bool keep = v.value->dtype() == DType::Bool;
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j) {
        double x = v.value->at(size_t(i * tk + j));
        bool visible = j <= i + (tk - tq);
        if (keep ? (x != 0) != visible : visible ? x != 0 : !(x <= -1e4)) return false;
      }
    return true;
  }

  // The last axis of a softmax (constant), or false.
  bool last_axis(const Op& sm) const {
    int64_t rank = int64_t(sm.outputs[0].type.shape.size());
    if (!sm.has("axis")) return true;
    const Tensor* t = const_of(sm, "axis");
    if (!t || t->numel() != 1) return false;
    int64_t a = int64_t(t->at(0));
    return a == -1 || a == rank - 1;
  }

  void claim(const Plan& p, const std::string& last) {
    for (const std::string& n : p.fused_from) claimed_.insert(n), absorbed.insert(n);
    absorbed.erase(last);
    plans[last] = p;
  }

  void match_softmax(const Op& sm) {
    if (claimed_.count(out(sm))) return;
    const Arg* x = sm.arg("x");
    if (!x || x->kind != Arg::Kind::Var) return;
    const Type& st = sm.outputs[0].type;
    if (!st.is_tensor() || st.has_unknown_dims()) return;
    std::vector<std::string> chain;  // absorbed ops, last first
    Arg scores = *x;
    std::optional<Arg> mask;
    double scale = 1;
    if (const Op* add = absorbable(&scores, "add")) {
      const Arg &a = *add->arg("x"), &b = *add->arg("y");
      // The scores side is the one that does not broadcast (mask may equal it in shape).
      bool a_scores = info(a).type.shape == st.shape && mask_fits(b, st);
      bool b_scores = !a_scores && info(b).type.shape == st.shape && mask_fits(a, st);
      if (a_scores || b_scores) {
        mask = a_scores ? b : a;
        scores = a_scores ? a : b;
        chain.push_back(out(*add));
      }
    }
    if (const Op* mul = absorbable(&scores, {"mul", "real_div"})) {
      const Arg &a = *mul->arg("x"), &b = *mul->arg("y");
      std::optional<double> cb = scalar_const(b, st.shape), ca = mul->type == "mul" ? scalar_const(a, st.shape) : std::nullopt;
      const Arg* s = cb ? &a : ca ? &b : nullptr;
      if (s && info(*s).type.shape == st.shape && s->kind == Arg::Kind::Var) {
        double c = cb ? *cb : *ca;
        if (mul->type == "mul" || c != 0) {
          scale = mul->type == "mul" ? c : 1.0 / c;
          scores = *s;
          chain.push_back(out(*mul));
        }
      }
    }
    std::reverse(chain.begin(), chain.end());
    chain.push_back(out(sm));

    if (match_attention(sm, scores, mask, scale, chain)) return;
    if (chain.size() == 1) return;  // a bare softmax stays what it is
    Plan p;
    p.type = "milrt_softmax";
    p.inputs = {{"x", scores}};
    if (mask) p.inputs.push_back({"mask", *mask});
    p.inputs.push_back({"axis", Arg{}});  // filled in by the rewrite (a literal of the program's dialect)
    p.scale = scale;
    p.fused_from = chain;
    int64_t rank = int64_t(st.shape.size());
    axis_[out(sm)] = softmax_axis(sm, rank);
    claim(p, out(sm));
  }

  int64_t softmax_axis(const Op& sm, int64_t rank) const {
    const Tensor* t = sm.has("axis") ? const_of(sm, "axis") : nullptr;
    int64_t a = t ? int64_t(t->at(0)) : -1;
    return a < 0 ? a + rank : a;
  }

 public:
  std::map<std::string, int64_t> axis_;  // milrt_softmax plans: the normalized axis

 private:
  bool match_attention(const Op& sm, const Arg& scores, const std::optional<Arg>& mask, double scale,
                       const std::vector<std::string>& chain) {
    if (!last_axis(sm) || sm.outputs[0].type.shape.size() < 2) return false;
    // After: the probabilities' only use is matmul(p, v).
    const std::string& p = out(sm);
    if (uses(p) != 1 || outputs_.count(p)) return false;
    const Op* pv = nullptr;
    for (const Op& op : f_.ops)
      if (op.type == "matmul" && op.outputs.size() == 1 && op.arg("x") && op.arg("x")->kind == Arg::Kind::Var &&
          op.arg("x")->var == p)
        pv = &op;
    if (!pv || claimed_.count(out(*pv))) return false;
    bool tx = false, ty = false;
    if (!flag(*pv, "transpose_x", tx) || !flag(*pv, "transpose_y", ty) || tx || ty) return false;
    const Arg& v = *pv->arg("y");
    // Before: the scores are q·kᵀ.
    const Op* qk = absorbable(&scores, "matmul");
    if (!qk || !flag(*qk, "transpose_x", tx) || !flag(*qk, "transpose_y", ty) || tx) return false;
    const Arg& q = *qk->arg("x");
    Arg k = *qk->arg("y");
    std::optional<std::pair<Arg, std::vector<int64_t>>> k_transpose;
    std::vector<std::string> before;
    if (!ty) {
      // matmul(q, kT) with kT a transpose used only here: k is kT with its
      // last two dims swapped back.
      const Op* tr = absorbable(&k, "transpose");
      const Tensor* perm_t = tr ? const_of(*tr, "perm") : nullptr;
      if (!perm_t || perm_t->numel() < 2) return false;
      std::vector<int64_t> perm;
      for (int64_t i = 0; i < perm_t->numel(); ++i) perm.push_back(int64_t(perm_t->at(size_t(i))));
      size_t r = perm.size();
      std::swap(perm[r - 1], perm[r - 2]);
      before.push_back(out(*tr));
      bool identity = true;
      for (size_t i = 0; i < r; ++i) identity &= perm[i] == int64_t(i);
      if (identity) k = *tr->arg("x");
      else k_transpose = std::make_pair(*tr->arg("x"), perm);
    }
    for (const Arg* a : {&q, &v})
      if (info(*a).type.shape.size() < 2) return false;
    // The fused op's result has q's dtype; the matmul's may differ only in odd mixes.
    if (info(q).type.dtype != pv->outputs[0].type.dtype) return false;
    if (!k_transpose && info(k).type.shape.size() < 2) return false;
    // program order: [transpose], matmul, [mul], [add], softmax, matmul
    std::vector<std::string> order = before;
    order.push_back(out(*qk));
    order.insert(order.end(), chain.begin(), chain.end());
    order.push_back(out(*pv));

    const Shape& ss = sm.outputs[0].type.shape;
    int64_t tq = ss[ss.size() - 2], tk = ss[ss.size() - 1];
    Plan plan;
    plan.type = "milrt_attention";
    plan.inputs = {{"q", q}, {"k", k}, {"v", v}};
    bool causal = mask && causal_const(*mask, tq, tk);
    if (mask && !causal) plan.inputs.push_back({"mask", *mask});
    plan.inputs.push_back({"causal", Arg{}});  // literal filled in by the rewrite
    causal_[out(*pv)] = causal;
    plan.scale = scale;
    plan.fused_from = order;
    plan.k_transpose = k_transpose;
    claimed_.insert(out(*pv));
    claim(plan, out(*pv));
    return true;
  }

  void match_sdpa(const Op& op) {
    const Type& qt = info(*op.arg("query")).type;
    if (!qt.is_tensor() || qt.shape.empty() || qt.shape.back() <= 0 || qt.dtype != op.outputs[0].type.dtype) return;
    Plan plan;
    plan.type = "milrt_attention";
    plan.inputs = {{"q", *op.arg("query")}, {"k", *op.arg("key")}, {"v", *op.arg("value")}};
    const Shape& os = op.outputs[0].type.shape;
    const Type& kt = info(*op.arg("key")).type;
    bool causal = false;
    if (op.has("attn_mask")) {
      causal = os.size() >= 2 && kt.shape.size() >= 2 &&
               causal_const(*op.arg("attn_mask"), os[os.size() - 2], kt.shape[kt.shape.size() - 2]);
      if (!causal) plan.inputs.push_back({"mask", *op.arg("attn_mask")});
    }
    plan.inputs.push_back({"causal", Arg{}});
    causal_[out(op)] = causal;
    plan.scale = 1.0 / std::sqrt(double(qt.shape.back()));
    plan.fused_from = {out(op)};
    claim(plan, out(op));
  }

 public:
  std::map<std::string, bool> causal_;

 private:
  const Function& f_;
  ValueTable values_;
  std::map<std::string, size_t> producer_;
  std::unordered_map<std::string, int> uses_;
  std::set<std::string> outputs_, claimed_;
};

void fuse_function(Function& f, bool bare) {
  Matcher m(f);
  m.run();
  if (m.plans.empty()) return;
  std::set<std::string> read_before = passes::names_read(f);
  passes::rewrite_ops(f, bare, [&](const Op& op, passes::Replacement& r) {
    if (op.outputs.size() != 1) return false;
    auto it = m.plans.find(op.outputs[0].name);
    if (it == m.plans.end()) return false;
    const Plan& p = it->second;
    Inputs in = p.inputs;
    for (auto& [key, arg] : in) {
      if (key == "axis") arg = r.scalar(DType::Int32, double(m.axis_.at(op.outputs[0].name)));
      if (key == "causal") arg = r.boolean(m.causal_.at(op.outputs[0].name));
      if (key == "k" && p.k_transpose)
        arg = r.emit("transpose", "k", {{"x", p.k_transpose->first}, {"perm", r.ints(p.k_transpose->second)}});
    }
    in.push_back({"scale", r.scalar(DType::FP32, p.scale)});
    r.finish(p.type, in);
    passes::set_fused_from(r.ops().back(), p.fused_from, r.bare());
    return true;
  });
  std::erase_if(f.ops, [&](const Op& op) { return op.outputs.size() == 1 && m.absorbed.count(op.outputs[0].name); });
  passes::drop_orphaned_consts(f, read_before);
}

}  // namespace

namespace passes {
void fuse_attention(Program& p) {
  for (Function& f : p.functions) fuse_function(f, p.version == "1.3");
}
}  // namespace passes

}  // namespace milrt
