// Text generation from a Llama checkpoint with a KV cache: a decode plan (one
// token per run) compiled once, and prefill plans (a whole prompt per run)
// compiled once per distinct prompt length, all from build_llama_decoder and
// all binding the same weight memory (zero copy: plans read the checkpoint's
// tensors in place).
//
// The KV cache lives in plan state. Plan states cannot be bound to shared
// memory, so after a prefill the generator copies the prefill plan's caches
// into the decode plan (set_state): one copy of the cache per prompt, none
// per token. Decoding itself runs on bound buffers (token, position, logits)
// with no allocation per token.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "llm/checkpoint.h"
#include "milrt/plan.h"

namespace milrt::llm {

class Generator {
 public:
  // Validates the weights and compiles the decode plan.
  explicit Generator(LlamaWeights weights);
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  const LlamaConfig& config() const { return w_.cfg; }
  // The position the next token will take (tokens in the cache so far).
  int64_t position() const { return pos_; }

  // Empties the cache: the next token goes to position 0.
  void reset();
  // Compiles the prefill plan for prompts of `tokens` tokens now (prefill
  // otherwise does on first use), so that timing a prefill times no compile.
  void prepare(int64_t tokens);
  // Resets, then runs `ids` (1..seq tokens) from position 0 as one prefill
  // (a single token is a decode). Returns the last token's logits (vocab
  // floats, valid until the next call). Throws Error for an empty prompt, a
  // prompt longer than seq, or a token outside [0, vocab).
  const float* prefill(const std::vector<int32_t>& ids);
  // Runs one token at position(); returns its logits as prefill does.
  // Throws Error when the cache is full or for a token outside [0, vocab).
  const float* decode(int32_t token);

 private:
  struct Prefill {
    Plan plan;
    std::vector<int32_t> tokens;
  };
  void check_token(int32_t t) const;
  Prefill& prefill_plan(int64_t tokens);
  void bind_common(Plan& p);

  LlamaWeights w_;
  Plan decode_;
  std::map<int64_t, Prefill> prefill_;  // by prompt length
  int32_t token_ = 0, pos_in_ = 0;     // the plans' "tokens" (decode) and "pos" inputs
  int64_t pos_ = 0;
  std::vector<float> logits_;
};

}  // namespace milrt::llm
