// Options shared by the commands that load and compile models: where a model
// may read weights from (--allow-external-weights), the memory limit of its
// plan (--max-memory), its matrix product precision and determinism. One
// subcommand runs per process, so one set of values serves them all.
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "commands.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/model_description.h"

namespace milrt::cli {
namespace {
LoadOptions& load_options() {
  static LoadOptions o;
  return o;
}
std::string& max_memory_text() {
  static std::string s;
  return s;
}
}  // namespace

void add_load_options(CLI::App& cmd) {
  cmd.add_option("--allow-external-weights", load_options().allow_external_weights,
                 "DIR: let the model's BLOBFILE paths also read files below DIR (by default a model may read "
                 "only its own bundle); repeatable");
}

Program load_model_cli(const std::string& path) { return load_model(path, load_options()); }

std::string function_cli(const std::string& model, const Program& p, const std::string& given) {
  std::string name = given;
  if (name.empty()) {
    // As Core ML: a multifunction package runs its default function unless told otherwise.
    if (!p.function("main") && is_mlpackage(model)) name = load_model_description(model).default_function;
    if (name.empty() && !p.function("main") && p.functions.size() == 1) name = p.functions[0].name;
    if (name.empty()) name = "main";
  }
  if (!p.function(name)) {
    std::string names;
    for (auto& f : p.functions) names += (names.empty() ? "" : ", ") + f.name;
    throw Error(model + ": error: no function '" + name + "' (functions: " + names + ")");
  }
  return name;
}

void add_max_memory_option(CLI::App& cmd) {
  cmd.add_option("--max-memory", max_memory_text(),
                 "refuse a plan needing more than this many bytes (weights + arena + states + inputs + outputs); "
                 "suffixes K, M, G, T; default 3/4 of physical memory");
}

namespace {
struct PlanFlags {
  std::string precision = "fp32";
  bool deterministic = false;
  int64_t max_loop_iterations = kDefaultMaxLoopIterations;
};
PlanFlags& plan_flags() {
  static PlanFlags f;
  return f;
}
}  // namespace

void add_plan_options(CLI::App& cmd) {
  cmd.add_option("--precision", plan_flags().precision,
                 "fp32 (default) or bf16: matrix products (matmul, linear) with operands rounded to bf16 and fp32 "
                 "accumulation, as torch.set_float32_matmul_precision('medium')")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd.add_flag("--deterministic", plan_flags().deterministic,
               "results bit-identical for any thread count: only kernels that guarantee it (no oneDNN GEMM)");
  cmd.add_option("--max-loop-iterations", plan_flags().max_loop_iterations,
                 "a while_loop running its body more often ends the run with an error (default 1048576; models "
                 "are untrusted and Core ML bounds no loop)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 62));
}

int64_t max_loop_iterations_cli() { return plan_flags().max_loop_iterations; }

void apply_plan_options_cli(CompileOptions& options) {
  options.matmul_precision = plan_flags().precision == "bf16" ? CompileOptions::MatmulPrecision::bf16
                                                              : CompileOptions::MatmulPrecision::fp32;
  options.deterministic = plan_flags().deterministic;
  options.max_loop_iterations = plan_flags().max_loop_iterations;
}

size_t max_memory_cli() { return max_memory_text().empty() ? 0 : parse_bytes(max_memory_text()); }

namespace {
std::string& numerics_text() {
  static std::string s = "fp32";
  return s;
}
}  // namespace

void add_numerics_option(CLI::App& cmd) {
  cmd.add_option("--numerics", numerics_text(),
                 "fp32 (default: fp16 values computed and kept in fp32) or fp16 (rounded to fp16 after every op, "
                 "as fp16 hardware and --engine reference do)")
      ->check(CLI::IsMember({"fp32", "fp16"}));
}

CompileOptions::Numerics numerics_cli() {
  return numerics_text() == "fp16" ? CompileOptions::Numerics::fp16 : CompileOptions::Numerics::fp32;
}

size_t parse_bytes(const std::string& s) {
  auto bad = [&] { return Error("error: --max-memory expects a size like 512M, 2G or 1048576, got '" + s + "'"); };
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno || !std::isfinite(v) || v < 0) throw bad();
  std::string unit(end);
  for (const char* tail : {"iB", "B"})
    if (unit.size() > 1 && unit.size() >= std::string(tail).size() &&
        unit.compare(unit.size() - std::string(tail).size(), std::string::npos, tail) == 0) {
      unit.resize(unit.size() - std::string(tail).size());
      break;
    }
  double mult = 1;
  if (unit == "K" || unit == "k") mult = 1024.0;
  else if (unit == "M" || unit == "m") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty() && unit != "B") throw bad();
  double bytes = v * mult;
  if (bytes >= 1.8e19) throw bad();
  return size_t(bytes);
}

}  // namespace milrt::cli
