// milrt bench MODEL: median latency of a compiled plan (and, with --vs
// reference, of the reference executor in the same run).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "commands.h"
#include "runtime/gemm_tuning.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "milrt/plan.h"

namespace milrt::cli {
namespace {

// Median wall time of `runs` calls of f, in seconds, after one warm-up call.
template <class F, class G = void (*)()>
double median_seconds(int runs, F f, G after_warmup = [] {}) {
  f();
  after_warmup();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Median latency of a model's compiled plan");
  add_load_options(*cmd);
  add_max_memory_option(*cmd);
  add_plan_options(*cmd);
  add_numerics_option(*cmd);
  static std::string model, function, vs;
  static std::vector<std::string> inputs;
  static int runs = 20;
  static bool json = false;
  cmd->add_option("model", model, "a .mlmodelc directory or a .mil file");
  add_bench_train(*cmd);
  add_bench_generate(*cmd);
  add_bench_kernels(*cmd);
  cmd->add_option("--function", function, "function to run (default main, else a package's default function, else the only one)");
  cmd->add_option("--input", inputs, "NAME=FILE.npy (inputs not given are uniform random in [-1, 1])");
  cmd->add_option("--runs", runs, "timed runs (default 20)")->check(CLI::Range(1, 1000000));
  cmd->add_option("--vs", vs, "also time this engine in the same run: reference")->check(CLI::IsMember({"reference"}));
  cmd->add_flag("--json", json, "end with one JSON object of the figures");
  add_profile_options(*cmd);
  cmd->callback([cmd] {
    if (!cmd->get_subcommands().empty()) return;  // bench train, generate or kernels ran
    if (model.empty()) throw Error("error: bench needs a MODEL (or a subcommand: train, generate, kernels)");
    const ProfileFlags& pf = profile_flags();
    Program p = load_model_cli(model);
    legalize_layout_idioms(p);
    verify(p);
    function = function_cli(model, p, function);
    const Function* f = p.function(function);
    TensorMap in;
    for (auto& spec : inputs) {
      auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0) throw Error("error: --input expects NAME=FILE.npy, got '" + spec + "'");
      in[spec.substr(0, eq)] = read_npy(spec.substr(eq + 1));
    }
    for (auto& prm : f->params)
      if (!in.count(prm.name) && prm.type.has_unknown_dims())
        throw Error("error: input '" + prm.name + "' has flexible shape " + prm.type.str() + ": give it with --input");
    CompileOptions opts;
    opts.max_memory = max_memory_cli();
    apply_plan_options_cli(opts);
    opts.numerics = numerics_cli();
    opts.function = function;
    for (auto& [name, t] : in) opts.input_shapes[name] = t.shape();
    const rt::GemmTuneStats tune0 = rt::gemm_tune_stats();
    auto c0 = std::chrono::steady_clock::now();
    Plan plan = compile(p, opts);
    double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    const rt::GemmTuneStats tune1 = rt::gemm_tune_stats();
    const double tune_ms = tune1.tuning_ms - tune0.tuning_ms;
    if (tune1.timed > tune0.timed)
      std::printf("GEMM tuning: %lld product shapes timed in %.0f ms (part of the compile time; cache file %s)\n",
                  (long long)(tune1.timed - tune0.timed), tune_ms, rt::gemm_tuning_cache_path().c_str());
    // Random inputs only once compile() has checked the plan (inputs
    // included) against the memory limit.
    std::mt19937 rng(1);
    std::uniform_real_distribution<double> u(-1, 1);
    for (auto& prm : f->params) {
      if (in.count(prm.name)) continue;
      Tensor t(prm.type.dtype, prm.type.shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), u(rng));
      in[prm.name] = t;
    }
    // Profiled: the timed runs only (the warm-up grows scratch and caches);
    // the steps' clocks add a little to the median.
    if (pf.on()) plan.set_profiling(true, !pf.trace.empty());
    double compiled = median_seconds(runs, [&] { plan.run(in); }, [&] { plan.reset_profile(); });
    std::printf("compile %.3f ms; compiled plan: median %.4f ms over %d runs; arena %zu bytes (intermediates %zu)\n",
                compile_s * 1e3, compiled * 1e3, runs, plan.arena_bytes(), plan.intermediate_bytes());
    double reference = 0;
    if (vs == "reference") {
      reference = median_seconds(std::max(1, runs / 4), [&] { run_reference(p, function, in); });
      std::printf("reference: median %.4f ms; compiled is %.1fx faster\n", reference * 1e3, reference / compiled);
    }
    if (json)
      std::printf("{\"model\": \"%s\", \"runs\": %d, \"compile_ms\": %.4f, \"compiled_ms\": %.6f, \"reference_ms\": %.6f, "
                  "\"arena_bytes\": %zu, \"intermediate_bytes\": %zu, \"gemm_tuning_ms\": %.1f}\n",
                  model.c_str(), runs, compile_s * 1e3, compiled * 1e3, reference * 1e3, plan.arena_bytes(),
                  plan.intermediate_bytes(), tune_ms);
    report_profile(plan, "profile of " + model + " (" + function + ")");
  });
}

}  // namespace milrt::cli
