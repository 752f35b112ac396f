// The Llama model (llama2.c's, as llama_builder.h describes it) as an
// incremental decoder: one MIL program that runs T tokens starting at a
// run-time position against a KV cache held as ios18 state. T = 1 is the
// decode program (one token per run); T > 1 is a prefill program (a prompt's
// tokens at once, as GEMMs).
//
// Program (function "main", opset ios18):
//   inputs  "tokens" int32 [1, T], "pos" int32 [1] (position of tokens[0]),
//           every weight of llama_weight_specs(cfg) as fp32 (plan inputs, so
//           a plan binds the checkpoint's memory without copies);
//   states  "l{i}_kcache", "l{i}_vcache" fp32 [1, kv_heads, seq, head_dim]:
//           head-major, so attention reads each head's keys as one contiguous
//           [seq, head_dim] matrix (no transpose of the cache per token);
//   output  "logits" fp32 [1, vocab]: the last token's.
// Per layer, the new keys/values of positions [pos, pos+T) are written with
// slice_update (begin/end computed from pos) + coreml_update_state, then the
// T queries attend to the whole cache with an additive mask built from pos
// (key position j is visible to query i iff j <= pos + i), so positions not
// yet written never contribute, whatever they hold. RoPE's cos/sin rows are
// gathered from constant [seq, width] tables at positions pos + i.
// Grouped-query attention reshapes the queries to [1, kv_heads, group*T,
// head_dim] so that one batched matmul per kv head reads its cache once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llm/llama_config.h"
#include "milrt/ir.h"

namespace milrt::llm {

// Throws Error for a config that fails cfg.validate() or T outside 1..cfg.seq.
Program build_llama_decoder(const LlamaConfig& cfg, int64_t tokens);

// The state names, "l0_kcache", "l0_vcache", "l1_kcache", ...
std::vector<std::string> llama_cache_names(const LlamaConfig& cfg);

}  // namespace milrt::llm
