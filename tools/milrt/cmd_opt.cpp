#include <cstdio>

#include "commands.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/passes.h"

namespace milrt::cli {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> r;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) r.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return r;
}

void add_opt(CLI::App& app) {
  auto* cmd = app.add_subcommand("opt", "Run passes over a model and print the resulting MIL");
  add_load_options(*cmd);
  static std::string model, pipeline, print_after;
  static bool list = false;
  cmd->add_option("model", model, "a .mlmodelc directory or a .mil file");
  cmd->add_option("--passes", pipeline, "comma-separated pass names, run in order");
  cmd->add_option("--print-after", print_after, "print the IR after this pass (or 'all') to stderr");
  cmd->add_flag("--list", list, "list the passes and exit");
  cmd->callback([] {
    if (list) {
      for (auto& p : all_passes()) std::printf("%-28s %s\n", p.name.c_str(), p.summary.c_str());
      return;
    }
    if (model.empty()) throw CLI::RequiredError("model");
    Program p = load_model_cli(model);
    std::vector<std::string> names = split_commas(pipeline);
    // The seeds' layout idioms only verify after legalization: run it first
    // unless the pipeline starts with it (run_passes verifies after each pass).
    if (names.empty() || names[0] != "legalize-layout-idioms") {
      legalize_layout_idioms(p);
      verify(p);
    }
    run_passes(p, names, [](const std::string& pass, const Program& q) {
      if (print_after == "all" || print_after == pass)
        std::fprintf(stderr, "// ----- after %s\n%s", pass.c_str(), print_mil(q).c_str());
    });
    std::fputs(print_mil(p).c_str(), stdout);
  });
}

}  // namespace milrt::cli
