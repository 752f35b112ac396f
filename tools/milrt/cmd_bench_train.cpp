// milrt bench train: median milliseconds per training step of a config on
// synthetic tokens, the optimizer's time spread over --accum micro-steps (as
// ../shared/peers/pytorch_llama_step.py measures PyTorch).
#include <cstdio>
#include <fmt/format.h>

#include "commands.h"
#include "kernels/threads.h"
#include "llm/checkpoint.h"
#include "llm/distributed.h"
#include "llm/train_tasks.h"
#include "milrt/error.h"

namespace milrt::cli {

void add_bench_train(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("train", "Median ms per training step (forward + backward + optimizer / accum)");
  static std::string config = "stories15m";
  static int64_t steps = 3, accum = 10, batch = 1, seq = 0;
  static int threads = 0, zero = 0;
  static bool json = false, comm_overlap = true;
  static double bucket_mb = 4;
  static std::string precision = "fp32";
  cmd->add_option("--config", config, "stories15m | stories110m | stories15m-gqa | tiny | default | seed-layer");
  cmd->add_option("--steps", steps, "timed optimizer steps (default 3)")->check(CLI::Range(1, 100000));
  cmd->add_option("--accum", accum, "micro-steps per optimizer step (default 10)")->check(CLI::Range(1, 100000));
  cmd->add_option("--batch", batch, "sequences per micro-step (default 1)")->check(CLI::Range(1, 4096));
  cmd->add_option("--seq", seq, "tokens per sequence (default: the model's)");
  cmd->add_option("--threads", threads, "threads (default MILRT_THREADS or all cores)");
  cmd->add_flag("--json", json, "end with one JSON object of the figures");
  cmd->add_option("--precision", precision, "fp32, bf16 (matrix products) or fp16 (fp16 program, loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--zero", zero, "under mpirun: 1 shards the AdamW state over the ranks (ZeRO-1)")
      ->check(CLI::IsMember({0, 1}));
  add_comm_options(*cmd, comm_overlap, bucket_mb);
  cmd->footer("Under mpirun -np N: data parallel, each rank --threads threads; rank 0 prints the global tokens/s "
              "and the communication share.");
  add_profile_options(*cmd);
  auto run = [] {
    if (llm::dist::rank() != 0 && !std::freopen("/dev/null", "w", stdout)) throw Error("bench train: cannot silence rank output");
    if (threads > 0) kernels::set_num_threads(threads);
    llm::TrainTask task;
    TensorMap weights;
    int64_t tokens = 0;
    if (config == "seed-layer") {
      if (precision == "fp16") throw Error("bench train: --precision fp16 is for Llama configs, not seed-layer");
      task = llm::seed_layer_task();
      weights = task.init_weights;
    } else {
      auto cfg = llm::llama_preset(config);
      if (!cfg) throw Error("bench train: unknown --config '" + config + "'");
      llm::LlamaTaskOptions o;
      o.batch = batch;
      o.seq = seq;
      o.synthetic = true;
      o.compute = precision == "fp16" ? DType::FP16 : DType::FP32;
      task = llm::llama_task(*cfg, nullptr, o);
      weights = llm::init_llama_weights(*cfg, 1).tensors;
      tokens = task.tokens_per_microstep;
    }
    llm::TrainOptions t;
    t.steps = steps + 1;  // the first step warms caches and per-thread scratch
    t.accum = accum;
    t.eval_batches = 1;
    t.profile = profile_flags().on();
    t.trace = !profile_flags().trace.empty();
    t.precision = precision == "bf16" ? CompileOptions::MatmulPrecision::bf16 : CompileOptions::MatmulPrecision::fp32;
    t.peak_gflops = profile_peak_gflops(precision == "bf16");
    t.zero = zero;
    t.comm_overlap = comm_overlap;
    t.bucket_mb = bucket_mb;
    llm::TrainLog log = llm::train(task, t, weights);
    const double step_ms = log.ms_fwd_bwd + log.ms_data + log.ms_optimizer / double(accum);
    const double gflops = task.flops_per_microstep / (step_ms / 1000) * 1e-9;
    std::printf("%s%s", llm::efficiency_report(task, t, log).c_str(), llm::distributed_report(task, t, log).c_str());
    report_train_profile(log);
    std::printf("%s: %.1f ms/step (forward+backward %.1f, optimizer %.1f once per %lld steps), %.1f GFLOP/s = %.1f%% of "
                "the measured %s peak %.0f GFLOP/s, %d thread%s\n",
                config.c_str(), step_ms, log.ms_fwd_bwd, log.ms_optimizer, (long long)accum, gflops,
                100 * gflops / log.peak_gflops, log.peak_kind, log.peak_gflops, log.threads, log.threads == 1 ? "" : "s");
    // The whole optimizer step (every rank's micro-batches, communication
    // included), median wall time: what data parallelism is judged by.
    const int world = log.world_size;
    const double global_tokens = double(tokens) * double(accum) * double(world);
    const double global_tok_s = log.ms_step > 0 ? global_tokens / (log.ms_step / 1000) : 0;
    const double comm_share = log.ms_step > 0 ? (log.ms_allreduce + log.ms_wait) / log.ms_step : 0;
    if (world > 1) {  // one process: the line above says it all
      std::printf("global: %d rank%s x %d thread%s, %lld tokens per optimizer step (%d x accum %lld x %lld), %.1f ms per "
                  "optimizer step (median), %.0f tokens/s; communication %.1f ms/step (%s %.1f + waiting %.1f) = %.1f%%%s%s\n",
                  world, world == 1 ? "" : "s", log.threads, log.threads == 1 ? "" : "s", (long long)global_tokens, world,
                  (long long)accum, (long long)tokens, log.ms_step, global_tok_s, log.ms_allreduce + log.ms_wait,
                  log.zero ? "reduce-scatter+all-gather" : "all-reduce", log.ms_allreduce, log.ms_wait, 100 * comm_share,
                  log.zero ? ", ZeRO-1" : "", log.comm_overlap ? "; the all-reduce overlaps the backward pass" : "");
    }
    if (json)
      std::printf("{\"config\": \"%s\", \"threads\": %d, \"accum\": %lld, \"tokens_per_step\": %lld, \"ms_per_step\": %.3f, "
                  "\"fwd_bwd_ms\": %.3f, \"fwd_ms\": %.3f, \"optimizer_ms\": %.3f, \"data_ms\": %.3f, \"gflops\": %.2f, "
                  "\"peak_gflops\": %.2f, \"precision\": \"%s\", \"ranks\": %d, \"optimizer_step_ms\": %.3f, "
                  "\"global_tokens_per_s\": %.1f, \"comm_ms\": %.3f, \"comm_share\": %.4f, \"zero\": %d}\n",
                  config.c_str(), log.threads, (long long)accum, (long long)tokens, step_ms, log.ms_fwd_bwd, log.ms_fwd,
                  log.ms_optimizer, log.ms_data, gflops, log.peak_gflops, precision.c_str(), world, log.ms_step,
                  global_tok_s, log.ms_allreduce + log.ms_wait, comm_share, log.zero);
  };
  cmd->callback([run] { run_as_rank(run); });
}

}  // namespace milrt::cli
