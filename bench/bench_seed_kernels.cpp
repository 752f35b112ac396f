// The second seed's six training kernels (src/llm/seed_kernels.h) compiled
// into plans at a chosen size (default: the seed's full layer, DIM 768,
// HIDDEN 2048, HEADS 12, SEQ 512): compile time, median run time, GFLOP/s,
// peak arena vs the sum of intermediates, the kernels each plan runs, and
// optionally the reference executor on the same input.
//
//   build/bench_seed_kernels [--dim 768 --hidden 2048 --heads 12 --seq 512]
//                            [--runs 10] [--vs-reference] [--json]
//
// The seed's Apple compiler needs seconds per kernel; its ANE runs fwdAttn in
// a few ms. Weights are random (the figures do not depend on their values).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "llm/seed_kernels.h"
#include "milrt/plan.h"
#include "milrt/reference.h"

namespace {
using namespace milrt;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median_seconds(int runs, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor random_tensor(Shape s, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> n(0, scale);
  Tensor t(DType::FP16, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), n(rng));
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Compile and run the second seed's six layer kernels as milrt plans");
  int dim = 768, hidden = 2048, heads = 12, seq = 512, runs = 10;
  bool vs_reference = false, json = false;
  app.add_option("--dim", dim);
  app.add_option("--hidden", hidden);
  app.add_option("--heads", heads);
  app.add_option("--seq", seq);
  app.add_option("--runs", runs)->check(CLI::PositiveNumber);
  app.add_flag("--vs-reference", vs_reference, "also time the reference executor (slow at full size)");
  app.add_flag("--json", json, "end with one JSON object of the figures");
  CLI11_PARSE(app, argc, argv);

  try {
    llm::SeedLayerConfig cfg{dim, hidden, heads, seq};
    std::mt19937_64 rng(1);
    llm::SeedLayerWeights w;
    w.rms1 = random_tensor({dim}, rng, 1.0);
    w.rms2 = random_tensor({dim}, rng, 1.0);
    double sd = 1.0 / std::sqrt(double(dim)), sh = 1.0 / std::sqrt(double(hidden));
    w.wq = random_tensor({dim, dim}, rng, sd);
    w.wk = random_tensor({dim, dim}, rng, sd);
    w.wv = random_tensor({dim, dim}, rng, sd);
    w.wo = random_tensor({dim, dim}, rng, sd);
    w.w1 = random_tensor({hidden, dim}, rng, sd);
    w.w3 = random_tensor({hidden, dim}, rng, sd);
    w.w2 = random_tensor({dim, hidden}, rng, sh);

    struct Kernel { std::string name; Program program; double flops; };
    const double D = dim, H = hidden, S = seq, SC = double(heads) * seq;
    // Matrix-product flops (2 per multiply-add) of each kernel, from the seed's structure
    // (sdpa_bwd1 recomputes the scores; element-wise work is not counted).
    std::vector<Kernel> kernels = {
        {"sdpa_fwd_taps", llm::seed_sdpa_fwd_taps(cfg, w), 2 * S * D * D * 4 + 2 * 2 * SC * S * (D / heads)},
        {"ffn_fwd_taps", llm::seed_ffn_fwd_taps(cfg, w), 2 * S * D * H * 3},
        {"ffn_bwd", llm::seed_ffn_bwd(cfg, w), 2 * S * D * H * 3},
        {"qkv_bwd", llm::seed_qkv_bwd(cfg, w), 2 * S * D * D * 3},
        {"sdpa_bwd1", llm::seed_sdpa_bwd1(cfg, w), 2 * S * D * D + 3 * 2 * SC * S * (D / heads)},
        {"sdpa_bwd2", llm::seed_sdpa_bwd2(cfg), 2 * 2 * SC * S * (D / heads)},
    };

    std::string js = "{\"dim\": " + std::to_string(dim) + ", \"hidden\": " + std::to_string(hidden) +
                     ", \"heads\": " + std::to_string(heads) + ", \"seq\": " + std::to_string(seq) +
                     ", \"runs\": " + std::to_string(runs) + ", \"kernels\": [";
    for (size_t k = 0; k < kernels.size(); ++k) {
      const Kernel& K = kernels[k];
      const Param& x = K.program.functions.at(0).params.at(0);
      TensorMap in{{x.name, random_tensor(x.type.shape, rng, 1.0)}};
      auto t0 = Clock::now();
      Plan plan = compile(K.program);
      double compile_s = seconds_since(t0);
      plan.run(in);  // warm-up: first touch of the arena and weights
      double run_s = median_seconds(runs, [&] { plan.run(in); });
      double ref_s = 0;
      if (vs_reference) ref_s = median_seconds(1, [&] { run_reference(K.program, "main", in); });
      std::vector<Plan::StepInfo> steps = plan.steps();
      std::printf("%-14s compile %7.1f ms  run %9.3f ms  %7.1f GFLOP/s  %3zu kernels  arena %6.2f MiB of %6.2f MiB "
                  "intermediates",
                  K.name.c_str(), compile_s * 1e3, run_s * 1e3, K.flops / run_s * 1e-9, steps.size(),
                  double(plan.arena_bytes()) / (1 << 20), double(plan.intermediate_bytes()) / (1 << 20));
      if (vs_reference) std::printf("  reference %8.1f ms (%.0fx)", ref_s * 1e3, ref_s / run_s);
      std::printf("\n");
      js += std::string(k ? ", " : "") + "{\"name\": \"" + K.name + "\", \"compile_ms\": " +
            std::to_string(compile_s * 1e3) + ", \"run_ms\": " + std::to_string(run_s * 1e3) +
            ", \"gflops\": " + std::to_string(K.flops / run_s * 1e-9) + ", \"steps\": " +
            std::to_string(steps.size()) + ", \"arena_bytes\": " + std::to_string(plan.arena_bytes()) +
            ", \"intermediate_bytes\": " + std::to_string(plan.intermediate_bytes()) +
            (vs_reference ? ", \"reference_ms\": " + std::to_string(ref_s * 1e3) : std::string()) + "}";
    }
    js += "]}";
    if (json) std::printf("%s\n", js.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
