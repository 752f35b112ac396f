// KV-cache generation (src/llm/llama_decoder.h, generator.h, `milrt
// generate`) against an independent fp32 forward written here the way
// llama2.c's run.c computes it (one token at a time, its own RoPE, attention
// over its own cache, no milrt code), and against the plain fp64 Llama of
// tests/support.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <new>
#include <cmath>
#include <functional>
#include <set>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "llm/checkpoint.h"
#include "llm/generator.h"
#include "llm/llama_decoder.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/llama_fp64.h"
#include "support/random_checkpoint.h"
#include "support/test_util.h"
#include "test_cli_util.h"


namespace milrt::test {
namespace {

namespace fs = std::filesystem;
using llm::LlamaConfig;
using llm::LlamaWeights;

// ---- llama2.c's run.c forward, fp32, written from its source's structure

struct RunC {
  LlamaConfig c;
  std::map<std::string, std::vector<float>> w;
  std::vector<float> x, xb, xb2, hb, hb2, q, k, v, att, logits, key_cache, value_cache;

  explicit RunC(const LlamaWeights& lw) : c(lw.cfg) {
    for (auto& [n, t] : lw.tensors) w[n].assign(t.ptr<float>(), t.ptr<float>() + t.numel());
    const size_t kv_dim = size_t(c.kv_dim());
    x.resize(size_t(c.dim)), xb.resize(size_t(c.dim)), xb2.resize(size_t(c.dim));
    hb.resize(size_t(c.hidden)), hb2.resize(size_t(c.hidden));
    q.resize(size_t(c.dim)), k.resize(kv_dim), v.resize(kv_dim);
    att.resize(size_t(c.heads * c.seq)), logits.resize(size_t(c.vocab));
    key_cache.resize(size_t(c.layers * c.seq) * kv_dim), value_cache.resize(key_cache.size());
  }
  const float* W(const std::string& n) const { return w.at(n).data(); }

  static void rmsnorm(float* o, const float* x, const float* g, int n) {
    float ss = 0;
    for (int j = 0; j < n; ++j) ss += x[j] * x[j];
    ss /= float(n);
    ss += 1e-5f;
    ss = 1.0f / std::sqrt(ss);
    for (int j = 0; j < n; ++j) o[j] = g[j] * (ss * x[j]);
  }
  static void softmax(float* x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; ++i) mx = std::max(mx, x[i]);
    float sum = 0;
    for (int i = 0; i < n; ++i) sum += x[i] = std::exp(x[i] - mx);
    for (int i = 0; i < n; ++i) x[i] /= sum;
  }
  static void matmul(float* xout, const float* x, const float* w, int n, int d) {
    for (int i = 0; i < d; ++i) {
      float val = 0;
      for (int j = 0; j < n; ++j) val += w[i * n + j] * x[j];
      xout[i] = val;
    }
  }

  const float* forward(int token, int pos) {
    const int dim = int(c.dim), kv_dim = int(c.kv_dim()), hs = int(c.head_dim()), hidden = int(c.hidden);
    const int kv_mul = int(c.heads / c.kv_heads), seq = int(c.seq);
    std::copy(W("tok_embeddings") + token * dim, W("tok_embeddings") + (token + 1) * dim, x.begin());
    for (int l = 0; l < int(c.layers); ++l) {
      const std::string p = fmt::format("l{}_", l);
      rmsnorm(xb.data(), x.data(), W(p + "rms_att"), dim);
      const size_t loff = size_t(l) * size_t(seq * kv_dim);
      float* kc = key_cache.data() + loff + size_t(pos * kv_dim);
      float* vc = value_cache.data() + loff + size_t(pos * kv_dim);
      matmul(q.data(), xb.data(), W(p + "wq"), dim, dim);
      matmul(kc, xb.data(), W(p + "wk"), dim, kv_dim);
      matmul(vc, xb.data(), W(p + "wv"), dim, kv_dim);
      for (int i = 0; i < dim; i += 2) {
        const int head_dim = i % hs;
        const float freq = 1.0f / std::pow(10000.0f, float(head_dim) / float(hs));
        const float val = float(pos) * freq, fcr = std::cos(val), fci = std::sin(val);
        const int rotn = i < kv_dim ? 2 : 1;
        for (int r = 0; r < rotn; ++r) {
          float* vec = r == 0 ? q.data() : kc;
          const float v0 = vec[i], v1 = vec[i + 1];
          vec[i] = v0 * fcr - v1 * fci;
          vec[i + 1] = v0 * fci + v1 * fcr;
        }
      }
      for (int h = 0; h < int(c.heads); ++h) {
        const float* qh = q.data() + h * hs;
        float* a = att.data() + h * seq;
        for (int t = 0; t <= pos; ++t) {
          const float* kt = key_cache.data() + loff + size_t(t * kv_dim + (h / kv_mul) * hs);
          float score = 0;
          for (int i = 0; i < hs; ++i) score += qh[i] * kt[i];
          a[t] = score / std::sqrt(float(hs));
        }
        softmax(a, pos + 1);
        float* o = xb.data() + h * hs;
        std::fill(o, o + hs, 0.0f);
        for (int t = 0; t <= pos; ++t) {
          const float* vt = value_cache.data() + loff + size_t(t * kv_dim + (h / kv_mul) * hs);
          for (int i = 0; i < hs; ++i) o[i] += a[t] * vt[i];
        }
      }
      matmul(xb2.data(), xb.data(), W(p + "wo"), dim, dim);
      for (int i = 0; i < dim; ++i) x[size_t(i)] += xb2[size_t(i)];
      rmsnorm(xb.data(), x.data(), W(p + "rms_ffn"), dim);
      matmul(hb.data(), xb.data(), W(p + "w1"), dim, hidden);
      matmul(hb2.data(), xb.data(), W(p + "w3"), dim, hidden);
      for (int i = 0; i < hidden; ++i) {
        float val = hb[size_t(i)];
        val *= 1.0f / (1.0f + std::exp(-val));
        hb[size_t(i)] = val * hb2[size_t(i)];
      }
      matmul(xb.data(), hb.data(), W(p + "w2"), hidden, dim);
      for (int i = 0; i < dim; ++i) x[size_t(i)] += xb[size_t(i)];
    }
    rmsnorm(x.data(), x.data(), W("rms_final"), dim);
    matmul(logits.data(), x.data(), W(c.shared_classifier ? "tok_embeddings" : "wcls"), dim, int(c.vocab));
    return logits.data();
  }
};

int32_t argmax(const float* v, int64_t n) { return int32_t(std::max_element(v, v + n) - v); }

// ---- checkpoints

// Random checkpoints: tests/support/random_checkpoint.h (seed 7).
std::string checkpoint(const std::string& config, bool unshared) { return random_llama2c_checkpoint(config, unshared); }

fp64::Weights to_fp64(const LlamaWeights& w) {
  fp64::Weights r;
  for (auto& [n, t] : w.tensors) r[n].assign(t.ptr<float>(), t.ptr<float>() + t.numel());
  return r;
}

fp64::LlamaShape fp64_shape(const LlamaConfig& c) {
  fp64::LlamaShape s;
  s.dim = c.dim, s.hidden = c.hidden, s.layers = c.layers, s.heads = c.heads, s.kv_heads = c.kv_heads;
  s.vocab = c.vocab, s.shared_classifier = c.shared_classifier;
  return s;
}

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

// ---- greedy parity with run.c

// Greedy decoding, one token per run from BOS, `steps` tokens, token for
// token against the run.c forward; logits compared at every step too.
// Tolerance 2e-5 on logits of size ~0.1..1 (measured: <= 2e-6): both are
// fp32 with different summation orders over at most `hidden` terms per dot
// product. With a shared classifier the greedy path of a random model
// repeats one token; the unshared models' paths vary, and must.
void expect_greedy_parity(const std::string& config, bool unshared, int steps) {
  LlamaWeights w = llm::load_llama2c_checkpoint(checkpoint(config, unshared));
  ASSERT_EQ(w.cfg.shared_classifier, !unshared);
  RunC ref(w);
  llm::Generator gen(w);
  const int64_t V = w.cfg.vocab;
  steps = std::min<int>(steps, int(w.cfg.seq));
  int32_t tok = 1, tok_ref = 1;
  double worst = 0;
  std::vector<int32_t> seen;
  for (int pos = 0; pos < steps; ++pos) {
    const float* got = pos == 0 ? gen.prefill({tok}) : gen.decode(tok);
    const float* want = ref.forward(tok_ref, pos);
    worst = std::max(worst, max_abs_diff(got, want, V));
    tok = argmax(got, V);
    tok_ref = argmax(want, V);
    ASSERT_EQ(tok, tok_ref) << config << ": greedy tokens differ at position " << pos;
    seen.push_back(tok);
  }
  EXPECT_LT(worst, 2e-5) << config;
  std::sort(seen.begin(), seen.end());
  const size_t distinct = size_t(std::unique(seen.begin(), seen.end()) - seen.begin());
  if (unshared) {
    EXPECT_GE(distinct, 8u) << config << ": the unshared model's greedy path should vary";
  }
  std::printf("[ info ] %s%s: %d greedy tokens equal run.c's (%zu distinct), max |logit diff| %.2e\n", config.c_str(),
              unshared ? " unshared" : "", steps, distinct, worst);
}

TEST(GenerateParity, TinySharedGreedyMatchesRunC) { expect_greedy_parity("tiny", false, 64); }
TEST(GenerateParity, TinyUnsharedGreedyMatchesRunC) { expect_greedy_parity("tiny", true, 64); }
TEST(GenerateParity, Stories15mGqaGreedyMatchesRunC) { expect_greedy_parity("stories15m-gqa", false, 64); }
TEST(GenerateParity, Stories15mUnsharedGreedyMatchesRunC) { expect_greedy_parity("stories15m", true, 64); }

// With a shared classifier a random model's greedy path repeats one token
// (each token's own embedding dominates its logits); the unshared one varies,
// so a token-for-token match there means something. Here: a prompt through
// the prefill plan, then greedy decoding to the end of the context.
TEST(GenerateParity, PromptThenGreedyToTheEndOfTheContextMatchesRunC) {
  LlamaWeights w = llm::load_llama2c_checkpoint(checkpoint("tiny", true));
  RunC ref(w);
  llm::Generator gen(w);
  const int64_t V = w.cfg.vocab;
  std::vector<int32_t> prompt = {1, 17, 300, 42, 99, 5};
  const float* got = gen.prefill(prompt);
  const float* want = nullptr;
  for (size_t i = 0; i < prompt.size(); ++i) want = ref.forward(prompt[i], int(i));
  std::set<int32_t> distinct;
  double worst = max_abs_diff(got, want, V);
  for (int64_t pos = int64_t(prompt.size()); pos < w.cfg.seq; ++pos) {
    const int32_t a = argmax(got, V), b = argmax(want, V);
    ASSERT_EQ(a, b) << "position " << pos;
    distinct.insert(a);
    got = gen.decode(a);
    want = ref.forward(b, int(pos));
    worst = std::max(worst, max_abs_diff(got, want, V));
  }
  EXPECT_LT(worst, 2e-5);
  EXPECT_GE(distinct.size(), 8u) << "the unshared model's greedy path should vary";
  std::printf("[ info ] tiny unshared, prompt of 6: %lld greedy tokens equal run.c's, %zu distinct, max |logit diff| %.2e\n",
              (long long)(w.cfg.seq - int64_t(prompt.size())), distinct.size(), worst);
}

// ---- prefill vs decode, and the fp64 reference

// Prefill of T tokens then one decode equals T+1 single-token decodes (the
// same cache contents reached two ways); both equal the fp64 model's logits
// at the matching positions. Tolerances: 1e-5 between the two fp32 paths
// (different GEMM shapes, so different blocking and summation order;
// measured <= 1e-6), 2e-5 against fp64 (measured <= 2e-6) on logits of size
// ~0.1..1.
void expect_prefill_matches_decodes(const std::string& config, int64_t T) {
  LlamaWeights w = llm::load_llama2c_checkpoint(checkpoint(config, false));
  const int64_t V = w.cfg.vocab;
  std::vector<int32_t> ids{1};
  for (int64_t i = 1; i <= T; ++i) ids.push_back(int32_t((i * 7919 + 13) % V));
  std::vector<double> ref = fp64::llama_logits(fp64_shape(w.cfg), to_fp64(w), ids, 1, T + 1);

  llm::Generator one(w), pre(w);
  std::vector<float> step_logits;
  double worst64 = 0;
  for (int64_t p = 0; p <= T; ++p) {
    const float* l = p == 0 ? one.prefill({ids[0]}) : one.decode(ids[size_t(p)]);
    double err = 0;
    for (int64_t i = 0; i < V; ++i) err = std::max(err, std::fabs(double(l[i]) - ref[size_t(p * V + i)]));
    EXPECT_LT(err, 2e-5) << config << " decode at position " << p << " vs fp64";
    worst64 = std::max(worst64, err);
    if (p == T) step_logits.assign(l, l + V);
  }
  const float* last_prompt = pre.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + T));
  double err_pf = 0;
  for (int64_t i = 0; i < V; ++i) err_pf = std::max(err_pf, std::fabs(double(last_prompt[i]) - ref[size_t((T - 1) * V + i)]));
  EXPECT_LT(err_pf, 2e-5) << config << " prefill's last logits vs fp64";
  EXPECT_EQ(pre.position(), T);
  const float* after = pre.decode(ids[size_t(T)]);
  const double d = max_abs_diff(after, step_logits.data(), V);
  EXPECT_LT(d, 1e-5) << config << ": prefill(" << T << ") + decode vs " << T + 1 << " decodes";
  std::printf("[ info ] %s: prefill %lld + decode vs %lld decodes: max |diff| %.2e; vs fp64: decodes %.2e, prefill %.2e\n",
              config.c_str(), (long long)T, (long long)T + 1, d, worst64, err_pf);

  // A second prompt of the same length reuses the compiled prefill plan and
  // starts from an empty cache: the same prompt gives the same logits.
  const float* again = pre.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + T));
  EXPECT_EQ(max_abs_diff(again, last_prompt, V), 0.0);
  pre.prefill({1, 5, 9});  // another length: its own plan
  again = pre.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + T));
  after = pre.decode(ids[size_t(T)]);
  EXPECT_LT(max_abs_diff(after, step_logits.data(), V), 1e-5) << "after a different prompt";
}

TEST(GeneratePrefill, TinyPrefillThenDecodeEqualsDecodes) { expect_prefill_matches_decodes("tiny", 23); }
TEST(GeneratePrefill, Stories15mGqaPrefillThenDecodeEqualsDecodes) {
  expect_prefill_matches_decodes("stories15m-gqa", 9);
}

TEST(GeneratePrefill, FullContextPrefillAndDecodeToTheEnd) {
  LlamaWeights w = llm::load_llama2c_checkpoint(checkpoint("tiny", true));
  RunC ref(w);
  llm::Generator gen(w);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < w.cfg.seq - 1; ++i) ids.push_back(int32_t((i * 31 + 1) % w.cfg.vocab));
  const float* want = nullptr;
  for (size_t i = 0; i < ids.size(); ++i) want = ref.forward(ids[i], int(i));
  EXPECT_LT(max_abs_diff(gen.prefill(ids), want, w.cfg.vocab), 2e-4);
  const float* got = gen.decode(3);  // the last position
  want = ref.forward(3, int(w.cfg.seq - 1));
  EXPECT_LT(max_abs_diff(got, want, w.cfg.vocab), 2e-4);
  EXPECT_EQ(gen.position(), w.cfg.seq);
}

// ---- the programs themselves

TEST(GenerateProgram, DecoderHasStatesAndNoPerTokenWeightsCopies) {
  LlamaConfig cfg = *llm::llama_preset("tiny");
  Plan p = compile(llm::build_llama_decoder(cfg, 1));
  ASSERT_EQ(p.states().size(), size_t(2 * cfg.layers));
  EXPECT_EQ(p.states()[0].name, "l0_kcache");
  EXPECT_EQ(p.states()[0].shape, (Shape{1, cfg.kv_heads, cfg.seq, cfg.head_dim()}));
  ASSERT_EQ(p.outputs().size(), 1u);
  EXPECT_EQ(p.outputs()[0].shape, (Shape{1, cfg.vocab}));
  for (const char* in : {"tokens", "pos", "tok_embeddings", "l1_w3"}) {
    bool found = false;
    for (auto& port : p.inputs()) found |= port.name == in;
    EXPECT_TRUE(found) << in;
  }
  // The prefill program reads the same kinds of inputs and states.
  Plan pf = compile(llm::build_llama_decoder(cfg, 8));
  EXPECT_EQ(pf.states().size(), p.states().size());
  EXPECT_EQ(pf.inputs().size(), p.inputs().size());
}

// The decode program run by the reference executor (no passes, no kernels)
// agrees with the compiled plan, states included, over a few positions.
TEST(GenerateProgram, ReferenceExecutorAgreesWithThePlan) {
  LlamaWeights w = llm::load_llama2c_checkpoint(checkpoint("tiny", false));
  Program prog = llm::build_llama_decoder(w.cfg, 1);
  Plan plan = compile(prog);
  TensorMap ref_states;
  for (int pos = 0; pos < 4; ++pos) {
    TensorMap in = w.tensors;
    in["tokens"] = make(DType::Int32, {1, 1}, {double(pos * 11 + 1)});
    in["pos"] = make(DType::Int32, {1}, {double(pos)});
    Tensor want = run_reference(prog, "main", in, ref_states).at("logits");
    Tensor got = plan.run(in).at("logits");
    double err = 0;
    for (int64_t i = 0; i < want.numel(); ++i) err = std::max(err, std::fabs(want.at(size_t(i)) - got.at(size_t(i))));
    EXPECT_LT(err, 1e-4) << "position " << pos;
  }
  std::vector<double> a = values(plan.state("l1_vcache")), b = values(ref_states.at("l1_vcache"));
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::fabs(a[i] - b[i]));
  EXPECT_LT(err, 1e-5);
}

// The KV-cache write runs in the state's buffer: slice_update writes only
// the new rows, and coreml_update_state then has nothing to copy.
TEST(GenerateProgram, CacheWritesAreInPlace) {
  LlamaConfig cfg = *llm::llama_preset("tiny");
  Plan p = compile(llm::build_llama_decoder(cfg, 1));
  int in_place = 0, updates_in_place = 0, copies = 0;
  for (auto& s : p.steps()) {
    in_place += s.kernel == "slice_update (in place)";
    copies += s.kernel == "slice_update";
    updates_in_place += s.kernel == "coreml_update_state (result in place)";
  }
  EXPECT_EQ(in_place, 2 * cfg.layers);
  EXPECT_EQ(copies, 0);
  EXPECT_EQ(updates_in_place, 2 * cfg.layers);
}

// Where the state's old contents are read after the slice_update, the write
// must not go in place (it would change what that read sees): still correct.
TEST(GenerateProgram, CacheWriteReadAfterwardsStaysACopy) {
  Program prog = parse_mil(program_text(
      "tensor<fp32, [1, 4]> kv, tensor<int32, [2]> b, tensor<int32, [2]> e, state<tensor<fp32, [3, 4]>> cache",
      "tensor<fp32, [3, 4]> old = read_state(input = cache)[name = string(\"old\")];\n"
      "tensor<fp32, [3, 4]> upd = slice_update(x = old, update = kv, begin = b, end = e)[name = string(\"upd\")];\n"
      "tensor<fp32, [3, 4]> d = sub(x = upd, y = old)[name = string(\"d\")];\n"
      "tensor<fp32, [3, 4]> now = coreml_update_state(state = cache, value = upd)[name = string(\"now\")];\n"
      "tensor<fp32, [3, 4]> y = add(x = now, y = d)[name = string(\"y\")];",
      "y"), "kv.mil", ".");
  verify(prog);
  Plan plan = compile(prog);
  for (auto& s : plan.steps()) EXPECT_NE(s.kernel, "slice_update (in place)");
  TensorMap ref_states;
  for (int pos = 0; pos < 3; ++pos) {
    TensorMap in{{"kv", make(DType::FP32, {1, 4}, {1.0 + pos, 2, 3, 4})},
                 {"b", make(DType::Int32, {2}, {double(pos), 0})},
                 {"e", make(DType::Int32, {2}, {double(pos + 1), 4})}};
    Tensor want = run_reference(prog, "main", in, ref_states).at("y");
    EXPECT_TRUE(plan.run(in).at("y").same_bytes(want)) << pos;
  }
}

// ---- bad input

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(GenerateErrors, BadPromptsTokensAndPositions) {
  LlamaWeights w = llm::load_llama2c_checkpoint(checkpoint("tiny", false));
  llm::Generator gen(w);
  expect_error([&] { gen.prefill(std::vector<int32_t>(size_t(w.cfg.seq + 1), 5)); }, "more than the model's seq_len 64");
  expect_error([&] { gen.prefill({}); }, "no tokens");
  expect_error([&] { gen.prefill({1, 512}); }, "token id 512 is outside the vocabulary [0, 512)");
  expect_error([&] { gen.prefill({1, -3}); }, "token id -3");
  gen.prefill({1});
  expect_error([&] { gen.decode(100000); }, "outside the vocabulary");
  gen.prefill(std::vector<int32_t>(size_t(w.cfg.seq), 5));
  expect_error([&] { gen.decode(5); }, "context is full");
  expect_error([] { llm::build_llama_decoder(*llm::llama_preset("tiny"), 65); }, "tokens per run must be in 1..64");

  // A truncated checkpoint.
  const std::string full = checkpoint("tiny", false), cut = temp_dir("generate_cut") + "/cut.bin";
  fs::copy_file(full, cut);
  fs::resize_file(cut, fs::file_size(full) - 1000);
  expect_error([&] { llm::Generator g(llm::load_llama2c_checkpoint(cut)); }, "cut.bin");
}

// ---- the CLI

// A tokenizer.bin for a vocabulary of `n`: <unk>, <s>, </s>, the 256 byte
// pieces, then words (llama2.c's export format).
std::string write_tokenizer(int64_t n) {
  std::string path = temp_dir("generate_tok") + "/tokenizer.bin";
  std::ofstream f(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
  auto piece = [&](const std::string& s, float score) {
    f.write(reinterpret_cast<const char*>(&score), 4);
    u32(uint32_t(s.size()));
    f << s;
  };
  u32(16);
  piece("<unk>", 0), piece("\n<s>\n", 0), piece("\n</s>\n", 0);
  char buf[8];
  for (int b = 0; b < 256; ++b) std::snprintf(buf, sizeof buf, "<0x%02X>", b), piece(buf, 0);
  for (int64_t i = 259; i < n; ++i) piece(" w" + std::to_string(i), -float(i));
  return path;
}

TEST(GenerateCli, StreamsTextAndReportsSpeed) {
  const std::string ckpt = checkpoint("tiny", false), tok = write_tokenizer(512);
  CliResult r = run_cli({"generate", "--checkpoint", ckpt, "--tokenizer", tok, "--prompt", "hi there", "--steps", "40",
                         "--temperature", "0", "--threads", "1"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  // The prompt is echoed first (with the dummy prefix: this toy vocabulary
  // has no " hi" piece, and a byte-token space is not stripped after BOS).
  EXPECT_EQ(r.out.rfind(" hi there", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), std::string("hi there").size() + 20) << r.out;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("prompt: 10 tokens"), std::string::npos) << r.err;  // BOS, the dummy prefix, 8 bytes

  // Greedy is deterministic; sampling with a seed is too.
  CliResult again = run_cli({"generate", "--checkpoint", ckpt, "--tokenizer", tok, "--prompt", "hi there", "--steps",
                             "40", "--temperature", "0"}, 120);
  EXPECT_EQ(again.out, r.out);
  CliResult s1 = run_cli({"generate", "--checkpoint", ckpt, "--tokenizer", tok, "--steps", "30", "--seed", "5"}, 120);
  CliResult s2 = run_cli({"generate", "--checkpoint", ckpt, "--tokenizer", tok, "--steps", "30", "--seed", "5"}, 120);
  ASSERT_EQ(s1.exit_code, 0) << s1.err;
  EXPECT_EQ(s1.out, s2.out);

  // Errors: one line, exit code 2.
  std::string long_prompt(100, 'x');
  r = run_cli({"generate", "--checkpoint", ckpt, "--tokenizer", tok, "--prompt", long_prompt});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("more than the model's seq_len"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const std::string cut = temp_dir("generate_cli_cut") + "/cut.bin";
  fs::copy_file(ckpt, cut);
  fs::resize_file(cut, 100);
  r = run_cli({"generate", "--checkpoint", cut, "--tokenizer", tok});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
  r = run_cli({"generate", "--checkpoint", ckpt, "--tokenizer", write_tokenizer(300)});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("vocabulary size"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace milrt::test
