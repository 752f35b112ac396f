// milrt bench generate: prefill and decode speed of the KV-cache generator
// (src/llm/generator.h) on a checkpoint or a seeded random model. A rep is a
// prefill of --prompt-tokens random tokens, then --steps decodes of random
// tokens after it (the tokens fed do not change the work; when prompt and
// steps do not fit in seq_len together, the decodes follow an untimed prefill
// of the prompt's first seq_len - steps tokens instead); the figures are
// medians over --reps after one untimed warm-up rep. Loading and compiling
// (quantizing included) are timed separately and excluded from the speeds.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>

#include "commands.h"
#include "kernels/peak.h"
#include "kernels/threads.h"
#include "llm/checkpoint.h"
#include "llm/generator.h"
#include "milrt/error.h"

namespace milrt::cli {
namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The resident set now, in MB (0 where /proc is missing).
double resident_mb() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A JSON string literal for a file name or config (quotes and backslashes escaped).
std::string json_str(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) r += c;
  }
  return r + "\"";
}

}  // namespace

void add_bench_generate(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("generate", "Prefill and decode tok/s of the KV-cache generator");
  static std::string checkpoint, config, weights = "fp32", activations = "fp32", prefill_precision, scales;
  static int64_t block = 32, prompt_tokens = 256, steps = 128;
  static int reps = 3, threads = 0;
  static uint64_t seed = 1;
  static bool json = false;
  auto* ck = cmd->add_option("--checkpoint", checkpoint, "llama2.c checkpoint");
  auto* cf = cmd->add_option("--config", config, "random weights instead: stories15m | stories110m | stories15m-gqa | tiny");
  ck->excludes(cf);
  cmd->add_option("--weights", weights, "fp32 (the checkpoint in place), fp16, bf16, int8 or int4");
  auto* bl = cmd->add_option("--block", block, "int8, int4: elements of a weight row sharing a scale (default 32)");
  cmd->add_option("--scales", scales, "int8, int4: the block scales' dtype, fp16 (default) or fp32");
  cmd->add_option("--activations", activations,
                  "fp32 (default, exact) or int8: with --weights int8 or int4, decode quantizes the activations (not exact)");
  cmd->add_option("--prefill-precision", prefill_precision,
                  "the prompt's matrix products: fp32 or bf16 (default bf16 with --weights bf16, else fp32)");
  cmd->add_option("--prompt-tokens", prompt_tokens, "prompt length of the prefill (default 256)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--steps", steps, "decoded tokens after the prompt (default 128)")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->add_option("--reps", reps, "timed repetitions (default 3)")->check(CLI::Range(1, 100000));
  cmd->add_option("--seed", seed, "seed of the random weights and tokens (default 1)");
  cmd->add_option("--threads", threads, "threads (default MILRT_THREADS or all cores)");
  cmd->add_flag("--json", json, "end with one JSON object of the figures");
  add_profile_options(*cmd);
  cmd->callback([bl] {
    (void)profile_flags();  // checks that --trace FILE can be written before any work
    if (checkpoint.empty() == config.empty()) throw Error("bench generate: give --checkpoint FILE or --config NAME");
    const llm::GeneratorOptions opt =
        llm::parse_generator_options(weights, bl->count() ? std::optional<int64_t>(block) : std::nullopt, activations,
                                     prefill_precision, scales);
    if (threads > 0) kernels::set_num_threads(threads);

    auto t_load = std::chrono::steady_clock::now();
    llm::LlamaWeights w;
    if (!checkpoint.empty()) {
      w = llm::load_llama2c_checkpoint(checkpoint);
    } else {
      auto cfg = llm::llama_preset(config);
      if (!cfg) throw Error("bench generate: unknown --config '" + config + "'");
      w = llm::init_llama_weights(*cfg, seed);
    }
    const double load_s = since(t_load);
    const llm::LlamaConfig cfg = w.cfg;
    if (prompt_tokens > cfg.seq || steps >= cfg.seq)
      throw Error("bench generate: --prompt-tokens " + std::to_string(prompt_tokens) + " must be at most, and --steps " +
                  std::to_string(steps) + " below, the model's seq_len " + std::to_string(cfg.seq));
    // The context the decodes start from.
    const int64_t context = std::min(prompt_tokens, cfg.seq - steps);

    auto t_compile = std::chrono::steady_clock::now();
    llm::Generator gen(std::move(w), opt);
    gen.prepare(prompt_tokens);
    gen.prepare(context);
    const double compile_s = since(t_compile);
    const double rss_compiled_mb = resident_mb();  // the fp32 checkpoint is gone unless the plans read it

    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> token(0, int32_t(cfg.vocab - 1));
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens)), fed(static_cast<size_t>(steps));
    for (auto& t : prompt) t = token(rng);
    prompt[0] = 1;  // BOS, as a real prompt starts
    for (auto& t : fed) t = token(rng);

    std::vector<double> prefill_s, decode_s;
    for (int r = 0; r <= reps; ++r) {
      // Profiled: the timed repetitions, not the warm-up.
      if (r == 1 && profile_flags().on()) gen.set_profiling(true, !profile_flags().trace.empty());
      auto t0 = std::chrono::steady_clock::now();
      gen.prefill(prompt);
      const double p = since(t0);
      if (context < prompt_tokens) gen.prefill(std::vector<int32_t>(prompt.begin(), prompt.begin() + context));
      auto t1 = std::chrono::steady_clock::now();
      for (int32_t t : fed) gen.decode(t);
      const double d = since(t1);
      if (r > 0) prefill_s.push_back(p), decode_s.push_back(d);  // rep 0 warms caches and scratch
    }
    if (profile_flags().on()) {
      std::vector<std::pair<const Plan*, std::string>> plans{{&gen.decode_plan(), "profile of the decode plan (one token)"}};
      if (const Plan* p = gen.compiled_prefill(prompt_tokens))
        plans.push_back({p, "profile of the prefill plan (" + std::to_string(prompt_tokens) + " tokens)"});
      report_profiles(plans);
    }
    const double prefill_tok_s = double(prompt_tokens) / median(prefill_s);
    const double decode_tok_s = double(steps) / median(decode_s);
    const int64_t bytes = llm::decode_weight_bytes(cfg, opt.weights, opt.block, opt.scales);
    const double gb_s = double(bytes) * decode_tok_s * 1e-9;
    // The machine's limits, measured in the same run after the timed part:
    // decode against the read bandwidth (it streams every weight once per
    // token), prefill against the peak of the products it runs.
    const int nt_run = kernels::num_threads();
    const double read_gbs = kernels::measure_read_bandwidth_gbs(nt_run);
    const kernels::PeakKind peak_kind =
        llm::prefill_uses_bf16(opt) ? kernels::bf16_peak_kind() : kernels::PeakKind::fp32_fma;
    const double peak_gflops = kernels::measure_peak_gflops(peak_kind, nt_run);
    const double prefill_gflops = llm::prefill_flops(cfg, prompt_tokens) / median(prefill_s) * 1e-9;
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    const double max_rss_mb = double(ru.ru_maxrss) / 1024.0;
    const std::string model = checkpoint.empty() ? config : checkpoint;
    const int nt = kernels::num_threads();

    const char* prefill_math = llm::prefill_uses_bf16(opt) ? "bf16" : "fp32";
    const bool quantized = opt.weights == llm::WeightStorage::int8 || opt.weights == llm::WeightStorage::int4;
    // fp16 scales are the default; only the other kind is named.
    const std::string storage_note =
        quantized ? " (block " + std::to_string(opt.block) + (opt.scales == DType::FP16 ? "" : ", fp32 scales") + ")"
                  : "";
    std::printf("%s, %s weights%s%s, %s prefill: prefill %lld tokens %.1f tok/s; decode %lld tokens after %lld %.1f tok/s, %.1f MB of weights "
                "a token = %.2f GB/s; compile %.2f s, load %.2f s; RSS %.0f MB compiled, peak %.0f MB; medians of %d, %d thread%s\n",
                model.c_str(), weights.c_str(),
                storage_note.c_str(),
                activations == "int8" ? ", int8 activations" : "", prefill_math,
                (long long)prompt_tokens, prefill_tok_s, (long long)steps, (long long)context, decode_tok_s, double(bytes) * 1e-6, gb_s,
                compile_s, load_s, rss_compiled_mb, max_rss_mb, reps, nt, nt == 1 ? "" : "s");
    std::printf("  decode %.2f GB/s = %.0f%% of the measured read bandwidth %.1f GB/s; prefill %.1f GFLOP/s = %.1f%% of the "
                "measured %s peak %.0f GFLOP/s\n",
                gb_s, 100 * gb_s / read_gbs, read_gbs, prefill_gflops, 100 * prefill_gflops / peak_gflops,
                kernels::peak_kind_name(peak_kind), peak_gflops);
    if (json)
      std::printf("{\"model\": %s, \"weights\": \"%s\", \"activations\": \"%s\", \"prefill_precision\": \"%s\", \"block\": %lld, \"scales\": \"%s\", \"threads\": %d, \"prompt_tokens\": %lld, "
                  "\"steps\": %lld, \"decode_context\": %lld, \"reps\": %d, \"prefill_tok_s\": %.3f, \"prefill_ms\": %.4f, \"decode_tok_s\": %.3f, "
                  "\"decode_ms_per_token\": %.4f, \"weight_bytes_per_token\": %lld, \"decode_gb_s\": %.3f, "
                  "\"compile_s\": %.4f, \"load_s\": %.4f, \"rss_compiled_mb\": %.1f, \"max_rss_mb\": %.1f, "
                  "\"read_bandwidth_gb_s\": %.3f, \"decode_bandwidth_fraction\": %.4f, \"prefill_gflops\": %.3f, "
                  "\"peak_kind\": \"%s\", \"peak_gflops\": %.3f, \"prefill_peak_fraction\": %.4f}\n",
                  json_str(model).c_str(), weights.c_str(), activations.c_str(), prefill_math, (long long)opt.block,
                  quantized ? std::string(dtype_name(opt.scales)).c_str() : "none", nt, (long long)prompt_tokens,
                  (long long)steps, (long long)context, reps, prefill_tok_s, median(prefill_s) * 1e3, decode_tok_s, 1e3 / decode_tok_s,
                  (long long)bytes, gb_s, compile_s, load_s, rss_compiled_mb, max_rss_mb, read_gbs, gb_s / read_gbs,
                  prefill_gflops, kernels::peak_kind_name(peak_kind), peak_gflops, prefill_gflops / peak_gflops);
  });
}

}  // namespace milrt::cli
