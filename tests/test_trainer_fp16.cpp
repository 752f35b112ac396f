// fp16 training (LlamaProgramOptions::compute = FP16, dynamic loss scaling):
// the fp16 program's shape (fp32 master weights cast once, fp32 loss), its
// loss against the fp32 program's, training that reaches fp32's validation
// loss, overflowing steps skipped with the scale halved, and a resumed fp16
// run equal to an uninterrupted one bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "llm/checkpoint.h"
#include "llm/llama_builder.h"
#include "llm/train_tasks.h"
#include "milrt/error.h"
#include "milrt/plan.h"
#include "milrt/reference.h"
#include "support/test_util.h"
#include "support/tiny_training.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {

namespace fs = std::filesystem;
using namespace milrt::llm;

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(TrainerFp16, ProgramCastsEachMasterWeightOnceAndKeepsTheLossFp32) {
  const LlamaConfig cfg = tiny_llama_config();
  Program p = build_llama_loss(cfg, {2, 8, DType::FP16});
  const Function& f = *p.function("main");
  int casts = 0, fp16_ops = 0;
  for (const Op& op : f.ops) {
    if (op.type == "cast") ++casts;
    for (const auto& out : op.outputs)
      if (out.type.dtype == DType::FP16) ++fp16_ops;
  }
  const auto specs = llama_weight_specs(cfg);
  EXPECT_EQ(casts, int(specs.size()) + 1) << "one cast per weight, one for the logits";
  EXPECT_GT(fp16_ops, 40) << "the activations are fp16";
  for (const WeightSpec& w : specs) {
    auto it = std::find_if(f.params.begin(), f.params.end(), [&](const Param& q) { return q.name == w.name; });
    ASSERT_NE(it, f.params.end()) << w.name;
    EXPECT_EQ(it->type.dtype, DType::FP32) << w.name << " is the fp32 master copy";
  }
  auto scale = std::find_if(f.params.begin(), f.params.end(), [](const Param& q) { return q.name == "loss_scale"; });
  ASSERT_NE(scale, f.params.end());
  EXPECT_EQ(scale->type.dtype, DType::FP32);
  // The fp32 program has neither casts nor a loss scale.
  Program p32 = build_llama_loss(cfg, {2, 8});
  for (const Op& op : p32.function("main")->ops) EXPECT_NE(op.type, "cast");
  for (const Param& q : p32.function("main")->params) EXPECT_NE(q.name, "loss_scale");
  EXPECT_THROW(build_llama_loss(cfg, {2, 8, DType::BF16}), Error);
}

// Step 0: the same weights and batch through the fp32 program and the fp16
// one (scale 2^15, divided out exactly). The compiled plan rounds the fp16
// program's weights (the casts) but computes in fp32; the reference executor
// rounds every op's result to fp16 as the hardware does. Tolerances: fp16's
// relative step 2^-11 on logits of magnitude ~1 over 16 positions moves a
// cross-entropy of ~5.5 by well under 0.01 (plan) and 0.03 (per-op rounding).
TEST(TrainerFp16, LossAtStepZeroEqualsFp32WithinFp16Rounding) {
  const LlamaConfig cfg = tiny_llama_config();
  LlamaWeights w = init_llama_weights(cfg, 7);
  TensorMap in = w.tensors;
  Tensor tokens(DType::Int32, {2, 16}), targets(DType::Int32, {2, 16});
  for (int64_t i = 0; i < 32; ++i) tokens.set(size_t(i), double((i * 37 + 11) % 259)), targets.set(size_t(i), double((i * 53 + 5) % 259));
  in["tokens"] = tokens, in["targets"] = targets;
  const double want = compile(build_llama_loss(cfg, {2, 16})).run(in).at("loss").at(0);
  const double scale = 32768;
  in["loss_scale"] = Tensor::scalar(DType::FP32, scale);
  Program p16 = build_llama_loss(cfg, {2, 16, DType::FP16});
  const double plan16 = compile(p16).run(in).at("loss").at(0) / scale;
  const double ref16 = run_reference(p16, "main", in).at("loss").at(0) / scale;
  EXPECT_GT(want, 0.9 * std::log(259.0));
  EXPECT_NEAR(plan16, want, 0.01);
  EXPECT_NE(plan16, want) << "the fp16 program computed exactly as fp32: the casts did nothing";
  EXPECT_NEAR(ref16, want, 0.03);
}

TEST(TrainerFp16, TrainsToFp32ValidationLoss) {
  std::string dir = temp_dir("trainer_fp16_learns");
  std::shared_ptr<const Tokenizer> tok = byte_tokenizer();
  LlamaTaskOptions to = tiny_task_options(dir);
  TrainLog logs[2];
  for (int i = 0; i < 2; ++i) {
    to.compute = i == 0 ? DType::FP32 : DType::FP16;
    TrainTask task = llama_task(tiny_llama_config(), tok, to);
    TensorMap w = init_llama_weights(tiny_llama_config(), 3).tensors;
    logs[i] = train(task, tiny_train_options(120), w);
  }
  const double v32 = logs[0].rows.back().val_loss, v16 = logs[1].rows.back().val_loss;
  ::testing::Test::RecordProperty("val_loss_fp32", std::to_string(v32));
  ::testing::Test::RecordProperty("val_loss_fp16", std::to_string(v16));
  EXPECT_NEAR(logs[1].rows[0].loss, logs[0].rows[0].loss, 0.01);
  EXPECT_LT(v16, v32 * 1.1 + 0.05) << "fp16 " << v16 << " vs fp32 " << v32;
  EXPECT_LT(v16, 0.5 * logs[1].rows[0].loss) << "fp16 training learned";
  EXPECT_TRUE(logs[1].skipped_steps.empty()) << "2^15 overflowed on the tiny model";
  EXPECT_EQ(logs[1].loss_scale, 32768.0) << "120 steps: no doubling (window 200), no halving";
  EXPECT_EQ(logs[0].loss_scale, 1.0);
}

// A scale of 2^40 makes the logit gradients, scale * (p - onehot) / (B*T),
// overflow fp16 at the cast back from fp32: the first steps are skipped,
// each halving the scale, until it fits, and then the model trains.
TEST(TrainerFp16, HugeInitialScaleSkipsStepsThenTrains) {
  std::string dir = temp_dir("trainer_fp16_overflow");
  std::shared_ptr<const Tokenizer> tok = byte_tokenizer();
  LlamaTaskOptions to = tiny_task_options(dir);
  to.compute = DType::FP16;
  TrainTask task = llama_task(tiny_llama_config(), tok, to);
  TensorMap w = init_llama_weights(tiny_llama_config(), 3).tensors;
  const TensorMap w0 = init_llama_weights(tiny_llama_config(), 3).tensors;
  TrainOptions o = tiny_train_options(80);
  o.loss_scale = std::ldexp(1.0, 40);
  TrainLog log = train(task, o, w);
  // The first steps overflow in a row; near fp16's limit a later step may
  // overflow again (and be skipped too). No doubling: 80 steps < window 200.
  size_t k = 0;
  while (k < log.skipped_steps.size() && log.skipped_steps[k] == int64_t(k + 1)) ++k;
  ASSERT_GT(k, 0u) << "the first step did not overflow at scale 2^40";
  ASSERT_LT(k, 40u);
  ::testing::Test::RecordProperty("initial_skips", int(k));
  const size_t skips = log.skipped_steps.size();
  EXPECT_LT(skips, k + 4) << "training kept overflowing after the scale came down";
  EXPECT_EQ(log.loss_scale, std::ldexp(1.0, 40 - int(skips))) << "halved once per skipped step";
  for (const TrainLog::Row& r : log.rows) {
    const bool skipped = std::count(log.skipped_steps.begin(), log.skipped_steps.end(), r.step) > 0;
    EXPECT_EQ(std::isnan(r.grad_norm), skipped) << "step " << r.step;
    EXPECT_TRUE(std::isfinite(r.loss)) << "step " << r.step << ": the loss itself is fp32 and fine";
  }
  EXPECT_LT(log.rows.back().val_loss, 0.6 * log.rows.front().loss) << "training proceeded after the skips";
  bool changed = false;
  for (auto& [name, t] : w0)
    changed |= std::memcmp(t.data(), w.at(name).data(), t.nbytes()) != 0;
  EXPECT_TRUE(changed);
}

// Stopped after step 7 and resumed: equal to the uninterrupted run, with a
// scale window of 2 from 2^20 so the scale both grows and overflows (and is
// halved) within the 12 steps, on either side of the interruption.
TEST(TrainerFp16, ResumedRunEqualsUninterruptedRunBitForBit) {
  std::string root = temp_dir("trainer_fp16_resume");
  std::string data = write_tiny_corpus(root);
  std::shared_ptr<const Tokenizer> tok = byte_tokenizer();
  LlamaTaskOptions to;
  to.batch = 4;
  to.data = data;
  to.compute = DType::FP16;
  TrainOptions opt = tiny_train_options(12);
  opt.accum = 2;
  opt.eval_every = 4;
  opt.loss_scale = std::ldexp(1.0, 20);
  opt.loss_scale_window = 2;

  std::string dir_a = (fs::path(root) / "a").string(), dir_b = (fs::path(root) / "b").string();
  opt.out_dir = dir_a;
  TrainTask task_a = llama_task(tiny_llama_config(), tok, to);
  TensorMap wa = init_llama_weights(tiny_llama_config(), 5).tensors;
  TrainLog a = train(task_a, opt, wa);
  ASSERT_FALSE(a.interrupted);
  ASSERT_EQ(a.rows.size(), 12u);
  EXPECT_FALSE(a.skipped_steps.empty()) << "the test wants an overflow to exercise the saved scale";
  EXPECT_LT(a.skipped_steps.size(), 6u);

  // Stopped after step 7 and resumed; the resumed run is given scale 1, which
  // it must ignore: the saved scale wins.
  InterruptedRun b = train_interrupted_then_resumed(tok, to, opt, dir_b, 7, 5, [](TrainOptions& o) { o.loss_scale = 1; });
  const TrainLog &b1 = b.first, &b2 = b.resumed;
  ASSERT_TRUE(b1.interrupted);
  ASSERT_EQ(b1.rows.size(), 7u);
  ASSERT_EQ(b2.first_step, 7);
  ASSERT_EQ(b2.rows.size(), 12u);
  for (size_t i = 7; i < 12; ++i) {
    EXPECT_TRUE(same_bits(b2.rows[i].loss, a.rows[i].loss)) << "step " << i + 1;
    EXPECT_TRUE(same_bits(b2.rows[i].grad_norm, a.rows[i].grad_norm)) << "step " << i + 1;
  }
  EXPECT_EQ(b2.loss_scale, a.loss_scale);
  EXPECT_EQ(slurp(dir_a + "/checkpoint.bin"), slurp(dir_b + "/checkpoint.bin")) << "final weights differ";
  EXPECT_EQ(slurp(dir_a + "/train_state.bin"), slurp(dir_b + "/train_state.bin")) << "optimizer or scale state differs";

  // The state names its precision: an fp32 task cannot resume it.
  to.compute = DType::FP32;
  TrainTask task_d = llama_task(tiny_llama_config(), tok, to);
  TensorMap wd = load_llama2c_checkpoint((fs::path(dir_b) / "checkpoint.bin").string()).tensors;
  opt.out_dir = dir_b;
  opt.resume = true;
  try {
    train(task_d, opt, wd);
    ADD_FAILURE() << "an fp32 task resumed an fp16 state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
  }
}

TEST(TrainCliFp16, TrainsWithPrecisionFp16) {
  std::string dir = temp_dir("train_cli_fp16");
  std::string data = write_tiny_corpus(dir), out = (fs::path(dir) / "run").string();
  CliResult r = run_cli({"train", "--config", "tiny", "--data", data, "--steps", "3", "--batch", "2", "--seq", "16",
                         "--precision", "fp16", "--out", out, "--samples", "0"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("step 3/3"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(fs::path(out) / "train_state.bin"));
  r = run_cli({"train", "--data", data, "--steps", "4", "--batch", "2", "--seq", "16", "--out", out, "--resume",
               "--precision", "fp32", "--samples", "0"}, 300);
  EXPECT_EQ(r.exit_code, 2) << "resuming an fp16 run as fp32";
  EXPECT_NE(r.err.find("--precision fp16"), std::string::npos) << r.err;
  // Without --precision the run directory's record (run.json) says fp16.
  r = run_cli({"train", "--data", data, "--steps", "4", "--out", out, "--resume", "--samples", "0"}, 300);
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("step 4/4"), std::string::npos) << r.out;
  r = run_cli({"bench", "train", "--config", "tiny", "--steps", "1", "--accum", "1", "--precision", "fp16", "--json"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("\"precision\": \"fp16\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace milrt::test
