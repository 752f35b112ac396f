// milrt grad MODEL --loss NAME --wrt A,B: the program with its derived
// (gradient) function added, printed as MIL or written to --out.
#include <cstdio>

#include "commands.h"
#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"

namespace milrt::cli {

void add_grad(CLI::App& app) {
  auto* cmd = app.add_subcommand("grad", "Differentiate a function: add <function>_grad returning the loss and gradients");
  add_load_options(*cmd);
  static std::string model, loss, wrt, function = "main", out;
  static bool list = false, keep = false;
  cmd->add_option("model", model, "a .mlmodelc directory or a .mil file");
  cmd->add_option("--loss", loss, "the value to differentiate (summed when not a scalar)");
  cmd->add_option("--wrt", wrt, "comma-separated inputs to differentiate with respect to");
  cmd->add_option("--function", function, "the function to differentiate (default main)");
  cmd->add_option("--out", out, "write the program here (atomically) instead of printing it");
  cmd->add_flag("--keep-outputs", keep, "also return the function's other outputs");
  cmd->add_flag("--list", list, "list the ops that have a gradient rule and exit");
  cmd->callback([] {
    if (list) {
      for (const std::string& op : differentiable_ops()) std::printf("%s\n", op.c_str());
      return;
    }
    if (model.empty()) throw CLI::RequiredError("model");
    if (loss.empty()) throw CLI::RequiredError("--loss");
    if (wrt.empty()) throw CLI::RequiredError("--wrt");
    Program p = load_model_cli(model);
    legalize_layout_idioms(p);   // the seeds' layout idioms verify only after it (as in opt)
    verify(p);
    GradOptions o;
    o.function = function;
    o.loss = loss;
    o.wrt = split_commas(wrt);
    o.keep_outputs = keep;
    std::string text = print_mil(differentiate(p, o));
    if (out.empty()) std::fputs(text.c_str(), stdout);
    else write_file_atomic(out, text);
  });
}

}  // namespace milrt::cli
