// `milrt train --config seed-layer --engine ane-sim|ane`: the second seed's
// training loop through the Neural Engine backend (llm/ane_seed_training.h),
// separate from cmd_train.cpp's CPU trainer.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "llm/optimizer.h"

namespace milrt::cli {

struct EngineTrainArgs {
  std::string engine;          // "ane-sim" or "ane"
  uint32_t seed = 42;          // srand48 seed of the synthetic experiment
  int64_t steps = 0, accum = 1;
  llm::AdamWConfig adamw;      // the seed's recipe, as --config seed-layer's defaults make it
  std::string init;            // weights to start from (a seed-layer checkpoint.bin)
  bool quiet = false;
  int log_every = 10;
  const std::atomic<bool>* stop = nullptr;
  std::function<bool(const char*)> given;  // whether a flag was on the command line
  double loss_scale = 1;       // AneTrainOptions::loss_scale
  bool dynamic_weights = true; // AneTrainOptions::dynamic_weights (--ane-weights dynamic|constant)
};

// Refuses (one-line Error) what the engine path does not do, then trains and
// prints a line per logged step and a final report.
void run_seed_layer_on_engine(const EngineTrainArgs& a, int world_size);

}  // namespace milrt::cli
