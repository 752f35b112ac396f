#include "llm/llama_builder.h"

#include <map>
#include <string>

#include "llm/transformer_block.h"
#include "milrt/builder.h"
#include "milrt/error.h"

namespace milrt::llm {
namespace {

int64_t checked_seq(const LlamaConfig& cfg, const LlamaProgramOptions& o) {
  cfg.validate();
  const int64_t T = o.seq == 0 ? cfg.seq : o.seq;
  if (o.batch <= 0) throw Error("llama program: batch must be positive, got " + std::to_string(o.batch));
  if (T <= 0 || T > cfg.seq)
    throw Error("llama program: seq must be in 1.." + std::to_string(cfg.seq) + " (the model's context), got " +
                std::to_string(o.seq));
  return T;
}

// Tokens, optional targets and every weight as inputs; returns the logits.
Value build_logits(FunctionBuilder& f, const LlamaConfig& cfg, int64_t B, int64_t T, bool with_targets) {
  Value tokens = f.input("tokens", Type::tensor(DType::Int32, {B, T}));
  if (with_targets) f.input("targets", Type::tensor(DType::Int32, {B, T}));
  std::map<std::string, Value> w;
  for (const WeightSpec& s : llama_weight_specs(cfg)) w[s.name] = f.input(s.name, Type::tensor(DType::FP32, s.shape));

  BlockShape shape{cfg.dim, cfg.hidden, cfg.heads, cfg.kv_heads, T, cfg.norm_eps, true, cfg.rope_theta};
  TransformerBuilder tb(f, shape);
  Value x = f.op("gather", "embed", {{"x", w.at("tok_embeddings")}, {"indices", tokens}, {"axis", lit_i32(0)}});
  for (int64_t i = 0; i < cfg.layers; ++i) {
    const std::string p = "l" + std::to_string(i) + "_";
    BlockWeights bw{w.at(p + "rms_att"), w.at(p + "wq"), w.at(p + "wk"), w.at(p + "wv"), w.at(p + "wo"),
                    w.at(p + "rms_ffn"), w.at(p + "w1"), w.at(p + "w2"), w.at(p + "w3")};
    x = tb.block(p, x, bw);
  }
  Value xf = tb.rmsnorm("final_norm", x, w.at("rms_final"));
  return tb.linear("logits", xf, w.at(cfg.shared_classifier ? "tok_embeddings" : "wcls"));
}

}  // namespace

Program build_llama_loss(const LlamaConfig& cfg, const LlamaProgramOptions& opts) {
  const int64_t T = checked_seq(cfg, opts);
  FunctionBuilder f("main");
  Value logits = build_logits(f, cfg, opts.batch, T, true);
  // loss = mean over positions of logsumexp(logits) - logits[target]; the
  // target logit is picked with a one-hot product so only ops with simple
  // gradients sit between the logits and the loss.
  Value lse = f.op("reduce_log_sum_exp", "logits_lse",
                   {{"x", logits}, {"axes", lit_i32s({-1})}, {"keep_dims", lit_bool(false)}});
  Value onehot = f.op("one_hot", "targets_onehot",
                      {{"indices", f.value("targets")}, {"one_hot_vector_size", lit_i32(cfg.vocab)},
                       {"axis", lit_i32(-1)}, {"on_value", lit_f32(1.0)}, {"off_value", lit_f32(0.0)}});
  Value picked = f.op("mul", "target_logits_all", {{"x", onehot}, {"y", logits}});
  Value target = f.op("reduce_sum", "target_logits",
                      {{"x", picked}, {"axes", lit_i32s({-1})}, {"keep_dims", lit_bool(false)}});
  Value nll = f.op("sub", "nll", {{"x", lse}, {"y", target}});
  Value loss = f.op("reduce_mean", "loss", {{"x", nll}, {"axes", lit_i32s({0, 1})}, {"keep_dims", lit_bool(false)}});
  f.output(loss);
  return make_program({f.build()});
}

Program build_llama_logits(const LlamaConfig& cfg, const LlamaProgramOptions& opts) {
  const int64_t T = checked_seq(cfg, opts);
  FunctionBuilder f("main");
  f.output(build_logits(f, cfg, opts.batch, T, false));
  return make_program({f.build()});
}

}  // namespace milrt::llm
