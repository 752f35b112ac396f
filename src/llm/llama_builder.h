// A Llama-family model (llama2.c's) as one MIL program, built through the IR
// builder from simple differentiable ops, so the same program runs on the
// reference executor, compiles to a plan and goes through differentiate() for
// training.
//
// The model, per llama2.c's run.c:
//   x = tok_embeddings[tokens]
//   per layer: xb = rmsnorm(x) * rms_att; q, k, v = xb·Wqᵀ, xb·Wkᵀ, xb·Wvᵀ;
//     RoPE on q and k (pairs (2j, 2j+1) within each head rotated by
//     t · theta^(-2j/head_dim) at position t); causal attention, scale
//     1/sqrt(head_dim), query head h reading kv head h / (heads / kv_heads);
//     x += att·Woᵀ; xb = rmsnorm(x) * rms_ffn; x += (silu(xb·W1ᵀ) * xb·W3ᵀ)·W2ᵀ
//   logits = (rmsnorm(x) * rms_final)·Wclsᵀ (Wcls = tok_embeddings when shared)
//
// Ops used (what autodiff and the compiler must cover): gather (embedding);
// mul, reduce_mean, add, rsqrt (RMSNorm, the idiom fuse-norms fuses); matmul
// with transpose_y (projections, weights [out, in] as stored); reshape,
// slice_by_index, concat, mul, add (RoPE, with constant cos/sin tables for
// positions 0..T-1); reshape, transpose and milrt_attention (causal, scale
// 1/sqrt(head_dim): the fused attention op, whose gradient is the fused
// backward; GQA through a size-1 kv-group dim it broadcasts, no copies of K/V);
// silu (SwiGLU); reduce_log_sum_exp, gather_along_axis, sub, reduce_mean
// (cross-entropy). Scalar and table constants are `const` ops (variables, so
// gradient rules can name them); integer parameters (axes, shapes, perms,
// flags) are literals. Values are named per layer: l0_q, l0_att, l0_x, ...
#pragma once
#include <cstdint>

#include "llm/llama_config.h"
#include "milrt/ir.h"

namespace milrt::llm {

struct LlamaProgramOptions {
  int64_t batch = 1;  // B: sequences per run
  int64_t seq = 0;    // T: positions per sequence; 0 = cfg.seq (at most cfg.seq)
  // FP32, or FP16 for mixed-precision training (the Neural Engine computes in
  // fp16): the weight inputs stay fp32 (the master copy, names unchanged) and
  // each is cast to fp16 by one `cast` op (<name>_fp16) at its first use;
  // activations and constants (eps, scale, mask -3e4, RoPE tables) are fp16;
  // the logits are cast back to fp32 ("logits"; the fp16 product is
  // "logits_fp16"), so the cross-entropy and the loss are fp32.
  DType compute = DType::FP32;
};

// Function "main" (opset ios18). Inputs: "tokens" int32 [B, T], "targets"
// int32 [B, T], then every weight of llama_weight_specs(cfg), in that order,
// as an fp32 input of its spec's shape (weights are plan inputs, never
// constants, so one plan serves every training step). Output: "loss", an fp32
// scalar, the mean cross-entropy of targets over all B*T positions.
// With compute FP16 there is one more input after "targets": "loss_scale", an
// fp32 scalar, and "loss" = cross-entropy * loss_scale (the cross-entropy
// itself is "ce"), so the backward pass runs on scaled gradients that stay
// above fp16's subnormals; the trainer divides the loss and the gradients by
// the scale again (dynamic loss scaling, see trainer.h).
// Throws Error for a config that fails cfg.validate() or bad options.
Program build_llama_loss(const LlamaConfig& cfg, const LlamaProgramOptions& opts = {});

// The same model without the loss: inputs "tokens" [B, T] then the weights;
// output "logits" fp32 [B, T, vocab] for every position.
Program build_llama_logits(const LlamaConfig& cfg, const LlamaProgramOptions& opts = {});

}  // namespace milrt::llm
