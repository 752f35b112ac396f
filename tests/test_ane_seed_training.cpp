// The second seed's training loop through the Neural Engine backend on the
// simulated device (llm/ane_seed_training.h), against the CPU trainer's
// fp16 seed-layer program (`milrt train --config seed-layer --precision
// fp16`): the same layer, loss and Adam recipe, differentiated by autodiff
// instead of the seed's hand-written backward kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include "ane/sim_device.h"
#include "llm/ane_seed_training.h"
#include "llm/seed_layer_builder.h"
#include "llm/train_tasks.h"
#include "llm/trainer.h"
#include "milrt/error.h"
#include "support/test_util.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {

using namespace milrt::llm;

// dim 64, hidden 128, 4 heads, seq 32 (a multiple of 32, the engine's rows).
SeedLayerConfig small_layer() { return SeedLayerConfig{64, 128, 4, 32}; }
constexpr int64_t kSteps = 10;

AneDeviceFactory sim_devices(size_t max_compiles = 119) {
  return [max_compiles] {
    auto sim = std::make_shared<ane::SimDevice>(ane::SimLimits{max_compiles});
    return std::shared_ptr<milrt_ane_device>(sim, sim->table());
  };
}

struct AneRun {
  AneTrainLog log;
  TensorMap weights;
};

// The seed's constant weights unless `dynamic` (the trainer's default).
AneRun run_ane(size_t budget = 119, size_t resident = 6, int64_t steps = kSteps, double loss_scale = 1,
               bool dynamic = false) {
  const SeedLayerConfig c = small_layer();
  TensorMap all = seed_layer_synthetic_inputs(c, 42);
  AneRun r;
  for (const WeightSpec& w : seed_layer_weight_specs(c)) r.weights[w.name] = all.at(w.name).clone();
  AneTrainOptions o;
  o.steps = steps;
  o.adamw = seed_adamw(steps);
  o.compile_budget = budget;
  o.max_resident = resident;
  o.loss_scale = loss_scale;
  o.dynamic_weights = dynamic;
  r.log = train_seed_layer_ane(c, all.at("x"), all.at("target"), r.weights, o, sim_devices(budget));
  return r;
}

// The independent path: the CPU trainer on the fp16 program, same recipe.
struct CpuRun {
  TrainLog log;
  TensorMap weights;
};

CpuRun run_cpu() {
  TrainTask t = seed_layer_task(small_layer(), 42, DType::FP16);
  CpuRun r;
  r.weights = t.init_weights;
  TrainOptions o;
  o.steps = kSteps;
  o.accum = 1;
  o.adamw = seed_adamw(kSteps);
  o.eval_batches = 1;
  r.log = train(t, o, r.weights);
  return r;
}

bool same_weights(const TensorMap& a, const TensorMap& b) {
  for (const auto& [name, t] : a)
    if (!t.same_bytes(b.at(name))) return false;
  return a.size() == b.size();
}

// Tolerances. Both runs round every activation to fp16 (relative 2^-11 ≈
// 4.9e-4) but in different places: the engine rounds the seed's kernel
// outputs and its inputs (dy, dx2 ...), the CPU program rounds per op of
// its own op sequence and scales the loss by 2^15 before the backward pass.
// The output y (|y| ≈ 0.1–1) then differs by a few fp16 ulps per element:
// relative ε ≈ 3·2^-11 ≈ 1.5e-3. The loss is mean(e²) with e = y − target,
// so ΔL ≈ 2·mean(e·δy): at worst (every δy with the sign of e)
// |ΔL| / L ≈ 2ε = 3e-3; rounding errors have independent signs, so over
// N = seq·dim = 2048 elements the sum shrinks by about √N ≈ 45, to
// about 7e-5 (measured: at most 8e-5 over the ten steps). Ten Adam steps
// add a difference where elements with gradients within rounding of zero
// move opposite ways, small against the loss's 5x decrease. kLossRel = 1e-3
// allows about 15 times the independent-sign estimate and a third of the
// worst case. A wrong gradient term moves the loss by far more (measured:
// RMSNorm's backward without its mean term 5e-2, dW3 left out 0.27, the
// residual's dy left out of dx2 1.4).
constexpr double kLossRel = 1e-3;
// The weights: ten updates of each element are ±lr·(m̂/√v̂) ≈ ±lr, so any
// two runs from the same start stay within 2·10·lr of each other whatever
// their gradients: a bound on |Δw| would prove nothing. What the gradients
// decide is the direction of the updates, so the test compares the update
// vectors u = w10 − w0 of each tensor: ‖u_ane − u_cpu‖ ≤ kUpdateRel ‖u_cpu‖.
// Each update of an element is about ±lr (Adam's m̂/√v̂ has magnitude
// about 1 while the gradient's sign holds), so if a fraction f of the
// elements got the opposite sign at every step, ‖u_ane − u_cpu‖ / ‖u_cpu‖
// would be about 2√f. Only gradients within fp16 rounding of zero can
// disagree; kUpdateRel = 0.05 allows f up to 6e-4 (measured: at most 0.01,
// f ≈ 3e-5). A dropped or wrong gradient term turns a tensor's update
// around or leaves it at zero (relative difference near 1 or more).
constexpr double kUpdateRel = 0.05;

// The gradients' global norm (AdamW::step's, after unscaling) is dominated
// by the largest elements, each a few fp16 ulps off (relative k·2^-11 with
// k ≈ 5: 2.5e-3 if all erred one way; measured at most 6e-4).
constexpr double kNormRel = 5e-3;

double update_difference(const Tensor& w0, const Tensor& a, const Tensor& b) {
  const float *p0 = w0.ptr<float>(), *pa = a.ptr<float>(), *pb = b.ptr<float>();
  double num = 0, den = 0;
  for (int64_t i = 0; i < w0.numel(); ++i) {
    const double ua = double(pa[i]) - p0[i], ub = double(pb[i]) - p0[i];
    num += (ua - ub) * (ua - ub);
    den += ub * ub;
  }
  return std::sqrt(num / den);
}

TEST(AneSeedTraining, MatchesTheCpuTrainerForTenSteps) {
  const AneRun ane = run_ane();
  const CpuRun cpu = run_cpu();
  ASSERT_EQ(ane.log.rows.size(), size_t(kSteps));
  ASSERT_EQ(cpu.log.rows.size(), size_t(kSteps));
  double worst = 0;
  for (int64_t i = 0; i < kSteps; ++i) {
    const double a = ane.log.rows[size_t(i)].loss, b = cpu.log.rows[size_t(i)].loss;
    worst = std::max(worst, std::abs(a - b) / b);
    const double ga = ane.log.rows[size_t(i)].grad_norm, gb = cpu.log.rows[size_t(i)].grad_norm;
    std::printf("[ane-seed] step %2lld loss ane-sim %.6f (%.1f ms) cpu fp16 %.6f (%.1f ms) rel %.2e | grad norm %.4e %.4e rel %.2e\n",
                (long long)i + 1, a, ane.log.rows[size_t(i)].ms, b, cpu.log.rows[size_t(i)].ms, std::abs(a - b) / b, ga, gb,
                std::abs(ga - gb) / gb);
    EXPECT_NEAR(a, b, kLossRel * b) << "step " << i + 1;
    EXPECT_NEAR(ga, gb, kNormRel * gb) << "step " << i + 1;
  }
  std::printf("[ane-seed] worst loss difference %.2e (bound %.0e)\n", worst, kLossRel);
  EXPECT_LT(ane.log.rows.back().loss, 0.8 * ane.log.rows.front().loss) << "the layer learns on the device";

  const TensorMap w0 = seed_layer_synthetic_inputs(small_layer(), 42);
  for (const auto& [name, w] : cpu.weights) {
    const double d = update_difference(w0.at(name), ane.weights.at(name), w);
    std::printf("[ane-seed] %-8s update difference %.3f\n", name.c_str(), d);
    EXPECT_LT(d, kUpdateRel) << name;
  }
  // Six compiles on the first step, then the five weight-bearing kernels per step.
  EXPECT_EQ(ane.log.totals.compiles, 6 + 5 * (kSteps - 1));
  EXPECT_EQ(ane.log.totals.restarts, 0);
  EXPECT_EQ(ane.log.totals.evictions, 0);
}

// Dynamic weights (llm/seed_dynamic_weights.h): each kernel compiled once
// per run, the weights written into the kernels' inputs every step. The
// dynamic kernels give their constant twins' bits on the simulator
// (test_ane_dynamic_weights) and the packed weights are the same fp16
// roundings of the same master weights, so the ten steps must equal the
// constant-weight run bit for bit, and so match the CPU trainer within the
// tolerances above. Six compiles also fit a budget of six, where constant
// weights would restart before every step.
TEST(AneSeedTraining, DynamicWeightsCompileEachKernelOnce) {
  const AneRun constant = run_ane();
  const AneRun dynamic = run_ane(119, 6, kSteps, 1, true);
  const CpuRun cpu = run_cpu();
  ASSERT_EQ(dynamic.log.rows.size(), size_t(kSteps));
  for (size_t i = 0; i < size_t(kSteps); ++i) {
    const AneTrainRow &d = dynamic.log.rows[i], &c = constant.log.rows[i];
    std::printf("[ane-seed] step %2zu constant weights %.1f ms (lowering %.1f, device %.1f), dynamic %.1f ms "
                "(lowering %.1f, device %.1f), compiles %lld -> %lld\n",
                i + 1, c.ms, c.lower_ms, c.device_ms, d.ms, d.lower_ms, d.device_ms, (long long)c.totals.compiles,
                (long long)d.totals.compiles);
    EXPECT_EQ(d.loss, c.loss) << "step " << i + 1;
    EXPECT_EQ(d.grad_norm, c.grad_norm) << "step " << i + 1;
    EXPECT_NEAR(d.loss, cpu.log.rows[i].loss, kLossRel * cpu.log.rows[i].loss) << "step " << i + 1;
    EXPECT_EQ(d.totals.compiles, 6) << "step " << i + 1;
  }
  EXPECT_TRUE(same_weights(dynamic.weights, constant.weights));
  EXPECT_EQ(dynamic.log.totals.compiles, 6);
  EXPECT_EQ(dynamic.log.totals.restarts, 0);
  EXPECT_EQ(dynamic.log.totals.evictions, 0);

  const AneRun tight = run_ane(6, 6, 4, 1, true);
  EXPECT_EQ(tight.log.totals.compiles, 6);
  EXPECT_EQ(tight.log.totals.restarts, 0);
  // Three resident kernels: every kernel recompiled at every use, as with
  // constant weights, and the same bits as the run keeping all six.
  const AneRun evicting = run_ane(119, 3, 4, 1, true);
  const AneRun base4 = run_ane(119, 6, 4, 1, true);
  EXPECT_EQ(evicting.log.totals.compiles, 6 * 4);
  EXPECT_TRUE(same_weights(evicting.weights, base4.weights));
}

// A loss scale multiplies dy before fp16 and divides the gradients after:
// the losses and the gradients' norm (a forgotten unscale would be 1024
// times off; Adam's update alone would not show it) stay the CPU trainer's.
TEST(AneSeedTraining, LossScaleChangesOnlyTheRounding) {
  const AneRun scaled = run_ane(119, 6, 4, 1024);
  const CpuRun cpu = run_cpu();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(scaled.log.rows[i].loss, cpu.log.rows[i].loss, kLossRel * cpu.log.rows[i].loss) << "step " << i + 1;
    EXPECT_NEAR(scaled.log.rows[i].grad_norm, cpu.log.rows[i].grad_norm, kNormRel * cpu.log.rows[i].grad_norm)
        << "step " << i + 1;
  }
  expect_error_containing([&] { run_ane(119, 6, 1, 1e30); }, "not finite at step 1 (loss scale 1e+30)");
}

// A budget of 12 compiles: step 1 uses 6, step 2 reaches 11, step 3 would
// pass 12, so every second step starts on a fresh device. The weights and
// losses equal an uninterrupted run's bit for bit; so do those of a run
// keeping only three kernels loaded (every kernel recompiled at every use).
TEST(AneSeedTraining, RestartsAndEvictionsChangeNothing) {
  const AneRun base = run_ane(119, 6, 5);
  const AneRun restarted = run_ane(12, 6, 5);
  EXPECT_EQ(restarted.log.totals.restarts, 2);  // before steps 3 and 5
  EXPECT_EQ(restarted.log.totals.compiles, 6 + 5 + 6 + 5 + 6);
  EXPECT_TRUE(same_weights(base.weights, restarted.weights));
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(restarted.log.rows[i].loss, base.log.rows[i].loss) << "step " << i + 1;

  const AneRun evicting = run_ane(119, 3, 5);
  EXPECT_EQ(evicting.log.totals.compiles, 6 * 5);
  // Step 1 fills three slots and evicts for the other three kernels; each
  // later step starts with only sdpa_bwd2 loaded (new weights replace the
  // others' programs, which is no eviction) and evicts four times.
  EXPECT_EQ(evicting.log.totals.evictions, 3 + 4 * 4);
  EXPECT_TRUE(same_weights(base.weights, evicting.weights));
}

TEST(AneSeedTraining, RefusesWhatTheEngineCannotDo) {
  const SeedLayerConfig c{64, 128, 4, 48};
  TensorMap all = seed_layer_synthetic_inputs(c, 42);
  TensorMap w;
  for (const WeightSpec& s : seed_layer_weight_specs(c)) w[s.name] = all.at(s.name);
  AneTrainOptions o;
  o.steps = 1;
  o.adamw = seed_adamw(1);
  expect_error_containing([&] { train_seed_layer_ane(c, all.at("x"), all.at("target"), w, o, sim_devices()); },
                          "not a multiple of 32");
  // A budget below one step's six compiles can never be met, restart or not.
  expect_error_containing([&] { run_ane(5, 6, 1); }, "needs 6 compiles, a device allows 5");
  // A device whose budget is spent even when fresh (the chip's is per process).
  const SeedLayerConfig s = small_layer();
  TensorMap in = seed_layer_synthetic_inputs(s, 42);
  TensorMap ws;
  for (const WeightSpec& sp : seed_layer_weight_specs(s)) ws[sp.name] = in.at(sp.name);
  auto shared = std::make_shared<ane::SimDevice>(ane::SimLimits{12});
  AneDeviceFactory same = [shared] { return std::shared_ptr<milrt_ane_device>(shared, shared->table()); };
  o.steps = 3;
  o.compile_budget = 12;
  o.dynamic_weights = false;  // with dynamic weights six compiles serve every step: no restart to refuse
  expect_error_containing([&] { train_seed_layer_ane(s, in.at("x"), in.at("target"), ws, o, same); },
                          "restart it from a checkpoint");
}

// The CLI at the seed's size (the only size --config seed-layer has): one
// micro-step on ane-sim, about 40 s here (the simulator evaluates each
// kernel with the reference executor). The first step's loss is the forward
// pass at the initial weights, so the CPU trainer's fp16 program gives it
// independently; the refusals are one line each.
TEST(AneSeedTrainingCli, OneStepAtTheSeedsSizeAndRefusals) {
  CliResult r = run_cli({"train", "--config", "seed-layer", "--engine", "ane-sim", "--steps", "1", "--accum", "1"}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (const char* s : {"precision fp16 on ane-sim", "budget 119 compiles per device", "=== ane-sim efficiency report",
                        "compiles 6 | evictions 0 | restarts 0", "each compiled once, weights packed into their inputs"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  const size_t at = r.out.find("step 1/1 | loss ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double loss = std::atof(r.out.c_str() + at + std::strlen("step 1/1 | loss "));

  TrainTask t = seed_layer_task(SeedLayerConfig{}, 42, DType::FP16);
  TensorMap w = t.init_weights;
  TrainOptions o;
  o.steps = 1;
  o.adamw = seed_adamw(1);
  o.eval_batches = 1;
  const double want = train(t, o, w).rows.at(0).loss;
  std::printf("[ane-seed] seed size, step 1: ane-sim %.6f, cpu fp16 %.6f\n", loss, want);
  EXPECT_NEAR(loss, want, kLossRel * want);

  auto refused = [](const std::vector<std::string>& args, const char* why) {
    CliResult e = run_cli(args, 60);
    EXPECT_EQ(e.exit_code, 2) << e.out << e.err;
    EXPECT_NE(e.err.find(why), std::string::npos) << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
  };
  const std::vector<std::string> sim = {"train", "--config", "seed-layer", "--engine", "ane-sim", "--steps", "1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), sim.begin(), sim.end());
    return extra;
  };
  refused(with({"--precision", "fp32"}), "computes in fp16, the seed's numerics");
  refused(with({"--out", temp_dir("ane_seed_cli")}), "does not take --out");
  refused(with({"--resume"}), "does not take --resume");
  refused({"train", "--config", "tiny", "--engine", "ane-sim"}, "trains --config seed-layer only");
  refused({"train", "--config", "tiny", "--loss-scale", "2"}, "--loss-scale is for --engine ane-sim|ane");
  refused({"train", "--config", "tiny", "--ane-weights", "constant"}, "--ane-weights is for --engine ane-sim|ane");
#if !defined(__APPLE__)
  refused({"train", "--config", "seed-layer", "--engine", "ane"}, "the Neural Engine needs macOS");
#endif
}

}  // namespace
}  // namespace milrt::test
