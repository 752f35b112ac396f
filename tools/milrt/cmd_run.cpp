#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "ane/executor.h"
#include "ane/sim_device.h"
#if defined(__APPLE__)
#include "ane/macos/ane_private.h"
#endif
#include "commands.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "milrt/plan.h"
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
TensorMap read_named_npys(const std::vector<std::string>& specs, const char* flag) {
  TensorMap r;
  for (auto& spec : specs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(std::string("error: ") + flag + " expects NAME=FILE.npy, got '" + spec + "'");
    r[spec.substr(0, eq)] = read_npy(spec.substr(eq + 1));
  }
  return r;
}

// Prints the largest absolute and relative differences; false if over tolerance.
bool compare(const std::string& name, const Tensor& got, const Tensor& want, double tolerance) {
  if (got.shape() != want.shape())
    throw Error("error: --compare " + name + ": shape " + shape_str(want.shape()) + " differs from the output's " +
                shape_str(got.shape()));
  double max_abs = 0, max_rel = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double a = got.at(size_t(i)), b = want.at(size_t(i));
    double d = std::fabs(a - b);
    if (std::isnan(a) != std::isnan(b)) d = INFINITY;
    max_abs = std::max(max_abs, d);
    max_rel = std::max(max_rel, d / std::max(std::fabs(b), 1e-30));
  }
  bool ok = tolerance < 0 || max_abs <= tolerance;
  std::printf("compare %s: max |diff| %.6g, max rel diff %.6g over %lld elements%s\n", name.c_str(), max_abs,
              max_rel, static_cast<long long>(got.numel()),
              tolerance < 0 ? "" : (ok ? " (within tolerance)" : " (EXCEEDS tolerance)"));
  return ok;
}
// Ctrl-C while a plan runs cancels it (the run ends with "error: cancelled",
// exit code 2); a second Ctrl-C ends the process as usual.
std::atomic<Plan*> running_plan{nullptr};
extern "C" void cancel_on_sigint(int) {
  if (Plan* p = running_plan.load()) p->cancel();
  signal(SIGINT, SIG_DFL);
}
struct CancelOnSigint {
  struct sigaction old{};
  explicit CancelOnSigint(Plan& p) {
    running_plan.store(&p);
    struct sigaction sa{};
    sa.sa_handler = cancel_on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
  }
  ~CancelOnSigint() {
    sigaction(SIGINT, &old, nullptr);
    running_plan.store(nullptr);
  }
};
}  // namespace

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run a model on .npy inputs");
  add_load_options(*cmd);
  add_max_memory_option(*cmd);
  add_numerics_option(*cmd);
  add_profile_options(*cmd);
  add_plan_options(*cmd);
  static std::string model, function, out_dir, engine = "compiled";
  static std::vector<std::string> inputs, compares, taps;
  static double tolerance = -1;
  cmd->add_option("model", model, "a .mlmodelc directory or a .mil file")->required();
  cmd->add_option("--function", function, "function to run (default main, else a package's default function, else the only one)");
  cmd->add_option("--input", inputs, "NAME=FILE.npy, once per function input");
  cmd->add_option("--output-dir", out_dir, "write each output as DIR/NAME.npy");
  cmd->add_option("--tap", taps, "NAME[,NAME...]: also report intermediate value NAME (an op result, constant or input), "
                 "written as DIR/taps/NAME.npy with --output-dir")
      ->delimiter(',');
  cmd->add_option("--compare", compares, "NAME=FILE.npy: report the largest difference of output (or tap) NAME from FILE");
  cmd->add_option("--tolerance", tolerance, "with --compare: exit 1 if any |difference| exceeds this");
  static size_t ane_resident = 16;
  cmd->add_option("--engine", engine, "compiled (default: a fused, memory-planned plan), reference (the oracle: every op, "
                                      "fp64 rounded per op), ane-sim (Neural Engine partition on the simulated device) "
                                      "or ane (the Neural Engine; macOS only)")
      ->check(CLI::IsMember({"reference", "compiled", "ane-sim", "ane"}));
  cmd->add_option("--ane-resident", ane_resident, "with --engine ane-sim or ane: engine programs kept loaded at once (LRU, default 16)")
      ->check(CLI::PositiveNumber);
  cmd->callback([] {
    const ProfileFlags& pf = profile_flags();
#if !defined(__APPLE__)
    if (engine == "ane") throw Error("error: the Neural Engine needs macOS; use --engine ane-sim");
#endif
    if (pf.on() && engine != "compiled") throw Error("error: --profile and --trace time the steps of a compiled plan, not --engine " + engine);
    if (engine != "compiled") {
      CompileOptions o;
      apply_plan_options_cli(o);
      if (o.matmul_precision != CompileOptions::MatmulPrecision::fp32)
        throw Error("error: --precision bf16 applies to compiled plans; --engine " + engine + " does not use it");
    }
    Program p = load_model_cli(model);
    legalize_layout_idioms(p);
    verify(p);
    function = function_cli(model, p, function);
    const Function* f = p.function(function);
    TensorMap in = read_named_npys(inputs, "--input");
    TensorMap expected = read_named_npys(compares, "--compare");
    for (auto& prm : f->params)
      if (!in.count(prm.name))
        throw Error("error: missing --input " + prm.name + "=FILE.npy (" + prm.type.str() + ")");
    TensorMap out, tapped;
    CompileOptions opts;
    opts.taps = taps;
    if (engine == "compiled") {
      opts.function = function;
      opts.max_memory = max_memory_cli();
      apply_plan_options_cli(opts);
      opts.numerics = numerics_cli();
      opts.profile = pf.on();
      opts.trace = !pf.trace.empty();
      for (auto& [name, t] : in)
        if (f->param(name) && f->param(name)->type.kind != Type::Kind::State) opts.input_shapes[name] = t.shape();
      Plan plan = compile(p, opts);
      // A state's --input is its value before this run, as for the reference.
      for (auto& port : plan.states())
        if (auto it = in.find(port.name); it != in.end()) {
          plan.set_state(port.name, it->second);
          in.erase(it);
        }
      CancelOnSigint on_ctrl_c(plan);
      out = plan.run(in);
      for (auto& name : taps) tapped[name] = plan.tap(name);
      report_profile(plan, "profile of " + model + " (" + function + ")");
    } else if (engine == "ane-sim" || engine == "ane") {
      if (!taps.empty()) throw Error("error: --tap is not supported with --engine " + engine);
      ane::PartitionOptions po;
      po.function = function;
      for (auto& [name, t] : in)
        if (f->param(name) && f->param(name)->type.kind != Type::Kind::State && f->param(name)->type.has_unknown_dims())
          po.input_shapes[name] = t.shape();
      ane::Partition part = ane::partition(p, po);
      ane::SimDevice sim;
      milrt_ane_device* device = sim.table();
#if defined(__APPLE__)
      // The chip through the private framework: built and syntax-checked
      // only; never run by this project's tests (README, Neural Engine).
      milrt_ane_device chip{};
      if (engine == "ane") {
        char err[512] = "";
        if (milrt_ane_open_private(&chip, err, sizeof err) != 0) throw Error(std::string("error: ") + err);
        device = &chip;
      }
#endif
      ane::ExecutorOptions eo;
      eo.max_resident = ane_resident;
      ane::Executor ex(part, device, eo);
      TensorMap states, plain;
      for (auto& [name, t] : in)
        (f->param(name) && f->param(name)->type.kind == Type::Kind::State ? states : plain)[name] = t;
      out = ex.run(plain, states);
      std::fprintf(stderr, "%s: %zu engine programs, %zu host steps, %zu compiles\n", engine.c_str(),
                   part.engine_programs(), part.host_steps(), device->compile_count(device->context));
    } else if (taps.empty()) {
      out = run_reference(p, function, in, ReferenceOptions{max_loop_iterations_cli()});
    } else {  // the reference executor keeps every value: taps cost nothing there
      check_taps(*f, opts);
      TensorMap all = run_reference_all(p, function, in, ReferenceOptions{max_loop_iterations_cli()});
      for (auto& name : f->outputs) out[name] = all.at(name);
      for (auto& name : taps) tapped[name] = all.at(name);
    }
    if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
    for (auto& name : f->outputs) {
      summarize(name, out.at(name));
      if (!out_dir.empty()) write_npy((std::filesystem::path(out_dir) / (name + ".npy")).string(), out.at(name));
    }
    if (!out_dir.empty() && !tapped.empty()) std::filesystem::create_directories(out_dir + "/taps");
    std::vector<std::string> printed;  // taps in the order given, each once
    for (auto& name : taps) {
      if (std::count(printed.begin(), printed.end(), name)) continue;
      printed.push_back(name);
      summarize("tap " + name, tapped.at(name));
      if (!out_dir.empty())
        write_npy((std::filesystem::path(out_dir) / "taps" / (name + ".npy")).string(), tapped.at(name));
    }
    bool within = true;
    for (auto& [name, want] : expected) {
      const Tensor* got = out.count(name) ? &out.at(name) : tapped.count(name) ? &tapped.at(name) : nullptr;
      if (!got) throw Error("error: --compare names '" + name + "', which is neither an output nor a tap");
      within &= compare(name, *got, want, tolerance);
    }
    if (!within) throw CLI::RuntimeError(1);
  });
}

}  // namespace milrt::cli
