// AdamW for the Llama trainer, as llama2.c's train.py configures PyTorch:
// global-norm gradient clipping, bias-corrected AdamW with decoupled weight
// decay on matrices only (dim >= 2; RMSNorm gains are not decayed), and a
// linear-warmup + cosine learning-rate schedule.
#pragma once
#include <cstdint>

#include "llm/checkpoint.h"
#include "milrt/reference.h"

namespace milrt::llm {

struct AdamWConfig {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double grad_clip = 1.0;  // max global L2 norm of the gradients; 0 disables clipping
  int64_t warmup = 100, total_steps = 1000;
  double min_lr_ratio = 0.1;
  void validate() const;   // throws Error naming the bad field
};

// The rate of update number `step` (0-based: the updates already taken).
// Warmup: lr·(step+1)/warmup while step < warmup, so the first update is not
// wasted at 0 and update warmup-1 reaches lr. Then cosine from lr at
// step == warmup down to min_lr_ratio·lr at step == total_steps, and that
// minimum afterwards.
double learning_rate(const AdamWConfig& c, int64_t step);

class AdamW {
 public:
  // Moments start at zero for every tensor of `params` (fp32 only).
  AdamW(const AdamWConfig& cfg, const TensorMap& params);

  // One update of `params` in place from `grads` (the same names, shapes and
  // fp32). Returns the gradients' global L2 norm before clipping. A
  // non-finite norm throws Error and leaves everything unchanged.
  double step(TensorMap& params, const TensorMap& grads);

  int64_t steps_taken() const { return step_; }
  const AdamWConfig& config() const { return cfg_; }
  // Copies of the moments and the step (extra left empty for the trainer).
  TrainState state() const;
  // Takes the moments and step of `s`, which must match the parameters.
  void restore(const TrainState& s);

 private:
  void check_same(const TensorMap& t, const char* what) const;

  AdamWConfig cfg_;
  int64_t step_ = 0;
  TensorMap m_, v_;
};

}  // namespace milrt::llm
