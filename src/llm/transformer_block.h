// The pre-norm transformer block shared by the Llama model builder and the
// seed-layer builder: RMSNorm, projections, optional RoPE, causal (grouped
// query) attention as one milrt_attention, and SwiGLU, emitted as MIL ops on
// activations [..., T, D] (any leading dims: [B, T, D] for Llama, [T, D] for the seed).
// Internal to src/llm; see llama_builder.h for the op choices and why.
#pragma once
#include <cstdint>
#include <string>

#include "milrt/builder.h"

namespace milrt::llm {

struct BlockShape {
  int64_t dim = 0, hidden = 0, heads = 0, kv_heads = 0, seq = 0;
  double norm_eps = 1e-5;
  bool rope = true;
  double rope_theta = 10000.0;
};

// One block's weights: values (function inputs) of the builder.
struct BlockWeights {
  Value rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3;
};

class TransformerBuilder {
 public:
  // Shared constants (eps, RoPE tables) are added
  // to `f` once, on first use, in `dtype` (FP32 or FP16: the dtype of the
  // activations and weights the caller passes).
  TransformerBuilder(FunctionBuilder& f, const BlockShape& s, DType dtype = DType::FP32) : f_(f), s_(s), dtype_(dtype) {}

  // out = x * rsqrt(mean(x², last axis) + eps) * gamma; values named
  // <name>_sq, _ms, _var, _rrms, _xn and <name>.
  Value rmsnorm(const std::string& name, const Value& x, const Value& gamma);
  // x·Wᵀ for W [out, in] as llama2.c stores it.
  Value linear(const std::string& name, const Value& x, const Value& w);
  // One block; values named <prefix>q, <prefix>att, ..., the result <prefix>x.
  Value block(const std::string& prefix, const Value& x, const BlockWeights& w);

 private:
  Value rope(const std::string& name, const Value& x, int64_t width);
  Value rope_table(const std::string& name, int64_t width, bool sine);
  Value scalar(const std::string& name, double v);
  Value split_heads(const std::string& name, const Value& x, int64_t group);
  Value merge_heads(const std::string& name, const Value& x);

  FunctionBuilder& f_;
  BlockShape s_;
  DType dtype_;
};

}  // namespace milrt::llm
