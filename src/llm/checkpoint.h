// Llama weights on disk: llama2.c's checkpoints (legacy version 0 and
// version 1 "ak42"), their random initialization, and the training state
// (AdamW moments, step, the trainer's own bytes) kept beside a checkpoint,
// and a plain file of named fp32 tensors for other tasks' weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llm/llama_config.h"
#include "milrt/reference.h"
#include "milrt/tensor.h"

namespace milrt::llm {

// fp32 tensors named and shaped as llama_weight_specs(cfg), no others.
struct LlamaWeights {
  LlamaConfig cfg;
  TensorMap tensors;
};

// Reads a llama2.c checkpoint, version 0 (7 int32 header) or 1 (magic "ak42",
// 256-byte header), told apart by the magic. The header is checked for
// plausible sizes and the file size against it before anything is allocated;
// every error names the path and what disagrees.
LlamaWeights load_llama2c_checkpoint(const std::string& path);

// Writes `w` (validated against its cfg first) as version 0 or 1, atomically.
// Version 0's two RoPE tables are written as zeros: every reader recomputes
// RoPE (llama2.c's run.c skips them, and so does the loader here), and zeros
// are what ../shared/peers/make_llama2c_checkpoint.py writes, so its files
// re-save byte-identically.
void save_llama2c_checkpoint(const std::string& path, const LlamaWeights& w, int version);

// llama2.c train.py's initialization, from `seed` alone: every matrix normal
// with std 0.02, the residual output projections (wo, w2) with std
// 0.02/sqrt(2·layers), RMSNorm gains 1. (train.py scales w3 instead of w2,
// although w2 is the FFN's output projection; this follows GPT-2's intent.)
// Each tensor has its own stream derived from (seed, name), so a tensor's
// values do not depend on which others exist.
LlamaWeights init_llama_weights(const LlamaConfig& cfg, uint64_t seed);

// Throws Error unless `w.tensors` holds exactly the specs of w.cfg, as fp32.
void check_llama_weights(const LlamaWeights& w);

// The training state written beside a checkpoint: AdamW's moments (m and v
// with the same names and shapes), the step, and bytes only the trainer reads
// (data sampler position, RNG, its config text).
struct TrainState {
  int64_t step = 0;
  TensorMap m, v;
  std::vector<uint8_t> extra;
};

// Format (little-endian): "MILRTTS\0", uint32 version 1, int64 step,
// uint64 tensor count; per tensor: uint32 name length, name, uint32 rank,
// int64 dims, fp32 m, fp32 v; then uint64 extra length and the extra bytes,
// and nothing after. Written atomically; every count is checked against the
// bytes left before it is allocated.
void save_train_state(const std::string& path, const TrainState& s);
TrainState load_train_state(const std::string& path);

// Named fp32 tensors: the weights of tasks without a llama2.c format (the
// seed layer's checkpoint.bin). Format (little-endian): "MILRTWT\0", uint32
// version 1, uint64 tensor count; per tensor, in name order: uint32 name
// length, name, uint32 rank, int64 dims, fp32 data; nothing after. Written
// atomically; read with the train state's checks (counts against the bytes
// left before allocating, duplicates and trailing bytes refused).
void save_tensor_file(const std::string& path, const TensorMap& tensors);
TensorMap load_tensor_file(const std::string& path);
// Whether `path` starts with the tensor file's magic (false if unreadable).
bool is_tensor_file(const std::string& path);

}  // namespace milrt::llm
