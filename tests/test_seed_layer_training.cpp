// The second seed's experiment as `milrt train --config seed-layer` runs it:
// the weights file's bytes against a layout written out by hand, a resumed
// run equal bit for bit to an uninterrupted one (library, on a small layer;
// CLI, at the seed's size), the seed's Adam recipe seen in the weights the
// first update writes, and run directories that do not match refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "llm/checkpoint.h"
#include "llm/seed_layer_builder.h"
#include "llm/train_tasks.h"
#include "llm/trainer.h"
#include "milrt/error.h"
#include "support/test_util.h"
#include "support/tiny_training.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {

namespace fs = std::filesystem;
using namespace milrt::llm;

template <class T> void put(std::string& s, T v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(TensorFile, BytesFollowTheDocumentedLayout) {
  const std::string dir = temp_dir("tensor_file");
  Tensor a(DType::FP32, {2}), b(DType::FP32, {1, 2});
  a.mutable_ptr<float>()[0] = 1.5f, a.mutable_ptr<float>()[1] = -2.0f;
  b.mutable_ptr<float>()[0] = 0.25f, b.mutable_ptr<float>()[1] = 8.0f;
  const std::string path = dir + "/w.bin";
  save_tensor_file(path, {{"b", b}, {"a", a}});

  std::string want("MILRTWT\0", 8);
  put<uint32_t>(want, 1);
  put<uint64_t>(want, 2);
  put<uint32_t>(want, 1), want += "a", put<uint32_t>(want, 1), put<int64_t>(want, 2), put(want, 1.5f), put(want, -2.0f);
  put<uint32_t>(want, 1), want += "b", put<uint32_t>(want, 2), put<int64_t>(want, 1), put<int64_t>(want, 2);
  put(want, 0.25f), put(want, 8.0f);
  EXPECT_EQ(slurp(path), want);
  EXPECT_TRUE(is_tensor_file(path));

  TensorMap back = load_tensor_file(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back.at("b").shape(), (Shape{1, 2}));
  EXPECT_EQ(back.at("a").ptr<float>()[1], -2.0f);
  EXPECT_EQ(back.at("b").ptr<float>()[1], 8.0f);

  // Damaged files are one-line errors naming the file, never a crash or a huge allocation.
  auto fails = [&](const std::string& bytes, const char* why) {
    write_bytes(dir + "/bad.bin", bytes);
    try {
      load_tensor_file(dir + "/bad.bin");
      ADD_FAILURE() << "accepted: " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.bin"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  fails(want.substr(0, want.size() - 1), "truncated");
  fails(want + "x", "unexpected bytes");
  fails("MILRTTS" + want.substr(7), "bad magic");
  std::string huge = want.substr(0, 12);
  put<uint64_t>(huge, uint64_t(1) << 60);
  fails(huge, "implausible tensor count");
  std::string twice = want.substr(0, 12);
  put<uint64_t>(twice, 2);
  for (int i = 0; i < 2; ++i) put<uint32_t>(twice, 1), twice += "a", put<uint32_t>(twice, 0), put(twice, 3.0f);
  fails(twice, "appears twice");
  EXPECT_FALSE(is_tensor_file(dir + "/missing.bin"));
}

// A small layer with the seed's recipe (constant lr, Adam 0.9/0.999).
SeedLayerConfig small_layer() { return SeedLayerConfig{32, 64, 2, 16}; }

TrainOptions seed_recipe(int64_t steps, const std::string& dir) {
  TrainOptions o;
  o.steps = steps;
  o.accum = 3;
  o.adamw.lr = 1e-3, o.adamw.beta1 = 0.9, o.adamw.beta2 = 0.999, o.adamw.eps = 1e-8;
  o.adamw.weight_decay = 0, o.adamw.grad_clip = 0, o.adamw.warmup = 0, o.adamw.min_lr_ratio = 1;
  o.adamw.total_steps = steps;
  o.eval_batches = 1;
  o.out_dir = dir;
  return o;
}

TEST(SeedLayerTraining, ResumedRunEqualsUninterruptedRunBitForBit) {
  const std::string root = temp_dir("seed_layer_resume");
  const std::string dir_a = root + "/a", dir_b = root + "/b";
  TrainTask ta = seed_layer_task(small_layer());
  TensorMap wa = ta.init_weights;
  TrainLog a = train(ta, seed_recipe(5, dir_a), wa);

  TrainTask tb = seed_layer_task(small_layer());
  TensorMap wb = tb.init_weights;
  train(tb, seed_recipe(2, dir_b), wb);
  // A new process: the weights come back from the run directory alone.
  TrainTask tc = seed_layer_task(small_layer());
  TensorMap wc = load_seed_layer_weights(dir_b + "/checkpoint.bin", small_layer());
  TrainOptions resume = seed_recipe(5, dir_b);
  resume.resume = true;
  TrainLog c = train(tc, resume, wc);

  ASSERT_EQ(c.first_step, 2);
  ASSERT_EQ(c.rows.size(), 5u);
  // Rows before the resume come back from losses.csv (6 decimals); the rest are computed.
  for (size_t i = 2; i < 5; ++i) EXPECT_EQ(c.rows[i].loss, a.rows[i].loss) << "step " << i + 1;
  EXPECT_LT(a.rows.back().loss, a.rows.front().loss) << "the layer learns";
  EXPECT_EQ(slurp(dir_a + "/checkpoint.bin"), slurp(dir_b + "/checkpoint.bin")) << "final weights differ";
  EXPECT_EQ(slurp(dir_a + "/train_state.bin"), slurp(dir_b + "/train_state.bin")) << "optimizer state differs";
  for (const auto& [name, w] : wa) EXPECT_EQ(std::memcmp(w.data(), wc.at(name).data(), w.nbytes()), 0) << name;

  // A checkpoint of another layer size, or of another kind, is refused by name.
  EXPECT_THROW(load_seed_layer_weights(dir_a + "/checkpoint.bin", SeedLayerConfig{}), Error);
  EXPECT_THROW(load_seed_layer_weights(dir_a + "/train_state.bin", small_layer()), Error);
}

// The seed's numerics: the layer in fp16 on fp32 master weights, the loss
// scaled dynamically, learns as the fp32 layer does.
TEST(SeedLayerTraining, Fp16LayerLearnsLikeFp32) {
  TrainTask t32 = seed_layer_task(small_layer());
  TrainTask t16 = seed_layer_task(small_layer(), 42, DType::FP16);
  ASSERT_NE(t16.program.function("main")->params.size(), t32.program.function("main")->params.size())
      << "the fp16 program takes the loss scale";
  TensorMap w32 = t32.init_weights, w16 = t16.init_weights;
  TrainOptions o = seed_recipe(8, "");
  TrainLog a = train(t32, o, w32), b = train(t16, o, w16);
  ASSERT_EQ(b.rows.size(), 8u);
  EXPECT_TRUE(b.skipped_steps.empty());
  EXPECT_EQ(b.loss_scale, 32768);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(b.rows[i].loss, a.rows[i].loss, 0.02 * a.rows[i].loss) << "step " << i + 1;
  EXPECT_LT(b.rows.back().loss, 0.8 * b.rows.front().loss) << "the fp16 layer learns";
  EXPECT_NE(b.rows.back().loss, a.rows.back().loss) << "fp16 rounding shows";
}

// The CLI at the seed's size: one update, then a resume to two, equal to two
// updates in one go; the first update shows the recipe.
TEST(SeedLayerCli, RecipeResumeAndMismatchedRunsRefused) {
  const std::string root = temp_dir("seed_layer_cli");
  const std::string a = root + "/a", b = root + "/b";
  CliResult r = run_cli({"train", "--config", "seed-layer", "--out", b, "--steps", "1", "--accum", "1"}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (const char* s : {"params: 7.08M", "Adam lr 1.0e-03 b1 0.9 b2 0.999 eps 1e-08 | constant lr | weight decay 0 | clip off",
                        "[batch 1: 1 micro-steps", "=== efficiency report", "compile time:"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;

  // Adam's first update is lr * g / (|g| + eps) with no warmup: no weight,
  // the RMSNorm gains included, moves by more than lr = 1e-3, and in every
  // tensor those with the largest gradients (|g| >> eps) move by lr itself.
  TensorMap w0 = seed_layer_synthetic_inputs(SeedLayerConfig{}, 42);
  TensorMap w1 = load_tensor_file(b + "/checkpoint.bin");
  ASSERT_EQ(w1.size(), 9u);
  for (const auto& [name, t] : w1) {
    const float *p0 = w0.at(name).ptr<float>(), *p1 = t.ptr<float>();
    double largest = 0;
    for (int64_t i = 0; i < t.numel(); ++i) largest = std::max(largest, std::abs(double(p1[i]) - double(p0[i])));
    EXPECT_NEAR(largest, 1e-3, 1e-5) << name;
  }

  r = run_cli({"train", "--out", b, "--resume", "--steps", "2"}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("total steps:  2 micro-steps, 2 optimizer steps"), std::string::npos) << r.out;
  r = run_cli({"train", "--config", "seed-layer", "--out", a, "--steps", "2", "--accum", "1"}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(slurp(a + "/checkpoint.bin"), slurp(b + "/checkpoint.bin")) << "resumed weights differ";
  EXPECT_EQ(slurp(a + "/train_state.bin"), slurp(b + "/train_state.bin"));
  nlohmann::json rec = nlohmann::json::parse(slurp(b + "/run.json"));
  EXPECT_EQ(rec["config"], "seed-layer");
  EXPECT_EQ(rec["counters"]["micro_steps"], 2);
  EXPECT_EQ(rec["counters"]["optimizer_steps"], 2);

  auto refused = [&](const std::vector<std::string>& args, const char* why) {
    CliResult e = run_cli(args, 120);
    EXPECT_EQ(e.exit_code, 2) << e.out << e.err;
    EXPECT_NE(e.err.find(why), std::string::npos) << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
  };
  refused({"train", "--out", b, "--resume", "--steps", "3", "--accum", "4"}, "made with --accum 1, not 4");
  refused({"train", "--out", b, "--resume", "--config", "tiny"}, "made with --config seed-layer, not tiny");
  refused({"train", "--config", "seed-layer", "--out", b, "--steps", "1"}, "already holds a run");
  // A directory from before run.json: the checkpoint's format tells the config.
  fs::remove(b + "/run.json");
  refused({"train", "--out", b, "--resume", "--config", "tiny"}, "--config seed-layer");
  // Only a training state left (the seed layer's state before its weights were saved).
  const std::string c = root + "/c";
  fs::create_directories(c);
  fs::copy_file(b + "/train_state.bin", c + "/train_state.bin");
  refused({"train", "--config", "seed-layer", "--out", c, "--steps", "1"}, "already holds a run (train_state.bin)");
  refused({"train", "--config", "seed-layer", "--out", c, "--resume"}, "no checkpoint.bin");
  refused({"train", "--config", "seed-layer", "--batch", "4"}, "--batch");
  r = run_cli({"train", "--config", "seed-layer", "--precision", "fp16", "--steps", "1", "--accum", "1"}, 600);
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("precision fp16 (fp16 layer"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace milrt::test
