// The second seed's training loop (train_large.m) through the Neural Engine
// backend: `milrt train --config seed-layer --engine ane-sim` (or `ane`).
//
// Weights reach the kernels in one of two ways (AneTrainOptions::
// dynamic_weights). Dynamic (the default): the five weight-bearing kernels'
// twins of llm/seed_dynamic_weights.h take the weights in their one input,
// beside the activations; every kernel compiles once per device (6 compiles
// per run) and each optimizer step writes the current weights, rounded to
// fp16, into the packed inputs. Constant, as the seed does per batch: the
// five kernels are rebuilt with the weights as constants and compiled every
// optimizer step (6 + 5 per further step; the engine fixes constant weights
// at compile time), and the weight-free sdpa_bwd2 once per device. Both give
// the same bits on the simulated device. Per micro-step:
//
//   device  sdpa_fwd_taps(x) -> o, Q, K, V, attn, xnorm
//   CPU     x2 = x + o
//   device  ffn_fwd_taps(x2) -> ffn, h1, h3, gate, x2norm
//   CPU     y = x2 + ffn, loss = mean((y - target)^2), dy = 2 (y - target) / n
//   device  ffn_bwd(dy, h1, h3) -> dx_ffn, dh1, dh3
//   CPU     dW2 dW1 dW3 (worker) | RMSNorm2 backward: dx2 = rms_bwd(dx_ffn) + dy
//   CPU     dWo (worker)
//   device  sdpa_bwd1(Q, K, V, dx2) -> dV, probs, dp;  sdpa_bwd2(probs, dp, Q, K) -> dQ, dK
//   CPU     dWq dWk dWv (worker)
//   device  qkv_bwd(dQ, dK, dV) -> dx_attn
//   CPU     RMSNorm1 backward (its gain's gradient; x is data, so dx ends there)
//
// then the gradients averaged over the micro-steps and one AdamW step on the
// fp32 master weights (llm/optimizer.h; the seed's recipe is Adam 0.9/0.999/
// 1e-8 at a constant 1e-3). The weight gradients run on one CPU worker
// thread, in the order above (the seed's serial dispatch queue), while the
// main thread drives the device: each gradient sum is written by one task
// only and the matrix products are bit-identical for any thread count, so
// results do not depend on the overlap.
//
// Every kernel goes through ane::partition (one engine program, no host
// step) and an ane::Executor on the given device. When the next optimizer
// step's compiles would pass the device's budget, the trainer does the
// seed's checkpoint-and-restart in process: it unloads every program and
// opens a fresh device (see restart_device in the .cpp for the macOS path,
// where the budget is per process and the restart is an exec()). With
// dynamic weights and all six kernels resident, that never happens.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ane/device.h"
#include "llm/optimizer.h"
#include "llm/seed_kernels.h"
#include "milrt/reference.h"

namespace milrt::llm {

// Opens a device with its whole compile budget: a new ane::SimDevice for
// ane-sim. Called once at the start and once per restart.
using AneDeviceFactory = std::function<std::shared_ptr<milrt_ane_device>()>;

// Counters of the whole run (restarts included).
struct AneTrainStats {
  int64_t compiles = 0;   // kernel compiles asked of the devices
  int64_t evictions = 0;  // kernels unloaded to stay within max_resident
  int64_t restarts = 0;   // fresh devices opened because the budget ran out
};

struct AneTrainRow {
  int64_t step = 0;    // 1-based optimizer step
  double loss = 0;     // mean over the step's micro-steps, before its update
  double grad_norm = 0;  // global L2 norm of the averaged, unscaled gradients (AdamW::step's)
  double ms = 0;       // the whole step: lowering, compiles, micro-steps, AdamW
  double lower_ms = 0;   // building and partitioning the weight-bearing kernels (dynamic weights: on step 1
                         // only) and writing the weights into their packed inputs
  double device_ms = 0;  // inside the executors: packing, compiles, evaluation
  double cpu_ms = 0;     // residuals, loss, RMSNorm backward, waiting for dW, AdamW
  AneTrainStats totals;  // after this step
};

struct AneTrainOptions {
  int64_t steps = 10;   // optimizer steps
  int64_t accum = 1;    // micro-steps per optimizer step (the seed: 100, on its one fixed batch)
  AdamWConfig adamw;    // e.g. seed_adamw()
  size_t compile_budget = 119;  // compiles one device allows (the chip: about 119 per process)
  size_t max_resident = 6;      // kernels loaded at once; the seed keeps all six
  // dy is multiplied by this before the backward kernels round it to fp16,
  // and the gradients divided by it. 1 is the seed's numerics; at its size
  // (seq·dim = 393216) dy = 2(y − target)/n is about 5e-7, below fp16's
  // smallest normal (6.1e-5), so the backward pass starts with 3–4
  // significant bits. The backward pass is linear in dy, so a power of two
  // here changes nothing but that rounding; an overflow is an Error.
  double loss_scale = 1;
  // Weights packed into the kernels' inputs, each kernel compiled once per
  // device (seed_dynamic_weights.h), instead of constants recompiled every
  // step. Same numerics on the simulator; on the chip, whether its compiler
  // accepts matmul on weights sliced from the input at these sizes is
  // unverified (the seed's own attention matmuls take two runtime operands).
  bool dynamic_weights = true;
  const std::atomic<bool>* stop = nullptr;  // set: return after the current step
  std::function<void(const AneTrainRow&)> on_step;
};

struct AneTrainLog {
  std::vector<AneTrainRow> rows;
  AneTrainStats totals;
  double wall_ms = 0;
  bool interrupted = false;
};

// train_large.m's optimizer: Adam b1 0.9, b2 0.999, eps 1e-8, constant lr
// 1e-3, no weight decay, no clipping, for `steps` updates.
AdamWConfig seed_adamw(int64_t steps);

// Trains `weights` (fp32, seed_layer_weight_specs names: rms_att wq wk wv wo
// rms_ffn w1 w2 w3) in place on `x` and `target` (fp32 [seq, dim], as
// seed_layer_synthetic_inputs makes them). cfg.seq must be a multiple of 32
// (the engine's row alignment). Throws Error in one line for bad arguments,
// a device failure, or a step that needs more compiles than a fresh device
// allows.
AneTrainLog train_seed_layer_ane(const SeedLayerConfig& cfg, const Tensor& x, const Tensor& target, TensorMap& weights,
                                 const AneTrainOptions& options, const AneDeviceFactory& open_device);

}  // namespace milrt::llm
