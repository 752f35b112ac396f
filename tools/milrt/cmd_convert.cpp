// milrt convert MODEL --out OUT: a model in another container. Any model
// milrt loads (.mlpackage, .mlmodelc bundle, .mil file) is written as a
// package (what coremltools opens) or a compiled bundle's model.mil +
// weights, chosen by --format or OUT's extension; a .mil OUT gets the
// program's text alone, for reading and diffing. Blobs are read and written
// again: OUT never refers to files of MODEL.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "model_dir_writer.h"

namespace milrt::cli {
namespace {
namespace fs = std::filesystem;

struct Args {
  std::string model, out, format;
  int64_t inline_limit = 16;
  bool overwrite = false;
};

void run(Args a) {
  while (a.out.size() > 1 && a.out.back() == '/') a.out.pop_back();
  if (a.out.empty()) throw Error("convert: --out is empty");
  if (a.inline_limit < 0) throw Error("convert: --inline-limit must be >= 0");
  const fs::path out = fs::absolute(a.out);
  Program p = load_model_cli(a.model);
  verify(p);
  if (a.format.empty() && out.extension() == ".mil") {
    if (fs::exists(fs::symlink_status(out)) && !a.overwrite)
      throw Error("convert: " + out.string() + " exists; give --overwrite to replace it");
    write_file_atomic(out.string(), print_mil(p));  // BLOBFILE paths as the model had them
  } else {
    const ModelDirFormat format = model_dir_format("convert", a.format, out);
    write_model_dir("convert", out, format, a.overwrite, [&](const fs::path& tmp) {
      if (format == ModelDirFormat::mlpackage) save_mlpackage(p, tmp.string(), a.inline_limit);
      else save_model(p, tmp.string(), a.inline_limit);
    });
  }
  size_t ops = 0;
  for (const Function& f : p.functions) ops += f.ops.size();
  std::printf("wrote %zu function%s, %zu ops: %s\n", p.functions.size(), p.functions.size() == 1 ? "" : "s", ops,
              out.string().c_str());
}

}  // namespace

void add_convert(CLI::App& app) {
  static Args a;
  auto* cmd = app.add_subcommand("convert", "Write a model as an .mlpackage, a .mlmodelc bundle or MIL text");
  cmd->add_option("model", a.model, "the model: X.mlpackage, X.mlmodelc or X.mil")->required();
  cmd->add_option("--out", a.out, "what to write: X.mlpackage, X.mlmodelc (model.mil + weights) or X.mil")->required();
  cmd->add_option("--format", a.format, "mlpackage or mlmodelc (default: from --out's extension)");
  cmd->add_option("--inline-limit", a.inline_limit,
                  "constants of more elements than this go into weights/weight.bin (default 16)");
  cmd->add_flag("--overwrite", a.overwrite, "replace an existing model at --out (after the new one is complete)");
  add_load_options(*cmd);
  cmd->callback([] { run(a); });
}

}  // namespace milrt::cli
