#include "inspect_dot.h"

#include <map>
#include <set>

#include "milrt/passes.h"

namespace milrt::cli {
namespace {

// A string as a Graphviz quoted string; "\n" in `s` stays a line break.
std::string quoted(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

std::string value_label(const std::string& name, const Type& t) { return name + "\n" + t.str(); }

std::string flops_text(double f) {
  char buf[32];
  if (f >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MFLOP", f / 1e6);
  else if (f >= 1e3) std::snprintf(buf, sizeof buf, "%.1f kFLOP", f / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f FLOP", f);
  return buf;
}

// At most `n` op names, then a count of the rest: fused steps can list dozens.
std::string ops_text(const std::vector<std::string>& ops, size_t n = 6) {
  std::string r;
  for (size_t i = 0; i < ops.size() && i < n; ++i) r += (i ? ", " : "") + ops[i];
  if (ops.size() > n) r += ", ... (" + std::to_string(ops.size() - n) + " more)";
  return r;
}

}  // namespace

std::string plan_dot(const Plan& plan, const Function& f) {
  std::map<std::string, const Op*> defining;     // value -> op of the optimized function
  std::map<std::string, Type> types;
  for (const Param& p : f.params) types[p.name] = p.type;
  for (const Op& op : f.ops)
    for (const Output& o : op.outputs) {
      if (op.type != "const") defining[o.name] = &op;
      types[o.name] = o.type;
    }
  const std::vector<Plan::StepInfo> steps = plan.steps();
  std::map<const Op*, size_t> step_of;
  std::vector<const Op*> op_of(steps.size(), nullptr);
  std::map<std::string, std::string> producer;   // value -> node id
  for (const Param& p : f.params) producer[p.name] = "in_" + std::to_string(&p - f.params.data());
  std::string out = "digraph plan {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n"
                    "  edge [fontname=\"monospace\", fontsize=9];\n";
  for (size_t i = 0; i < f.params.size(); ++i)
    out += "  in_" + std::to_string(i) + " [shape=ellipse, label=" +
           quoted("input " + value_label(f.params[i].name, f.params[i].type)) + "];\n";
  for (size_t i = 0; i < steps.size(); ++i) {
    const Plan::StepInfo& s = steps[i];
    for (const std::string& v : s.ops)
      if (auto it = defining.find(v); it != defining.end() && !step_of.count(it->second)) {
        step_of[it->second] = i;
        op_of[i] = it->second;
        for (const Output& o : it->second->outputs) producer[o.name] = std::string("s").append(std::to_string(i));
        break;
      }
    out += "  s" + std::to_string(i) + " [label=" +
           quoted("#" + std::to_string(i) + " " + s.kernel + "\n" + ops_text(s.ops) + "\n" + flops_text(s.flops)) +
           "];\n";
  }
  // Edges: each value a step reads, from the node that produces it, once per pair.
  std::set<std::pair<std::string, std::string>> seen;
  auto edge = [&](const std::string& value, const std::string& to) {
    auto it = producer.find(value);
    if (it == producer.end() || it->second == to || !seen.insert({it->second + "|" + value, to}).second) return;
    out += "  " + it->second + " -> " + to + " [label=" + quoted(value_label(value, types[value])) + "];\n";
  };
  for (size_t i = 0; i < steps.size(); ++i)
    for (const Input& in : op_of[i] ? op_of[i]->inputs : std::vector<Input>{}) {
      std::vector<const Arg*> args = {&in.arg};
      for (size_t k = 0; k < args.size(); ++k) {
        if (args[k]->kind == Arg::Kind::Tuple)
          for (const Arg& e : args[k]->elems) args.push_back(&e);
        else if (args[k]->kind == Arg::Kind::Var)
          edge(args[k]->var, std::string("s").append(std::to_string(i)));
      }
    }
  for (size_t i = 0; i < f.outputs.size(); ++i) {
    out += "  out_" + std::to_string(i) + " [shape=ellipse, label=" + quoted("output " + f.outputs[i]) + "];\n";
    edge(f.outputs[i], "out_" + std::to_string(i));
  }
  return out + "}\n";
}

}  // namespace milrt::cli
