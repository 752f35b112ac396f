// A plain fp64 Llama (llama2.c's model) and the second seed's transformer
// layer, written from the math with no milrt code: the oracle that the MIL
// model builders, their gradients and later generation are tested against.
//
// Weights are plain arrays keyed by llama2.c's names (the same names milrt's
// LlamaConfig gives them, spelled out here independently), row-major,
// matrices [out, in].
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace milrt::test::fp64 {

using Weights = std::map<std::string, std::vector<double>>;

struct LlamaShape {
  int64_t dim = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0;
  bool shared_classifier = true;
  double norm_eps = 1e-5, rope_theta = 10000.0;
};

// Logits [B, T, vocab] of every position for tokens [B, T] (row-major, each
// sequence starting at position 0, causal attention).
std::vector<double> llama_logits(const LlamaShape& s, const Weights& w, const std::vector<int32_t>& tokens,
                                 int64_t batch, int64_t seq);
// Mean cross-entropy of targets [B, T] under llama_logits.
double llama_loss(const LlamaShape& s, const Weights& w, const std::vector<int32_t>& tokens,
                  const std::vector<int32_t>& targets, int64_t batch, int64_t seq);

// The second seed's layer (train_large.m): RMSNorm, multi-head causal
// attention without rotary embeddings, residual, RMSNorm, SwiGLU, residual;
// loss = mean squared error against target. x and target are [seq, dim];
// weights rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3.
struct SeedShape {
  int64_t dim = 0, hidden = 0, heads = 0, seq = 0;
  double norm_eps = 1e-5;
};
std::vector<double> seed_layer_forward(const SeedShape& s, const Weights& w, const std::vector<double>& x);
double seed_layer_loss(const SeedShape& s, const Weights& w, const std::vector<double>& x,
                       const std::vector<double>& target);

}  // namespace milrt::test::fp64
