#include <cstdio>

#include "commands.h"
#include "milrt/mil.h"
#include "milrt/plan.h"

namespace milrt::cli {

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Compile a model and print its plan: kernels, FLOPs, bytes, arena");
  static std::string model, function = "main";
  cmd->add_option("model", model, "a .mlmodelc directory or a .mil file")->required();
  cmd->add_option("--function", function, "function to compile (default main)");
  cmd->callback([] {
    Program p = load_model(model);
    verify(p);
    CompileOptions opts;
    opts.function = function;
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
  });
}

}  // namespace milrt::cli
