#include "llm/llama_config.h"

#include <fmt/format.h>

#include "milrt/error.h"

namespace milrt::llm {

int64_t LlamaConfig::param_count() const {
  int64_t n = 0;
  for (const WeightSpec& w : llama_weight_specs(*this)) n += shape_numel(w.shape);
  return n;
}

void LlamaConfig::validate() const {
  auto fail = [&](const std::string& why) { throw Error("model config (" + str() + "): " + why); };
  if (dim <= 0 || hidden <= 0 || layers <= 0 || heads <= 0 || kv_heads <= 0 || vocab <= 0 || seq <= 0)
    fail("every size must be positive");
  if (dim % heads != 0) fail("dim must be a multiple of heads");
  if (heads % kv_heads != 0) fail("heads must be a multiple of kv_heads");
  if (head_dim() % 2 != 0) fail("head dimension (dim / heads) must be even for rotary embeddings");
}

std::string LlamaConfig::str() const {
  return fmt::format("dim {}, hidden {}, layers {}, heads {}, kv_heads {}, vocab {}, seq {}{}", dim, hidden, layers,
                     heads, kv_heads, vocab, seq, shared_classifier ? "" : ", separate classifier");
}

namespace {
struct Preset {
  const char* name;
  LlamaConfig cfg;
};
// dim, hidden, layers, heads, kv_heads, vocab, seq (the peers script's table).
const Preset kPresets[] = {
    {"stories15m", {288, 768, 6, 6, 6, 32000, 256}},
    {"stories110m", {768, 2048, 12, 12, 12, 32000, 256}},
    {"stories15m-gqa", {288, 768, 6, 6, 2, 32000, 256}},
    {"tiny", {64, 172, 2, 4, 2, 512, 64}},
    // `make run`: a byte-level model (259 tokens: llama's 3 specials + 256
    // byte-fallback ids) small enough to learn the embedded corpus in minutes.
    {"default", {128, 384, 4, 4, 4, 259, 128}},
};
}  // namespace

std::optional<LlamaConfig> llama_preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return p.cfg;
  return std::nullopt;
}

std::vector<std::string> llama_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

std::vector<WeightSpec> llama_weight_specs(const LlamaConfig& c) {
  std::vector<WeightSpec> w;
  w.push_back({"tok_embeddings", {c.vocab, c.dim}});
  for (int64_t i = 0; i < c.layers; ++i) {
    auto n = [&](const char* what) { return fmt::format("l{}_{}", i, what); };
    w.push_back({n("rms_att"), {c.dim}});
    w.push_back({n("wq"), {c.dim, c.dim}});
    w.push_back({n("wk"), {c.kv_dim(), c.dim}});
    w.push_back({n("wv"), {c.kv_dim(), c.dim}});
    w.push_back({n("wo"), {c.dim, c.dim}});
    w.push_back({n("rms_ffn"), {c.dim}});
    w.push_back({n("w1"), {c.hidden, c.dim}});
    w.push_back({n("w2"), {c.dim, c.hidden}});
    w.push_back({n("w3"), {c.hidden, c.dim}});
  }
  w.push_back({"rms_final", {c.dim}});
  if (!c.shared_classifier) w.push_back({"wcls", {c.vocab, c.dim}});
  return w;
}

}  // namespace milrt::llm
