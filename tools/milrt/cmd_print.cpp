#include <cstdio>

#include "commands.h"
#include "milrt/mil.h"

namespace milrt::cli {

void add_print(CLI::App& app) {
  auto* cmd = app.add_subcommand("print", "Parse a model and print it back as MIL text");
  add_load_options(*cmd);
  static std::string model;
  cmd->add_option("model", model, "a .mlmodelc directory or a .mil file")->required();
  cmd->callback([] {
    Program p = load_model_cli(model);
    std::fputs(print_mil(p).c_str(), stdout);
  });
}

}  // namespace milrt::cli
