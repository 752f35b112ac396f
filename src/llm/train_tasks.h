// The two things `milrt train` trains: a Llama language model on a token
// stream, and the second seed's single transformer layer on its synthetic
// regression target.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "llm/llama_config.h"
#include "llm/seed_kernels.h"
#include "llm/tokenizer.h"
#include "llm/trainer.h"

namespace milrt::llm {

struct LlamaTaskOptions {
  int64_t batch = 8, seq = 0;        // seq 0 = cfg.seq
  std::string data;                  // "" = the embedded corpus
  double val_fraction = 0.1;
  uint64_t seed = 1;                 // data order
  int checkpoint_version = 0;        // llama2.c format written by save_weights
  bool synthetic = false;            // uniform random tokens instead of data (benchmarks; no tokenizer needed)
  // FP16: the fp16 loss program (LlamaProgramOptions::compute), which makes
  // train() scale the loss dynamically; weights and optimizer stay fp32.
  DType compute = DType::FP32;
};

// Loss program, data sampling and llama2.c checkpoints for `cfg`. The
// tokenizer's vocabulary must equal cfg.vocab (checked before any work); it
// may be null with o.synthetic.
TrainTask llama_task(const LlamaConfig& cfg, std::shared_ptr<const Tokenizer> tok, const LlamaTaskOptions& o);

// Model FLOPs of forward + backward for B sequences of T tokens: 6 per
// weight use (the classifier included, the embedding lookup not) plus the
// attention products (12 * layers * T² * dim per sequence, unmasked).
double llama_train_flops(const LlamaConfig& cfg, int64_t batch, int64_t seq);

// The second seed's experiment (train_large.m): one layer (by default dim
// 768, hidden 2048, 12 heads, seq 512), MSE against its synthetic target,
// from the seed's srand48 seed (42 in train_large.m). Its checkpoint.bin is a
// tensor file (save_tensor_file) of the weights. compute FP16: the fp16
// program of build_seed_layer_loss (loss-scaled; master weights stay fp32).
TrainTask seed_layer_task(const SeedLayerConfig& cfg = {}, uint32_t seed = 42, DType compute = DType::FP32);

// The seed layer's model FLOPs per micro-step, split as train_large.m prints
// them (its sum is the task's flops_per_microstep). The matrix products with
// weights count 2 FLOPs per multiply-add in each of forward, backward to the
// inputs and backward to the weights; attention's T x T products count in
// full (no causal saving), two in forward and four in backward.
struct SeedLayerFlops {
  double forward = 0, backward_dx = 0, backward_dw = 0, attention_backward = 0;
  double total() const { return forward + backward_dx + backward_dw + attention_backward; }
};
SeedLayerFlops seed_layer_flops(const SeedLayerConfig& cfg);

// The seed layer's weights from a tensor file (a seed-layer run's
// checkpoint.bin): exactly the tensors of seed_layer_weight_specs(cfg), or an
// Error naming the file and what differs.
TensorMap load_seed_layer_weights(const std::string& path, const SeedLayerConfig& cfg);

}  // namespace milrt::llm
