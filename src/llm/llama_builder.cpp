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
  if (o.compute != DType::FP32 && o.compute != DType::FP16)
    throw Error(std::string("llama program: compute dtype must be fp32 or fp16, got ") + std::string(dtype_name(o.compute)));
  if (T <= 0 || T > cfg.seq)
    throw Error("llama program: seq must be in 1.." + std::to_string(cfg.seq) + " (the model's context), got " +
                std::to_string(o.seq));
  return T;
}

// Tokens, optional targets (and with fp16 compute the loss scale) and every
// weight as inputs; returns the fp32 logits.
Value build_logits(FunctionBuilder& f, const LlamaConfig& cfg, int64_t B, int64_t T, bool with_targets, DType compute) {
  const bool fp16 = compute == DType::FP16;
  Value tokens = f.input("tokens", Type::tensor(DType::Int32, {B, T}));
  if (with_targets) f.input("targets", Type::tensor(DType::Int32, {B, T}));
  if (with_targets && fp16) f.input("loss_scale", Type::tensor(DType::FP32, {}));
  std::map<std::string, Value> w;
  for (const WeightSpec& s : llama_weight_specs(cfg)) w[s.name] = f.input(s.name, Type::tensor(DType::FP32, s.shape));
  // A weight in the compute dtype: with fp16, one cast of the fp32 master
  // copy, emitted where the weight is first used and shared by later uses
  // (the shared classifier), so each weight is rounded once per run.
  std::map<std::string, Value> cast;
  auto W = [&](const std::string& name) -> Value {
    if (!fp16) return w.at(name);
    auto it = cast.find(name);
    if (it != cast.end()) return it->second;
    Value c = f.op("cast", name + "_fp16", {{"x", w.at(name)}, {"dtype", lit_str("fp16")}});
    return cast.emplace(name, c).first->second;
  };

  BlockShape shape{cfg.dim, cfg.hidden, cfg.heads, cfg.kv_heads, T, cfg.norm_eps, true, cfg.rope_theta};
  TransformerBuilder tb(f, shape, compute);
  Value x = f.op("gather", "embed", {{"x", W("tok_embeddings")}, {"indices", tokens}, {"axis", lit_i32(0)}});
  for (int64_t i = 0; i < cfg.layers; ++i) {
    const std::string p = std::string("l").append(std::to_string(i)).append("_");  // (not "l" + s: GCC 12's -Wrestrict misfires on it)
    // The casts of a layer's weights sit just before its block.
    BlockWeights bw;
    bw.rms_att = W(p + "rms_att");
    bw.wq = W(p + "wq"), bw.wk = W(p + "wk"), bw.wv = W(p + "wv"), bw.wo = W(p + "wo");
    bw.rms_ffn = W(p + "rms_ffn");
    bw.w1 = W(p + "w1"), bw.w3 = W(p + "w3"), bw.w2 = W(p + "w2");
    x = tb.block(p, x, bw);
  }
  Value xf = tb.rmsnorm("final_norm", x, W("rms_final"));
  Value cls = W(cfg.shared_classifier ? "tok_embeddings" : "wcls");
  if (!fp16) return tb.linear("logits", xf, cls);
  Value logits16 = tb.linear("logits_fp16", xf, cls);
  return f.op("cast", "logits", {{"x", logits16}, {"dtype", lit_str("fp32")}});
}

}  // namespace

Program build_llama_loss(const LlamaConfig& cfg, const LlamaProgramOptions& opts) {
  const int64_t T = checked_seq(cfg, opts);
  FunctionBuilder f("main");
  Value logits = build_logits(f, cfg, opts.batch, T, true, opts.compute);
  // loss = mean over positions of logsumexp(logits) - logits[target]. The
  // target logit is gathered: its gradient scatters into the softmax's
  // gradient in place (fold-scatter-add), where a one-hot product would
  // write, multiply and reduce three [B, T, vocab] tensors in each direction.
  Value lse = f.op("reduce_log_sum_exp", "logits_lse",
                   {{"x", logits}, {"axes", lit_i32s({-1})}, {"keep_dims", lit_bool(false)}});
  Value idx = f.op("reshape", "targets_idx", {{"x", f.value("targets")}, {"shape", lit_i32s({opts.batch, T, 1})}});
  Value picked = f.op("gather_along_axis", "target_logits_all", {{"x", logits}, {"indices", idx}, {"axis", lit_i32(-1)}});
  Value target = f.op("reshape", "target_logits", {{"x", picked}, {"shape", lit_i32s({opts.batch, T})}});
  Value nll = f.op("sub", "nll", {{"x", lse}, {"y", target}});
  const bool scaled = opts.compute == DType::FP16;
  Value loss = f.op("reduce_mean", scaled ? "ce" : "loss",
                    {{"x", nll}, {"axes", lit_i32s({0, 1})}, {"keep_dims", lit_bool(false)}});
  if (scaled) loss = f.op("mul", "loss", {{"x", loss}, {"y", f.value("loss_scale")}});
  f.output(loss);
  return make_program({f.build()});
}

Program build_llama_logits(const LlamaConfig& cfg, const LlamaProgramOptions& opts) {
  const int64_t T = checked_seq(cfg, opts);
  FunctionBuilder f("main");
  f.output(build_logits(f, cfg, opts.batch, T, false, opts.compute));
  return make_program({f.build()});
}

}  // namespace milrt::llm
