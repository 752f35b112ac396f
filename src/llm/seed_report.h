// What `milrt train --config seed-layer` prints, after train_large.m: the
// start banner (parameters, size in fp16, optimizer, the FLOP split), the
// kernels the compiler made, and the final efficiency block over the whole
// run (its counters survive --resume, as the seed's survive its restarts).
#pragma once
#include <string>

#include "llm/optimizer.h"
#include "llm/run_record.h"
#include "llm/seed_kernels.h"
#include "llm/trainer.h"
#include "milrt/plan.h"

namespace milrt::llm {

// `precision`: fp32 | bf16 | fp16, as --precision names it.
std::string seed_layer_banner(const SeedLayerConfig& cfg, const TrainOptions& opt, const std::string& precision);
// One line per plan: its kernel count, then per kernel family (the kernel
// name up to ':') how many steps and their FLOPs, largest first.
std::string plan_kernel_summary(const Plan& step, const Plan& eval, double compile_ms);
// `totals`: the run record after the last save (every process of the run).
std::string seed_layer_final_report(const SeedLayerConfig& cfg, const TrainLog& log, const RunRecord& totals);

}  // namespace milrt::llm
