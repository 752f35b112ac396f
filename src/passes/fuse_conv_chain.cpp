// fuse-conv-chain: two or more pointwise convolutions in a row, each with
// its bias and activation,
//
//   x -> conv 1x1 [-> bias add] [-> act] -> conv 1x1 [-> bias add] [-> act] -> ...
//
// become one milrt_conv_chain, which the runtime computes tile by tile over
// the spatial positions with the intermediates in cache (kernels/generic/
// conv_chain.h). A link is a `conv` or `milrt_conv` with a 1x1 kernel, unit
// strides, one group and no padding, a constant weight and a constant bias
// (or none), on a static [N, C, spatial...] fp16 or fp32 tensor; what follows
// a conv is matched by fuse-conv-epilogue's own rules (run here on a copy of
// the function), so the two passes absorb the same epilogues. A link joins
// the previous one when it alone reads the previous output, as x, and that
// output is not a function output. A chain is cut where one more link would
// no longer fit the kernel's cache budget (kernels::conv_chain_tile: a tile's
// intermediates, and the weights that every tile reads again), so very wide
// chains stay unfused.
//
// It runs before canonicalize, which turns every pointwise conv into a
// matmul. The fused op takes the last absorbed op's output (name, type) and
// `name`, and lists every replaced output in `fused_from`; inline biases are
// the epilogue's constant (shaped [C]), or zeros for a conv without one.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/generic/conv_chain.h"
#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt::passes {
namespace {

// The output names a fused op lists in `fused_from` (none when it has none).
std::vector<std::string> fused_names(const Op& op) {
  std::vector<std::string> r;
  const Arg* a = op.arg("fused_from");
  if (!a || a->kind != Arg::Kind::Const || a->lit->value.dtype() != DType::String) return r;
  std::string w;
  for (char ch : a->lit->value.strings().at(0) + " ") {
    if (ch != ' ') w += ch;
    else if (!w.empty()) r.push_back(std::move(w)), w.clear();
  }
  return r;
}

// A conv and the epilogue ops it absorbs.
struct Link {
  std::vector<size_t> ops;      // program order, the conv first
  std::string out;              // the last absorbed op's output
  Arg bias;                     // Var or Const; Kind::Tuple when none
  std::string act = "none";
  double alpha = 0, beta = 0;
  int64_t cin = 0, cout = 0;
};

class Finder {
 public:
  Finder(const Function& f, bool bare) : f_(f), uses_(count_uses(f)) {
    for (size_t i = 0; i < f.ops.size(); ++i) {
      const Op& op = f.ops[i];
      for (const Output& o : op.outputs) index_[o.name] = i;
      if (op.type == "const" && op.outputs.size() == 1)
        if (const Arg* v = op.arg("val"); v && v->kind == Arg::Kind::Const) consts_[op.outputs[0].name] = v->lit.get();
    }
    // fuse-conv-epilogue on a copy says what follows each conv.
    Program copy;
    copy.version = bare ? "1.3" : "1.0";
    copy.functions.push_back(f);
    fuse_conv_epilogue(copy);
    for (const Op& op : copy.functions[0].ops)
      if (op.type == "milrt_conv") epilogues_.emplace(first_fused(op), op);
  }

  const Literal* constant(const Arg* a) const {
    if (!a) return nullptr;
    if (a->kind == Arg::Kind::Const) return a->lit.get();
    if (a->kind == Arg::Kind::Var)
      if (auto it = consts_.find(a->var); it != consts_.end()) return it->second;
    return nullptr;
  }

  // The link headed by op i, if it is a fusable pointwise conv.
  std::optional<Link> link_at(size_t i) const {
    const Op& op = f_.ops[i];
    if ((op.type != "conv" && op.type != "milrt_conv") || op.outputs.size() != 1 || !pointwise(op)) return {};
    const Type& t = op.outputs[0].type;
    const Type* xt = type_of(op.arg("x"));
    const Literal* w = constant(op.arg("weight"));
    if (!xt || !w || w->value.empty() || xt->dtype != t.dtype || xt->has_unknown_dims() || t.has_unknown_dims())
      return {};
    if (t.dtype != DType::FP32 && t.dtype != DType::FP16) return {};
    Link l;
    l.cin = xt->shape[1];
    l.cout = t.shape[1];
    l.ops = {i};
    l.out = op.outputs[0].name;
    const Op* epi = &op;   // the op holding bias and activation
    if (op.type == "conv") {
      if (auto it = epilogues_.find(l.out); it != epilogues_.end()) {
        epi = &it->second;
        const std::string last = epi->outputs[0].name;
        for (const std::string& n : fused_names(*epi))
          if (n != l.out) l.ops.push_back(index_.at(n));
        l.out = last;
      }
    }
    if (const Arg* b = epi->arg("bias")) {
      const Literal* lit = constant(b);
      if (!lit || lit->value.empty() || lit->value.numel() != l.cout) return {};
      l.bias = *b;
    } else {
      l.bias = Arg::of_tuple({});
    }
    if (const Literal* a = constant(epi->arg("activation"))) l.act = a->value.strings().at(0);
    if (l.act == "clip") {
      const Literal *lo = constant(epi->arg("alpha")), *hi = constant(epi->arg("beta"));
      if (!lo || !hi || lo->value.empty() || hi->value.empty()) return {};
      l.alpha = lo->value.at(0);
      l.beta = hi->value.at(0);
    }
    return l;
  }

  // The link that alone reads `l`'s output as its x.
  std::optional<size_t> successor(const Link& l) const {
    auto u = uses_.find(l.out);
    if (u == uses_.end() || u->second != 1) return {};
    for (size_t j = l.ops.back() + 1; j < f_.ops.size(); ++j) {
      const Op& op = f_.ops[j];
      bool reads = false;
      for (const Input& in : op.inputs) for_each_var(in.arg, [&](const std::string& v) { reads |= v == l.out; });
      if (!reads) continue;
      const Arg* x = op.arg("x");
      if (x && x->kind == Arg::Kind::Var && x->var == l.out) return j;
      return {};
    }
    return {};
  }

 private:
  static std::string first_fused(const Op& op) {
    auto n = fused_names(op);
    return n.empty() ? "" : n.front();
  }

  const Type* type_of(const Arg* a) const {
    if (!a || a->kind != Arg::Kind::Var) return nullptr;
    if (const Param* p = f_.param(a->var)) return &p->type;
    auto it = index_.find(a->var);
    if (it == index_.end()) return nullptr;
    for (const Output& o : f_.ops[it->second].outputs)
      if (o.name == a->var) return &o.type;
    return nullptr;
  }

  // 1x1 kernel, unit strides, one group, no padding (a 1-wide kernel at
  // stride 1 is padded by nothing under same / same_lower); dilations do
  // not matter for a 1-wide kernel.
  bool pointwise(const Op& op) const {
    const Type* xt = type_of(op.arg("x"));
    const Literal* w = constant(op.arg("weight"));
    if (!xt || !w || xt->shape.size() < 3 || xt->shape.size() > 5) return false;
    const Shape& ws = w->type.shape;
    if (ws.size() != xt->shape.size()) return false;
    for (size_t d = 2; d < ws.size(); ++d)
      if (ws[d] != 1) return false;
    auto all = [&](const char* key, int64_t want) {
      const Arg* a = op.arg(key);
      if (!a) return true;
      const Literal* l = constant(a);
      if (!l || l->value.empty() || l->value.dtype() == DType::String) return false;
      for (int64_t k = 0; k < l->value.numel(); ++k)
        if (int64_t(l->value.at(size_t(k))) != want) return false;
      return true;
    };
    if (!all("strides", 1) || !all("groups", 1)) return false;
    std::string pad_type = "valid";
    if (const Arg* a = op.arg("pad_type")) {
      const Literal* l = constant(a);
      if (!l || l->value.dtype() != DType::String) return false;
      pad_type = l->value.strings().at(0);
    }
    if (pad_type == "custom") return all("pad", 0);
    return pad_type == "valid" || pad_type == "same" || pad_type == "same_lower";
  }

  const Function& f_;
  std::unordered_map<std::string, int> uses_;
  std::map<std::string, size_t> index_;                 // value -> defining op
  std::map<std::string, const Literal*> consts_;
  std::map<std::string, Op> epilogues_;                 // conv output -> its milrt_conv in the copy
};

Arg f32_vector(const std::vector<double>& v) {
  Literal l;
  l.type = Type::tensor(DType::FP32, {int64_t(v.size())});
  l.value = Tensor(DType::FP32, l.type.shape);
  for (size_t i = 0; i < v.size(); ++i) l.value.set(i, v[i]);
  return Arg::of_const(std::move(l));
}

Arg zeros(DType dt, int64_t n) {
  Literal l;
  l.type = Type::tensor(dt, {n});
  l.value = Tensor(dt, l.type.shape);
  return Arg::of_const(std::move(l));
}

Op chain_op(const Function& f, const std::vector<Link>& chain, bool bare) {
  const Op& first = f.ops[chain.front().ops.front()];
  const Op& last = f.ops[chain.back().ops.back()];
  const DType dt = last.outputs[0].type.dtype;
  Op out;
  out.type = "milrt_conv_chain";
  out.loc = first.loc;
  out.name = last.name;
  out.outputs = last.outputs;
  out.set("x", *first.arg("x"));
  std::vector<Arg> ws, bs;
  std::string acts;
  std::vector<double> alphas, betas;
  bool clips = false;
  std::vector<std::string> from;
  for (const Link& l : chain) {
    ws.push_back(*f.ops[l.ops.front()].arg("weight"));
    bs.push_back(l.bias.kind == Arg::Kind::Tuple ? zeros(dt, l.cout) : l.bias);
    acts += (acts.empty() ? "" : " ") + l.act;
    alphas.push_back(l.alpha);
    betas.push_back(l.beta);
    clips = clips || l.act == "clip";
    for (size_t k : l.ops) {
      // A milrt_conv link names the ops it replaced, not itself.
      const std::vector<std::string> names = fused_names(f.ops[k]);
      if (names.empty()) from.push_back(f.ops[k].outputs[0].name);
      else from.insert(from.end(), names.begin(), names.end());
    }
  }
  out.set("weights", Arg::of_tuple(std::move(ws)));
  out.set("biases", Arg::of_tuple(std::move(bs)));
  out.set("activations", string_literal(acts, bare));
  if (clips) {
    out.set("alphas", f32_vector(alphas));
    out.set("betas", f32_vector(betas));
  }
  set_fused_from(out, from, bare);
  return out;
}

int64_t positions(const Function& f, const Link& l) {
  const Shape& s = f.ops[l.ops.back()].outputs[0].type.shape;
  return shape_numel(Shape(s.begin() + 2, s.end()));
}

void fuse_function(Function& f, bool bare) {
  // Most programs have no conv: skip the analysis (a copy of the function).
  auto is_conv = [](const Op& op) { return op.type == "conv" || op.type == "milrt_conv"; };
  if (std::none_of(f.ops.begin(), f.ops.end(), is_conv)) return;
  const std::set<std::string> read_before = names_read(f);
  Finder find(f, bare);
  std::map<size_t, Link> links;
  for (size_t i = 0; i < f.ops.size(); ++i)
    if (auto l = find.link_at(i)) links.emplace(i, std::move(*l));
  std::set<size_t> has_pred;
  std::map<size_t, size_t> next;
  for (auto& [i, l] : links)
    if (auto j = find.successor(l); j && links.count(*j) && links.at(*j).cin == l.cout &&
                                    positions(f, links.at(*j)) == positions(f, l)) {
      next[i] = *j;
      has_pred.insert(*j);
    }
  std::vector<bool> drop(f.ops.size(), false);
  std::map<size_t, Op> place;   // the fused op goes where its last absorbed op was
  auto emit = [&](const std::vector<Link>& chain) {
    if (chain.size() < 2) return;
    for (const Link& l : chain)
      for (size_t k : l.ops) drop[k] = true;
    place.emplace(chain.back().ops.back(), chain_op(f, chain, bare));
  };
  for (auto& [i, l] : links) {
    if (has_pred.count(i)) continue;
    std::vector<Link> chain = {l};
    std::vector<int64_t> channels = {l.cin, l.cout};
    for (auto it = next.find(i); it != next.end(); it = next.find(it->second)) {
      const Link& n = links.at(it->second);
      channels.push_back(n.cout);
      if (kernels::conv_chain_tile(channels, positions(f, n)) == 0) {
        emit(chain);
        chain.clear();
        channels = {n.cin, n.cout};
      }
      chain.push_back(n);
    }
    emit(chain);
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

void fuse_conv_chain(Program& p) {
  for (Function& f : p.functions) fuse_function(f, p.version == "1.3");
}

}  // namespace milrt::passes
