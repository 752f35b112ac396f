// AdamW for the Llama trainer, as llama2.c's train.py configures PyTorch:
// global-norm gradient clipping, bias-corrected AdamW with decoupled weight
// decay on matrices only (dim >= 2; RMSNorm gains are not decayed), and a
// linear-warmup + cosine learning-rate schedule.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

// ZeRO-1 (`milrt train --zero 1` under mpirun): the weights and gradients as
// one flat fp32 array, tensor after tensor in the task's weight order, each
// tensor starting at a multiple of 16 floats (64 bytes, for the kernels), the
// whole padded to world * shard floats so every rank owns an equal part:
// rank r owns [r*shard, (r+1)*shard). The gaps hold no tensor and are never
// read as one.
struct FlatLayout {
  struct Entry {
    std::string name;
    Shape shape;
    int64_t offset = 0, numel = 0;  // in floats, from the start of the array
  };
  std::vector<Entry> entries;
  int64_t used = 0;                 // end of the last tensor
  int64_t shard = 0;                // floats per rank (a multiple of 16)
  int world = 1;
  int64_t size() const { return shard * int64_t(world); }

  // (name, shape) in order.
  static FlatLayout make(const std::vector<std::pair<std::string, Shape>>& tensors, int world);
};

// AdamW over rank `rank`'s part of a FlatLayout: the moments of that part
// only (shard floats each, 1/world of AdamW's), the same update, the same
// numbers as AdamW::step on those elements given the same global norm.
class ShardedAdamW {
 public:
  ShardedAdamW(const AdamWConfig& cfg, const FlatLayout& layout, int rank);

  // Sum of squares of the gradients of this part (its tensor elements).
  double sum_squares(const float* grad_shard) const;
  // One update of the part's weights from its gradients, clipped by the
  // global norm `norm` (sqrt of the sum over ranks of sum_squares). A
  // non-finite norm throws Error and leaves everything unchanged.
  void step(float* weight_shard, const float* grad_shard, double norm);

  int64_t steps_taken() const { return step_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  // Takes this part of a whole training state (AdamW::state()'s, or one
  // assembled from gathered parts with unflatten): every tensor of the
  // layout, fp32, same shapes.
  void restore(const TrainState& s);
  // The tensors of a whole flat array (layout.size() floats: every rank's
  // part gathered in rank order), e.g. the moments for a TrainState that
  // equals AdamW::state()'s.
  static TensorMap unflatten(const FlatLayout& layout, const float* all);

 private:
  struct Segment { int64_t begin, count; bool decay; };  // begin: within the shard
  AdamWConfig cfg_;
  FlatLayout layout_;
  int rank_ = 0;
  int64_t step_ = 0;
  std::vector<Segment> segments_;
  std::vector<float> m_, v_;
};

}  // namespace milrt::llm
