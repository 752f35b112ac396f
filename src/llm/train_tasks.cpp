#include "llm/train_tasks.h"

#include <cstring>
#include <fstream>
#include <fmt/format.h>

#include "llm/checkpoint.h"
#include "llm/data.h"
#include "llm/llama_builder.h"
#include "llm/seed_layer_builder.h"
#include "milrt/error.h"

namespace milrt::llm {
namespace {

// The sampler state as bytes for TrainState::extra (and back).
std::vector<uint8_t> to_bytes(const BatchSampler::State& s) {
  std::vector<uint8_t> b(sizeof s);
  std::memcpy(b.data(), &s, sizeof s);
  return b;
}

BatchSampler::State from_bytes(const std::vector<uint8_t>& b) {
  BatchSampler::State s;
  if (b.size() != sizeof s) throw Error("train: the training state's data position is not from this version of milrt");
  std::memcpy(&s, b.data(), sizeof s);
  return s;
}

// Uniform random ids for benchmarks (splitmix64; no data file).
TokenData synthetic_tokens(int64_t vocab, int64_t n, uint64_t seed) {
  TokenData d;
  d.source = "synthetic";
  uint64_t x = seed;
  auto next = [&] {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (auto* v : {&d.train, &d.val})
    for (int64_t i = 0; i < n; ++i) v->push_back(int32_t(next() % uint64_t(vocab)));
  return d;
}

// Refuses a model whose training needs more memory than the machine has
// available, before anything large is allocated. The estimate: weights,
// gradients and the two AdamW moments (16 bytes per parameter), plus the
// activations a step keeps for the backward pass (per token and layer about
// 16·dim + 4·hidden floats and heads·T attention probabilities, and 3 copies
// of the logits).
void check_fits_in_memory(const LlamaConfig& c, int64_t batch, int64_t seq) {
  const double tokens = double(batch) * double(seq);
  const double act = tokens * (double(c.layers) * (16.0 * double(c.dim) + 4.0 * double(c.hidden) + 2.0 * double(c.heads * seq)) +
                               3.0 * double(c.vocab));
  const double need = 16.0 * double(c.param_count()) + 4.0 * act;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kb = 0, avail = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit)
    if (key == "MemAvailable:") avail = kb * 1024;
  if (avail > 0 && need > avail)
    throw Error(fmt::format("train: {} with batch {} x seq {} needs about {:.1f} GiB, {:.1f} GiB is available: "
                            "use a smaller model, --batch or --seq",
                            c.str(), batch, seq, need / (1 << 30), avail / (1 << 30)));
}

}  // namespace

double llama_train_flops(const LlamaConfig& c, int64_t batch, int64_t seq) {
  const double matmul_params =
      double(c.layers) * double(2 * c.dim * c.dim + 2 * c.dim * c.kv_dim() + 3 * c.dim * c.hidden) + double(c.vocab * c.dim);
  const double tokens = double(batch * seq);
  return 6 * matmul_params * tokens + 12.0 * double(c.layers) * double(batch) * double(seq) * double(seq) * double(c.dim);
}

TrainTask llama_task(const LlamaConfig& cfg, std::shared_ptr<const Tokenizer> tok, const LlamaTaskOptions& o) {
  cfg.validate();
  const int64_t seq = o.seq > 0 ? o.seq : cfg.seq;
  if (seq > cfg.seq) throw Error(fmt::format("train: --seq {} exceeds the model's seq_len {}", seq, cfg.seq));
  if (o.batch < 1) throw Error("train: --batch must be at least 1");
  if (!o.synthetic && tok->vocab_size() != cfg.vocab)
    throw Error(fmt::format("train: the tokenizer has {} tokens but the model's vocabulary is {}", tok->vocab_size(), cfg.vocab));

  check_fits_in_memory(cfg, o.batch, seq);

  // Shared state of the data callbacks: the token streams and their samplers.
  struct Data {
    TokenData tokens;
    BatchSampler train, val;
    BatchSampler::State val_start;
    Data(TokenData t, int64_t b, int64_t s, uint64_t seed)
        : tokens(std::move(t)), train(tokens.train, b, s, seed), val(tokens.val, b, s, seed ^ 0x9e3779b97f4a7c15ull),
          val_start(val.state()) {}
  };
  auto data = std::make_shared<Data>(o.synthetic ? synthetic_tokens(cfg.vocab, o.batch * (seq + 1) * 8, o.seed)
                                                 : load_token_data(o.data, *tok, o.val_fraction, seq),
                                     o.batch, seq, o.seed);

  TrainTask t;
  t.name = "llama " + cfg.str() + (o.compute == DType::FP16 ? " fp16" : "");
  t.program = build_llama_loss(cfg, {o.batch, seq, o.compute});
  t.weights = llama_weight_specs(cfg);
  t.next_batch = [data](TensorMap& in, bool validation) {
    (validation ? data->val : data->train).next(in.at("tokens").mutable_ptr<int32_t>(), in.at("targets").mutable_ptr<int32_t>());
  };
  // Validation batches restart from the same place at every evaluation, so
  // evaluations are comparable; only the training position is saved.
  t.begin_validation = [data] { data->val.restore(data->val_start); };
  t.save_data_state = [data] { return to_bytes(data->train.state()); };
  t.restore_data_state = [data](const std::vector<uint8_t>& b) { data->train.restore(from_bytes(b)); };
  t.flops_per_microstep = llama_train_flops(cfg, o.batch, seq);
  t.tokens_per_microstep = o.batch * seq;
  const int version = o.checkpoint_version;
  t.save_weights = [cfg, version](const std::string& path, const TensorMap& w) {
    save_llama2c_checkpoint(path, LlamaWeights{cfg, w}, version);
  };
  return t;
}

TrainTask seed_layer_task(const SeedLayerConfig& cfg, uint32_t seed, DType compute) {
  TrainTask t;
  t.name = compute == DType::FP16 ? "seed-layer fp16" : "seed-layer";
  t.program = build_seed_layer_loss(cfg, compute);
  t.weights = seed_layer_weight_specs(cfg);
  TensorMap all = seed_layer_synthetic_inputs(cfg, seed);
  for (const WeightSpec& w : t.weights) t.init_weights[w.name] = all.at(w.name);
  // One fixed batch, as in the seed: the layer learns to map x to its target.
  auto fixed = std::make_shared<TensorMap>(TensorMap{{"x", all.at("x")}, {"target", all.at("target")}});
  t.next_batch = [fixed](TensorMap& in, bool) {
    for (const char* name : {"x", "target"}) {
      const Tensor& src = fixed->at(name);
      std::memcpy(in.at(name).mutable_data(), src.data(), src.nbytes());
    }
  };
  t.flops_per_microstep = seed_layer_flops(cfg).total();
  t.save_weights = [](const std::string& path, const TensorMap& w) { save_tensor_file(path, w); };
  return t;
}

SeedLayerFlops seed_layer_flops(const SeedLayerConfig& cfg) {
  const double d = double(cfg.dim), h = double(cfg.hidden), T = double(cfg.seq);
  const double weights = 2 * T * (4 * d * d + 3 * d * h);  // wq wk wv wo, w1 w3 [h, d], w2 [d, h]
  SeedLayerFlops f;
  f.forward = weights + 4 * T * T * d;  // Q·Kᵀ and P·V over all heads
  f.backward_dx = weights;
  f.backward_dw = weights;
  f.attention_backward = 8 * T * T * d;  // dP, dV, dQ, dK
  return f;
}

TensorMap load_seed_layer_weights(const std::string& path, const SeedLayerConfig& cfg) {
  if (!is_tensor_file(path))
    throw Error(fmt::format("seed-layer weights '{}': not a milrt tensor file (is it a llama2.c checkpoint of another "
                            "--config?)", path));
  TensorMap w = load_tensor_file(path);
  const std::vector<WeightSpec> specs = seed_layer_weight_specs(cfg);
  for (const WeightSpec& s : specs) {
    auto it = w.find(s.name);
    if (it == w.end()) throw Error(fmt::format("seed-layer weights '{}': no tensor '{}'", path, s.name));
    if (it->second.shape() != s.shape)
      throw Error(fmt::format("seed-layer weights '{}': '{}' is {}, this layer needs {}", path, s.name,
                              shape_str(it->second.shape()), shape_str(s.shape)));
  }
  if (w.size() != specs.size())
    throw Error(fmt::format("seed-layer weights '{}': {} tensors, the layer has {}", path, w.size(), specs.size()));
  return w;
}

}  // namespace milrt::llm
