// The second seed's (train_large.m) six Neural Engine training kernels for one
// transformer layer (RMSNorm, multi-head causal attention, SwiGLU FFN), built
// as MIL programs through the IR builder with the seed's exact op sequences.
//
// Every kernel is `func main(tensor<fp16, [1, C_in, 1, SEQ]> x) -> (out)`,
// channel-first fp16 with SEQ as the last dim; projections are 1x1 convs and
// several tensors travel concatenated along channels. Channel layouts (D =
// dim, H = hidden, SC = heads * seq, the attention scores [heads, seq, seq]
// flattened to [SC, seq]):
//
//   kernel          input x                 output out
//   sdpa_fwd_taps   x_in [D]                o, Q, K, V, attn, xnorm   [6D]
//   ffn_fwd_taps    x2 [D]                  ffn, h1, h3, gate, x2norm [2D+3H]
//   ffn_bwd         dffn [D], h1, h3        dx, dh1, dh3              [D+2H]
//   qkv_bwd         dQ, dK, dV [3D]         dx                        [D]
//   sdpa_bwd1       Q, K, V, dx2 [4D]       dV [D], probs, dp [SC]    [D+2SC]
//   sdpa_bwd2       probs, dp [SC], Q, K    dQ, dK                    [2D]
//
// (`gate` is silu(h1) * h3, the seed's "silu_out" tap; `attn` is the
// attention output before Wo.) RMSNorm's backward, the residuals, the loss and
// every weight gradient stay on the CPU in the seed.
//
// The five weight-bearing kernels also come as dynamic-weight twins
// (seed_dynamic_kernel): the same outputs, the weights read from the input
// (llm/seed_dynamic_weights.h), so one compile serves every weight update.
#pragma once
#include "milrt/ir.h"
#include "milrt/tensor.h"

namespace milrt::llm {

// Defaults: train_large.m's layer (shared with seed_layer_builder.h).
struct SeedLayerConfig {
  int dim = 768, hidden = 2048, heads = 12, seq = 512;
};

// fp16 weights in the seed's CPU layout: row-major [out, in] matrices (y = W x)
// and [dim] RMSNorm scales. Each kernel reads only the fields it needs and
// turns them into conv weights [out, in, 1, 1] (transposed for the backward
// kernels, as the seed's build_blob_t does).
struct SeedLayerWeights {
  Tensor rms1, rms2;      // [dim]
  Tensor wq, wk, wv, wo;  // [dim, dim]
  Tensor w1, w3;          // [hidden, dim]
  Tensor w2;              // [dim, hidden]
};

// The causal mask the seed adds to the scaled scores: [1, 1, seq, seq] fp16,
// 0 where key <= query, -65504 (fp16's lowest) elsewhere.
Tensor seed_causal_mask(int seq);

// Each builder checks the config (positive sizes, dim divisible by heads) and
// the shapes and dtypes of the weights it reads, throwing milrt::Error.
Program seed_sdpa_fwd_taps(const SeedLayerConfig& c, const SeedLayerWeights& w);  // rms1 wq wk wv wo
Program seed_ffn_fwd_taps(const SeedLayerConfig& c, const SeedLayerWeights& w);   // rms2 w1 w3 w2
Program seed_ffn_bwd(const SeedLayerConfig& c, const SeedLayerWeights& w);        // w1 w3 w2
Program seed_qkv_bwd(const SeedLayerConfig& c, const SeedLayerWeights& w);        // wq wk wv
Program seed_sdpa_bwd1(const SeedLayerConfig& c, const SeedLayerWeights& w);      // wo
Program seed_sdpa_bwd2(const SeedLayerConfig& c);

// The five weight-bearing kernels by name, for code that treats them alike.
enum class SeedWeightKernel { SdpaFwdTaps, FfnFwdTaps, FfnBwd, QkvBwd, SdpaBwd1 };
const char* seed_kernel_name(SeedWeightKernel k);
Program seed_kernel(SeedWeightKernel k, const SeedLayerConfig& c, const SeedLayerWeights& w);

// Kernel k's dynamic-weight twin: its input widened to
// seed_dynamic_layout(k, c).shape() with every weight (gains included) in
// columns beside the activations, sliced out and reshaped inside the
// program; each 1x1 conv becomes matmul on the sliced matrix (a conv's
// weight must be constant), every other op stays. The reference executor
// sums matmul and conv in the same order, so the twins give the same bits
// for the same fp16 weights. Compiled once, it
// takes new weights with every input (seed_pack_dynamic). Throws Error where
// the layout passes the engine's limits (seed_dynamic_weights.h).
Program seed_dynamic_kernel(SeedWeightKernel k, const SeedLayerConfig& c);

}  // namespace milrt::llm
