// milrt generate: text from a llama2.c checkpoint with the KV-cache decoder
// (src/llm/generator.h), following llama2.c's run.c: --steps counts every
// position, prompt included (0 or more than seq_len = seq_len); the prompt is
// encoded with BOS; temperature 0 is greedy; generation stops at BOS; text
// streams to stdout as it is produced and the speeds go to stderr.
// --weights picks how the weights are held (generator.h): fp32 binds the
// checkpoint in place; fp16, bf16 and int8 (blocks of --block, fp16 scales
// unless --scales fp32) are made from it at load, and int4 the same way. --activations int8 (with int8 or int4 weights only) quantizes the
// activations of the decode products too: integer dot products, not exact.
#include <chrono>
#include <cstdio>
#include <ctime>

#include "commands.h"
#include "kernels/threads.h"
#include "llm/checkpoint.h"
#include "llm/generator.h"
#include "llm/sample.h"
#include "llm/tokenizer.h"
#include "milrt/error.h"

namespace milrt::cli {
namespace {

struct Args {
  std::string checkpoint, tokenizer, prompt;
  int64_t steps = 256;
  double temperature = 1.0, top_p = 0.9;
  uint64_t seed = 0;
  int threads = 0;
  std::string weights = "fp32", activations = "fp32", prefill_precision, scales;
  int64_t block = 32;
  bool block_given = false;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void run(const Args& a) {
  if (a.threads > 0) kernels::set_num_threads(a.threads);
  const llm::GeneratorOptions gopt =
      llm::parse_generator_options(a.weights, a.block_given ? std::optional<int64_t>(a.block) : std::nullopt,
                                   a.activations, a.prefill_precision, a.scales);
  llm::LlamaWeights w = llm::load_llama2c_checkpoint(a.checkpoint);
  const llm::LlamaConfig cfg = w.cfg;
  // Without --tokenizer: the byte-level vocabulary `milrt train` uses by default.
  auto tok = a.tokenizer.empty() ? llm::byte_tokenizer() : llm::load_llama2c_tokenizer(a.tokenizer, cfg.vocab);
  if (tok->vocab_size() != cfg.vocab)
    throw Error("generate: " + a.checkpoint + " has a vocabulary of " + std::to_string(cfg.vocab) +
                " tokens: give its --tokenizer (without one, bytes: 259 tokens)");
  const int64_t steps = a.steps <= 0 || a.steps > cfg.seq ? cfg.seq : a.steps;
  const double temperature = a.temperature < 0 ? 0 : a.temperature;
  const double top_p = a.top_p <= 0 || a.top_p > 1 ? 0.9 : a.top_p;
  uint64_t rng = a.seed ? a.seed : uint64_t(std::time(nullptr));

  std::vector<int32_t> ids = tok->encode(a.prompt, /*bos=*/true, /*eos=*/false);
  if (int64_t(ids.size()) > cfg.seq)
    throw Error("generate: the prompt has " + std::to_string(ids.size()) + " tokens, more than the model's seq_len " +
                std::to_string(cfg.seq));
  llm::Generator gen(std::move(w), gopt);
  gen.prepare(int64_t(ids.size()));  // compiled before the clock starts

  for (size_t i = 1; i < ids.size(); ++i) std::fputs(llm::printable_piece(tok->decode(ids[i - 1], ids[i])).c_str(), stdout);
  std::fflush(stdout);
  auto t0 = std::chrono::steady_clock::now();
  const float* logits = gen.prefill(ids);
  const double prompt_s = seconds_since(t0);

  // As run.c: the logits of position pos pick the token of pos + 1, and a
  // token is run (decoded) only while its position is below steps.
  auto t1 = std::chrono::steady_clock::now();
  int64_t generated = 0, decoded = 0;
  int32_t token = ids.back();
  for (int64_t pos = int64_t(ids.size()) - 1; pos < steps;) {
    const int32_t next = llm::pick_token(logits, cfg.vocab, temperature, top_p, llm::xorshift_coin(rng));
    if (next == llm::Tokenizer::kBos) break;
    std::fputs(llm::printable_piece(tok->decode(token, next)).c_str(), stdout);
    std::fflush(stdout);
    ++generated;
    token = next;
    if (++pos >= steps) break;
    logits = gen.decode(token);
    ++decoded;
  }
  const double gen_s = seconds_since(t1);
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "prompt: %zu tokens in %.3f s, %.1f tok/s; generation: %lld tokens in %.3f s, %.1f tok/s (%d thread%s, %s weights%s)\n",
               ids.size(), prompt_s, double(ids.size()) / std::max(prompt_s, 1e-9), (long long)generated, gen_s,
               double(decoded) / std::max(gen_s, 1e-9), kernels::num_threads(), kernels::num_threads() == 1 ? "" : "s",
               a.weights.c_str(), a.activations == "int8" ? ", int8 activations" : "");
}

}  // namespace

void add_generate(CLI::App& app) {
  static Args a;
  auto* cmd = app.add_subcommand("generate", "Generate text from a llama2.c checkpoint (KV-cache decoding)");
  cmd->add_option("--checkpoint", a.checkpoint, "llama2.c checkpoint (version 0 or 1)")->required();
  cmd->add_option("--tokenizer", a.tokenizer, "llama2.c tokenizer.bin (default: bytes, as milrt train's default)");
  cmd->add_option("--prompt", a.prompt, "text to continue (encoded after BOS)");
  cmd->add_option("--steps", a.steps, "positions to run, prompt included (0 = seq_len)");
  cmd->add_option("--temperature", a.temperature, "0 = greedy");
  cmd->add_option("--top-p", a.top_p, "nucleus sampling threshold");
  cmd->add_option("--seed", a.seed, "sampling seed (0 = time)");
  cmd->add_option("--threads", a.threads, "threads (default MILRT_THREADS or all cores)");
  cmd->add_option("--weights", a.weights, "fp32 (the checkpoint in place), fp16, bf16, int8 or int4");
  auto* block =
      cmd->add_option("--block", a.block, "int8, int4: elements of a weight row sharing a scale (default 32)");
  cmd->add_option("--scales", a.scales, "int8, int4: the block scales' dtype, fp16 (default) or fp32");
  cmd->add_option("--activations", a.activations,
                  "fp32 (default, exact) or int8: with --weights int8 or int4, decode quantizes the activations per block "
                  "and takes integer dot products (faster, not exact)");
  cmd->add_option("--prefill-precision", a.prefill_precision,
                  "the prompt's matrix products: fp32 (exact) or bf16 (operands rounded to bf16, on AMX or "
                  "avx512_bf16 where present); default bf16 with --weights bf16, else fp32");
  cmd->callback([block] {
    a.block_given = block->count() > 0;
    run(a);
  });
}

}  // namespace milrt::cli
