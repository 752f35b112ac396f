#include "llm/generator.h"

#include "llm/llama_decoder.h"
#include "milrt/error.h"

namespace milrt::llm {

Generator::Generator(LlamaWeights weights) : w_(std::move(weights)) {
  check_llama_weights(w_);
  logits_.assign(size_t(w_.cfg.vocab), 0.0f);
  decode_ = compile(build_llama_decoder(w_.cfg, 1));
  bind_common(decode_);
  decode_.bind("tokens", &token_);
}

void Generator::bind_common(Plan& p) {
  for (auto& [name, t] : w_.tensors) p.bind(name, t);
  p.bind("pos", &pos_in_);
  p.bind("logits", logits_.data());
}

void Generator::check_token(int32_t t) const {
  if (t < 0 || t >= w_.cfg.vocab)
    throw Error("generate: token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                std::to_string(w_.cfg.vocab) + ")");
}

void Generator::reset() {
  decode_.reset_state();
  pos_ = 0;
}

Generator::Prefill& Generator::prefill_plan(int64_t T) {
  auto it = prefill_.find(T);
  if (it == prefill_.end()) {
    it = prefill_.emplace(T, Prefill{compile(build_llama_decoder(w_.cfg, T)), std::vector<int32_t>(size_t(T))}).first;
    bind_common(it->second.plan);
    it->second.plan.bind("tokens", it->second.tokens.data());
  }
  return it->second;
}

void Generator::prepare(int64_t tokens) {
  if (tokens > 1 && tokens <= w_.cfg.seq) prefill_plan(tokens);
}

const float* Generator::prefill(const std::vector<int32_t>& ids) {
  const int64_t T = int64_t(ids.size());
  if (T == 0) throw Error("generate: the prompt has no tokens (it needs at least BOS)");
  if (T > w_.cfg.seq)
    throw Error("generate: the prompt has " + std::to_string(T) + " tokens, more than the model's seq_len " +
                std::to_string(w_.cfg.seq));
  for (int32_t t : ids) check_token(t);
  reset();
  if (T == 1) return decode(ids[0]);
  Prefill& pf = prefill_plan(T);
  std::copy(ids.begin(), ids.end(), pf.tokens.begin());
  pos_in_ = 0;
  // Cache rows beyond T are masked out and never read, but zeroing them keeps
  // the decode plan's cache identical to one built token by token.
  pf.plan.reset_state();
  pf.plan.run();
  for (const std::string& n : llama_cache_names(w_.cfg)) decode_.set_state(n, pf.plan.state(n));
  pos_ = T;
  return logits_.data();
}

const float* Generator::decode(int32_t token) {
  check_token(token);
  if (pos_ >= w_.cfg.seq)
    throw Error("generate: the context is full (seq_len " + std::to_string(w_.cfg.seq) + " tokens)");
  token_ = token;
  pos_in_ = int32_t(pos_);
  decode_.run();
  ++pos_;
  return logits_.data();
}

}  // namespace milrt::llm
