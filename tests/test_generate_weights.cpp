// Generation with compressed weights (GeneratorOptions::weights: fp16, bf16,
// int8 blocks) against the fp32 generator, whose own parity with llama2.c's
// run.c and a plain fp64 Llama is tests/test_generate.cpp's subject; plus
// `milrt generate --weights` and `milrt bench generate`.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "llm/checkpoint.h"
#include "llm/generator.h"
#include "llm/llama_decoder.h"
#include "milrt/error.h"
#include "support/logit_compare.h"
#include "support/random_checkpoint.h"
#include "support/test_util.h"
#include "test_cli_util.h"

// Every operator new in this test program is counted (decoding must allocate nothing).
#include "support/count_allocations.h"

namespace milrt::test {
namespace {

using llm::GeneratorOptions;
using llm::LlamaWeights;
using llm::WeightStorage;

struct Format {
  const char* name;
  WeightStorage storage;
  int64_t block;
  // Max |logit - fp32 logit| allowed, as a fraction of the fp32 logits' range (max - min).
  double logit_tol;
  // Greedy tokens that must equal the fp32 generator's.
  int greedy;
};

// Tolerances, relative to the range of the fp32 logits (max - min), about
// 3-5x the maxima measured on these seeds (the [ info ] lines):
// - fp16 keeps 11 significant bits (relative rounding <= 2^-11 per weight);
//   the weights (std 0.02) are far above fp16's subnormals. Measured
//   <= 3.6e-4 of the range through 6 layers: 0.2%.
// - bf16 keeps 8 (<= 2^-8 per weight, 8x fp16's): measured <= 3.5e-3: 1.5%.
// - int8: a weight moves by up to half a step, step = max|w| of its block /
//   127 (~1/254 of the block's max, about a 1/50 of the weights' std for 32
//   Gaussian weights a block; blocks of 16 have smaller maxima): about 2.5x
//   bf16's error, measured <= 9.6e-3: 3%.
// Greedy agreement over 64 tokens, measured on the unshared model (the
// shared-classifier models' greedy paths repeat one or two tokens, so their
// agreement says little): fp16 47, bf16 16, int8 16 (both block sizes), each
// parting at a near tie of the fp32 logits (top-2 gap 8e-5 and 7e-4 of the
// range, below the formats' errors); asserted: 32, 16, 16.
const Format kFormats[] = {
    {"fp16", WeightStorage::fp16, 32, 0.002, 32},
    {"bf16", WeightStorage::bf16, 32, 0.015, 16},
    {"int8 block 32", WeightStorage::int8, 32, 0.03, 16},
    {"int8 block 16", WeightStorage::int8, 16, 0.03, 16},
};

std::vector<int32_t> prompt_of(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids{1};
  for (int64_t i = 1; i < n; ++i) ids.push_back(int32_t((i * 7919 + 13) % vocab));
  return ids;
}

// The prompt's prefill, then 16 decodes of the fp32 generator's greedy
// tokens fed to both (the same inputs, so the logits are comparable at every
// step); then greedy decoding from the same prompt, each on its own.
void expect_close_to_fp32(const std::string& config, bool unshared, const Format& f) {
  const LlamaWeights w = llm::load_llama2c_checkpoint(random_llama2c_checkpoint(config, unshared));
  const int64_t V = w.cfg.vocab;
  llm::Generator ref(w), gen(w, GeneratorOptions{f.storage, f.block});
  const std::vector<int32_t> prompt = prompt_of(8, V);

  const float* want = ref.prefill(prompt);
  const float* got = gen.prefill(prompt);
  double worst = 0, worst_prefill = max_abs_diff(got, want, V) / range_of(want, V);
  for (int i = 0; i < 16; ++i) {
    const int32_t t = argmax(want, V);
    want = ref.decode(t);
    got = gen.decode(t);
    worst = std::max(worst, max_abs_diff(got, want, V) / range_of(want, V));
  }
  EXPECT_LT(worst_prefill, f.logit_tol) << config << " " << f.name << ": prefill logits vs fp32, relative to their range";
  EXPECT_LT(worst, f.logit_tol) << config << " " << f.name << ": decode logits vs fp32, relative to their range";

  const float* lr = ref.prefill(prompt);
  const float* lg = gen.prefill(prompt);
  int32_t a = argmax(lr, V), b = argmax(lg, V);
  int agree = 0;
  std::vector<int32_t> path;
  while (agree < 64 && a == b && ref.position() < w.cfg.seq) {
    ++agree;
    path.push_back(a);
    lr = ref.decode(a);
    lg = gen.decode(b);
    a = argmax(lr, V), b = argmax(lg, V);
  }
  // Where the paths part, the fp32 logits of the two tokens chosen: a near
  // tie (a gap below the logits' error) is where any rounding may choose either.
  const double gap = agree < 64 ? (double(lr[a]) - double(lr[b])) / range_of(lr, V) : 0;
  EXPECT_GE(agree, f.greedy) << config << " " << f.name << ": greedy tokens equal to fp32's";
  // Parting is only allowed where fp32 itself hardly prefers its token.
  EXPECT_LT(gap, 2 * f.logit_tol) << config << " " << f.name << ": greedy path left fp32's at a clear choice";
  std::sort(path.begin(), path.end());
  std::printf("[ info ] %s%s %s: logits vs fp32 / range: prefill %.2e, decode %.2e; greedy equal for %d of 64 (%zu distinct), fp32 gap where they part %.1e of the range\n",
              config.c_str(), unshared ? " unshared" : "", f.name, worst_prefill, worst, agree,
              size_t(std::unique(path.begin(), path.end()) - path.begin()), gap);
}

class WeightsVsFp32 : public ::testing::TestWithParam<int> {};

TEST_P(WeightsVsFp32, Stories15mShared) { expect_close_to_fp32("stories15m", false, kFormats[GetParam()]); }
TEST_P(WeightsVsFp32, Stories15mGqa) { expect_close_to_fp32("stories15m-gqa", false, kFormats[GetParam()]); }
TEST_P(WeightsVsFp32, Stories15mUnshared) { expect_close_to_fp32("stories15m", true, kFormats[GetParam()]); }

INSTANTIATE_TEST_SUITE_P(Formats, WeightsVsFp32, ::testing::Range(0, 4), [](const auto& info) {
  std::string n = kFormats[info.param].name;
  std::replace(n.begin(), n.end(), ' ', '_');
  return n;
});

// Prefill of T tokens then a decode equals T+1 decodes with the same weights.
// fp16 and int8 compute in fp32 both ways (only the GEMM shapes differ, so
// the summation order): 1e-5 of the logits' range, as the fp32 generator's
// test allows (measured there <= 1e-6 absolute on logits of size ~0.1..1).
// bf16 prefill runs its matrix products in bf16 (activations rounded to 8
// significant bits, attention included), so the cache it leaves differs from
// the decodes' by bf16 rounding: 1.5% of the range as bf16 vs fp32 above
// (measured 1.4e-3).
void expect_prefill_matches_decodes(const std::string& config, const Format& f, double tol) {
  const LlamaWeights w = llm::load_llama2c_checkpoint(random_llama2c_checkpoint(config, true));
  const int64_t V = w.cfg.vocab, T = 9;
  const std::vector<int32_t> ids = prompt_of(T + 1, V);
  llm::Generator one(w, {f.storage, f.block}), pre(w, {f.storage, f.block});
  const float* l = one.prefill({ids[0]});
  for (int64_t p = 1; p <= T; ++p) l = one.decode(ids[size_t(p)]);
  const std::vector<float> steps(l, l + V);
  pre.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + T));
  const float* after = pre.decode(ids[size_t(T)]);
  const double d = max_abs_diff(after, steps.data(), V) / range_of(steps.data(), V);
  EXPECT_LT(d, tol) << config << " " << f.name;
  std::printf("[ info ] %s unshared %s: prefill %lld + decode vs %lld decodes: max |diff| / range %.2e\n", config.c_str(),
              f.name, (long long)T, (long long)T + 1, d);
}

TEST(WeightsPrefill, Fp16PrefillThenDecodeEqualsDecodes) {
  expect_prefill_matches_decodes("stories15m-gqa", kFormats[0], 1e-5);
}
TEST(WeightsPrefill, Bf16PrefillThenDecodeEqualsDecodes) {
  expect_prefill_matches_decodes("stories15m-gqa", kFormats[1], 0.015);
}
TEST(WeightsPrefill, Int8PrefillThenDecodeEqualsDecodes) {
  expect_prefill_matches_decodes("stories15m-gqa", kFormats[2], 1e-5);
}

// int8 and int4 weights with prefill_precision bf16: the prompt's products
// run on gemm's bf16 kernels (AMX where present) on the widened weights
// rounded to bf16 (that the weight products take the option is
// test_compiled_weight_formats' subject). Against the exact prefill of the
// same weights the logits move by bf16 rounding: within the 1.5% of the range
// that Bf16PrefillThenDecodeEqualsDecodes allows (measured 3.1e-3; with only
// the attention in bf16 and the weight products in fp32, 1.1e-3).
void expect_bf16_prefill_close_to_exact(WeightStorage storage) {
  const LlamaWeights w = llm::load_llama2c_checkpoint(random_llama2c_checkpoint("stories15m-gqa", true));
  const int64_t V = w.cfg.vocab;
  GeneratorOptions bf16{storage, 32}, exact{storage, 32};
  bf16.prefill_precision = CompileOptions::MatmulPrecision::bf16;
  llm::Generator gen(w, bf16), gen_exact(w, exact);
  const std::vector<int32_t> prompt = prompt_of(24, V);
  const float* got = gen.prefill(prompt);
  const float* want = gen_exact.prefill(prompt);
  const double d = max_abs_diff(got, want, V) / range_of(want, V);
  const char* name = llm::weight_storage_name(storage);
  EXPECT_LT(d, 0.015) << name << ": bf16 prefill vs exact prefill";
  EXPECT_EQ(argmax(got, V), argmax(want, V)) << name;
  std::printf("[ info ] %s bf16 prefill of 24 tokens vs exact: max |diff| / range %.2e\n", name, d);
}

TEST(WeightsPrefill, Int8Bf16PrefillCloseToExact) { expect_bf16_prefill_close_to_exact(WeightStorage::int8); }
TEST(WeightsPrefill, Int4Bf16PrefillCloseToExact) { expect_bf16_prefill_close_to_exact(WeightStorage::int4); }

// Prompts of several lengths (each its own prefill plan, all sharing the
// decode plan's stored weights) give the logits of the same prompt run by a
// fresh generator: no plan disturbs another's weights or cache.
TEST(WeightsPrefill, PromptsOfSeveralLengthsShareTheWeights) {
  const LlamaWeights w = llm::load_llama2c_checkpoint(random_llama2c_checkpoint("tiny", true));
  const int64_t V = w.cfg.vocab;
  llm::Generator gen(w, {WeightStorage::int8, 4});
  for (int64_t n : {5, 12, 3, 12, 5}) {
    const std::vector<int32_t> p = prompt_of(n, V);
    const float* l = gen.prefill(p);
    const std::vector<float> got(l, l + V);
    llm::Generator fresh(w, {WeightStorage::int8, 4});
    EXPECT_EQ(max_abs_diff(got.data(), fresh.prefill(p), V), 0.0) << n;
  }
}

// ---- no allocation per token

void expect_no_allocation(const Format& f) {
  const LlamaWeights w = llm::load_llama2c_checkpoint(random_llama2c_checkpoint("stories15m-gqa", false));
  llm::Generator gen(w, {f.storage, f.block});
  gen.prefill({1, 400, 500});
  int32_t t = 7;
  for (int i = 0; i < 2; ++i) t = argmax(gen.decode(t), w.cfg.vocab);  // kernels' scratch grows on first runs
  g_counting = true;
  const long before = g_allocations.load();
  for (int i = 0; i < 20; ++i) t = argmax(gen.decode(t), w.cfg.vocab);
  const long during = g_allocations.load() - before;
  EXPECT_EQ(gen.position(), 25);
  gen.prefill({1, 2, 3, 4});  // a new prompt length compiles a plan: the counter does see allocations
  const long compiling = g_allocations.load() - before - during;
  g_counting = false;
  EXPECT_EQ(during, 0) << f.name << ": operator new calls during 20 decoded tokens";
  EXPECT_GT(compiling, 100) << f.name;
}

TEST(WeightsDecode, Fp32DecodingAllocatesNothingPerToken) {
  expect_no_allocation({"fp32 (checkpoint bound in place)", WeightStorage::inputs, 32, 0, 0});
}
TEST(WeightsDecode, Int8DecodingAllocatesNothingPerToken) { expect_no_allocation(kFormats[2]); }
TEST(WeightsDecode, Bf16DecodingAllocatesNothingPerToken) { expect_no_allocation(kFormats[1]); }

// ---- options and their errors

TEST(WeightsOptions, ParsingAndErrors) {
  EXPECT_EQ(llm::parse_generator_options("fp32").weights, WeightStorage::inputs);
  EXPECT_EQ(llm::parse_generator_options("bf16").weights, WeightStorage::bf16);
  const GeneratorOptions q = llm::parse_generator_options("int8", 64);
  EXPECT_EQ(q.weights, WeightStorage::int8);
  EXPECT_EQ(q.block, 64);
  EXPECT_EQ(llm::parse_generator_options("int8").block, 32);
  expect_error_containing([] { llm::parse_generator_options("bogus"); }, "unknown weight storage 'bogus' (fp32, fp16, bf16, int8, int4)");
  expect_error_containing([] { llm::parse_generator_options("fp16", 16); }, "block size is for int8 or int4 weights, not fp16");
  expect_error_containing([] { llm::parse_generator_options("int8", 0); }, "must be positive, got 0");
  EXPECT_FALSE(llm::parse_generator_options("int8").prefill_precision.has_value());
  EXPECT_FALSE(llm::prefill_uses_bf16(llm::parse_generator_options("int8")));
  EXPECT_TRUE(llm::prefill_uses_bf16(llm::parse_generator_options("bf16")));
  EXPECT_TRUE(llm::prefill_uses_bf16(llm::parse_generator_options("int4", std::nullopt, "fp32", "bf16")));
  EXPECT_FALSE(llm::prefill_uses_bf16(llm::parse_generator_options("bf16", std::nullopt, "fp32", "fp32")));
  expect_error_containing([] { llm::parse_generator_options("int8", std::nullopt, "fp32", "fp16"); },
                          "unknown prefill precision 'fp16' (fp32, bf16)");

  // tiny: dim 64, hidden 172 = 4 · 43.
  const LlamaWeights w = llm::load_llama2c_checkpoint(random_llama2c_checkpoint("tiny", false));
  expect_error_containing([&] { llm::Generator g(w, {WeightStorage::int8, 32}); },
               "int8 block size 32 must divide dim 64 and hidden_dim 172");
  expect_error_containing([&] { llm::Generator g(w, {WeightStorage::int8, 8}); }, "int8 block size 8 must divide");
  llm::Generator ok(w, {WeightStorage::int8, 4});
  EXPECT_EQ(ok.config().dim, 64);
}

// Counted from the weight specs: every matrix once (a shared classifier is
// the embedding table read whole), the gains and one embedding row in fp32.
TEST(WeightsOptions, DecodeWeightBytes) {
  for (bool shared : {true, false}) {
    llm::LlamaConfig c = *llm::llama_preset("stories15m-gqa");
    c.shared_classifier = shared;
    int64_t matrix = 0, vectors = 0;
    for (const llm::WeightSpec& s : llm::llama_weight_specs(c)) {
      const int64_t n = shape_numel(s.shape);
      if (s.name == "tok_embeddings") vectors += c.dim, matrix += shared ? n : 0;
      else if (s.shape.size() == 2) matrix += n;
      else vectors += n;
    }
    EXPECT_EQ(matrix, 6 * (2 * 288 * 288 + 2 * 96 * 288 + 3 * 768 * 288) + 32000 * 288);
    EXPECT_EQ(llm::decode_weight_bytes(c, WeightStorage::inputs), 4 * (matrix + vectors));
    EXPECT_EQ(llm::decode_weight_bytes(c, WeightStorage::fp32), 4 * (matrix + vectors));
    EXPECT_EQ(llm::decode_weight_bytes(c, WeightStorage::bf16), 2 * matrix + 4 * vectors);
    EXPECT_EQ(llm::decode_weight_bytes(c, WeightStorage::fp16), 2 * matrix + 4 * vectors);
    // int8: a byte a weight plus an fp16 scale (the default) or fp32 scale per block.
    EXPECT_EQ(llm::decode_weight_bytes(c, WeightStorage::int8, 32), matrix + 2 * (matrix / 32) + 4 * vectors);
    EXPECT_EQ(llm::decode_weight_bytes(c, WeightStorage::int8, 16), matrix + 2 * (matrix / 16) + 4 * vectors);
    EXPECT_EQ(llm::decode_weight_bytes(c, WeightStorage::int8, 32, DType::FP32),
              matrix + 4 * (matrix / 32) + 4 * vectors);
  }
}

// ---- the CLI

int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

TEST(WeightsCli, GenerateWithInt8Weights) {
  const std::string ckpt = byte_vocab_checkpoint("generate_weights");
  CliResult r = run_cli({"generate", "--checkpoint", ckpt, "--weights", "int8", "--block", "4", "--steps", "40",
                         "--temperature", "0", "--threads", "1"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_GT(r.out.size(), 20u) << r.out;  // 39 byte tokens, some printed as escapes
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("int8 weights"), std::string::npos) << r.err;
  CliResult fp32 = run_cli({"generate", "--checkpoint", ckpt, "--steps", "40", "--temperature", "0"}, 120);
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_NE(fp32.err.find("fp32 weights"), std::string::npos) << fp32.err;

  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Bad& b : {Bad{{"--weights", "bogus"}, "unknown weight storage 'bogus'"},
                       Bad{{"--weights", "int8"}, "int8 block size 32 must divide dim 64 and hidden_dim 172"},
                       Bad{{"--weights", "int8", "--block", "0"}, "must be positive"},
                       Bad{{"--weights", "int8", "--block", "5"}, "int8 block size 5 must divide"},
                       Bad{{"--weights", "bf16", "--block", "4"}, "block size is for int8 or int4 weights, not bf16"}}) {
    std::vector<std::string> args{"generate", "--checkpoint", ckpt, "--steps", "5"};
    args.insert(args.end(), b.args.begin(), b.args.end());
    r = run_cli(args, 60);
    EXPECT_EQ(r.exit_code, 2) << b.message;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
}

// Counted by hand for dim 4, hidden 8, 2 layers, 2 heads, 1 kv head
// (kv_dim 2), vocab 10, 3 tokens: layer matrices 2·16 + 2·8 + 3·32 = 144
// per token, 2·2·144·3 = 1728; classifier once, 2·40 = 80; causal pairs
// 1+2+3 = 6, attention 2 products · 2 FLOPs · 2 layers · dim 4 · 6 = 192.
TEST(WeightsCli, PrefillFlopsCountedByHand) {
  llm::LlamaConfig c;
  c.dim = 4, c.hidden = 8, c.layers = 2, c.heads = 2, c.kv_heads = 1, c.vocab = 10, c.seq = 16;
  EXPECT_EQ(llm::prefill_flops(c, 3), 1728.0 + 80.0 + 192.0);
}

TEST(WeightsCli, BenchGenerateJson) {
  // tiny's hidden 172 takes blocks of 4 at most, hence --block 4.
  CliResult r = run_cli({"bench", "generate", "--config", "tiny", "--weights", "int8", "--block", "4", "--steps", "8",
                         "--prompt-tokens", "8", "--reps", "1", "--threads", "1", "--json"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::string last;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) if (!l.empty()) last = l;
  const nlohmann::json j = nlohmann::json::parse(last);
  EXPECT_EQ(j.at("model"), "tiny");
  EXPECT_EQ(j.at("weights"), "int8");
  EXPECT_EQ(j.at("block"), 4);
  EXPECT_EQ(j.at("threads"), 1);
  EXPECT_EQ(j.at("prompt_tokens"), 8);
  EXPECT_EQ(j.at("steps"), 8);
  EXPECT_EQ(j.at("decode_context"), 8);
  EXPECT_EQ(j.at("reps"), 1);
  EXPECT_EQ(j.at("weight_bytes_per_token"),
            llm::decode_weight_bytes(*llm::llama_preset("tiny"), WeightStorage::int8, 4));
  for (const char* k : {"prefill_tok_s", "prefill_ms", "decode_tok_s", "decode_ms_per_token", "decode_gb_s",
                        "compile_s", "load_s", "rss_compiled_mb", "max_rss_mb"})
    EXPECT_GT(j.at(k).get<double>(), 0) << k;
  EXPECT_NEAR(j.at("decode_gb_s").get<double>(),
              j.at("decode_tok_s").get<double>() * j.at("weight_bytes_per_token").get<double>() * 1e-9,
              1e-3 * j.at("decode_gb_s").get<double>() + 1e-3);
  // The fractions of the machine's limits, measured in the same run.
  for (const char* k : {"read_bandwidth_gb_s", "decode_bandwidth_fraction", "prefill_gflops", "peak_gflops",
                        "prefill_peak_fraction"})
    EXPECT_GT(j.at(k).get<double>(), 0) << k;
  EXPECT_EQ(j.at("peak_kind"), "fp32 FMA");  // int8 weights are widened to fp32 for the prompt's GEMMs
  EXPECT_EQ(j.at("prefill_precision"), "fp32");
  EXPECT_NEAR(j.at("decode_bandwidth_fraction").get<double>(),
              j.at("decode_gb_s").get<double>() / j.at("read_bandwidth_gb_s").get<double>(), 2e-3);
  EXPECT_NEAR(j.at("prefill_gflops").get<double>(),
              llm::prefill_flops(*llm::llama_preset("tiny"), 8) / (j.at("prefill_ms").get<double>() * 1e-3) * 1e-9,
              2e-3 * j.at("prefill_gflops").get<double>());

  // --prefill-precision bf16: measured against the bf16 peak.
  r = run_cli({"bench", "generate", "--config", "tiny", "--weights", "int8", "--block", "4", "--steps", "2",
               "--prompt-tokens", "8", "--reps", "1", "--threads", "1", "--prefill-precision", "bf16", "--json"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  last.clear();
  std::istringstream in2(r.out);
  for (std::string l; std::getline(in2, l);) if (!l.empty()) last = l;
  const nlohmann::json jb = nlohmann::json::parse(last);
  EXPECT_EQ(jb.at("prefill_precision"), "bf16");
  EXPECT_NE(jb.at("peak_kind"), "fp32 FMA");

  // A checkpoint works the same way; bad arguments are one-line errors.
  // When prompt and steps overflow seq_len (64), the decodes follow a shorter context.
  r = run_cli({"bench", "generate", "--checkpoint", random_llama2c_checkpoint("tiny", false), "--weights", "bf16",
               "--steps", "40", "--prompt-tokens", "64", "--reps", "1", "--json"}, 120);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bf16 weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"decode_context\": 24,"), std::string::npos) << r.out;
  for (auto args : std::vector<std::vector<std::string>>{
           {"--weights", "int8"},  // neither --checkpoint nor --config
           {"--config", "tiny", "--prompt-tokens", "65"},
           {"--config", "tiny", "--prompt-tokens", "8", "--steps", "64"},
           {"--config", "nope"},
           {"--config", "tiny", "--weights", "q4"}}) {
    args.insert(args.begin(), {"bench", "generate"});
    r = run_cli(args, 60);
    EXPECT_EQ(r.exit_code, 2) << args[2];
    EXPECT_EQ(lines(r.err), 1) << r.err;
  }
}

}  // namespace
}  // namespace milrt::test
