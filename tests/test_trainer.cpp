// The trainer end to end on a tiny Llama and a small text: the loss falls
// well below the data's unigram entropy, an interrupted run resumed from its
// checkpoint reproduces the uninterrupted one bit for bit, the run directory
// holds its files, bad input fails before any work, and `milrt train` works.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "llm/checkpoint.h"
#include "llm/data.h"
#include "llm/llama_builder.h"
#include "llm/sample.h"
#include "llm/train_report.h"
#include "llm/train_tasks.h"
#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/grad_check.h"
#include "support/test_util.h"
#include "support/tiny_training.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {

namespace fs = std::filesystem;
using namespace milrt::llm;

// Entropy (nats) of the token unigram distribution: what a model that ignores
// context at best achieves.
double unigram_entropy(const std::vector<int32_t>& tokens) {
  std::map<int32_t, double> count;
  for (int32_t t : tokens) count[t] += 1;
  double h = 0;
  for (auto& [t, c] : count) {
    double p = c / double(tokens.size());
    h -= p * std::log(p);
  }
  return h;
}

TEST(Trainer, TinyModelLearnsFarBelowUnigramEntropy) {
  std::string dir = temp_dir("trainer_learns");
  std::shared_ptr<const Tokenizer> tok = byte_tokenizer();
  LlamaTaskOptions to = tiny_task_options(dir);
  TrainTask task = llama_task(tiny_llama_config(), tok, to);
  TensorMap w = init_llama_weights(tiny_llama_config(), 3).tensors;
  TrainLog log = train(task, tiny_train_options(200), w);
  ASSERT_EQ(log.rows.size(), 200u);
  const double h = unigram_entropy(load_token_data(to.data, *tok).val);
  const double first = log.rows.front().loss, val = log.rows.back().val_loss;
  ::testing::Test::RecordProperty("unigram_entropy", std::to_string(h));
  ::testing::Test::RecordProperty("val_loss", std::to_string(val));
  EXPECT_GT(first, 0.9 * std::log(259.0)) << "an untrained model is near uniform";
  EXPECT_LT(val, 0.5 * h) << "validation loss " << val << " vs unigram entropy " << h;
  // Greedy text from a prompt keeps the prompt and continues in the corpus's
  // alphabet (an untrained model emits arbitrary bytes).
  SampleOptions so;
  so.prompt = "the cat";
  so.steps = 8;
  std::string text = sample_text(tiny_llama_config(), w, *tok, so);
  EXPECT_EQ(text.rfind("the cat", 0), 0u) << text;
  EXPECT_GT(text.size(), 7u) << text;
  const std::string c = tiny_corpus();
  for (char ch : text) EXPECT_NE(c.find(ch), std::string::npos) << "'" << ch << "' in " << text;
}

TEST(Trainer, ResumedRunEqualsUninterruptedRunBitForBit) {
  std::string root = temp_dir("trainer_resume");
  std::string data = write_tiny_corpus(root);
  std::shared_ptr<const Tokenizer> tok = byte_tokenizer();
  LlamaTaskOptions to;
  to.batch = 4;
  to.data = data;
  TrainOptions opt = tiny_train_options(12);
  opt.accum = 2;
  opt.eval_every = 4;

  std::string dir_a = (fs::path(root) / "a").string(), dir_b = (fs::path(root) / "b").string();
  opt.out_dir = dir_a;
  TrainTask task_a = llama_task(tiny_llama_config(), tok, to);
  TensorMap wa = init_llama_weights(tiny_llama_config(), 5).tensors;
  TrainLog a = train(task_a, opt, wa);
  ASSERT_FALSE(a.interrupted);

  // Run b is stopped after step 7 (as Ctrl-C does) and resumed.
  InterruptedRun b = train_interrupted_then_resumed(tok, to, opt, dir_b, 7, 5);
  const TrainLog &b1 = b.first, &b2 = b.resumed;
  ASSERT_TRUE(b1.interrupted);
  ASSERT_EQ(b1.rows.size(), 7u);
  ASSERT_EQ(b2.first_step, 7);
  ASSERT_EQ(b2.rows.size(), 12u);
  for (size_t i = 7; i < 12; ++i) {
    EXPECT_EQ(b2.rows[i].loss, a.rows[i].loss) << "step " << i + 1;
    EXPECT_EQ(b2.rows[i].grad_norm, a.rows[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_EQ(slurp(dir_a + "/checkpoint.bin"), slurp(dir_b + "/checkpoint.bin")) << "final weights differ";
  EXPECT_EQ(slurp(dir_a + "/train_state.bin"), slurp(dir_b + "/train_state.bin")) << "optimizer state differs";

  // The run directory: CSV of every step, an SVG plot and the report.
  std::string csv = slurp(dir_a + "/losses.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 13) << csv;
  EXPECT_EQ(csv.rfind("step,loss,val_loss,lr,grad_norm,ms,tok_s,comm_ms\n", 0), 0u);
  {  // one process: tokens per second from the step's time, no communication
    std::stringstream in(csv);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream cells(line);
      for (std::string c; std::getline(cells, c, ',');) f.push_back(c);
      ASSERT_EQ(f.size(), 8u) << line;
      EXPECT_GT(std::stod(f[6]), 0) << line;
      EXPECT_EQ(std::stod(f[7]), 0) << line;
    }
  }
  // The resumed run's CSV keeps the steps before the interruption (all but the timings agree).
  // The columns before the timing ones (ms, tok_s, comm_ms: the last three).
  auto without_ms = [](const std::string& text) {
    std::string s;
    std::stringstream in(text);
    for (std::string line; std::getline(in, line);) {
      size_t cut = line.size();
      for (int k = 0; k < 3; ++k) cut = line.rfind(',', cut - 1);
      s += line.substr(0, cut) + "\n";
    }
    return s;
  };
  EXPECT_EQ(without_ms(slurp(dir_b + "/losses.csv")), without_ms(csv));
  std::string svg = slurp(dir_a + "/loss.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("<path d=\"M"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(slurp(dir_a + "/report.txt").find("backward"), std::string::npos);
}

// bf16 matrix products: each operand rounded to bf16 once (nearest even),
// products accumulated in fp32 or better. Checked against fp64 of the rounded
// operands, and that the result differs from the fp32 plan (the option acts).
float to_bf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&v, &u, 4);
  return v;
}

// A run directory written before tok_s and comm_ms existed (6 columns)
// still resumes; any other column count is an error naming the line.
TEST(LossCsv, ReadsRowsWithAndWithoutTheCommunicationColumns) {
  const std::string dir = test::temp_dir("loss_csv");
  const std::string path = dir + "/losses.csv";
  std::ofstream(path) << "step,loss,val_loss,lr,grad_norm,ms\n1,2.5,,1e-3,0.5,10.0\n2,2.25,2.0,1e-3,0.25,11.0\n";
  std::vector<llm::TrainLog::Row> old = llm::read_loss_csv(path, 2);
  ASSERT_EQ(old.size(), 2u);
  EXPECT_EQ(old[1].loss, 2.25);
  EXPECT_EQ(old[1].val_loss, 2.0);
  EXPECT_TRUE(std::isnan(old[0].val_loss));
  EXPECT_TRUE(std::isnan(old[1].tok_s) && std::isnan(old[1].comm_ms));
  std::ofstream(path) << "step,loss,val_loss,lr,grad_norm,ms,tok_s,comm_ms\n1,2.5,,1e-3,0.5,10.0,512.5,3.25\n";
  std::vector<llm::TrainLog::Row> now = llm::read_loss_csv(path, 1);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].tok_s, 512.5);
  EXPECT_EQ(now[0].comm_ms, 3.25);
  std::ofstream(path) << "step,loss,val_loss,lr,grad_norm,ms,tok_s,comm_ms\n1,2.5,,1e-3,0.5,10.0,512.5\n";
  try {
    llm::read_loss_csv(path, 1);
    ADD_FAILURE() << "7 fields accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":2: error: expected 8"), std::string::npos) << e.what();
  }
}

TEST(Trainer, Bf16MatmulPlanRoundsOperandsOnce) {
  const int64_t M = 5, K = 37, N = 9;
  std::string text = program_text("tensor<fp32, [5, 37]> x, tensor<fp32, [37, 9]> y",
                                  stmt("tensor<fp32, [5, 9]>", "z", "matmul(x = x, y = y)"), "z");
  Program p = parse_mil(text, "<bf16>", ".");
  Tensor x = random_tensor(DType::FP32, {M, K}, 1, -1, 1), y = random_tensor(DType::FP32, {K, N}, 2, -1, 1);
  CompileOptions bf16;
  bf16.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  Tensor zb = compile(p, bf16).run({{"x", x}, {"y", y}}).at("z");
  Tensor zf = compile(p).run({{"x", x}, {"y", y}}).at("z");
  double differs = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        double t = double(to_bf16(float(x.at(size_t(i * K + k))))) * double(to_bf16(float(y.at(size_t(k * N + j)))));
        want += t, mag += std::fabs(t);
      }
      EXPECT_NEAR(zb.at(size_t(i * N + j)), want, 1e-6 * mag + 1e-7) << i << "," << j;
      differs = std::max(differs, std::fabs(zb.at(size_t(i * N + j)) - zf.at(size_t(i * N + j))));
    }
  EXPECT_GT(differs, 1e-4) << "bf16 precision did not change the product";
}

TEST(Trainer, Bf16TrainingLearnsLikeFp32) {
  std::string dir = temp_dir("trainer_bf16");
  std::shared_ptr<const Tokenizer> tok = byte_tokenizer();
  LlamaTaskOptions to = tiny_task_options(dir);
  TrainLog logs[2];
  for (int i = 0; i < 2; ++i) {
    TrainTask task = llama_task(tiny_llama_config(), tok, to);
    TensorMap w = init_llama_weights(tiny_llama_config(), 3).tensors;
    TrainOptions o = tiny_train_options(120);
    if (i == 1) o.precision = CompileOptions::MatmulPrecision::bf16;
    logs[i] = train(task, o, w);
  }
  // Same data and start: the first loss differs only by bf16 rounding.
  EXPECT_NEAR(logs[1].rows[0].loss, logs[0].rows[0].loss, 0.02);
  EXPECT_NE(logs[1].rows[0].loss, logs[0].rows[0].loss) << "bf16 run identical to fp32: the option did nothing";
  EXPECT_LT(logs[1].rows.back().val_loss, logs[0].rows.back().val_loss * 1.1 + 0.05)
      << "bf16 " << logs[1].rows.back().val_loss << " vs fp32 " << logs[0].rows.back().val_loss;
}

// --recompute on the tiny Llama: the training step keeps fewer bytes in its
// arena and computes the same gradients (within fp32 reassociation: fusion
// may group the repeated ops differently).
// The weights are stable plan inputs: GEMMs keep them packed between
// optimizer steps. Packing on every use instead must give the same bits (the
// same kernels sum in the same order); a missed repack after an update would
// leave later steps computing with stale weights and the losses would part.
TEST(Trainer, WeightsPackedOncePerUpdateGiveTheSameBits) {
  std::string dir = temp_dir("trainer_stable");
  std::shared_ptr<const Tokenizer> tok = byte_tokenizer();
  for (auto precision : {CompileOptions::MatmulPrecision::fp32, CompileOptions::MatmulPrecision::bf16}) {
    SCOPED_TRACE(precision == CompileOptions::MatmulPrecision::bf16 ? "bf16" : "fp32");
    std::vector<TrainLog> logs;
    std::vector<TensorMap> weights;
    for (bool stable : {true, false}) {
      TrainTask task = llama_task(tiny_llama_config(), tok, tiny_task_options(dir));
      TensorMap w = init_llama_weights(tiny_llama_config(), 5).tensors;
      TrainOptions opt = tiny_train_options(4);
      opt.accum = 2;
      opt.eval_every = 2;
      opt.precision = precision;
      opt.stable_weights = stable;
      logs.push_back(train(task, opt, w));
      weights.push_back(w);
    }
    ASSERT_EQ(logs[0].rows.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(logs[0].rows[i].loss, logs[1].rows[i].loss) << "step " << i + 1;
      if (!std::isnan(logs[1].rows[i].val_loss)) EXPECT_EQ(logs[0].rows[i].val_loss, logs[1].rows[i].val_loss);
    }
    EXPECT_NE(logs[0].rows[0].loss, logs[0].rows[3].loss) << "the weights must have changed";
    for (auto& [name, t] : weights[1])
      ASSERT_EQ(std::memcmp(t.data(), weights[0].at(name).data(), t.nbytes()), 0) << name;
  }
}

// The llama graph's RMSNorm, RoPE and SwiGLU gate are fused ops whose
// gradients read only kept inputs, so recompute finds nothing cheap left to
// recompute there (test_autodiff checks that it does on a silu chain): the
// arena must not grow and the gradients must not change.
TEST(Trainer, RecomputeNeverGrowsTheArenaAndKeepsTheGradients) {
  // Activations, not the logits, dominate memory here (small vocabulary).
  LlamaConfig cfg = tiny_llama_config();
  cfg.layers = 3, cfg.hidden = 128, cfg.vocab = 16;
  Program p = build_llama_loss(cfg, {4, 16});
  GradOptions keep, again;
  keep.loss = again.loss = "loss";
  for (const WeightSpec& w : llama_weight_specs(cfg)) keep.wrt.push_back(w.name);
  again.wrt = keep.wrt;
  again.recompute = true;
  CompileOptions co;
  co.function = "main_grad";
  Plan pk = compile(differentiate(p, keep), co), pr = compile(differentiate(p, again), co);
  ::testing::Test::RecordProperty("arena_keep", std::to_string(pk.arena_bytes()));
  ::testing::Test::RecordProperty("arena_recompute", std::to_string(pr.arena_bytes()));
  EXPECT_LE(pr.arena_bytes(), pk.arena_bytes());
  TensorMap in = init_llama_weights(cfg, 9).tensors;
  Tensor tokens(DType::Int32, {4, 16}), targets(DType::Int32, {4, 16});
  for (int64_t i = 0; i < 64; ++i) tokens.set(size_t(i), double((i * 7) % 16)), targets.set(size_t(i), double((i * 5) % 16));
  in["tokens"] = tokens;
  in["targets"] = targets;
  TensorMap gk = pk.run(in), gr = pr.run(in);
  for (auto& [name, g] : gk)
    for (int64_t i = 0; i < g.numel(); ++i)
      ASSERT_NEAR(gr.at(name).at(size_t(i)), g.at(size_t(i)), 1e-5 * (1 + std::fabs(g.at(size_t(i))))) << name << "[" << i << "]";
}

TEST(Trainer, BadInputFailsBeforeAnyWork) {
  std::string dir = temp_dir("trainer_bad");
  std::shared_ptr<const Tokenizer> tok = byte_tokenizer();
  auto message = [&](const LlamaConfig& cfg, LlamaTaskOptions o) {
    try {
      llama_task(cfg, tok, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LlamaTaskOptions o;
  o.data = (fs::path(dir) / "missing.txt").string();
  EXPECT_NE(message(tiny_llama_config(), o).find("missing.txt"), std::string::npos);
  o.data = (fs::path(dir) / "empty.txt").string();
  std::ofstream(o.data).close();
  EXPECT_NE(message(tiny_llama_config(), o).find("empty.txt"), std::string::npos);
  o.data = write_tiny_corpus(dir);
  LlamaConfig wrong_vocab = tiny_llama_config();
  wrong_vocab.vocab = 512;
  EXPECT_NE(message(wrong_vocab, o).find("vocabulary"), std::string::npos) << message(wrong_vocab, o);
  LlamaConfig huge = tiny_llama_config();
  huge.dim = 65536, huge.hidden = 262144, huge.layers = 64, huge.heads = 64, huge.kv_heads = 64;
  EXPECT_NE(message(huge, o).find("GiB"), std::string::npos) << message(huge, o);
  LlamaConfig odd = tiny_llama_config();
  odd.heads = 3;
  EXPECT_NE(message(odd, o).find("multiple of heads"), std::string::npos) << message(odd, o);
}

TEST(Trainer, PickTokenGreedyAndNucleus) {
  const float logits[4] = {0.0f, 2.0f, 1.0f, -1.0f};
  EXPECT_EQ(pick_token(logits, 4, 0.0, 0.9, 0.5), 1);
  // top_p tiny: only the most probable token is in the nucleus.
  EXPECT_EQ(pick_token(logits, 4, 1.0, 1e-6, 0.99), 1);
  // top_p 1 at temperature 1: probabilities e^l / sum, in order 1, 2, 0, 3.
  const double e[4] = {1.0, std::exp(2.0), std::exp(1.0), std::exp(-1.0)};
  const double sum = e[0] + e[1] + e[2] + e[3];
  EXPECT_EQ(pick_token(logits, 4, 1.0, 1.0, 0.5 * e[1] / sum), 1);
  EXPECT_EQ(pick_token(logits, 4, 1.0, 1.0, (e[1] + 0.5 * e[2]) / sum), 2);
  EXPECT_EQ(pick_token(logits, 4, 1.0, 1.0, (e[1] + e[2] + 0.5 * e[0]) / sum), 0);
  EXPECT_EQ(pick_token(logits, 4, 1.0, 1.0, 0.999999), 3);
}

// The nucleus from a full sort (no cutoff), written here as the reference for
// pick_token's pruned one: same tokens for every coin on a large vocabulary.
// run.c's xorshift coins from seed 42, computed by hand (Python, 64-bit
// wrap-around) for this test.
TEST(Trainer, XorshiftCoinsAreRunCs) {
  uint64_t s = 42;
  EXPECT_FLOAT_EQ(xorshift_coin(s), 0.3390852212905884f);
  EXPECT_FLOAT_EQ(xorshift_coin(s), 0.7822558283805847f);
  EXPECT_FLOAT_EQ(xorshift_coin(s), 0.790136992931366f);
}

TEST(Trainer, PickTokenNucleusEqualsAFullSort) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(5000);
  for (float& l : logits) l = nd(rng);
  for (double top_p : {0.5, 0.9, 0.99, 1.0})
    for (double temperature : {0.7, 1.0}) {
      std::vector<std::pair<double, int>> p;
      const float mx = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (size_t i = 0; i < logits.size(); ++i) {
        p.push_back({std::exp((double(logits[i]) - mx) / temperature), int(i)});
        sum += p.back().first;
      }
      std::stable_sort(p.begin(), p.end(), [](auto& a, auto& b) { return a.first > b.first; });
      double mass = 0;
      size_t keep = 0;
      while (keep < p.size() && (keep == 0 || mass < top_p * sum)) mass += p[keep++].first;
      for (double coin : {0.0, 0.1, 0.37, 0.5, 0.83, 0.999}) {
        double r = coin * mass;
        int expect = p[keep - 1].second;
        for (size_t i = 0; i < keep; ++i)
          if ((r -= p[i].first) < 0) { expect = p[i].second; break; }
        EXPECT_EQ(pick_token(logits.data(), int64_t(logits.size()), temperature, top_p, coin), expect)
            << "top_p " << top_p << " temperature " << temperature << " coin " << coin;
      }
    }
}

TEST(TrainCli, TrainsResumesAndReportsErrors) {
  std::string dir = temp_dir("train_cli");
  std::string data = write_tiny_corpus(dir), out = (fs::path(dir) / "run").string();
  CliResult r = run_cli({"train", "--config", "tiny", "--data", data, "--steps", "4", "--batch", "2", "--seq", "16",
                         "--out", out, "--samples", "1"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("efficiency"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--- sample 1 (greedy) ---"), std::string::npos) << r.out;
  for (const char* f : {"checkpoint.bin", "train_state.bin", "losses.csv", "loss.svg", "report.txt"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  LlamaWeights w = load_llama2c_checkpoint((fs::path(out) / "checkpoint.bin").string());
  EXPECT_EQ(w.cfg.dim, 64);
  EXPECT_EQ(w.cfg.vocab, 259) << "a preset trained from scratch takes the byte tokenizer's vocabulary";

  // A new run does not replace it without --overwrite.
  r = run_cli({"train", "--config", "tiny", "--data", data, "--steps", "1", "--out", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--overwrite"), std::string::npos) << r.err;

  // The trained byte-level model generates without a tokenizer file.
  r = run_cli({"generate", "--checkpoint", (fs::path(out) / "checkpoint.bin").string(), "--prompt", "the", "--steps", "12",
               "--temperature", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("the", 0), 0u) << r.out;

  r = run_cli({"train", "--data", data, "--steps", "6", "--batch", "2", "--seq", "16", "--out", out, "--resume", "--samples", "0"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("step 6/6"), std::string::npos) << r.out;

  r = run_cli({"train", "--data", (fs::path(dir) / "nope.txt").string(), "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("nope.txt"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run_cli({"train", "--resume", "--steps", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
}


// Gradient accumulation: an optimizer step's gradient is the mean of its
// micro-batches' (the first computed in place, the others added). loss =
// Σ w·x has gradient x, so with micro-batches x = v(0), v(1), v(2) the step's
// gradient norm is |mean v|, computed here in fp64; the logged loss is the
// micro-batches' mean loss.
TEST(Trainer, AccumulatedGradientIsTheMeanOfTheMicroBatches) {
  Program p = parse_mil(
      program_text("tensor<fp32, [2, 3]> x, tensor<fp32, [2, 3]> w",
                         "tensor<fp32, [2, 3]> p = mul(x = w, y = x)[name = string(\"p\")];\n"
                         "fp32 loss = reduce_sum(x = p)[name = string(\"loss\")];",
                         "loss"),
      "accum.mil", ".");
  verify(p);
  auto v = [](int64_t micro, int64_t i) { return 0.25 * double((micro * 7 + i * 5) % 11) - 1.0; };
  TrainTask task;
  task.name = "accum";
  task.program = p;
  task.weights = {{"w", {2, 3}}};
  task.init_weights["w"] = Tensor(DType::FP32, {2, 3});
  for (size_t i = 0; i < 6; ++i) task.init_weights["w"].set(i, 0.5);
  int64_t drawn = 0;
  task.next_batch = [&](TensorMap& d, bool validation) {
    Tensor& x = d.at("x");
    for (int64_t i = 0; i < 6; ++i) x.set(size_t(i), validation ? 0.0 : v(drawn, i));
    if (!validation) ++drawn;
  };
  TrainOptions opt = tiny_train_options(2);
  opt.accum = 3;
  opt.adamw.grad_clip = 0;
  TensorMap w = task.init_weights;
  TrainLog log = train(task, opt, w);
  ASSERT_EQ(log.rows.size(), 2u);
  for (int64_t s = 0; s < 2; ++s) {
    double sq = 0;
    for (int64_t i = 0; i < 6; ++i) {
      const double mean = (v(3 * s, i) + v(3 * s + 1, i) + v(3 * s + 2, i)) / 3;
      sq += mean * mean;
    }
    EXPECT_NEAR(log.rows[size_t(s)].grad_norm, std::sqrt(sq), 1e-6) << "step " << s + 1;
  }
  double loss0 = 0;
  for (int64_t k = 0; k < 3; ++k)
    for (int64_t i = 0; i < 6; ++i) loss0 += 0.5 * v(k, i) / 3;
  EXPECT_NEAR(log.rows[0].loss, loss0, 1e-6);
}

}  // namespace
}  // namespace milrt::test
