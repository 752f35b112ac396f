#include <cmath>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "milrt/reference.h"

namespace milrt::cli {
namespace {

void summarize(const std::string& name, const Tensor& t) {
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.at(size_t(i));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  double mean = t.numel() ? sum / double(t.numel()) : 0;
  std::printf("%s: %s %s min %.6g max %.6g mean %.6g\n", name.c_str(), shape_str(t.shape()).c_str(),
              std::string(dtype_name(t.dtype())).c_str(), lo, hi, mean);
}
}  // namespace

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run a model on .npy inputs");
  static std::string model, function = "main", out_dir, engine = "reference";
  static std::vector<std::string> inputs;
  cmd->add_option("model", model, "a .mlmodelc directory or a .mil file")->required();
  cmd->add_option("--function", function, "function to run (default main)");
  cmd->add_option("--input", inputs, "NAME=FILE.npy, once per function input");
  cmd->add_option("--output-dir", out_dir, "write each output as DIR/NAME.npy");
  cmd->add_option("--engine", engine, "execution engine")->check(CLI::IsMember({"reference"}));
  cmd->callback([] {
    Program p = load_model(model);
    legalize_layout_idioms(p);
    verify(p);
    const Function* f = p.function(function);
    if (!f) throw Error(model + ": error: no function '" + function + "'");
    TensorMap in;
    for (auto& spec : inputs) {
      auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0) throw Error("error: --input expects NAME=FILE.npy, got '" + spec + "'");
      in[spec.substr(0, eq)] = read_npy(spec.substr(eq + 1));
    }
    for (auto& prm : f->params)
      if (!in.count(prm.name))
        throw Error("error: missing --input " + prm.name + "=FILE.npy (" + prm.type.str() + ")");
    TensorMap out = run_reference(p, function, in);
    if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
    for (auto& name : f->outputs) {
      summarize(name, out.at(name));
      if (!out_dir.empty()) write_npy((std::filesystem::path(out_dir) / (name + ".npy")).string(), out.at(name));
    }
  });
}

}  // namespace milrt::cli
