// The second seed's training experiment (train_large.m) as one MIL program:
// a single transformer layer (RMSNorm, multi-head causal attention without
// rotary embeddings, residual, RMSNorm, SwiGLU, residual) whose output is
// fitted to a fixed target by mean squared error. The seed runs it as six
// hand-written Neural Engine kernels plus CPU code (src/llm/seed_kernels.h);
// here the forward and loss are one program and differentiate() derives the
// backward half.
#pragma once
#include <cstdint>
#include <vector>

#include "llm/llama_config.h"
#include "llm/seed_kernels.h"  // SeedLayerConfig {dim 768, hidden 2048, heads 12, seq 512}
#include "milrt/ir.h"
#include "milrt/reference.h"

namespace milrt::llm {

// rms_att [dim], wq wk wv wo [dim, dim], rms_ffn [dim], w1 [hidden, dim],
// w2 [dim, hidden], w3 [hidden, dim]: matrices [out, in] (y = x·Wᵀ), as the
// seed's CPU copies of its conv weights.
std::vector<WeightSpec> seed_layer_weight_specs(const SeedLayerConfig& cfg);

// Function "main" (opset ios18). Inputs "x" and "target", fp32 [seq, dim] (the
// transpose of the seed's channel-first [dim, seq]), then the weights in
// seed_layer_weight_specs order as fp32 inputs. Output "loss": fp32 scalar,
// mean over seq*dim of (layer(x) - target)². RMSNorm eps 1e-5 and the scores
// scale 1/sqrt(dim/heads) as in the seed. Throws Error for a bad config.
// compute FP16 is the seed's Neural Engine numerics: x and every weight cast
// to fp16 where the layer reads them, the layer in fp16, its output cast back
// and the loss in fp32, times an fp32 scalar input "loss_scale" (which makes
// the trainer scale the loss dynamically, as for the Llama fp16 programs).
Program build_seed_layer_loss(const SeedLayerConfig& cfg, DType compute = DType::FP32);

// The seed's synthetic experiment as fp32 inputs of build_seed_layer_loss:
// "x", "target" and every weight. It follows train_large.m with srand48(seed)
// (the seed uses 42), drand48 reimplemented bit-exactly:
//  - weights, drawn in the seed's order: wq[i], wk[i] alternately, then wv[i],
//    wo[i] alternately, then all of w1, w2, w3; each scale*(2*drand48()-1)
//    with scale 1/sqrt(dim) for wq wk wv wo w2 and 1/sqrt(hidden) for w1 w3;
//    rms_att = rms_ffn = 1;
//  - the generator is reseeded with `seed`, then for channel c, position t in
//    channel-first order (idx = c*seq + t): x = 0.1*(2*drand48()-1) and
//    target = 0.1*sinf(idx*0.03f + 1.0f), stored at [t, c].
TensorMap seed_layer_synthetic_inputs(const SeedLayerConfig& cfg, uint32_t seed = 42);

}  // namespace milrt::llm
