// State views, writes and homes. See state_steps.h.
#include "ane/state_steps.h"

#include <algorithm>

#include "milrt/error.h"
#include "passes/rewriter.h"

namespace milrt::ane {
namespace {

void check_holdable(const Param& p, int64_t max_dim) {
  const std::string what = "ane: state '" + p.name + "' (" + p.type.str() + ")";
  if (p.type.elems.size() != 1 || !p.type.elems[0].is_tensor())
    throw Error(what + " does not hold one tensor; the engine holds tensor states only");
  const Type& t = p.type.elems[0];
  if (t.dtype != DType::FP16 && t.dtype != DType::FP32)
    throw Error(what + ": the engine holds fp16 states only (fp32 ones rounded); run it with --engine reference");
  for (int64_t d : t.shape) {
    if (d < 0) throw Error(what + " has an unknown dim; the engine needs static shapes");
    if (d > max_dim)
      throw Error(what + " has a dim above " + std::to_string(max_dim) +
                  ", which the engine cannot hold; run it with --engine reference");
  }
}

// Whether op j is a slice_update of `view` that only the write at op i reads:
// then the write can store just its update, in place.
bool writes_in_place(const Function& f, size_t j, size_t i, const std::string& view) {
  const Op& su = f.ops[j];
  if (su.type != "slice_update") return false;
  for (auto& in : su.inputs)
    if (in.key != "x" && in.key != "update" && in.key != "begin" && in.key != "end") return false;  // strides, masks
  const Arg* x = su.arg("x");
  if (!x || x->kind != Arg::Kind::Var || x->var != view) return false;
  const std::string& v = su.outputs[0].name;
  if (std::count(f.outputs.begin(), f.outputs.end(), v)) return false;
  for (size_t k = 0; k < f.ops.size(); ++k) {
    if (k == i) continue;
    for (auto& in : f.ops[k].inputs) {
      bool reads = false;
      passes::for_each_var(in.arg, [&](const std::string& n) { reads |= n == v; });
      if (reads) return false;
    }
  }
  return true;
}

}  // namespace

StateOps find_state_ops(const Function& f, int64_t max_dim) {
  StateOps s;
  std::map<std::string, size_t> count;  // writes so far per state
  for (auto& p : f.params)
    if (p.type.kind == Type::Kind::State) check_holdable(p, max_dim), count[p.name] = 0;
  std::map<std::string, size_t> def;
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    for (auto& o : op.outputs) def[o.name] = i;
    if (op.type == "read_state") {
      const std::string& st = op.arg("input")->var;
      s.views[op.outputs[0].name] = st;
      s.version[op.outputs[0].name] = count.at(st);
    } else if (op.type == "coreml_update_state") {
      const std::string& st = op.arg("state")->var;
      const Arg* v = op.arg("value");
      StateWrite w;
      w.state = st;
      w.result = op.outputs[0].name;
      if (v->kind == Arg::Kind::Var) {
        w.value = v->var;
        auto d = def.find(v->var);
        if (d != def.end()) {
          const Arg* x = f.ops[d->second].arg("x");
          const std::string view = x && x->kind == Arg::Kind::Var ? x->var : "";
          auto vs = s.views.find(view);
          if (vs != s.views.end() && vs->second == st && s.version.at(view) == count.at(st) &&
              writes_in_place(f, d->second, i, view)) {
            const Op& su = f.ops[d->second];
            w.in_place = true;
            w.update = *su.arg("update");
            w.begin = *su.arg("begin");
            w.end = *su.arg("end");
            s.folded[d->second] = i;
          }
        }
      } else {
        throw Error("ane: '" + w.result + "' writes a constant into state '" + st + "'; give the value as an op");
      }
      s.writes[i] = w;
      s.views[w.result] = st;
      s.version[w.result] = ++count.at(st);
    }
  }
  return s;
}

void place_states(Partition& part, const Function& f, const StateOps& ops, int64_t max_dim) {
  part.views = ops.views;
  // The step that ends each (state, count) version: its write.
  std::map<std::pair<std::string, size_t>, size_t> ends;
  std::map<size_t, size_t> step_of_op;
  for (size_t s = 0; s < part.steps.size(); ++s)
    for (size_t i : part.steps[s].ops) step_of_op[i] = s;
  // A write's result shows its state's count after it: the version it ends is one before.
  for (auto& [i, w] : ops.writes) ends[{w.state, ops.version.at(w.result) - 1}] = step_of_op.at(i);
  auto overwritten_before = [&](const std::string& view, size_t step) {
    auto e = ends.find({ops.views.at(view), ops.version.at(view)});
    return e != ends.end() && step > e->second ? e->second : StateHome::npos;
  };
  auto save = [&](const std::string& view, size_t step) {
    const size_t w = overwritten_before(view, step);
    if (w == StateHome::npos) return;
    auto& sb = part.steps[w].save_before;
    if (!std::count(sb.begin(), sb.end(), view)) sb.push_back(view);
  };
  std::map<std::string, size_t> home;
  for (size_t s = 0; s < part.steps.size(); ++s) {
    Step& st = part.steps[s];
    for (auto& v : st.inputs) {
      if (!ops.views.count(v)) continue;
      save(v, s);
      const std::string& state = ops.views.at(v);
      if (st.kind == Step::Kind::Engine && overwritten_before(v, s) == StateHome::npos && !home.count(state)) {
        home[state] = s;
        st.state_inputs.push_back(v);
      }
    }
  }
  for (auto& o : f.outputs)
    if (ops.views.count(o)) save(o, part.steps.size());

  for (auto& p : f.params) {
    if (p.type.kind != Type::Kind::State) continue;
    StateHome h;
    h.name = p.name;
    h.type = p.type.elems[0];
    if (auto it = home.find(p.name); it != home.end()) {
      const Step& st = part.steps[it->second];
      h.step = it->second;
      h.packing = st.engine.input;
      for (auto& v : st.state_inputs)
        if (ops.views.at(v) == p.name)
          h.slot = size_t(std::find(st.inputs.begin(), st.inputs.end(), v) - st.inputs.begin());
    } else {
      try {
        h.packing = make_packing({{p.name, h.type}}, max_dim);
      } catch (const Error& e) {
        throw Error("ane: state '" + p.name + "' cannot be held on the engine: " + e.what());
      }
    }
    part.states.push_back(std::move(h));
  }
}

}  // namespace milrt::ane
