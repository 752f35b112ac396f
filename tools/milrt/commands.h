// Subcommands of the milrt CLI; each adds itself to the app and runs from its callback.
#pragma once
#include <CLI/CLI.hpp>
#include <cstddef>
#include <functional>
#include <string>

#include "milrt/ir.h"
#include "milrt/plan.h"
#include "runtime/profile_report.h"

namespace milrt::llm {
struct TrainLog;
}

namespace milrt::cli {
void add_check(CLI::App& app);   // milrt check MODEL
void add_run(CLI::App& app);     // milrt run MODEL --input NAME=FILE.npy ...
void add_print(CLI::App& app);   // milrt print MODEL
void add_opt(CLI::App& app);     // milrt opt MODEL --passes a,b,c
void add_inspect(CLI::App& app); // milrt inspect MODEL
void add_bench(CLI::App& app);   // milrt bench MODEL | bench train ...
void add_bench_train(CLI::App& bench);  // milrt bench train --config NAME
void add_bench_generate(CLI::App& bench);  // milrt bench generate --checkpoint FILE | --config NAME
void add_bench_kernels(CLI::App& bench);   // milrt bench kernels [--quick] [--threads 1,2] [--json]
void add_train(CLI::App& app);   // milrt train [--config NAME] ...
void add_grad(CLI::App& app);    // milrt grad MODEL --loss NAME --wrt A,B
void add_generate(CLI::App& app); // milrt generate --checkpoint FILE --tokenizer FILE ...
void add_export(CLI::App& app);   // milrt export --checkpoint FILE --out DIR.mlmodelc ...
void add_convert(CLI::App& app);  // milrt convert MODEL --out X.mlpackage|X.mlmodelc|X.mil

// Commands that load a model (check, run, print, opt, inspect, bench, grad)
// take --allow-external-weights DIR (repeatable; see milrt::LoadOptions) and
// load with load_model_cli().
void add_load_options(CLI::App& cmd);
Program load_model_cli(const std::string& path);
// The function a command works on: `given` (--function) if not empty, else
// main, else a package's default function, else the only one. Throws a
// one-line error naming the functions there are when it does not exist.
std::string function_cli(const std::string& model, const Program& p, const std::string& given);

// Commands that compile and run a plan (run, bench) take --max-memory BYTES
// (CompileOptions::max_memory; "512M", "2G", "1.5G", plain bytes; 0: default).
void add_max_memory_option(CLI::App& cmd);
size_t max_memory_cli();
// ... and --numerics fp32|fp16 (CompileOptions::numerics).
void add_numerics_option(CLI::App& cmd);
CompileOptions::Numerics numerics_cli();
// They also take --precision fp32|bf16 (CompileOptions::matmul_precision:
// matrix products with bf16 operands, fp32 accumulation) and --deterministic
// (CompileOptions::deterministic); apply_plan_options_cli sets both.
void add_plan_options(CLI::App& cmd);
void apply_plan_options_cli(CompileOptions& options);
// Runs a training command's body as one rank of an mpirun job (or alone): an
// error on a rank aborts the whole job with its message.
void run_as_rank(const std::function<void()>& run);
// The options of the commands that run under mpirun (train, bench train):
// --comm-timeout SECONDS (llm::dist::set_collective_timeout), --comm-overlap
// on|off and --bucket-mb MB (TrainOptions::comm_overlap, bucket_mb).
void add_comm_options(CLI::App& cmd, bool& overlap, double& bucket_mb);
// --max-loop-iterations, for the engines that take no CompileOptions (--engine reference).
int64_t max_loop_iterations_cli();
// "512M" -> 512 << 20; K, M, G, T (binary multiples, optional "B"/"iB"). Throws Error.
size_t parse_bytes(const std::string& s);

// --profile and --trace FILE (run, bench, train, bench train; profile_options.cpp).
struct ProfileFlags {
  bool profile = false;
  std::string trace;
  bool checked = false;
  bool on() const { return profile || !trace.empty(); }
};
void add_profile_options(CLI::App& cmd);
// The flags given; the first call with --trace checks that FILE can be
// written (an Error otherwise), so commands call it before any work.
const ProfileFlags& profile_flags();
// The measured peak (all threads) that profile tables and training reports divide by.
double profile_peak_gflops(bool bf16);
// With --profile the plan's table on stderr; with --trace its events to FILE.
void report_profile(const Plan& plan, const std::string& title);
// The same for several plans: a table each, one trace of all (a track group per plan).
void report_profiles(const std::vector<std::pair<const Plan*, std::string>>& plans);
// The same for a training run (TrainOptions::profile): the step and eval
// plans' tables, and one trace of both plans and the trainer's phases.
void report_train_profile(const llm::TrainLog& log);

// "a,b,,c" -> {"a", "b", "c"} (empty items dropped): list-valued options.
std::vector<std::string> split_commas(const std::string& s);
}  // namespace milrt::cli
