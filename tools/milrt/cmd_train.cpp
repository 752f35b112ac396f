// milrt train: trains a Llama-family model (or the second seed's layer)
// through a derived MIL gradient program; see src/llm/trainer.h.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>

#include "commands.h"
#include "kernels/threads.h"
#include "llm/checkpoint.h"
#include "llm/sample.h"
#include "llm/train_tasks.h"
#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"

namespace milrt::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // a second Ctrl-C does not wait for the save
}

struct Args {
  std::string config = "default", data, tokenizer, out, init, emit_mil, prompt = "The";
  int64_t steps = -1, batch = -1, seq = 0, accum = 1, eval_every = -1, eval_batches = 4, save_every = 0;
  int threads = 0, samples = 2, checkpoint_version = 0, log_every = 10;
  uint64_t seed = 1;
  bool resume = false, overwrite = false, quiet = false, recompute = false, seed_given = false, lr_given = false, warmup_given = false;
  std::string precision = "fp32";
  llm::AdamWConfig adamw;
};

// Defaults per config: the embedded default trains in a few minutes here.
void apply_defaults(Args& a, bool seed_layer) {
  if (a.steps < 0) a.steps = seed_layer ? 20 : (a.config == "default" ? 600 : 200);
  if (a.batch < 0) a.batch = a.config == "default" ? 16 : 8;
  if (a.eval_every < 0) a.eval_every = std::max<int64_t>(1, a.steps / 10);
  // The default model is small: it takes a larger rate and a short warmup.
  if (a.config == "default" && !a.lr_given) a.adamw.lr = 1e-3;
  if (a.config == "default" && !a.warmup_given) a.adamw.warmup = 30;
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
  t.log_every = a.log_every;
  t.quiet = a.quiet;
  t.recompute = a.recompute;
  t.stop = &g_stop;
  // fp16 is the task's program (fp16 compute, loss scaling); its matrix
  // products are the plan's fp32 ones on fp16-rounded operands.
  t.precision = a.precision == "bf16" ? CompileOptions::MatmulPrecision::bf16 : CompileOptions::MatmulPrecision::fp32;
  return t;
}

void run_llama(Args& a) {
  auto preset = llm::llama_preset(a.config);
  llm::LlamaConfig cfg;
  TensorMap weights;
  std::filesystem::path resume_ckpt = std::filesystem::path(a.out) / "checkpoint.bin";
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
  std::fflush(stdout);
  llm::TrainLog log = llm::train(task, t, weights);
  std::printf("%s", llm::efficiency_report(task, t, log).c_str());
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
  if (a.precision == "fp16") throw Error("train: --precision fp16 is for Llama configs; seed-layer takes fp32 or bf16");
  llm::TrainTask task = llm::seed_layer_task(a.seed_given ? uint32_t(a.seed) : 42);
  TensorMap weights = task.init_weights;
  llm::TrainOptions t = train_options(a);
  t.eval_batches = 1;  // one fixed batch
  std::printf("seed layer: dim 768, hidden 2048, 12 heads, seq 512, MSE, %d thread%s\n", kernels::num_threads(),
              kernels::num_threads() == 1 ? "" : "s");
  std::fflush(stdout);
  llm::TrainLog log = llm::train(task, t, weights);
  std::printf("%s", llm::efficiency_report(task, t, log).c_str());
}

}  // namespace

void add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a Llama-family model (or the second seed's layer) on a CPU");
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
  cmd->add_option("--beta2", a.adamw.beta2, "AdamW beta2");
  cmd->add_option("--grad-clip", a.adamw.grad_clip, "clip the global gradient norm (0 = off)");
  cmd->add_option("--eval-every", a.eval_every, "validation loss every N steps");
  cmd->add_option("--eval-batches", a.eval_batches, "batches per validation")->check(CLI::Range(1, 100000));
  cmd->add_option("--save-every", a.save_every, "checkpoint every N steps (always at the end and on Ctrl-C)");
  cmd->add_option("--checkpoint-version", a.checkpoint_version, "llama2.c format: 0 (legacy, run.c) or 1")->check(CLI::IsMember({0, 1}));
  static CLI::Option* cmd_seed = cmd->add_option("--seed", a.seed, "weights and data order (seed-layer: srand48 seed, default 42)");
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
  cmd->add_option("--emit-mil", a.emit_mil, "write the training program (loss and derived gradients) as MIL and exit");
  cmd->callback([cmd] {
    if (a.threads > 0) kernels::set_num_threads(a.threads);
    a.seed_given = cmd_seed->count() > 0;
    a.lr_given = cmd->count("--lr") > 0;
    a.warmup_given = cmd->count("--warmup") > 0;
    const bool seed_layer = a.config == "seed-layer";
    apply_defaults(a, seed_layer);
    if (a.resume && a.out.empty()) throw Error("train: --resume needs --out DIR (the run to continue)");
    if (a.resume && !a.init.empty()) throw Error("train: --resume and --init exclude each other");
    // A new run never replaces an earlier run's checkpoint unless asked to.
    if (!a.resume && !a.overwrite && !a.out.empty() && std::filesystem::exists(std::filesystem::path(a.out) / "checkpoint.bin"))
      throw Error("train: " + a.out + " already holds a run (checkpoint.bin): continue it with --resume, or replace it with --overwrite");
    std::signal(SIGINT, on_sigint);
    if (seed_layer) run_seed_layer(a);
    else run_llama(a);
  });
}

}  // namespace milrt::cli
