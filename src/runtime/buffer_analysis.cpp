// The buffer analysis of compile() (runtime/buffer_analysis.h): which values
// live in which memory, decided from the optimized function alone, before
// any buffer exists.
#include "runtime/buffer_analysis.h"

#include <algorithm>

#include "milrt/error.h"
#include "runtime/lowering.h"
#include "runtime/views.h"

namespace milrt::rt {

bool is_state_param(const Param& p) { return p.type.kind == Type::Kind::State && p.type.elems.size() == 1; }

static void collect_vars(const Arg& a, std::vector<std::string>& out) {
  if (a.kind == Arg::Kind::Var) out.push_back(a.var);
  for (auto& e : a.elems) collect_vars(e, out);
}

// Where each value is used: op indices in program order; a function output
// counts as a use at index ops.size() (after every op).
std::unordered_map<std::string, std::vector<int>> uses_of(const Function& f) {
  std::unordered_map<std::string, std::vector<int>> u;
  for (int i = 0; i < int(f.ops.size()); ++i) {
    std::vector<std::string> vars;
    for (auto& in : f.ops[size_t(i)].inputs) collect_vars(in.arg, vars);
    for (auto& v : vars) u[v].push_back(i);
  }
  for (auto& o : f.outputs) u[o].push_back(int(f.ops.size()));
  return u;
}

// Declared tensor types of every value (a state parameter: its wrapped tensor).
std::unordered_map<std::string, Type> value_types(const Function& f) {
  std::unordered_map<std::string, Type> t;
  for (auto& p : f.params) t[p.name] = is_state_param(p) ? p.type.elems[0] : p.type;
  for (auto& op : f.ops)
    for (auto& o : op.outputs) t[o.name] = o.type;
  return t;
}

// The inputs of `op` that its output may overwrite while it is computed: for
// an op marked in-place capable, each variable input of the output's shape
// whose stored elements have the output's size.
std::vector<std::string> in_place_inputs(const Op& op, const std::unordered_map<std::string, Type>& types) {
  std::vector<std::string> r;
  // A GEMM reads each residual tile just before it writes that tile of C
  // (kernels/gemm.h, weight_gemm.h; the oneDNN step copies it aside), so C may
  // be its residual, unless the residual is also an operand of the product.
  if (op.type == "milrt_gemm" && op.outputs.size() == 1) {
    const Arg* res = op.arg("residual");
    if (!res || res->kind != Arg::Kind::Var) return r;
    for (const char* k : {"x", "y", "bias"})
      if (const Arg* a = op.arg(k); a && a->kind == Arg::Kind::Var && a->var == res->var) return r;
    auto it = types.find(res->var);
    if (it != types.end() && it->second == op.outputs[0].type) r.push_back(res->var);
    return r;
  }
  // A scatter step copies its data into the output unless they share memory,
  // then writes the updates (lower/scatter_gather.cpp; every index checked
  // first): the output may be the data, never the indices or updates.
  if ((op.type == "scatter" || op.type == "scatter_along_axis" || op.type == "scatter_nd") && op.outputs.size() == 1) {
    const Arg* data = op.arg("data");
    if (!data || data->kind != Arg::Kind::Var) return r;
    for (const char* k : {"indices", "updates"})
      if (const Arg* a = op.arg(k); a && a->kind == Arg::Kind::Var && a->var == data->var) return r;
    auto it = types.find(data->var);
    if (it != types.end() && it->second == op.outputs[0].type) r.push_back(data->var);
    return r;
  }
  if (op.outputs.size() != 1 || !rt::in_place_allowed(op.type)) return r;
  const Type& out = op.outputs[0].type;
  if (!out.is_tensor() || out.dtype == DType::String) return r;
  const size_t out_size = dtype_size(rt::storage_dtype(out.dtype));
  for (auto& in : op.inputs) {
    if (in.arg.kind != Arg::Kind::Var) continue;
    auto it = types.find(in.arg.var);
    if (it == types.end() || !it->second.is_tensor() || it->second.dtype == DType::String) continue;
    if (it->second.shape == out.shape && dtype_size(rt::storage_dtype(it->second.dtype)) == out_size)
      r.push_back(in.arg.var);
  }
  return r;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

BufferDecisions decide_buffers(const Function& f, const std::map<std::string, std::string>& state_aliases,
                               const std::vector<OutputAccumulator>& accumulators) {
  const Function* fn = &f;
  const int n_ops = int(fn->ops.size());
  const auto uses = uses_of(*fn);
  const auto types = value_types(*fn);
  auto uses_at = [&](const std::string& v) -> const std::vector<int>& {
    static const std::vector<int> none;
    auto it = uses.find(v);
    return it == uses.end() ? none : it->second;
  };
  auto is_output = [&](const std::string& v) { return contains(fn->outputs, v); };
  BufferDecisions d;

  // State aliases {output -> input}: checked against the optimized function.
  auto& alias_of_input = d.alias_of_input;
  for (auto& [out, in] : state_aliases) {
    const Param* prm = fn->param(in);
    if (!prm || is_state_param(*prm))
      throw Error("error: state alias '" + out + "' -> '" + in + "': '" + in + "' is not an input of function '" +
                  fn->name + "'");
    if (!is_output(out))
      throw Error("error: state alias '" + out + "' -> '" + in + "': '" + out + "' is not an output of function '" +
                  fn->name + "'");
    if (!alias_of_input.emplace(in, out).second)
      throw Error("error: state alias: input '" + in + "' is the target of two outputs");
    const Type& ot = types.at(out);
    if (!ot.is_tensor() || ot.dtype != prm->type.dtype || ot.shape != prm->type.shape)
      throw Error("error: state alias '" + out + "' -> '" + in + "': the output is " + ot.str() +
                  " but the input is " + prm->type.str());
  }

  // Accumulators of accumulate_outputs: a view of the output's memory when a
  // chain of ops carries them to the sum in place, each value of the chain
  // read by the next op alone, which reads it in place (an elementwise add, a
  // GEMM's residual, a scatter's data): the values of the chain are views of
  // that memory too. Else a buffer of their own that run() fills from the
  // output memory before the steps.
  auto& accumulator_in_place = d.accumulator_in_place;
  auto& in_output = d.in_output;
  for (const rt::OutputAccumulator& a : accumulators) {
    std::vector<std::string> chain;
    bool direct = false;
    for (std::string v = a.acc; !direct;) {
      const std::vector<int>& at = uses_at(v);
      if (at.size() != 1) break;
      const Op& op = fn->ops[size_t(at[0])];
      if (op.outputs.size() != 1 || !contains(in_place_inputs(op, types), v)) break;
      v = op.outputs[0].name;
      direct = v == a.sum;
      if (!direct && (is_output(v) || contains(chain, v))) break;
      if (!direct) chain.push_back(v);
    }
    accumulator_in_place[a.acc] = direct;
    if (direct)
      for (const std::string& v : chain) in_output[v] = a.sum;
  }

  // Values living in a state's buffer (name -> the state). The results of
  // read_state and coreml_update_state equal the state's contents until its
  // next update: they stay in its buffer when consumed by then (a use by that
  // update itself is a copy onto itself).
  auto& in_state = d.in_state;
  for (int r = 0; r < n_ops; ++r) {
    const Op& op = fn->ops[size_t(r)];
    if (op.type != "read_state" && op.type != "coreml_update_state") continue;
    const Arg* a = op.arg(op.type == "read_state" ? "input" : "state");
    if (!a || a->kind != Arg::Kind::Var || op.outputs.size() != 1) continue;
    int next_update = n_ops;
    for (int u = r + 1; u < n_ops && next_update == n_ops; ++u) {
      const Arg* st = fn->ops[size_t(u)].arg("state");
      if (fn->ops[size_t(u)].type == "coreml_update_state" && st && st->kind == Arg::Kind::Var && st->var == a->var)
        next_update = u;
    }
    const std::string& value = op.outputs[0].name;
    bool safe = !is_output(value);
    for (int at : uses_at(value)) safe &= at <= next_update;
    if (safe) in_state[value] = a->var;
  }
  // A KV-cache write: slice_update(x = a value living in state S) whose only
  // use is the next update of S, as its value, runs in S's buffer too: the
  // step writes just the slice (no copy of the whole state out and back).
  // Only when nothing reads S's old contents after the slice_update: no value
  // in S is used past it, and no read_state of S comes between it and the update.
  for (int r = 0; r < n_ops; ++r) {
    const Op& op = fn->ops[size_t(r)];
    const Arg* x = op.arg("x");
    if (op.type != "slice_update" || op.outputs.size() != 1 || !x || x->kind != Arg::Kind::Var) continue;
    auto st = in_state.find(x->var);
    const std::string& value = op.outputs[0].name;
    if (st == in_state.end() || is_output(value) || uses_at(value).size() != 1) continue;
    const std::string state = st->second;
    const int u = uses_at(value)[0];
    const Op& upd = fn->ops[size_t(u)];
    const Arg* us = upd.arg("state");
    const Arg* uv = upd.arg("value");
    if (upd.type != "coreml_update_state" || !us || us->kind != Arg::Kind::Var || us->var != state || !uv ||
        uv->kind != Arg::Kind::Var || uv->var != value)
      continue;
    bool safe = true;
    for (auto& [v, s2] : in_state)
      if (s2 == state)
        for (int at : uses_at(v)) safe &= at <= r || at > u;
    for (int i = r + 1; i < u && safe; ++i) {
      const Arg* in = fn->ops[size_t(i)].arg("input");
      if (fn->ops[size_t(i)].type == "read_state" && in && in->kind == Arg::Kind::Var && in->var == state) safe = false;
    }
    for (const char* k : {"update", "begin", "end"})
      if (const Arg* a = op.arg(k); a && a->kind == Arg::Kind::Var && in_state.count(a->var)) safe = false;
    if (safe) in_state[value] = state;
  }
  // An aliased output is computed straight into its input's buffer when the
  // input is not read once the output's op starts, or read only by that op
  // running elementwise in place; otherwise it is copied in after the steps.
  for (auto& [in, out] : alias_of_input) {
    int def = -1;
    for (int i = 0; i < n_ops && def < 0; ++i)
      for (auto& o : fn->ops[size_t(i)].outputs)
        if (o.name == out) def = i;
    if (def < 0 || fn->ops[size_t(def)].type == "const" || fn->ops[size_t(def)].outputs.size() != 1 ||
        in_state.count(out))
      continue;
    bool direct = true;
    for (int at : uses_at(in))
      if (at > def || (at == def && !contains(in_place_inputs(fn->ops[size_t(def)], types), in))) direct = false;
    if (direct) in_state[out] = in;
  }

  // Views (runtime/views.h) take no step and no memory. Kept as ops instead
  // where state is involved (their buffers' lifetimes are decided above from
  // direct uses), and where an output view would need its root's storage
  // while the root is itself an output or another output's root.
  auto& views = d.views;
  {
    std::set<std::string> stateful, promoted;
    for (auto& [v, st] : in_state) { stateful.insert(v); stateful.insert(st); }
    for (auto& [in, out] : alias_of_input) { stateful.insert(in); stateful.insert(out); }
    for (auto& [v, sum] : in_output) stateful.insert(v);  // lives in the sum's memory, not a view's root
    for (auto& prm : fn->params)
      if (is_state_param(prm)) stateful.insert(prm.name);
    for (auto& [view, root] : rt::find_views(*fn)) {
      if (stateful.count(view) || stateful.count(root)) continue;
      if (is_output(view)) {
        if (fn->param(root) || is_output(root) || promoted.count(root)) continue;
        bool is_const = false;
        for (auto& op : fn->ops)
          if (op.type == "const" && op.outputs[0].name == root) is_const = true;
        if (is_const) continue;
        promoted.insert(root);
      }
      views[view] = root;
    }
  }
  // Roots of output views are computed in plan-owned output storage.
  auto& output_roots = d.output_roots;
  for (auto& [view, root] : views)
    if (is_output(view)) output_roots.insert(root);
  return d;
}

}  // namespace milrt::rt
