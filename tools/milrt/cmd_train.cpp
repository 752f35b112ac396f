// milrt train: trains a Llama-family model (or the second seed's layer)
// through a derived MIL gradient program; see src/llm/trainer.h.
#include <unistd.h>

#include <csignal>
#include <functional>
#include <memory>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kernels/threads.h"
#include "llm/checkpoint.h"
#include "llm/distributed.h"
#include "llm/run_record.h"
#include "llm/sample.h"
#include "llm/seed_report.h"
#include "llm/train_progress.h"
#include "llm/train_tasks.h"
#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "train_engine.h"

namespace milrt::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // a second Ctrl-C does not wait for the save
}

struct Args {
  std::string config = "default", data, tokenizer, out, init, emit_mil, prompt = "The";
  int64_t steps = -1, batch = -1, seq = 0, accum = -1, eval_every = -1, eval_batches = 4, save_every = 0;
  int threads = 0, samples = 2, checkpoint_version = 0, log_every = 10, zero = 0;
  double bucket_mb = 4;
  uint64_t seed = 1;
  bool resume = false, overwrite = false, quiet = false, recompute = false, comm_overlap = true;
  std::string precision = "fp32";
  std::string engine = "cpu";
  double loss_scale = 1;  // --engine only
  std::string ane_weights = "dynamic";  // --engine only
  llm::AdamWConfig adamw;
  std::function<bool(const char*)> given;  // whether a flag was on the command line
  std::optional<llm::RunRecord> record;    // the run being resumed, when it has run.json
};

bool is_seed_layer(const Args& a) { return a.config == "seed-layer"; }

// Defaults per config: the embedded default trains in a few minutes here; the
// seed layer follows train_large.m's recipe (Adam 0.9/0.999/1e-8 at a constant
// 1e-3, no weight decay, no clipping, 100 micro-steps per update, 400
// micro-steps), every flag still overriding.
void apply_defaults(Args& a) {
  const bool seed_layer = is_seed_layer(a);
  if (a.steps < 0) a.steps = seed_layer ? 4 : (a.config == "default" ? 600 : 200);
  if (a.accum < 0) a.accum = seed_layer ? 100 : 1;
  if (a.batch < 0) a.batch = seed_layer ? 1 : a.config == "default" ? 16 : 8;
  if (a.eval_every < 0) a.eval_every = std::max<int64_t>(1, a.steps / 10);
  auto dflt = [&](const char* flag, auto& field, auto value) {
    if (!a.given(flag)) field = value;
  };
  if (a.config == "default") {  // a small model: a larger rate and a short warmup
    dflt("--lr", a.adamw.lr, 1e-3);
    dflt("--warmup", a.adamw.warmup, int64_t(30));
  }
  if (seed_layer) {
    dflt("--lr", a.adamw.lr, 1e-3);
    dflt("--warmup", a.adamw.warmup, int64_t(0));
    dflt("--min-lr-ratio", a.adamw.min_lr_ratio, 1.0);
    dflt("--weight-decay", a.adamw.weight_decay, 0.0);
    dflt("--beta1", a.adamw.beta1, 0.9);
    dflt("--beta2", a.adamw.beta2, 0.999);
    dflt("--eps", a.adamw.eps, 1e-8);
    dflt("--grad-clip", a.adamw.grad_clip, 0.0);
  }
}

// --resume: the run directory's record fills in what was not given, and
// refuses what contradicts it; a directory without one (made before run.json)
// is checked by its checkpoint's format instead.
void take_run_record(Args& a) {
  a.record = llm::load_run_record(a.out);
  if (!a.record) return;
  const llm::RunRecord& r = *a.record;
  if (!a.given("--config")) a.config = r.config;
  if (!a.given("--precision")) a.precision = r.precision;
  if (!a.given("--batch")) a.batch = r.batch;
  if (!a.given("--seq")) a.seq = r.seq;
  if (!a.given("--accum")) a.accum = r.accum;
}

// The data-parallel line (and what --zero does in this world).
void print_data_parallel(const Args& a) {
  const int n = llm::dist::world_size();
  if (n > 1)
    std::printf("data parallel: %d ranks (MPI), rank r takes micro-batch r of every %d in a row%s\n", n, n,
                a.zero == 1 ? "; ZeRO-1: AdamW state sharded over the ranks" : "");
  else if (a.zero == 1)
    std::printf("--zero 1: one process, nothing to shard (the optimizer state stays whole)\n");
}

// What this invocation trains; a resumed run's counters go on from its record.
llm::RunRecord this_run(const Args& a) {
  llm::RunRecord r = a.record.value_or(llm::RunRecord{});
  r.config = a.config;
  r.precision = a.precision;
  r.batch = a.batch;
  r.seq = a.seq;
  r.accum = a.accum;
  r.world_size = llm::dist::world_size();
  return r;
}

// The record after this process's part: `base` plus the log's totals.
llm::RunRecord add_counters(llm::RunRecord base, int64_t step, const llm::TrainLog& log) {
  base.micro_steps += log.micro_steps;
  base.optimizer_steps = step;
  base.wall_ms += log.wall_ms;
  base.compile_ms += log.compile_ms;
  base.train_ms += log.train_ms;
  return base;
}

llm::TrainOptions train_options(const Args& a) {
  llm::TrainOptions t;
  t.steps = a.steps;
  t.accum = a.accum;
  t.adamw = a.adamw;
  t.adamw.total_steps = a.steps;
  t.eval_every = a.eval_every;
  t.eval_batches = a.eval_batches;
  t.save_every = a.save_every;
  t.out_dir = a.out;
  t.resume = a.resume;
  t.recompute = a.recompute;
  t.zero = a.zero;
  t.comm_overlap = a.comm_overlap;
  t.bucket_mb = a.bucket_mb;
  t.stop = &g_stop;
  t.profile = profile_flags().on();
  t.trace = !profile_flags().trace.empty();
  if (!a.out.empty()) {
    const llm::RunRecord base = this_run(a);
    const std::string dir = a.out;
    t.on_save = [base, dir](int64_t step, const llm::TrainLog& log) {
      llm::save_run_record(dir, add_counters(base, step, log));
    };
  }
  // fp16 is the task's program (fp16 compute, loss scaling); its matrix
  // products are the plan's fp32 ones on fp16-rounded operands.
  t.precision = a.precision == "bf16" ? CompileOptions::MatmulPrecision::bf16 : CompileOptions::MatmulPrecision::fp32;
  // The reports' utilisation is against the peak measured in this run.
  t.peak_gflops = profile_peak_gflops(a.precision == "bf16");
  return t;
}

// train() with the progress lines on rank 0 (unless --quiet): live on a
// terminal, every --log-every steps otherwise.
llm::TrainLog train_with_progress(llm::TrainTask& task, llm::TrainOptions t, TensorMap& weights, const Args& a,
                                  bool phase_lines) {
  std::unique_ptr<llm::TrainProgress> progress;
  if (!a.quiet && llm::dist::rank() == 0) {
    llm::ProgressOptions p;
    p.steps = t.steps;
    p.accum = t.accum;
    p.tokens_per_microstep = task.tokens_per_microstep;
    p.world = llm::dist::world_size();
    p.log_every = a.log_every;
    p.phase_lines = phase_lines;
    p.live = isatty(STDERR_FILENO);
    progress = std::make_unique<llm::TrainProgress>(p);
    t.on_step = [&progress](int64_t step, const llm::TrainLog& log) { progress->on_step(step, log); };
  }
  llm::TrainLog log = llm::train(task, t, weights);
  if (progress) progress->finish();
  return log;
}

void run_llama(Args& a) {
  auto preset = llm::llama_preset(a.config);
  llm::LlamaConfig cfg;
  TensorMap weights;
  std::filesystem::path resume_ckpt = std::filesystem::path(a.out) / "checkpoint.bin";
  if (a.resume && llm::is_tensor_file(resume_ckpt.string()))
    throw Error("train: " + a.out + " holds a --config seed-layer run, not a Llama one: resume it with --config seed-layer");
  if (a.resume || !a.init.empty()) {
    llm::LlamaWeights w = llm::load_llama2c_checkpoint(a.resume ? resume_ckpt.string() : a.init);
    cfg = w.cfg;
    weights = std::move(w.tensors);
  } else {
    if (!preset) throw Error("train: unknown --config '" + a.config + "' (" + fmt::format("{}", fmt::join(llm::llama_preset_names(), ", ")) + ", seed-layer)");
    cfg = *preset;
  }
  std::shared_ptr<const llm::Tokenizer> tok;
  if (a.tokenizer.empty()) {
    tok = llm::byte_tokenizer();
    // A preset trained from scratch takes the tokenizer's vocabulary; a
    // checkpoint's vocabulary is what it is (llama_task reports a mismatch).
    if (weights.empty()) cfg.vocab = tok->vocab_size();
  } else {
    tok = llm::load_llama2c_tokenizer(a.tokenizer, cfg.vocab);
  }
  llm::LlamaTaskOptions o;
  o.batch = a.batch;
  o.seq = a.seq;
  o.data = a.data;
  o.seed = a.seed;
  o.checkpoint_version = a.checkpoint_version;
  o.compute = a.precision == "fp16" ? DType::FP16 : DType::FP32;
  llm::TrainTask task = llm::llama_task(cfg, tok, o);
  if (!a.emit_mil.empty()) {  // the loss program with its derived gradient function, for inspection
    GradOptions go;
    go.loss = "loss";
    go.recompute = a.recompute;
    for (const llm::WeightSpec& w : task.weights) go.wrt.push_back(w.name);
    write_file_atomic(a.emit_mil, print_mil(differentiate(task.program, go)));
    std::printf("wrote %s (functions main and main_grad)\n", a.emit_mil.c_str());
    return;
  }
  if (weights.empty()) weights = llm::init_llama_weights(cfg, a.seed).tensors;

  llm::TrainOptions t = train_options(a);
  std::printf("model: %s (%.2fM parameters), %s tokenizer, batch %lld x seq %lld, accum %lld, %d thread%s\n",
              cfg.str().c_str(), double(cfg.param_count()) / 1e6, a.tokenizer.empty() ? "byte" : "llama2.c",
              (long long)a.batch, (long long)(a.seq > 0 ? a.seq : cfg.seq), (long long)a.accum, kernels::num_threads(),
              kernels::num_threads() == 1 ? "" : "s");
  print_data_parallel(a);
  std::fflush(stdout);
  llm::TrainLog log = train_with_progress(task, t, weights, a, /*phase_lines=*/false);
  std::printf("%s%s", llm::efficiency_report(task, t, log).c_str(), llm::distributed_report(task, t, log).c_str());
  report_train_profile(log);
  if (log.interrupted) std::printf("interrupted: checkpoint saved at step %lld in %s\n", (long long)(log.rows.empty() ? 0 : log.rows.back().step), a.out.c_str());
  else if (!a.out.empty()) std::printf("saved %s (llama2.c v%d), train_state.bin, losses.csv, loss.svg, report.txt\n", resume_ckpt.c_str(), a.checkpoint_version);
  for (int i = 0; i < a.samples && !log.interrupted; ++i) {
    llm::SampleOptions so;
    so.temperature = i == 0 ? 0.0 : 0.8;
    so.seed = a.seed + uint64_t(i);
    so.steps = std::min<int64_t>(cfg.seq - 1, 200);
    so.prompt = a.prompt;
    std::string text = llm::sample_text(cfg, weights, *tok, so);
    std::printf("--- sample %d (%s) ---\n%s\n", i + 1, i == 0 ? "greedy" : "temperature 0.8, top-p 0.9", text.c_str());
  }
}

void run_seed_layer(Args& a) {
  if (a.given("--batch") || a.given("--seq") || !a.data.empty() || !a.tokenizer.empty())
    throw Error("train: --config seed-layer trains on its one synthetic batch: --batch, --seq, --data and --tokenizer do not apply");
  const llm::SeedLayerConfig cfg;
  llm::TrainTask task = llm::seed_layer_task(cfg, a.given("--seed") ? uint32_t(a.seed) : 42,
                                             a.precision == "fp16" ? DType::FP16 : DType::FP32);
  const std::string ckpt = (std::filesystem::path(a.out) / "checkpoint.bin").string();
  if (a.resume && !std::filesystem::exists(ckpt))
    throw Error("train: " + a.out + " has no checkpoint.bin to resume from (seed-layer runs of earlier milrt versions "
                "saved no weights): start again with --overwrite");
  TensorMap weights = a.resume ? llm::load_seed_layer_weights(ckpt, cfg)
                      : !a.init.empty() ? llm::load_seed_layer_weights(a.init, cfg)
                                        : task.init_weights;
  llm::TrainOptions t = train_options(a);
  t.eval_batches = 1;  // one fixed batch
  t.on_compiled = [&](const Plan& step, const Plan& eval, double ms) {
    if (!a.quiet) std::printf("%s", llm::plan_kernel_summary(step, eval, ms).c_str()), std::fflush(stdout);
  };
  std::printf("%s%d thread%s\n", llm::seed_layer_banner(cfg, t, a.precision).c_str(), kernels::num_threads(),
              kernels::num_threads() == 1 ? "" : "s");
  print_data_parallel(a);
  std::fflush(stdout);
  llm::TrainLog log = train_with_progress(task, t, weights, a, /*phase_lines=*/true);
  std::printf("%s%s", llm::efficiency_report(task, t, log).c_str(), llm::distributed_report(task, t, log).c_str());
  report_train_profile(log);
  const int64_t last = log.rows.empty() ? 0 : log.rows.back().step;
  // The run's totals: what it had before this process, plus this process's part
  // (what on_save wrote last, with the wall time up to now).
  const llm::RunRecord totals = add_counters(this_run(a), last, log);
  std::printf("%s", llm::seed_layer_final_report(cfg, log, totals).c_str());
  if (log.interrupted) std::printf("interrupted: checkpoint saved at step %lld in %s\n", (long long)last, a.out.c_str());
  else if (!a.out.empty()) std::printf("saved %s (weights), train_state.bin, run.json, losses.csv, loss.svg, report.txt\n", ckpt.c_str());
}

}  // namespace

void add_comm_options(CLI::App& cmd, bool& overlap, double& bucket_mb) {
  cmd.add_option_function<double>(
         "--comm-timeout", [](double s) { llm::dist::set_collective_timeout(s); },
         "under mpirun: end the job when a collective (all-reduce, ...) waits longer than this many seconds for "
         "the other ranks (a stuck rank); 0: wait forever; default 600")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option_function<std::string>(
         "--comm-overlap", [&overlap](const std::string& v) { overlap = v == "on"; },
         "under mpirun: on (default) starts each bucket's gradient all-reduce as soon as the backward pass has "
         "computed it; off starts them after the pass (the same sums: for comparisons)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd.add_option("--bucket-mb", bucket_mb,
                 "under mpirun: gradients smaller than half this many MB are packed into buckets of this size for the "
                 "all-reduce (default 4)")
      ->check(CLI::Range(0.001, 1024.0));
}

void run_as_rank(const std::function<void()>& run) {
  // Under mpirun: one rank of a data-parallel job. An error on any rank ends
  // the whole job with its message instead of leaving the others waiting in
  // a collective.
  llm::dist::init();
  try {
    run();
  } catch (const std::exception& e) {
    if (!llm::dist::abort_job(e.what())) throw;
  }
}

void add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a Llama-family model (or the second seed's layer) on a CPU");
  cmd->footer("Data parallel: " + llm::dist::build_description() +
              ". Each rank runs --threads threads (MILRT_THREADS); rank 0 writes --out.");
  static Args a;
  cmd->add_option("--config", a.config, "default | stories15m | stories110m | stories15m-gqa | tiny | seed-layer");
  cmd->add_option("--data", a.data, "text file, or .bin of uint16 tokens (default: the embedded corpus)");
  cmd->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (default: bytes, vocab 259)");
  cmd->add_option("--out", a.out, "run directory: checkpoint.bin, train_state.bin, losses.csv, loss.svg, report.txt");
  cmd->add_option("--init", a.init, "start from this llama2.c checkpoint (fine-tuning)");
  cmd->add_flag("--resume", a.resume, "continue the run in --out exactly where it stopped");
  cmd->add_flag("--overwrite", a.overwrite, "start a new run in an --out that holds one");
  cmd->add_option("--steps", a.steps, "optimizer steps");
  cmd->add_option("--batch", a.batch, "sequences per micro-step")->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", a.seq, "tokens per sequence (default: the model's seq_len)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--accum", a.accum, "micro-steps per optimizer step")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--lr", a.adamw.lr, "peak learning rate");
  cmd->add_option("--warmup", a.adamw.warmup, "linear warmup steps");
  cmd->add_option("--min-lr-ratio", a.adamw.min_lr_ratio, "cosine decay floor as a fraction of --lr");
  cmd->add_option("--weight-decay", a.adamw.weight_decay, "AdamW decoupled weight decay (matrices only)");
  cmd->add_option("--beta1", a.adamw.beta1, "AdamW beta1");
  cmd->add_option("--beta2", a.adamw.beta2, "AdamW beta2");
  cmd->add_option("--eps", a.adamw.eps, "AdamW epsilon");
  cmd->add_option("--grad-clip", a.adamw.grad_clip, "clip the global gradient norm (0 = off)");
  cmd->add_option("--eval-every", a.eval_every, "validation loss every N steps");
  cmd->add_option("--eval-batches", a.eval_batches, "batches per validation")->check(CLI::Range(1, 100000));
  cmd->add_option("--save-every", a.save_every, "checkpoint every N steps (always at the end and on Ctrl-C)");
  cmd->add_option("--checkpoint-version", a.checkpoint_version, "llama2.c format: 0 (legacy, run.c) or 1")->check(CLI::IsMember({0, 1}));
  cmd->add_option("--seed", a.seed, "weights and data order (seed-layer: srand48 seed, default 42)");
  cmd->add_option("--threads", a.threads, "threads (default MILRT_THREADS or all cores)");
  cmd->add_option("--samples", a.samples, "texts generated at the end (greedy, then sampled)");
  cmd->add_option("--prompt", a.prompt, "what the samples start from (default \"The\")");
  cmd->add_option("--log-every", a.log_every, "log line every N steps when not on a terminal");
  cmd->add_flag("--quiet", a.quiet, "no progress output");
  cmd->add_flag("--recompute", a.recompute, "recompute cheap activations in the backward pass instead of keeping them");
  cmd->add_option("--precision", a.precision,
                  "fp32; bf16 (matrix operands bf16, fp32 accumulation); or fp16 (fp16 activations and weight copies, "
                  "dynamic loss scaling); master weights always fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  add_profile_options(*cmd);
  cmd->add_option("--zero", a.zero,
                  "1: under mpirun, shard the AdamW state over the ranks (ZeRO-1: reduce-scatter, update 1/N, all-gather); "
                  "a no-op for one process")
      ->check(CLI::IsMember({0, 1}));
  add_comm_options(*cmd, a.comm_overlap, a.bucket_mb);
  cmd->add_option("--engine", a.engine,
                  "cpu (default); ane-sim: --config seed-layer through the Neural Engine backend, the seed's six "
                  "kernels on the simulated device; ane: the same on the chip (macOS)")
      ->check(CLI::IsMember({"cpu", "ane-sim", "ane"}));
  cmd->add_option("--loss-scale", a.loss_scale,
                  "with --engine: multiply dY by this (a power of two) before the fp16 backward kernels and divide the "
                  "gradients by it; 1 (default) is the seed's numerics, whose dY underflows fp16 at the seed's size "
                  "(32768 keeps it)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ane-weights", a.ane_weights,
                  "with --engine: dynamic (default): weights packed into the kernels' inputs, each kernel compiled once; "
                  "constant: the seed's way, five kernels rebuilt and recompiled every optimizer step")
      ->check(CLI::IsMember({"dynamic", "constant"}));
  cmd->add_option("--emit-mil", a.emit_mil, "write the training program (loss and derived gradients) as MIL and exit");
  // One invocation: everything after parsing.
  auto run = [cmd] {
    if (llm::dist::rank() != 0) {  // one voice: rank 0 prints, the others only their errors
      if (!std::freopen("/dev/null", "w", stdout)) throw Error("train: cannot silence rank output");
      a.samples = 0;
    }
    if (a.threads > 0) kernels::set_num_threads(a.threads);
    a.given = [cmd](const char* flag) { return cmd->count(flag) > 0; };
    if (a.engine == "cpu" && a.given("--loss-scale"))
      throw Error("train: --loss-scale is for --engine ane-sim|ane (the CPU trainer scales fp16 losses dynamically)");
    if (a.engine == "cpu" && a.given("--ane-weights")) throw Error("train: --ane-weights is for --engine ane-sim|ane");
    if (a.engine != "cpu") {  // the seed's kernels on a Neural Engine device: train_engine.h
      if (!is_seed_layer(a)) throw Error("train: --engine " + a.engine + " trains --config seed-layer only");
      apply_defaults(a);
      std::signal(SIGINT, on_sigint);
      return run_seed_layer_on_engine({a.engine, a.given("--seed") ? uint32_t(a.seed) : 42, a.steps, a.accum, a.adamw,
                                       a.init, a.quiet, a.log_every, &g_stop, a.given, a.loss_scale,
                                       a.ane_weights == "dynamic"},
                                      llm::dist::world_size());
    }
    if (a.resume && a.out.empty()) throw Error("train: --resume needs --out DIR (the run to continue)");
    if (a.resume && !a.init.empty()) throw Error("train: --resume and --init exclude each other");
    namespace fs = std::filesystem;
    // A new run never replaces an earlier run's files unless asked to.
    if (!a.resume && !a.overwrite && !a.out.empty())
      for (const char* f : {"checkpoint.bin", "train_state.bin", "run.json"})
        if (fs::exists(fs::path(a.out) / f))
          throw Error("train: " + a.out + " already holds a run (" + f +
                      "): continue it with --resume, or replace it with --overwrite");
    if (a.resume) take_run_record(a);
    apply_defaults(a);
    if (a.record) llm::check_same_run(*a.record, this_run(a), a.out);
    std::signal(SIGINT, on_sigint);
    // mpirun forwards SIGUSR1 (not SIGINT) to every rank: `kill -USR1 <mpirun>`
    // stops a data-parallel run after the same step on all ranks and saves.
    if (llm::dist::distributed()) std::signal(SIGUSR1, on_sigint);
    if (is_seed_layer(a)) run_seed_layer(a);
    else run_llama(a);
  };
  cmd->callback([run] { run_as_rank(run); });
}

}  // namespace milrt::cli
