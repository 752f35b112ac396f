#include "llm/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "llm/llama_builder.h"
#include "milrt/error.h"
#include "milrt/plan.h"

namespace milrt::llm {

int32_t pick_token(const float* logits, int64_t n, double temperature, double top_p, double coin) {
  if (temperature <= 0) return int32_t(std::max_element(logits, logits + n) - logits);
  const float mx = *std::max_element(logits, logits + n);
  // Per-thread scratch: grown once, so sampling allocates nothing per token.
  thread_local std::vector<double> p;
  thread_local std::vector<int32_t> order;
  p.resize(size_t(n));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[size_t(i)] = std::exp((double(logits[i]) - mx) / temperature);
  // As run.c: a token below (1 - top_p)/(n - 1) of the mass cannot be in the
  // nucleus (all such tokens together hold less than 1 - top_p, and each is
  // less probable than every token kept), so only the others are sorted.
  const double cutoff = n > 1 ? (1.0 - std::min(top_p, 1.0)) * sum / double(n - 1) : 0.0;
  order.clear();
  for (int64_t i = 0; i < n; ++i)
    if (p[size_t(i)] >= cutoff) order.push_back(int32_t(i));
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)]; });
  // The nucleus: the most probable tokens until their mass reaches top_p.
  double mass = 0;
  size_t keep = 0;
  while (keep < order.size() && (keep == 0 || mass < top_p * sum)) mass += p[size_t(order[keep++])];
  double r = coin * mass;
  for (size_t i = 0; i < keep; ++i) {
    r -= p[size_t(order[i])];
    if (r < 0) return order[i];
  }
  return order[keep - 1];
}

std::string sample_text(const LlamaConfig& cfg, const TensorMap& weights, const Tokenizer& tok, const SampleOptions& o) {
  std::vector<int32_t> ids = tok.encode(o.prompt, /*bos=*/true, /*eos=*/false);
  if (int64_t(ids.size()) >= cfg.seq)
    throw Error("sample: the prompt has " + std::to_string(ids.size()) + " tokens, the model's seq_len is " + std::to_string(cfg.seq));
  Plan plan = compile(build_llama_logits(cfg, {1, cfg.seq}));
  Tensor tokens(DType::Int32, {1, cfg.seq}), logits(DType::FP32, {1, cfg.seq, cfg.vocab});
  plan.bind("tokens", tokens);
  plan.bind("logits", logits);
  for (const auto& [name, t] : weights) plan.bind_input(name, t);
  uint64_t rng = o.seed * 0x9e3779b97f4a7c15ull + 1;
  auto coin = [&] {  // splitmix64 -> [0, 1)
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  std::string text;
  for (size_t i = 1; i < ids.size(); ++i) text += tok.decode(ids[i - 1], ids[i]);
  for (int64_t s = 0; s < o.steps && int64_t(ids.size()) < cfg.seq; ++s) {
    std::copy(ids.begin(), ids.end(), tokens.mutable_ptr<int32_t>());
    plan.run();
    const float* row = logits.ptr<float>() + (int64_t(ids.size()) - 1) * cfg.vocab;
    int32_t next = pick_token(row, cfg.vocab, o.temperature, o.top_p, coin());
    if (next == Tokenizer::kBos || next == Tokenizer::kEos) break;
    text += tok.decode(ids.back(), next);
    ids.push_back(next);
  }
  return text;
}

float xorshift_coin(uint64_t& s) {
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return float(uint32_t((s * 0x2545F4914F6CDD1Dull) >> 32) >> 8) / 16777216.0f;
}

}  // namespace milrt::llm
