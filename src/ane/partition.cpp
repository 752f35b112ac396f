// Partitioning: validate each op, group runs, find each step's boundary
// values, lower engine runs and wrap host runs as sub-functions.
#include "ane/partition.h"

#include <map>
#include <set>

#include "ane/validate.h"
#include "ir/verifier.h"
#include "milrt/builder.h"
#include "milrt/error.h"

namespace milrt::ane {
namespace {

bool stateful(const Function& f) {
  for (auto& p : f.params)
    if (p.type.kind == Type::Kind::State) return true;
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

  if (stateful(f)) {  // first version: the whole function on the host
    Step s;
    s.whole_function = true;
    for (size_t i = 0; i < f.ops.size(); ++i)
      if (f.ops[i].type != "const") s.ops.push_back(i);
    for (auto& prm : f.params) s.inputs.push_back(prm.name);
    s.outputs = f.outputs;
    s.reasons.push_back("stateful function (state parameters): runs on the host in this version");
    part.steps.push_back(std::move(s));
    return part;
  }

  // Group ops into runs of one kind.
  for (size_t i = 0; i < f.ops.size(); ++i) {
    const Op& op = f.ops[i];
    if (op.type == "const") continue;
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
        if (constants.count(v)) continue;
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
    else
      st.host = host_program(part.program, f, st, types);
  }
  return part;
}

}  // namespace milrt::ane
