// The training loop: a loss program differentiated once, compiled once, run
// every micro-step on bound memory; gradients accumulated over `accum`
// micro-steps; AdamW on fp32 master weights; periodic evaluation,
// checkpoints and a report.
//
// What is trained is a TrainTask: a MIL program with a scalar "loss" output
// whose inputs are data (tokens, targets, ...) and weights. Weights are plan
// inputs, bound to the master copy, so nothing recompiles when they change.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "llm/llama_config.h"
#include "llm/optimizer.h"
#include "milrt/ir.h"
#include "milrt/plan.h"
#include "milrt/reference.h"
#include "runtime/profile_report.h"

namespace milrt::llm {

struct TrainTask {
  std::string name;                  // for logs ("stories15m", "seed-layer")
  Program program;                   // function "main": data inputs + weights -> "loss"
  std::vector<WeightSpec> weights;   // the inputs to train, in checkpoint order
  TensorMap init_weights;            // fp32 starting values (all of `weights`)
  // Fills the data inputs (every non-weight input, at its declared shape and
  // dtype) with the next training or validation batch.
  std::function<void(TensorMap& data, bool validation)> next_batch;
  // Called before each evaluation, so every evaluation sees the same
  // validation batches (may be empty).
  std::function<void()> begin_validation;
  // Data position for checkpoints (the sampler's state), and its restore.
  std::function<std::vector<uint8_t>()> save_data_state;
  std::function<void(const std::vector<uint8_t>&)> restore_data_state;
  double flops_per_microstep = 0;    // model FLOPs of forward + backward for one micro-batch
  int64_t tokens_per_microstep = 0;  // 0 when the task has no tokens
  // Saves the weights as a checkpoint (atomically); empty = the task has no
  // checkpoint format (then only the training state is saved).
  std::function<void(const std::string& path, const TensorMap& weights)> save_weights;
};

struct TrainLog;

struct TrainOptions {
  int64_t steps = 100;               // optimizer steps
  int64_t accum = 1;                 // micro-steps per optimizer step
  AdamWConfig adamw;
  int64_t eval_every = 0;            // 0: only at the end
  int64_t eval_batches = 4;
  int64_t save_every = 0;            // 0: only at the end (and on Ctrl-C)
  std::string out_dir;               // run directory; "" = no files
  bool resume = false;               // continue from out_dir's checkpoint + state
  bool recompute = false;            // GradOptions::recompute: less memory, a little more arithmetic
  // bf16: matrix products with bf16 operands and fp32 accumulation (weights,
  // gradients, optimizer and everything else stay fp32: the master copy).
  CompileOptions::MatmulPrecision precision = CompileOptions::MatmulPrecision::fp32;
  // fp16 training is chosen by the task: a program with an fp32 scalar input
  // "loss_scale" (LlamaTaskOptions::compute = FP16) computes in fp16 on fp32
  // master weights, and its "loss" output is the loss times that input. The
  // trainer then scales dynamically: it feeds the scale, divides the loss and
  // the gradients by it, skips the optimizer step and halves the scale when a
  // gradient is not finite, and doubles it after loss_scale_window good steps
  // in a row. The scale and the run of good steps are part of the training
  // state, so a resumed run continues exactly.
  // 2^15: the tiny models' logit gradients, scale * (p - onehot) / (B*T), stay
  // far below fp16's 65504 while the smallest useful ones leave its subnormal
  // range; one step above that costs a single skipped step.
  double loss_scale = 32768;
  int64_t loss_scale_window = 200;
  const std::atomic<bool>* stop = nullptr;  // set by SIGINT: save and return after the current step
  // Called once both plans are compiled (the step plan: loss and gradients;
  // the eval plan: loss), with the time compiling took.
  std::function<void(const Plan& step, const Plan& eval, double compile_ms)> on_compiled;
  // Called after every save of the run directory (out_dir set), with the log
  // so far: the place to keep run-level records beside the checkpoint.
  std::function<void(int64_t step, const TrainLog& log)> on_save;
  // Called after every optimizer step with the log so far, whose last row is
  // that step's (val_loss NaN when the step did not evaluate) and whose
  // last_step holds its phases: a caller's progress display (train() prints
  // nothing itself; llm/train_progress.h prints the CLI's lines). Called on
  // every rank of a data-parallel run. An exception it throws ends train()
  // there and propagates.
  std::function<void(int64_t step, const TrainLog& log)> on_step;
  // Profiling (--profile, --trace): both plans time every step, from the
  // second optimizer step on (the first grows caches and scratch) when more
  // than one runs; TrainLog gets the split per kernel family and the plans'
  // profiles. `trace` also keeps every step's run and the trainer's phases.
  bool profile = false, trace = false;
  // The machine's arithmetic ceiling for the reports' utilisation figures
  // (kernels::measure_peak_gflops of the kind the step's products use, fp32
  // FMA or bf16 dot, on the training threads), measured by the caller when it
  // wants those figures: about 0.6 s, so train() does not pay it on every
  // call. 0 leaves utilisation out of the reports.
  double peak_gflops = 0;
  // The weights are stable plan inputs (CompileOptions::stable_inputs): the
  // GEMMs convert and pack each weight once per optimizer step, not once per
  // micro-step and use. false packs on every use (the same results, slower:
  // for checks).
  bool stable_weights = true;
  // Data-parallel runs: 1 shards the AdamW state over the ranks (ZeRO-1):
  // the gradients are reduce-scattered over one flat, padded array in the
  // task's weight order, each rank updates its 1/N of the weights with its
  // 1/N of the moments (clipping by the global norm from an all-reduce of the
  // parts' sums of squares), and the weights are all-gathered. Checkpoints
  // gather the moments to rank 0 first, so train_state.bin is the same file
  // an unsharded run writes (a run resumes with or without --zero). 0, or a
  // world of one process: the unsharded optimizer (a no-op there).
  int zero = 0;
  // Data-parallel runs without ZeRO: each bucket's all-reduce starts as soon
  // as the last micro-step's backward pass has made its gradients final
  // (Plan::set_step_hook), overlapped with the rest of that pass, in the
  // order the plan finalises them (as rank 0 saw it in the first step).
  // false starts them all after the backward pass, in that same order: the
  // same sums, bit for bit (for comparisons).
  bool comm_overlap = true;
  // The all-reduce's bucket size: gradients smaller than half of it are
  // packed together up to this many MiB (2^20 bytes, as PyTorch DDP's
  // bucket_cap_mb); larger ones are summed alone.
  double bucket_mb = 4;
};

// Per-step figures, and the split of the time a report shows.
struct TrainLog {
  // val_loss NaN when not evaluated; tok_s: tokens of all ranks per second
  // of the step; comm_ms: waiting for the slowest rank plus moving the
  // gradients (and ZeRO-1's weights) in the step, 0 for one process (NaN in
  // rows read back from a losses.csv written before these columns existed).
  struct Row { int64_t step; double loss, val_loss, lr, grad_norm, ms, tok_s = NAN, comm_ms = NAN; };
  std::vector<Row> rows;
  double ms_fwd_bwd = 0, ms_fwd = 0, ms_optimizer = 0, ms_data = 0;  // medians per micro-step (optimizer per step)
  // ms_fwd is the time from a step run's start until its loss is final
  // (true), or, when the step plan cannot tell, the eval plan's run time.
  bool ms_fwd_in_step = false;
  double ms_accumulate = 0;          // median time of zeroing the gradient sums, once per optimizer step (accum > 1; the step plan adds into them)
  // This call's totals: compiling both plans, the training steps (evaluations
  // excluded), and everything from entering train() to the last save.
  double compile_ms = 0, train_ms = 0, wall_ms = 0;
  int64_t micro_steps = 0;           // run in this call
  double peak_gflops = 0;            // measured in the same run (all threads), of the kind below
  const char* peak_kind = "fp32 FMA";  // "bf16 dot" for --precision bf16
  int threads = 1;
  int64_t first_step = 0;            // > 0 after a resume
  // The last optimizer step's phases (what on_step reports): ms per
  // micro-step of the forward and backward plan, the zeroing of the gradient
  // sums, the optimizer (its step spread over the micro-steps) and the data;
  // and, in data-parallel runs, the medians so far of the wait and the
  // all-reduce per optimizer step.
  struct StepPhases { double fwd_bwd = 0, accumulate = 0, optimizer = 0, data = 0, wait = 0, allreduce = 0; };
  StepPhases last_step;
  // Loss scaling (fp16 tasks): steps whose gradients were not finite, so the
  // optimizer skipped them (their row's grad_norm is NaN), in this call; and
  // the scale now (after each step; 1 without scaling).
  std::vector<int64_t> skipped_steps;
  double loss_scale = 1;
  bool interrupted = false;
  // TrainOptions::profile: ms per optimizer step by family, largest first:
  // the step plan's kernel families (kernel_family(): matmul, attention,
  // norms, elementwise, conversions/packing, other) and the trainer's own
  // optimizer, accumulate (accum > 1) and data; over the profiled steps.
  std::vector<std::pair<std::string, double>> family_ms;
  int64_t profiled_steps = 0;
  Plan::Profile step_profile, eval_profile;
  std::vector<TraceSpan> phase_spans;  // TrainOptions::trace: data, accumulate, optimizer, eval
  // Data-parallel runs (src/llm/distributed.h; 1 rank otherwise): the ranks,
  // the gradient all-reduce's median ms per optimizer step and its total in
  // this call (with comm_overlap: what remains of it after the backward
  // pass, the part not hidden behind computation), the same for the wait before it (a barrier: the slowest rank's
  // lead, load imbalance rather than communication), the bytes and buckets it
  // reduces per step, and the checksum of the final weights, checked equal on
  // every rank.
  int world_size = 1;
  double ms_allreduce = 0, allreduce_ms = 0, ms_wait = 0, wait_ms = 0;
  int64_t allreduce_bytes = 0, allreduce_buckets = 0;
  uint64_t weights_checksum = 0;
  // ZeRO-1 (TrainOptions::zero in a data-parallel run): 1, and then
  // ms_allreduce/allreduce_ms are the reduce-scatter plus the all-gather.
  int zero = 0;
  bool comm_overlap = false;  // the all-reduce overlapped the backward pass
  int64_t buckets_started_early = 0;  // the last step's buckets started while kernel steps of its backward pass remained
  // This rank's AdamW moments (m and v) in bytes: all of them, or its part
  // under ZeRO-1.
  int64_t optimizer_state_bytes = 0;
  // Median wall ms per optimizer step (communication included).
  double ms_step = 0;
};

// Runs the loop; returns what it measured.
//
// Under mpirun (llm::dist::init() called first, world size N > 1) the loop is
// data-parallel: every rank runs the same steps on its own micro-batches and
// the gradients are averaged over ranks before the (identical) AdamW step.
// The ranks share one data stream: every rank draws every micro-batch of the
// task's sampler and keeps the r-th of each N in a row, so N ranks with
// --accum A see, per optimizer step, exactly the micro-batches one process
// with --accum N*A sees (validation batches are split the same way). The
// losses are global means; rank 0 alone writes out_dir; the weights start
// from rank 0's and are checked equal on every rank at the end.
//
// Files in out_dir: checkpoint.bin
// (the task's format), train_state.bin, losses.csv, loss.svg, report.txt.
TrainLog train(TrainTask& task, const TrainOptions& opt, TensorMap& weights);

// The efficiency report (the seed's): ms/step split into forward, backward,
// optimizer and data; useful TFLOP/s; fraction of the measured peak.
std::string efficiency_report(const TrainTask& task, const TrainOptions& opt, const TrainLog& log);

// Data-parallel runs: ranks, global batch and tokens/s, time in the gradient
// all-reduce, and the final weights' cross-rank check ("" for one process).
std::string distributed_report(const TrainTask& task, const TrainOptions& opt, const TrainLog& log);

}  // namespace milrt::llm
