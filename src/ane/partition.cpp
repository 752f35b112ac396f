// Partitioning: validate each op, group runs, find each step's boundary
// values, lower engine runs and wrap host runs as sub-functions.
#include "ane/partition.h"

#include <map>
#include <set>

#include "ane/state_steps.h"
#include "ane/validate.h"
#include "ir/verifier.h"
#include "milrt/builder.h"
#include "milrt/error.h"

namespace milrt::ane {
namespace {

// A write joins the StateWrite step just before it unless that step already
// writes its state or the write reads a view (which an earlier write of the
// same step could have changed): each write then sees the buffers it expects.
void add_write(Partition& part, const Function& f, const StateOps& ops, size_t i) {
  const StateWrite& w = ops.writes.at(i);
  std::vector<std::string> reads;
  std::string own_view;  // the view a folded slice_update updates: the buffer itself
  for (auto& [j, to] : ops.folded)
    if (to == i) reads = op_reads(f.ops[j]), own_view = f.ops[j].arg("x")->var;
  if (!w.in_place) reads.push_back(w.value);
  bool joins = !part.steps.empty() && part.steps.back().kind == Step::Kind::StateWrite;
  if (joins)
    for (auto& prev : part.steps.back().writes) joins &= prev.state != w.state;
  for (auto& r : reads) joins &= r == own_view || !ops.views.count(r);
  if (!joins) {
    part.steps.emplace_back();
    part.steps.back().kind = Step::Kind::StateWrite;
  }
  Step& st = part.steps.back();
  for (auto& [j, to] : ops.folded)
    if (to == i) st.ops.push_back(j);
  st.ops.push_back(i);
  st.writes.push_back(w);
  st.reasons.push_back(
      w.in_place
          ? "'" + w.result + "' coreml_update_state of a slice_update: writes only the update into state '" + w.state +
                "''s buffer, in place (the engine has no in-place write at a run-time position; begin/end are int32)"
          : "'" + w.result + "' coreml_update_state: copies the whole new value '" + w.value + "' into state '" +
                w.state + "''s buffer (the engine has no in-place write)");
}

// What a StateWrite step reads without a boundary value: the state
// parameter it writes, and the view of it that a folded slice_update updates.
bool implicit_read(const Function& f, const StateOps& ops, const Step& st, const std::string& v) {
  if (st.kind != Step::Kind::StateWrite) return false;
  if (const Param* p = f.param(v); p && p->type.kind == Type::Kind::State) return true;
  for (size_t i : st.ops)
    if (ops.folded.count(i) && f.ops[i].arg("x")->var == v) return true;
  return false;
}

// A function `main` holding the step's ops, its inputs as parameters and the
// constants it reads copied in, in the original's opset.
Program host_program(const Program& prog, const Function& f, const Step& s, const TypeTable& types) {
  Function g;
  g.name = "main";
  g.opset = f.opset;
  for (auto& n : s.inputs) g.params.push_back(Param{n, types.at(n), {}});
  g.ops = constants_read(f, s.ops);
  for (size_t i : s.ops) g.ops.push_back(f.ops[i]);
  g.outputs = s.outputs;
  Program h;
  h.version = prog.version;
  h.functions.push_back(std::move(g));
  h.base_dir = prog.base_dir;
  h.path = prog.path;
  return h;
}

}  // namespace

size_t Partition::engine_programs() const {
  size_t n = 0;
  for (auto& s : steps) n += s.kind == Step::Kind::Engine;
  return n;
}
size_t Partition::host_steps() const { return steps.size() - engine_programs(); }

const StateHome& Partition::state(const std::string& name) const {
  for (auto& h : states)
    if (h.name == name) return h;
  throw Error("ane: function '" + function + "' has no state '" + name + "'");
}

Partition partition(const Program& p, const PartitionOptions& options) {
  if (!p.function(options.function)) throw Error("ane: no function '" + options.function + "'");
  Partition part;
  if (options.input_shapes.empty()) {
    part.program = prepare_for_ane(p);
  } else {
    Program q = p;
    specialize_input_shapes(*q.function(options.function), options.input_shapes);
    part.program = prepare_for_ane(q);
  }
  part.function = options.function;
  const Function& f = *part.program.function(options.function);
  const TypeTable types = value_types(f);
  const std::set<std::string> constants = constant_values(f);
  for (auto& prm : f.params)
    if (prm.type.is_tensor() && prm.type.has_unknown_dims())
      throw Error("ane: input '" + prm.name + "' is " + prm.type.str() +
                  "; the engine compiles static shapes: give its shape (PartitionOptions::input_shapes)");

  const StateOps state_ops = find_state_ops(f, options.max_dim);

  // Group ops into runs of one kind. read_state makes no step (its result is
  // a view of the state's buffer), a folded slice_update is its write's.
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    if (op.type == "const" || op.type == "read_state" || state_ops.folded.count(i)) continue;
    if (state_ops.writes.count(i)) {
      add_write(part, f, state_ops, i);
      continue;
    }
    const std::string why = host_reason(op, types, constants, options.max_dim);
    const Step::Kind kind = why.empty() ? Step::Kind::Engine : Step::Kind::Host;
    const bool full = kind == Step::Kind::Engine && options.max_ops_per_program &&
                      !part.steps.empty() && part.steps.back().ops.size() >= options.max_ops_per_program;
    if (part.steps.empty() || part.steps.back().kind != kind || full) {
      part.steps.emplace_back();
      part.steps.back().kind = kind;
    }
    part.steps.back().ops.push_back(i);
    if (!why.empty())
      part.steps.back().reasons.push_back("'" + (op.outputs.empty() ? op.name : op.outputs[0].name) + "' " + why);
  }

  // Boundary values: what each step reads from outside, and which of its
  // values later steps (or the function's outputs) read.
  std::map<std::string, size_t> step_of;
  for (size_t s = 0; s < part.steps.size(); ++s)
    for (size_t i : part.steps[s].ops)
      for (auto& o : f.ops[i].outputs) step_of[o.name] = s;
  std::vector<std::set<std::string>> used_later(part.steps.size());
  for (size_t s = 0; s < part.steps.size(); ++s) {
    Step& st = part.steps[s];
    std::set<std::string> seen;
    for (size_t i : st.ops)
      for (auto& v : op_reads(f.ops[i])) {
        if (constants.count(v) || implicit_read(f, state_ops, st, v)) continue;
        auto it = step_of.find(v);
        if (it != step_of.end() && it->second == s) continue;
        if (seen.insert(v).second) st.inputs.push_back(v);
        if (it != step_of.end()) used_later[it->second].insert(v);
      }
  }
  for (auto& o : f.outputs)
    if (auto it = step_of.find(o); it != step_of.end()) used_later[it->second].insert(o);
  for (size_t s = 0; s < part.steps.size(); ++s) {
    Step& st = part.steps[s];
    for (size_t i : st.ops)
      for (auto& o : f.ops[i].outputs)
        if (used_later[s].count(o.name)) st.outputs.push_back(o.name);
    if (st.kind == Step::Kind::Engine)
      st.engine = lower_engine_program(f, st.ops, st.inputs, st.outputs, options.max_dim);
    else if (st.kind == Step::Kind::Host)
      st.host = host_program(part.program, f, st, types);
  }
  place_states(part, f, state_ops, options.max_dim);
  return part;
}

}  // namespace milrt::ane
