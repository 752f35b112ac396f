#include <cstdio>
#include <map>

#include "commands.h"
#include "ir/op_registry.h"
#include "milrt/mil.h"
#include "milrt/model_description.h"

namespace milrt::cli {

void add_check(CLI::App& app) {
  auto* cmd = app.add_subcommand("check", "Parse and verify a model; print an op histogram");
  add_load_options(*cmd);
  static std::string model;
  static bool list_ops = false;
  cmd->add_option("model", model, "a .mlpackage or .mlmodelc directory, or a .mil file");
  cmd->add_flag("--ops", list_ops, "list the ops milrt supports and exit");
  cmd->callback([] {
    if (list_ops) {
      for (auto& op : registered_ops()) std::printf("%s\n", op.c_str());
      return;
    }
    if (model.empty()) throw CLI::RequiredError("model");
    Program p = load_model_cli(model);
    std::vector<std::string> notes = legalize_layout_idioms(p);
    verify(p);
    for (auto& n : notes) std::printf("%s\n", n.c_str());
    // A package also declares its interface and metadata: print them first.
    if (is_mlpackage(model)) std::printf("%s", describe(load_model_description(model)).c_str());
    for (auto& f : p.functions) {
      std::map<std::string, int> hist;
      size_t n_ops = 0;  // those in nested blocks (control flow) included
      walk_ops(f.ops, [&](const Op& op) { ++hist[op.type], ++n_ops; });
      std::printf("function %s<%s>: %zu inputs, %zu ops, %zu outputs\n", f.name.c_str(), f.opset.c_str(),
                  f.params.size(), n_ops, f.outputs.size());
      for (auto& [op, n] : hist) std::printf("  %-36s %d\n", op.c_str(), n);
    }
    std::printf("ok\n");
  });
}

}  // namespace milrt::cli
