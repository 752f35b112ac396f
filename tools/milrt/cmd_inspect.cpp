#include <cstdio>

#include "ane/partition.h"
#include "commands.h"
#include "inspect_dot.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "milrt/passes.h"
#include "milrt/plan.h"

namespace milrt::cli {
namespace {

// Ops of function `fn` other than `const`: what each pass is judged by.
size_t op_count(const Program& p, const std::string& fn) {
  const Function* f = p.function(fn);
  size_t n = 0;
  if (f)
    for (const Op& op : f->ops) n += op.type != "const";
  return n;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// `--target ane`: the Neural Engine partition, one block per step.
void print_ane_partition(const Program& p, const std::string& function) {
  ane::PartitionOptions po;
  po.function = function;
  ane::Partition part = ane::partition(p, po);
  const Function& f = *part.program.function(function);
  std::printf("Neural Engine partition of %s: %zu engine programs, %zu host steps\n", function.c_str(),
              part.engine_programs(), part.host_steps());
  for (const ane::StateHome& h : part.states) {
    const ane::Packing::Slot& slot = h.packing.slots[h.slot];
    std::string where = h.step == ane::StateHome::npos
                            ? "a surface of its own"
                            : "channels " + std::to_string(slot.channel) + "-" +
                                  std::to_string(slot.channel + slot.channels - 1) + " of step " +
                                  std::to_string(h.step) + "'s input";
    std::printf("state %s: %s, one persistent fp16 buffer (%lld bytes) in %s\n", h.name.c_str(), h.type.str().c_str(),
                (long long)(slot.channels * h.packing.S * 2), where.c_str());
  }
  int program = 0;
  for (size_t i = 0; i < part.steps.size(); ++i) {
    const ane::Step& s = part.steps[i];
    std::vector<std::string> ops;
    for (size_t k : s.ops) ops.push_back(f.ops[k].outputs.empty() ? f.ops[k].type : f.ops[k].outputs[0].name + " (" + f.ops[k].type + ")");
    if (s.kind == ane::Step::Kind::Engine) {
      const ane::EngineProgram& e = s.engine;
      std::printf("step %zu: engine program %d, %zu ops: %s\n", i, program++, s.ops.size(), join(ops).c_str());
      std::printf("  input  fp16 %s, %zu bytes, packs: %s\n", shape_str(e.input.shape()).c_str(), e.input.bytes(),
                  join(s.inputs).c_str());
      std::printf("  output fp16 %s, %zu bytes, packs: %s\n", shape_str(e.output.shape()).c_str(), e.output.bytes(),
                  join(s.outputs).c_str());
      std::printf("  weights %zu bytes, MIL %zu bytes\n", e.weights.size(), e.mil.size());
      for (auto& v : s.state_inputs)
        std::printf("  state %s: read in place, as '%s' (its buffer is a block of this input, bound zero-copy)\n",
                    part.views.at(v).c_str(), v.c_str());
    } else if (s.kind == ane::Step::Kind::StateWrite) {
      std::printf("step %zu: host, writes state buffers, %zu ops: %s\n", i, s.ops.size(), join(ops).c_str());
      for (auto& r : s.reasons) std::printf("  on the host: %s\n", r.c_str());
      if (!s.save_before.empty())
        std::printf("  copies out first (read after this write): %s\n", join(s.save_before).c_str());
    } else {
      std::printf("step %zu: host, %zu ops: %s\n", i, s.ops.size(), join(ops).c_str());
      for (auto& r : s.reasons) std::printf("  on the host: %s\n", r.c_str());
    }
  }
}

}  // namespace

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Compile a model and print its plan: kernels, FLOPs, bytes, arena");
  add_load_options(*cmd);
  static std::string model, function, dot, target = "cpu";
  cmd->add_option("model", model, "a .mlmodelc directory or a .mil file")->required();
  cmd->add_option("--function", function, "function to compile (default main, else a package's default function, else the only one)");
  cmd->add_option("--dot", dot, "also write the plan as a Graphviz graph to this file");
  cmd->add_option("--target", target, "cpu (default: the compiled plan) or ane (the Neural Engine partition: "
                                      "engine programs with their packed I/O, host steps with why)")
      ->check(CLI::IsMember({"cpu", "ane"}));
  cmd->callback([] {
    Program p = load_model_cli(model);
    verify(p);
    function = function_cli(model, p, function);
    if (target == "ane") {
      if (!dot.empty()) throw milrt::Error("error: --dot draws the CPU plan, not --target ane");
      print_ane_partition(p, function);
      return;
    }
    CompileOptions opts;
    opts.function = function;
    // The pipeline once more, outside compile(), to count ops after each pass
    // and to keep the optimized function for the graph's edges.
    Program optimized = p;
    std::printf("%-24s %8s %8s\n", "pass", "ops in", "ops out");
    size_t before = op_count(optimized, function);
    run_passes(optimized, opts.passes, [&](const std::string& pass, const Program& q) {
      const size_t after = op_count(q, function);
      std::printf("%-24s %8zu %8zu\n", pass.c_str(), before, after);
      before = after;
    });
    Plan plan = compile(p, opts);
    double flops = 0, bytes = 0;
    int i = 0;
    for (auto& s : plan.steps()) {
      std::string ops;
      for (auto& o : s.ops) ops += (ops.empty() ? "" : ", ") + o;
      std::printf("%4d  %-28s %12.0f flop %12.0f B   %s\n", i++, s.kernel.c_str(), s.flops, s.bytes, ops.c_str());
      flops += s.flops;
      bytes += s.bytes;
    }
    std::printf("%zu steps, %.0f flop, %.0f bytes moved; arena %zu bytes for %zu bytes of intermediates\n",
                plan.steps().size(), flops, bytes, plan.arena_bytes(), plan.intermediate_bytes());
    if (!dot.empty()) {
      write_file_atomic(dot, plan_dot(plan, *optimized.function(function)));
      std::printf("wrote %s\n", dot.c_str());
    }
  });
}

}  // namespace milrt::cli
