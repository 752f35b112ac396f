// The shape of a Llama-family transformer (llama2.c's conventions) and the
// names of its weights, shared by the model builder, checkpoints, the
// optimizer and the trainer.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "milrt/tensor.h"

namespace milrt::llm {

struct LlamaConfig {
  int64_t dim = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0, seq = 0;
  bool shared_classifier = true;  // classifier = token embedding (llama2.c: vocab_size > 0 in the header)
  double norm_eps = 1e-5;         // RMSNorm epsilon (llama2.c: 1e-5)
  double rope_theta = 10000.0;

  int64_t head_dim() const { return dim / heads; }
  int64_t kv_dim() const { return kv_heads * head_dim(); }
  int64_t param_count() const;    // every weight element (the classifier once when shared)
  // Throws Error with a one-line reason for sizes that cannot form a model
  // (zero/negative, dim not divisible by heads, heads not by kv_heads, odd head_dim).
  void validate() const;
  std::string str() const;        // "dim 288, hidden 768, layers 6, heads 6, kv_heads 6, vocab 32000, seq 256"
};

// Named presets: "stories15m", "stories110m", "stories15m-gqa", "tiny" (as
// ../shared/peers/make_llama2c_checkpoint.py) and "default" (the small model
// `make run` trains on the embedded corpus).
std::optional<LlamaConfig> llama_preset(const std::string& name);
std::vector<std::string> llama_preset_names();

// One weight: its name (a MIL identifier, used as the plan input name) and
// shape. Matrices are [out, in] as llama2.c stores them.
struct WeightSpec {
  std::string name;
  Shape shape;
};

// Every weight in llama2.c's checkpoint order:
//   tok_embeddings [vocab, dim]; per layer i: l{i}_rms_att [dim], l{i}_wq [dim, dim],
//   l{i}_wk [kv_dim, dim], l{i}_wv [kv_dim, dim], l{i}_wo [dim, dim], l{i}_rms_ffn [dim],
//   l{i}_w1 [hidden, dim], l{i}_w2 [dim, hidden], l{i}_w3 [hidden, dim];
//   rms_final [dim]; wcls [vocab, dim] only when !shared_classifier.
// (The checkpoint stores each kind for all layers together; checkpoint I/O maps.)
std::vector<WeightSpec> llama_weight_specs(const LlamaConfig& c);

}  // namespace milrt::llm
