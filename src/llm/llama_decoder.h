// The Llama model (llama2.c's, as llama_builder.h describes it) as an
// incremental decoder: one MIL program that runs T tokens starting at a
// run-time position against a KV cache held as ios18 state. T = 1 is the
// decode program (one token per run); T > 1 is a prefill program (a prompt's
// tokens at once, as GEMMs).
//
// Program (function "main", opset ios18):
//   inputs  "tokens" int32 [1, T], "pos" int32 [1] (position of tokens[0]),
//           and, with WeightStorage::inputs, every weight of
//           llama_weight_specs(cfg) as fp32 (plan inputs, so a plan binds the
//           checkpoint's memory without copies); the other storages make the
//           weights consts of the program (see WeightStorage);
//   states  "l{i}_kcache", "l{i}_vcache" [1, kv_heads, seq, head_dim], fp32
//           (or fp16: DecoderOptions::cache),
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

#include "llm/checkpoint.h"
#include "llm/llama_config.h"
#include "milrt/ir.h"

namespace milrt::llm {

// How the program holds the weights of its matrix products (wq, wk, wv, wo,
// w1, w2, w3 and the classifier). The RMSNorm gains and the embedding table
// read by the token gather stay fp32 consts in every const storage: they are
// small or read one row per token, so compressing them saves no bandwidth.
enum class WeightStorage {
  inputs,  // fp32 plan inputs (the generator binds the checkpoint in place)
  fp32,    // fp32 consts: a self-contained program
  fp16,    // fp16 consts read by fp32 matmuls, as iOS17 allows (Core ML's usual form)
  bf16,    // bf16 consts read the same way: a milrt extension, Core ML has no bf16
  int8,    // int8 + one scale per block of a row (DecoderOptions::scales): constexpr_blockwise_shift_scale
  int4,    // the same with int4 data (scale = max|w| / 7), packed two a byte by the compiler
};

struct DecoderOptions {
  WeightStorage weights = WeightStorage::inputs;
  // int8, int4: consecutive elements of a weight row sharing one scale; must
  // divide dim and hidden (int4: and be even).
  int64_t block = 32;
  // The KV caches' state dtype. FP16 is what Core ML accepts for states: new
  // keys and values are rounded to fp16 on the way in and widened on the way
  // out, the rest of the program stays fp32.
  DType cache = DType::FP32;
  // int8, int4: the block scales' dtype, fp16 (the default, llama.cpp's Q8_0/Q4_0 form) or fp32. In Core ML the
  // op's output takes the scale's dtype, so fp16 scales give an fp16 weight, which the program casts to fp32
  // for its fp32 matmul; the compiler keeps it compressed either way (the cast fused away), and an fp16 scale is
  // 2 bytes a block instead of 4 (decode reads 0.5625 bytes a weight for int4/32 instead of 0.625, 1.0625 for
  // int8/32 instead of 1.125). The fp16 rounding of a scale (relative 2^-11) is far below the values' own.
  DType scales = DType::FP16;
};

// "fp32", "fp16", "bf16", "int8", "int4" (the const storages; "inputs" is internal).
// Throws Error naming the choices for anything else.
WeightStorage parse_weight_storage(const std::string& s);
const char* weight_storage_name(WeightStorage s);
// "fp16" or "fp32" (DecoderOptions::scales); throws Error naming the choices for anything else.
DType parse_scale_dtype(const std::string& s);

// Throws Error for a config that fails cfg.validate() or T outside 1..cfg.seq.
Program build_llama_decoder(const LlamaConfig& cfg, int64_t tokens);
// The same program with `w`'s weights as consts in opt.weights' storage
// (WeightStorage::inputs gives the program above). Throws Error for weights
// that fail check_llama_weights or a block that does not divide a row.
Program build_llama_decoder(const LlamaWeights& w, int64_t tokens, const DecoderOptions& opt);

// The state names, "l0_kcache", "l0_vcache", "l1_kcache", ...
std::vector<std::string> llama_cache_names(const LlamaConfig& cfg);

}  // namespace milrt::llm
