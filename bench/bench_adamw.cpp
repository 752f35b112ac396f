// AdamW throughput on stories110m-sized parameters (not a test).
//
//   ./bench_adamw [--threads N] [--reps R]
//
// Reports, per thread count, the median (and best) of R runs of:
//   update   kernels::adamw_update_f32 over all params: 28 bytes per element
//            (read p, g, m, v; write p, m, v), GB/s = 28·n / time
//   norm     kernels::sum_squares_f32 over all grads: 4 bytes per element
//   step     llm::AdamW::step on the model's TensorMap (norm + update, per tensor)
// for each usable kernel path (MILRT_ISA=generic, avx2, avx512 as the CPU allows).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bench/timing.h"
#include "kernels/cpu_features.h"
#include "kernels/generic/adamw.h"
#include "kernels/threads.h"
#include "llm/checkpoint.h"
#include "llm/optimizer.h"

namespace k = milrt::kernels;


int main(int argc, char** argv) {
  int max_threads = k::num_threads(), reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) max_threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  milrt::llm::LlamaConfig cfg = *milrt::llm::llama_preset("stories110m");
  milrt::llm::LlamaWeights w = milrt::llm::init_llama_weights(cfg, 1);
  milrt::TensorMap grads;
  for (const auto& [name, t] : w.tensors) {
    milrt::Tensor g(milrt::DType::FP32, t.shape());
    float* p = g.mutable_ptr<float>();
    for (int64_t i = 0; i < g.numel(); ++i) p[i] = 1e-4f * float((i * 2654435761u) % 1000) - 0.05f;
    grads.emplace(name, g);
  }
  const int64_t n = cfg.param_count();
  // One flat copy for the kernel-only figures.
  std::vector<float> p(n, 0.01f), g(n, 0.001f), m(n, 0.0f), v(n, 0.0f);
  k::AdamWStep s{0.9f, 0.95f, 1e-8f, 1.0f, 3e-4f, 1.0f, 0.99997f};
  std::printf("stories110m: %lld params (%.2f GB moved per update); cpu: %s\n", (long long)n, 28.0 * n / 1e9,
              k::cpu_features_string().c_str());
  for (k::Isa isa : k::usable_isas()) {
    if (isa == k::Isa::amx) continue;  // AdamW has no AMX path: the same loop as avx512
    setenv("MILRT_ISA", std::string(k::isa_name(isa)).c_str(), 1);
    k::reload_isa();
    for (int threads = 1; threads <= max_threads; threads *= 2) {
      k::set_num_threads(threads);
      k::bench::Timing tu = k::bench::time_runs(reps, [&] { k::adamw_update_f32(p.data(), g.data(), m.data(), v.data(), n, s); });
      k::bench::Timing tn = k::bench::time_runs(reps, [&] { volatile double x = k::sum_squares_f32(g.data(), n); (void)x; });
      milrt::llm::AdamWConfig oc;
      oc.warmup = 0;
      milrt::llm::AdamW opt(oc, w.tensors);
      k::bench::Timing ts = k::bench::time_runs(reps, [&] { opt.step(w.tensors, grads); });
      std::printf("%s, threads %d (median | best): update %.1f ms %.1f GB/s | %.1f GB/s; norm %.1f ms %.1f GB/s | "
                  "%.1f GB/s; AdamW::step %.1f ms %.1f GB/s | %.1f GB/s\n",
                  std::string(k::isa_name(isa)).c_str(), threads, tu.median * 1e3, 28.0 * n / tu.median / 1e9,
                  28.0 * n / tu.best / 1e9, tn.median * 1e3, 4.0 * n / tn.median / 1e9, 4.0 * n / tn.best / 1e9,
                  ts.median * 1e3, 32.0 * n / ts.median / 1e9, 32.0 * n / ts.best / 1e9);
    }
  }
  return 0;
}
