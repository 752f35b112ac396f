// milrt train --config seed-layer --engine ane-sim|ane: see train_engine.h.
#include <algorithm>
#include <cstdio>
#include <fmt/format.h>
#include <memory>
#include <vector>

#include "ane/sim_device.h"
#include "llm/ane_seed_training.h"
#include "llm/seed_layer_builder.h"
#include "llm/seed_report.h"
#include "llm/train_tasks.h"
#include "milrt/error.h"
#include "train_engine.h"
#if defined(__APPLE__)
#include "ane/macos/ane_private.h"
#endif

namespace milrt::cli {
namespace {

// What the CPU trainer does and this path does not: a run directory
// (checkpoints, resume), profiles of compiled plans, data options, MPI.
void refuse_unsupported(const EngineTrainArgs& a, int world_size) {
  const std::string e = "--engine " + a.engine;
#if !defined(__APPLE__)
  if (a.engine == "ane") throw Error("train: the Neural Engine needs macOS; use --engine ane-sim");
#endif
  if (world_size > 1)
    throw Error(fmt::format("train: {} runs in one process (one device), not as {} MPI ranks", e, world_size));
  if (a.given("--precision"))
    throw Error("train: " + e + " computes in fp16, the seed's numerics: --precision does not apply");
  for (const char* flag : {"--out", "--resume", "--overwrite", "--save-every", "--zero", "--recompute", "--emit-mil",
                           "--profile", "--trace", "--batch", "--seq", "--data", "--tokenizer"})
    if (a.given(flag))
      throw Error(fmt::format("train: {} does not take {} (it trains the seed's one batch and keeps no run directory)",
                              e, flag));
}

llm::AneDeviceFactory device_factory(const std::string& engine) {
#if defined(__APPLE__)
  // The chip through the private framework: built and syntax-checked only,
  // never run by this project's tests. Its compile budget is per process.
  if (engine == "ane")
    return [] {
      auto chip = std::make_shared<milrt_ane_device>();
      char err[512] = "";
      if (milrt_ane_open_private(chip.get(), err, sizeof err) != 0) throw Error(std::string("train: ") + err);
      return chip;
    };
#endif
  return [] {
    auto sim = std::make_shared<ane::SimDevice>();
    return std::shared_ptr<milrt_ane_device>(sim, sim->table());
  };
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::string step_line(const llm::AneTrainRow& r, int64_t steps) {
  return fmt::format("step {}/{} | loss {:.6f} | {:.1f} ms/step (lowering {:.1f}, device {:.1f}, cpu {:.1f}) | "
                     "compiles {} | evictions {} | restarts {}\n",
                     r.step, steps, r.loss, r.ms, r.lower_ms, r.device_ms, r.cpu_ms, r.totals.compiles,
                     r.totals.evictions, r.totals.restarts);
}

}  // namespace

void run_seed_layer_on_engine(const EngineTrainArgs& a, int world_size) {
  refuse_unsupported(a, world_size);
  const llm::SeedLayerConfig cfg;
  TensorMap all = llm::seed_layer_synthetic_inputs(cfg, a.seed);
  TensorMap weights = !a.init.empty() ? llm::load_seed_layer_weights(a.init, cfg) : TensorMap{};
  if (weights.empty())
    for (const llm::WeightSpec& w : llm::seed_layer_weight_specs(cfg)) weights[w.name] = all.at(w.name);

  llm::AneTrainOptions o;
  o.steps = a.steps;
  o.accum = a.accum;
  o.adamw = a.adamw;
  o.adamw.total_steps = a.steps;
  o.stop = a.stop;
  o.loss_scale = a.loss_scale;
  o.dynamic_weights = a.dynamic_weights;
  int64_t restarts = 0;
  o.on_step = [&](const llm::AneTrainRow& r) {
    const bool restarted = r.totals.restarts != restarts;
    restarts = r.totals.restarts;
    if (!a.quiet && (r.step == 1 || r.step % std::max(1, a.log_every) == 0 || r.step == a.steps || restarted))
      std::printf("%s", step_line(r, a.steps).c_str()), std::fflush(stdout);
  };
  llm::TrainOptions shown;  // for the banner only
  shown.steps = a.steps, shown.accum = a.accum, shown.adamw = o.adamw;
  const std::string scale = a.loss_scale == 1 ? "no loss scale" : fmt::format("dY scaled by {:g}", a.loss_scale);
  std::printf("%s", llm::seed_layer_banner(cfg, shown, "fp16 on " + a.engine + " (the seed's six kernels, fp32 master weights, " +
                                                          scale + ")")
                        .c_str());
  std::printf("engine: %s | 6 kernels, %s | budget %zu compiles per device, then an in-process restart\n",
              a.engine.c_str(),
              o.dynamic_weights ? "each compiled once, weights packed into their inputs (--ane-weights dynamic)"
                                : "5 rebuilt with the weights every update (--ane-weights constant)",
              o.compile_budget);
  std::fflush(stdout);

  llm::AneTrainLog log = llm::train_seed_layer_ane(cfg, all.at("x"), all.at("target"), weights, o, device_factory(a.engine));

  std::vector<double> ms, lower, device, cpu;
  for (const auto& r : log.rows) ms.push_back(r.ms), lower.push_back(r.lower_ms), device.push_back(r.device_ms), cpu.push_back(r.cpu_ms);
  std::printf("=== %s efficiency report ===\n", a.engine.c_str());
  std::printf("total steps:  %zu optimizer steps x %lld micro-steps\n", log.rows.size(), (long long)a.accum);
  std::printf("wall time:    %.1f s\n", log.wall_ms / 1000);
  std::printf("per step:     median %.1f ms (lowering %.1f, device %.1f, cpu %.1f)\n", median(ms), median(lower),
              median(device), median(cpu));
  std::printf("compiles:     %lld | evictions %lld | restarts %lld\n", (long long)log.totals.compiles,
              (long long)log.totals.evictions, (long long)log.totals.restarts);
  if (!log.rows.empty())
    std::printf("loss:         %.6f -> %.6f\n", log.rows.front().loss, log.rows.back().loss);
  if (log.interrupted) std::printf("interrupted after step %zu (nothing saved: no run directory)\n", log.rows.size());
}

}  // namespace milrt::cli
