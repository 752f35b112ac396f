// Text generation from a Llama checkpoint with a KV cache: a decode plan (one
// token per run) compiled once, and prefill plans (a whole prompt per run)
// compiled once per distinct prompt length, all from build_llama_decoder.
//
// Weights (GeneratorOptions::weights):
// - inputs (the default): fp32 plan inputs bound to the checkpoint's tensors
//   (zero copy: every plan reads the checkpoint's memory in place).
// - fp32, fp16, bf16, int8, int4: the weights become consts of the programs in that
//   storage (llama_decoder.h). The stored form is made once, from the decode
//   program; every prefill program is given those same consts (Tensor copies
//   share buffers), so decode and prefill plans share one copy, and the
//   generator drops its fp32 weights once the decode program is built.
//   fp16/bf16 weights are read exactly (widened to fp32) and int8/int4 as scale·q,
//   with fp32 math, so decoding differs from fp32 weights only by the weights'
//   rounding. bf16 prefill plans (and any with prefill_precision bf16) compile with
//   CompileOptions::MatmulPrecision::bf16 (every matrix product of the prompt,
//   attention included, rounds its operands to bf16 and accumulates in fp32:
//   vdpbf16ps, about twice the fp32 GEMM rate), which is the point of bf16
//   prefill; decode stays fp32 math, bound by reading the weights anyway.
// - int8 or int4 with GeneratorOptions::activations int8
//   (CompileOptions::ActivationPrecision::int8): products that stream the
//   weights (decode, and prompts of up to 4 tokens) quantize their
//   activations to int8 per block and take integer dot products, llama.cpp's
//   Q8_0 x Q8_0; faster than exact decoding and not exact (the README's
//   Generation section has the measured logit error). Longer prompts are
//   computed exactly as without it.
//
// The KV cache lives in plan state. Plan states cannot be bound to shared
// memory, so after a prefill the generator copies the prefill plan's caches
// into the decode plan (set_state): one copy of the cache per prompt, none
// per token. Decoding itself runs on bound buffers (token, position, logits)
// with no allocation per token.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "llm/checkpoint.h"
#include "llm/llama_decoder.h"
#include "milrt/plan.h"

namespace milrt::llm {

struct GeneratorOptions {
  WeightStorage weights = WeightStorage::inputs;
  // int8, int4: elements of a weight row sharing one scale; must divide dim and hidden (int4: even).
  int64_t block = 32;
  // int8, int4: the scales' dtype, fp16 (the default) or fp32 (DecoderOptions::scales).
  DType scales = DType::FP16;
  // int8 and int4 weights only: how the matrix products meet the activations (exact:
  // fp32 activations; int8: quantized per block, see CompileOptions).
  CompileOptions::ActivationPrecision activations = CompileOptions::ActivationPrecision::exact;
  // The prompt's (prefill's) matrix products: bf16 rounds their operands to bf16 and sums in fp32 on
  // the bf16 kernels (AMX tiles or vdpbf16ps where the CPU has them), int8 and int4 weights widened
  // panel by panel and rounded; nullopt: bf16 for bf16 weights, fp32 (exact) for the others.
  // Decoding is unaffected: it streams the weights with fp32 math.
  std::optional<CompileOptions::MatmulPrecision> prefill_precision = std::nullopt;
};

// The options a command line gives: `weights` "fp32" (the checkpoint bound
// in place: WeightStorage::inputs), "fp16", "bf16", "int8" or "int4"; `block`
// only with int8 or int4; `activations` "fp32" (exact, the default) or "int8",
// the latter only with int8 or int4 weights; `prefill_precision` "" (the weights' default), "fp32" or
// "bf16"; `scales` "" (fp16), "fp16" or "fp32", only with int8 or int4. Throws a one-line Error for anything else.
GeneratorOptions parse_generator_options(const std::string& weights, std::optional<int64_t> block = std::nullopt,
                                         const std::string& activations = "fp32",
                                         const std::string& prefill_precision = "", const std::string& scales = "");

// Bytes of weights one decoded token reads in `storage`: every matrix (the
// classifier included) once, the RMSNorm gains and one embedding row;
// inputs and fp32 count 4 bytes an element, fp16/bf16 2, int8 1 (int4 half
// a byte) plus a scale of `scales` (fp16: 2 bytes, fp32: 4) per block.
// KV-cache reads are not counted.
int64_t decode_weight_bytes(const LlamaConfig& cfg, WeightStorage storage, int64_t block = 32,
                            DType scales = DType::FP16);

// Useful FLOPs of a prefill of `tokens` tokens from position 0: every layer
// matrix for each token, the classifier for the last one (prefill returns
// its logits only), and causal attention's two products (query i against
// keys 0..i). The masked-out keys the kernels also touch are not counted.
double prefill_flops(const LlamaConfig& cfg, int64_t tokens);
// Whether a prefill with these options multiplies in bf16 (the option, or by
// default bf16 weights), else in fp32: which machine peak it is measured against.
bool prefill_uses_bf16(const GeneratorOptions& g);

class Generator {
 public:
  // Validates the weights (and, for int8, the block: a one-line Error before
  // anything is built) and compiles the decode plan.
  explicit Generator(LlamaWeights weights, GeneratorOptions options = {});
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  const LlamaConfig& config() const { return cfg_; }
  const GeneratorOptions& options() const { return opt_; }
  // The position the next token will take (tokens in the cache so far).
  int64_t position() const { return pos_; }

  // Empties the cache: the next token goes to position 0.
  void reset();
  // Compiles the prefill plan for prompts of `tokens` tokens now (prefill
  // otherwise does on first use), so that timing a prefill times no compile.
  void prepare(int64_t tokens);
  // Resets, then runs `ids` (1..seq tokens) from position 0 as one prefill
  // (a single token is a decode). Returns the last token's logits (vocab
  // floats, valid until the next call). Throws Error for an empty prompt, a
  // prompt longer than seq, or a token outside [0, vocab).
  const float* prefill(const std::vector<int32_t>& ids);
  // Runs one token at position(); returns its logits as prefill does.
  // Throws Error when the cache is full or for a token outside [0, vocab).
  const float* decode(int32_t token);

  // Plan::set_profiling on the decode plan and every prefill plan (those
  // compiled later too): what `bench generate --profile` reports.
  void set_profiling(bool on, bool trace = false);
  const Plan& decode_plan() const { return decode_; }
  // The prefill plan for prompts of `tokens` tokens, if compiled (else null).
  const Plan* compiled_prefill(int64_t tokens) const;

 private:
  struct Prefill {
    Plan plan;
    std::vector<int32_t> tokens;
  };
  void check_token(int32_t t) const;
  Prefill& prefill_plan(int64_t tokens);
  Program prefill_program(int64_t tokens) const;
  void bind_common(Plan& p);

  LlamaConfig cfg_;
  GeneratorOptions opt_;
  LlamaWeights w_;          // inputs storage only: the bound checkpoint
  std::vector<Op> weight_ops_;  // const storages: the ops defining the weights, shared by every program
  Plan decode_;
  std::map<int64_t, Prefill> prefill_;  // by prompt length
  int32_t token_ = 0, pos_in_ = 0;     // the plans' "tokens" (decode) and "pos" inputs
  int64_t pos_ = 0;
  std::vector<float> logits_;
  bool profiling_ = false, tracing_ = false;
};

}  // namespace milrt::llm
