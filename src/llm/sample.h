// Text from a trained Llama: greedy or temperature/top-p sampling with the
// full-context logits program (each token recomputes the whole prefix; the
// KV-cache decoder belongs to generation). Used for the samples `milrt train`
// prints at the end of a run.
#pragma once
#include <cstdint>
#include <string>

#include "llm/llama_config.h"
#include "llm/tokenizer.h"
#include "milrt/reference.h"

namespace milrt::llm {

struct SampleOptions {
  std::string prompt;        // encoded with BOS; "" = BOS alone
  int64_t steps = 128;       // tokens to generate (stops at the model's seq_len or EOS/BOS)
  double temperature = 0;    // 0 = greedy
  double top_p = 0.9;        // nucleus sampling when temperature > 0 (1 = off)
  uint64_t seed = 1;
};

// The prompt followed by the generated text.
std::string sample_text(const LlamaConfig& cfg, const TensorMap& weights, const Tokenizer& tok, const SampleOptions& o);

// Picks a token from `logits` (n of them): argmax when temperature is 0, else
// softmax(logits / temperature) cut to the smallest set whose probability
// reaches top_p, drawn with `coin` in [0, 1).
int32_t pick_token(const float* logits, int64_t n, double temperature, double top_p, double coin);

// llama2.c's xorshift generator (run.c's random_f32): the next coin in
// [0, 1) from state `s`, so a seed gives the same coin stream as run.c.
float xorshift_coin(uint64_t& s);

}  // namespace milrt::llm
