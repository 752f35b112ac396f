// The Llama model builder and the seed-layer builder against a plain fp64
// implementation written from the math (tests/support/llama_fp64.h): logits
// and loss from the reference executor and from the compiled plan, print ->
// parse round trips, config errors, the seed's synthetic data against libc's
// drand48, and (autodiff) gradients against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>

#include "llm/llama_builder.h"
#include "llm/seed_layer_builder.h"
#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "milrt/reference.h"
#include "support/llama_fp64.h"

namespace milrt {
namespace {

CompileOptions grad_function() {
  CompileOptions o;
  o.function = "main_grad";
  return o;
}

using llm::LlamaConfig;
using llm::LlamaProgramOptions;

// Tiny models: every feature on, sizes small enough for fp64 finite differences.
LlamaConfig tiny(int64_t heads, int64_t kv_heads, bool shared, int64_t layers = 2) {
  LlamaConfig c;
  c.dim = 16;
  c.hidden = 24;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.vocab = 11;
  c.seq = 16;
  c.shared_classifier = shared;
  return c;
}

test::fp64::LlamaShape fp64_shape(const LlamaConfig& c) {
  return {c.dim, c.hidden, c.layers, c.heads, c.kv_heads, c.vocab, c.shared_classifier, c.norm_eps, c.rope_theta};
}

// Random fp32 weights (uniform, scaled by 1/sqrt(fan-in) so activations stay
// O(1); RMSNorm gains around 1 so they matter), and the same values in fp64.
struct Model {
  TensorMap inputs;
  test::fp64::Weights w64;
};

void add_weights(Model& m, const std::vector<llm::WeightSpec>& specs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const llm::WeightSpec& s : specs) {
    Tensor t(DType::FP32, s.shape);
    const bool gain = s.shape.size() == 1;
    const double scale = gain ? 0.2 : (s.name == "tok_embeddings" ? 1.0 : 1.0 / std::sqrt(double(s.shape[1])));
    std::vector<double> v(size_t(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.set(size_t(i), gain ? 1.0 + scale * u(rng) : scale * u(rng));
      v[size_t(i)] = t.at(size_t(i));  // the fp32 value, exactly
    }
    m.inputs[s.name] = t;
    m.w64[s.name] = v;
  }
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = int32_t(rng() % uint32_t(vocab));
  return ids;
}

Tensor ids_tensor(const std::vector<int32_t>& ids, int64_t B, int64_t T) {
  Tensor t(DType::Int32, {B, T});
  for (size_t i = 0; i < ids.size(); ++i) t.set(i, ids[i]);
  return t;
}

double max_abs_diff(const Tensor& got, const std::vector<double>& want) {
  EXPECT_EQ(size_t(got.numel()), want.size());
  double m = 0;
  for (size_t i = 0; i < want.size() && i < size_t(got.numel()); ++i) m = std::max(m, std::abs(got.at(i) - want[i]));
  return m;
}

struct Case {
  const char* name;
  int64_t heads, kv_heads;
  bool shared;
  int64_t batch, seq;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class LlamaForward : public ::testing::TestWithParam<Case> {};

// fp32 (reference executor: every op rounded to fp32; plan: fp32 kernels with
// fused RMSNorm/attention and other summation orders) vs exact fp64. Logits
// are O(1..10) and pass through ~60 fp32 ops with sums of at most 24 terms:
// measured errors are <= 1e-6, so 2e-5 absolute leaves a 20x margin while any
// real mistake (a wrong head, a RoPE sign, a missing mask) moves logits by
// >= 1e-2 (a flipped RoPE sine moves them by 0.17..0.75).
TEST_P(LlamaForward, LogitsAndLossMatchFp64) {
  const Case& k = GetParam();
  LlamaConfig cfg = tiny(k.heads, k.kv_heads, k.shared);
  LlamaProgramOptions opts{k.batch, k.seq};
  Model m;
  add_weights(m, llm::llama_weight_specs(cfg), 7);
  std::vector<int32_t> tokens = random_ids(k.batch * k.seq, cfg.vocab, 1), targets = random_ids(k.batch * k.seq, cfg.vocab, 2);
  std::vector<double> want_logits = test::fp64::llama_logits(fp64_shape(cfg), m.w64, tokens, k.batch, k.seq);
  double want_loss = test::fp64::llama_loss(fp64_shape(cfg), m.w64, tokens, targets, k.batch, k.seq);

  TensorMap in = m.inputs;
  in["tokens"] = ids_tensor(tokens, k.batch, k.seq);
  Program lp = llm::build_llama_logits(cfg, opts);
  verify(lp);
  Tensor ref_logits = run_reference(lp, "main", in).at("logits");
  ASSERT_EQ(ref_logits.shape(), (Shape{k.batch, k.seq, cfg.vocab}));
  const double ref_err = max_abs_diff(ref_logits, want_logits);
  EXPECT_LT(ref_err, 2e-5) << "reference executor";
  Plan plan = compile(lp);
  const double plan_err = max_abs_diff(plan.run(in).at("logits"), want_logits);
  EXPECT_LT(plan_err, 2e-5) << "compiled plan";

  in["targets"] = ids_tensor(targets, k.batch, k.seq);
  Program pl = llm::build_llama_loss(cfg, opts);
  verify(pl);
  Tensor ref_loss = run_reference(pl, "main", in).at("loss");
  ASSERT_EQ(ref_loss.shape(), Shape{});
  EXPECT_NEAR(ref_loss.at(0), want_loss, 2e-5) << "reference executor";
  Plan lplan = compile(pl);
  const double plan_loss = lplan.run(in).at("loss").at(0);
  EXPECT_NEAR(plan_loss, want_loss, 2e-5) << "compiled plan";
  std::printf("  %s: max |logit err| reference %.2e plan %.2e; loss %.6f, err reference %.2e plan %.2e\n", k.name,
              ref_err, plan_err, want_loss, std::abs(ref_loss.at(0) - want_loss), std::abs(plan_loss - want_loss));
}

INSTANTIATE_TEST_SUITE_P(Configs, LlamaForward,
                         ::testing::Values(Case{"mha_shared_T16", 2, 2, true, 1, 16},
                                           Case{"mha_separate_T7_B2", 2, 2, false, 2, 7},
                                           Case{"gqa_shared_T7", 4, 2, true, 1, 7},
                                           Case{"gqa_separate_T16_B2", 4, 1, false, 2, 16},
                                           Case{"gqa_T1", 4, 2, true, 2, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

// The grouped-query head mapping checked without the fp64 model: a GQA model
// equals the MHA model whose K/V projections repeat each kv head for the
// `heads / kv_heads` query heads that share it (llama2.c: kv head h / kv_mul).
TEST(LlamaBuilder, GroupedQueriesEqualRepeatedKvHeads) {
  LlamaConfig gqa = tiny(4, 2, true, 1), mha = tiny(4, 4, true, 1);
  Model m;
  add_weights(m, llm::llama_weight_specs(gqa), 3);
  TensorMap in_gqa = m.inputs, in_mha = m.inputs;
  const int64_t hd = gqa.head_dim(), group = 2;
  for (const char* w : {"l0_wk", "l0_wv"}) {
    const Tensor& src = m.inputs.at(w);  // [kv_dim, dim]
    Tensor rep(DType::FP32, {mha.dim, mha.dim});
    for (int64_t h = 0; h < mha.heads; ++h)
      for (int64_t r = 0; r < hd; ++r)
        for (int64_t c = 0; c < mha.dim; ++c)
          rep.set(size_t((h * hd + r) * mha.dim + c), src.at(size_t(((h / group) * hd + r) * gqa.dim + c)));
    in_mha[w] = rep;
  }
  std::vector<int32_t> tokens = random_ids(9, gqa.vocab, 5);
  in_gqa["tokens"] = in_mha["tokens"] = ids_tensor(tokens, 1, 9);
  Tensor a = run_reference(llm::build_llama_logits(gqa, {1, 9}), "main", in_gqa).at("logits");
  Tensor b = run_reference(llm::build_llama_logits(mha, {1, 9}), "main", in_mha).at("logits");
  std::vector<double> bv(size_t(b.numel()));
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = b.at(i);
  EXPECT_LT(max_abs_diff(a, bv), 1e-5);
}

TEST(LlamaBuilder, InputsOutputsAndNames) {
  LlamaConfig cfg = tiny(4, 2, false);
  Program p = llm::build_llama_loss(cfg, {3, 5});
  const Function& f = *p.function("main");
  std::vector<llm::WeightSpec> specs = llm::llama_weight_specs(cfg);
  ASSERT_EQ(f.params.size(), specs.size() + 2);
  EXPECT_EQ(f.params[0].name, "tokens");
  EXPECT_EQ(f.params[0].type, Type::tensor(DType::Int32, {3, 5}));
  EXPECT_EQ(f.params[1].name, "targets");
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(f.params[i + 2].name, specs[i].name);
    EXPECT_EQ(f.params[i + 2].type, Type::tensor(DType::FP32, specs[i].shape));
  }
  ASSERT_EQ(f.outputs, std::vector<std::string>{"loss"});
  // Weights are inputs, never constants: the only constants are the shared
  // scalars and tables.
  std::set<std::string> names, consts;
  for (const Op& op : f.ops) {
    for (const Output& o : op.outputs) names.insert(o.name);
    if (op.type == "const") consts.insert(op.outputs[0].name);
  }
  EXPECT_EQ(consts, (std::set<std::string>{"rope_cos_16", "rope_sin_16", "rope_cos_8", "rope_sin_8"}));
  for (const char* n : {"embed", "l0_q", "l0_q_rope", "l0_att", "l1_x", "logits", "loss"}) EXPECT_TRUE(names.count(n)) << n;

  Program lp = llm::build_llama_logits(cfg, {});
  const Function& g = *lp.function("main");
  EXPECT_EQ(g.params.size(), specs.size() + 1);
  EXPECT_EQ(g.params[0].type, Type::tensor(DType::Int32, {1, cfg.seq}));
  ASSERT_EQ(g.outputs, std::vector<std::string>{"logits"});
}

// The printed program parses back to the same IR and computes the same loss.
TEST(LlamaBuilder, PrintsAndParsesBack) {
  for (const LlamaConfig& cfg : {tiny(2, 2, true), tiny(4, 2, false)}) {
    Program p = llm::build_llama_loss(cfg, {2, 5});
    Program q = parse_mil(print_mil(p), "llama.mil", ".");
    verify(q);
    EXPECT_EQ(ir_diff(p, q), "");
  }
  Program s = llm::build_seed_layer_loss({16, 24, 2, 6});
  Program q = parse_mil(print_mil(s), "seed.mil", ".");
  verify(q);
  EXPECT_EQ(ir_diff(s, q), "");
}

void expect_error(const std::function<void()>& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(LlamaBuilder, BadConfigIsAClearError) {
  LlamaConfig c = tiny(3, 3, true);  // 16 not divisible by 3
  expect_error([&] { llm::build_llama_loss(c); }, "dim must be a multiple of heads");
  c = tiny(4, 3, true);
  expect_error([&] { llm::build_llama_logits(c); }, "heads must be a multiple of kv_heads");
  c = tiny(4, 4, true);
  c.vocab = 0;
  expect_error([&] { llm::build_llama_loss(c); }, "must be positive");
  expect_error([&] { llm::build_llama_loss(tiny(2, 2, true), {0, 4}); }, "batch must be positive");
  expect_error([&] { llm::build_llama_loss(tiny(2, 2, true), {1, 17}); }, "seq must be in 1..16");
  expect_error([&] { llm::build_llama_loss(tiny(2, 2, true), {1, -1}); }, "seq must be in 1..16");
  expect_error([&] { llm::build_seed_layer_loss({16, 24, 5, 8}); }, "dim divisible by heads");
  expect_error([&] { llm::seed_layer_synthetic_inputs({16, 0, 2, 8}); }, "all must be positive");
}

// ---- the seed layer ----

test::fp64::Weights to_fp64(const TensorMap& in, std::vector<double>& x, std::vector<double>& target) {
  test::fp64::Weights w;
  for (const auto& [name, t] : in) {
    std::vector<double> v(size_t(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.at(i);
    if (name == "x") x = v;
    else if (name == "target") target = v;
    else w[name] = v;
  }
  return w;
}

// The seed's experiment at a small size on its own synthetic data: the loss
// (MSE ~ 1e-2 here) within 1e-6 relative to fp64 (fp32 rounding through one
// layer; a wrong op moves it by far more).
TEST(SeedLayerBuilder, LossMatchesFp64) {
  llm::SeedLayerConfig cfg{16, 40, 4, 12};
  TensorMap in = llm::seed_layer_synthetic_inputs(cfg);
  std::vector<double> x, target;
  test::fp64::Weights w = to_fp64(in, x, target);
  const double want = test::fp64::seed_layer_loss({16, 40, 4, 12}, w, x, target);
  Program p = llm::build_seed_layer_loss(cfg);
  verify(p);
  const double ref = run_reference(p, "main", in).at("loss").at(0);
  const double plan = compile(p).run(in).at("loss").at(0);
  EXPECT_NEAR(ref, want, 1e-6 * want + 1e-9);
  EXPECT_NEAR(plan, want, 1e-6 * want + 1e-9);
  EXPECT_GT(want, 1e-3);  // not trivially zero
}

// The synthetic data and initial weights follow train_large.m literally,
// using libc's srand48/drand48 (the seed's generator) as the oracle.
TEST(SeedLayerBuilder, SyntheticInputsFollowTheSeed) {
  const int DIM = 16, HIDDEN = 40, SEQ = 12;
  TensorMap in = llm::seed_layer_synthetic_inputs({DIM, HIDDEN, 4, SEQ}, 42);
  std::vector<float> Wq(DIM * DIM), Wk(DIM * DIM), Wv(DIM * DIM), Wo(DIM * DIM), W1(HIDDEN * DIM), W2(DIM * HIDDEN),
      W3(HIDDEN * DIM), x_in(SEQ * DIM), y_tgt(SEQ * DIM);
  srand48(42);
  float scale_d = 1.0f / sqrtf(DIM), scale_h = 1.0f / sqrtf(HIDDEN);
  for (size_t i = 0; i < Wq.size(); i++) { Wq[i] = scale_d * (2 * drand48() - 1); Wk[i] = scale_d * (2 * drand48() - 1); }
  for (size_t i = 0; i < Wq.size(); i++) { Wv[i] = scale_d * (2 * drand48() - 1); Wo[i] = scale_d * (2 * drand48() - 1); }
  for (size_t i = 0; i < W1.size(); i++) W1[i] = scale_h * (2 * drand48() - 1);
  for (size_t i = 0; i < W2.size(); i++) W2[i] = scale_d * (2 * drand48() - 1);
  for (size_t i = 0; i < W3.size(); i++) W3[i] = scale_h * (2 * drand48() - 1);
  srand48(42);
  for (int c = 0; c < DIM; c++)
    for (int t = 0; t < SEQ; t++) {
      int idx = c * SEQ + t;
      x_in[idx] = 0.1f * (2 * drand48() - 1);
      y_tgt[idx] = 0.1f * sinf(idx * 0.03f + 1.0f);
    }
  auto same = [&](const char* name, const std::vector<float>& want) {
    const Tensor& t = in.at(name);
    ASSERT_EQ(size_t(t.numel()), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(t.ptr<float>()[i], want[i]) << name << "[" << i << "]";
  };
  same("wq", Wq); same("wk", Wk); same("wv", Wv); same("wo", Wo); same("w1", W1); same("w2", W2); same("w3", W3);
  for (const char* g : {"rms_att", "rms_ffn"})
    for (int i = 0; i < DIM; ++i) EXPECT_EQ(in.at(g).ptr<float>()[i], 1.0f);
  // [seq, dim] here, channel-first [dim, seq] in the seed.
  for (int c = 0; c < DIM; c++)
    for (int t = 0; t < SEQ; t++) {
      ASSERT_EQ(in.at("x").ptr<float>()[t * DIM + c], x_in[c * SEQ + t]);
      ASSERT_EQ(in.at("target").ptr<float>()[t * DIM + c], y_tgt[c * SEQ + t]);
    }
  auto specs = llm::seed_layer_weight_specs({DIM, HIDDEN, 4, SEQ});
  EXPECT_EQ(in.size(), specs.size() + 2);
}

// The fp64 seed layer is the seed's layer: on the same (fp16-rounded)
// weights and input, the seed's own forward kernels (src/llm/seed_kernels.h,
// its exact fp16 op sequences: attention kernel, residual, FFN kernel,
// residual) give the same output. fp16 rounds every intermediate (values
// ~0.1-1, 11-bit mantissa, ~20 ops deep): measured within 2e-3 of fp64.
TEST(SeedLayerBuilder, Fp64LayerIsTheSeedKernelsLayer) {
  const int D = 16, H = 40, S = 12;
  llm::SeedLayerConfig cfg{D, H, 4, S};
  TensorMap in = llm::seed_layer_synthetic_inputs(cfg);
  // Bigger inputs and gains than the seed's 0.1 so every part contributes.
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < in["x"].numel(); ++i) in["x"].set(size_t(i), u(rng));
  for (const char* g : {"rms_att", "rms_ffn"})
    for (int i = 0; i < D; ++i) in[g].set(size_t(i), 1.0 + 0.3 * u(rng));
  for (auto& [name, t] : in) t = t.cast(DType::FP16).cast(DType::FP32);  // both sides see the fp16 values

  llm::SeedLayerWeights sw;
  sw.rms1 = in["rms_att"].cast(DType::FP16);
  sw.rms2 = in["rms_ffn"].cast(DType::FP16);
  sw.wq = in["wq"].cast(DType::FP16);
  sw.wk = in["wk"].cast(DType::FP16);
  sw.wv = in["wv"].cast(DType::FP16);
  sw.wo = in["wo"].cast(DType::FP16);
  sw.w1 = in["w1"].cast(DType::FP16);
  sw.w2 = in["w2"].cast(DType::FP16);
  sw.w3 = in["w3"].cast(DType::FP16);
  // [S, D] -> the seed's channel-first [1, D, 1, S].
  Tensor x_cf(DType::FP16, {1, D, 1, S});
  for (int c = 0; c < D; ++c)
    for (int t = 0; t < S; ++t) x_cf.set(size_t(c * S + t), in["x"].at(size_t(t * D + c)));
  Tensor att = run_reference(llm::seed_sdpa_fwd_taps(cfg, sw), "main", {{"x", x_cf}}).at("out");  // o first
  Tensor x2(DType::FP16, {1, D, 1, S});
  for (int i = 0; i < D * S; ++i) x2.set(size_t(i), x_cf.at(size_t(i)) + att.at(size_t(i)));
  Tensor ffn = run_reference(llm::seed_ffn_fwd_taps(cfg, sw), "main", {{"x", x2}}).at("out");   // ffn first

  std::vector<double> x, target;
  test::fp64::Weights w = to_fp64(in, x, target);
  std::vector<double> y = test::fp64::seed_layer_forward({D, H, 4, S}, w, x);
  double worst = 0;
  for (int c = 0; c < D; ++c)
    for (int t = 0; t < S; ++t)
      worst = std::max(worst, std::abs(x2.at(size_t(c * S + t)) + ffn.at(size_t(c * S + t)) - y[size_t(t * D + c)]));
  EXPECT_LT(worst, 2e-3);
  std::printf("  seed kernels (fp16) vs fp64 layer: max |diff| %.2e\n", worst);
}

// ---- gradients (differentiate) vs central finite differences of fp64 ----

// A few random coordinates of every weight: the fp32 gradient of the derived
// program vs (L(w + h) - L(w - h)) / 2h of the fp64 loss, h = 1e-4
// (truncation ~ h² times the third derivative ~ 1e-9, rounding ~ 1e-16 / h:
// the quotient is exact to ~1e-8 of the loss's scale). The fp32 gradient
// carries a few 1e-7 relative error per op of the backward chain, relative to
// the weight's largest gradient element gmax (small elements are sums with
// cancellation); measured <= 4e-7 gmax, so |g - fd| <= 1e-5 gmax + 1e-4 |fd|
// leaves a 25x margin while a wrong rule is off by the gradient's own size.
template <class Loss>
void check_gradients(const TensorMap& grads, const test::fp64::Weights& w64, const std::vector<llm::WeightSpec>& specs,
                     Loss loss, int per_weight, uint32_t seed, const std::string& what) {
  std::mt19937 rng(seed);
  double worst = 0;
  std::string worst_at;
  for (const llm::WeightSpec& s : specs) {
    auto it = grads.find(s.name + "_grad");
    ASSERT_NE(it, grads.end()) << "no gradient output for " << s.name;
    ASSERT_EQ(it->second.shape(), s.shape) << s.name;
    double gmax = 0;
    for (int64_t i = 0; i < it->second.numel(); ++i) gmax = std::max(gmax, std::abs(it->second.at(size_t(i))));
    EXPECT_GT(gmax, 0) << s.name << " has an all-zero gradient";
    for (int n = 0; n < per_weight; ++n) {
      const size_t i = rng() % size_t(shape_numel(s.shape));
      test::fp64::Weights w = w64;
      const double h = 1e-4;
      w[s.name][i] += h;
      const double up = loss(w);
      w[s.name][i] -= 2 * h;
      const double down = loss(w);
      const double fd = (up - down) / (2 * h), got = it->second.at(i);
      EXPECT_NEAR(got, fd, 1e-5 * gmax + 1e-4 * std::abs(fd)) << what << ": d loss / d " << s.name << "[" << i << "]";
      if (std::abs(got - fd) / gmax > worst) worst = std::abs(got - fd) / gmax, worst_at = s.name;
    }
  }
  std::printf("  %s: max |grad - fd| / gmax %.2e (at %s)\n", what.c_str(), worst, worst_at.c_str());
}

std::vector<std::string> names_of(const std::vector<llm::WeightSpec>& specs) {
  std::vector<std::string> n;
  for (const llm::WeightSpec& s : specs) n.push_back(s.name);
  return n;
}

TEST(LlamaGradients, EveryWeightMatchesFiniteDifferences) {
  struct G { const char* name; LlamaConfig cfg; int64_t batch, seq; };
  for (const G& g : {G{"gqa_shared", tiny(4, 2, true), 2, 5}, G{"mha_separate", tiny(2, 2, false), 1, 6}}) {
    const LlamaConfig& cfg = g.cfg;
    Model m;
    add_weights(m, llm::llama_weight_specs(cfg), 11);
    std::vector<int32_t> tokens = random_ids(g.batch * g.seq, cfg.vocab, 3),
                         targets = random_ids(g.batch * g.seq, cfg.vocab, 4);
    TensorMap in = m.inputs;
    in["tokens"] = ids_tensor(tokens, g.batch, g.seq);
    in["targets"] = ids_tensor(targets, g.batch, g.seq);
    std::vector<llm::WeightSpec> specs = llm::llama_weight_specs(cfg);
    GradOptions o;
    o.loss = "loss";
    o.wrt = names_of(specs);
    Program gp = differentiate(llm::build_llama_loss(cfg, {g.batch, g.seq}), o);
    verify(gp);
    TensorMap grads = run_reference(gp, "main_grad", in);
    auto loss = [&](const test::fp64::Weights& w) {
      return test::fp64::llama_loss(fp64_shape(cfg), w, tokens, targets, g.batch, g.seq);
    };
    EXPECT_NEAR(grads.at("loss").at(0), loss(m.w64), 2e-5);
    check_gradients(grads, m.w64, specs, loss, 3, 5, std::string(g.name) + " reference");
    TensorMap planned = compile(gp, grad_function()).run(in);
    check_gradients(planned, m.w64, specs, loss, 3, 5, std::string(g.name) + " plan");
  }
}

TEST(SeedLayerGradients, EveryWeightMatchesFiniteDifferences) {
  llm::SeedLayerConfig cfg{16, 40, 4, 12};
  TensorMap in = llm::seed_layer_synthetic_inputs(cfg);
  std::vector<double> x, target;
  test::fp64::Weights w64 = to_fp64(in, x, target);
  std::vector<llm::WeightSpec> specs = llm::seed_layer_weight_specs(cfg);
  GradOptions o;
  o.loss = "loss";
  o.wrt = names_of(specs);
  Program gp = differentiate(llm::build_seed_layer_loss(cfg), o);
  verify(gp);
  auto loss = [&](const test::fp64::Weights& w) { return test::fp64::seed_layer_loss({16, 40, 4, 12}, w, x, target); };
  check_gradients(run_reference(gp, "main_grad", in), w64, specs, loss, 4, 9, "seed layer reference");
  check_gradients(compile(gp, grad_function()).run(in), w64, specs, loss, 4, 9, "seed layer plan");
}

}  // namespace
}  // namespace milrt
