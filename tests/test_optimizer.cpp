// AdamW and its schedule against a plain fp64 AdamW written here from
// PyTorch's documented algorithm (torch.optim.AdamW + clip_grad_norm_).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/generic/adamw.h"
#include "kernels/threads.h"
#include "llm/optimizer.h"
#include "support/test_util.h"

using namespace milrt;
using namespace milrt::llm;

namespace {

Tensor random_tensor(Shape shape, std::mt19937& rng, double scale, double offset = 0) {
  Tensor t(DType::FP32, shape);
  std::normal_distribution<double> n(0.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_ptr<float>()[i] = float(offset + scale * n(rng));
  return t;
}

TensorMap clone_all(const TensorMap& m) {
  TensorMap out;
  for (const auto& [k, t] : m) out.emplace(k, t.clone());
  return out;
}

// fp64 AdamW, one tensor at a time, state kept in doubles.
struct RefAdamW {
  AdamWConfig c;
  int64_t t = 0;
  std::map<std::string, std::vector<double>> p, m, v;
  std::map<std::string, int> rank;

  RefAdamW(const AdamWConfig& cfg, const TensorMap& params) : c(cfg) {
    for (const auto& [k, x] : params) {
      p[k] = test::values(x);
      m[k].assign(p[k].size(), 0.0);
      v[k].assign(p[k].size(), 0.0);
      rank[k] = x.rank();
    }
  }
  static double lr_at(const AdamWConfig& c, int64_t it) {
    if (it < c.warmup) return c.lr * double(it + 1) / double(c.warmup);
    double min_lr = c.lr * c.min_lr_ratio;
    if (it >= c.total_steps) return min_lr;
    double r = double(it - c.warmup) / double(c.total_steps - c.warmup);
    return min_lr + 0.5 * (1 + std::cos(3.14159265358979323846 * r)) * (c.lr - min_lr);
  }
  double step(const TensorMap& grads) {
    double sq = 0;
    for (const auto& [k, g] : grads)
      for (double x : test::values(g)) sq += x * x;
    double norm = std::sqrt(sq);
    double clip = (c.grad_clip > 0 && norm > c.grad_clip) ? c.grad_clip / (norm + 1e-6) : 1.0;
    double lr = lr_at(c, t);
    ++t;
    for (auto& [k, pk] : p) {
      std::vector<double> g = test::values(grads.at(k));
      for (size_t i = 0; i < pk.size(); ++i) {
        double gi = g[i] * clip;
        if (rank[k] >= 2) pk[i] -= lr * c.weight_decay * pk[i];
        m[k][i] = c.beta1 * m[k][i] + (1 - c.beta1) * gi;
        v[k][i] = c.beta2 * v[k][i] + (1 - c.beta2) * gi * gi;
        double mhat = m[k][i] / (1 - std::pow(c.beta1, double(t)));
        double vhat = v[k][i] / (1 - std::pow(c.beta2, double(t)));
        pk[i] -= lr * mhat / (std::sqrt(vhat) + c.eps);
      }
    }
    return norm;
  }
};

using test::error_of;

}  // namespace

TEST(Schedule, HandComputedPoints) {
  AdamWConfig c;
  c.lr = 1e-3, c.warmup = 10, c.total_steps = 110, c.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 4), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 9), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1e-3);  // cosine starts at the peak
  // 25% through the decay: 1e-4 + 0.5·(1 + cos(π/4))·9e-4.
  EXPECT_NEAR(learning_rate(c, 35), 8.6819805153394637e-4, 1e-15);
  EXPECT_NEAR(learning_rate(c, 60), 5.5e-4, 1e-15);  // halfway: the mean of peak and floor
  EXPECT_NEAR(learning_rate(c, 109), 1e-4 + 0.5 * (1 + std::cos(M_PI * 0.99)) * 9e-4, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(c, 110), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 100000), 1e-4);
  c.warmup = 0;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 1e-3);
  c.min_lr_ratio = 0;
  EXPECT_NEAR(learning_rate(c, 55), 5e-4, 1e-15);
  EXPECT_THROW(learning_rate(c, -1), Error);
}

TEST(AdamWOpt, ConfigValidation) {
  TensorMap p{{"w", Tensor(DType::FP32, {2, 2})}};
  auto bad = [&](auto set, const char* field) {
    AdamWConfig c;
    set(c);
    std::string e = error_of([&] { AdamW o(c, p); });
    EXPECT_NE(e.find(field), std::string::npos) << e;
  };
  bad([](AdamWConfig& c) { c.lr = -1; }, "lr");
  bad([](AdamWConfig& c) { c.beta1 = 1; }, "beta1");
  bad([](AdamWConfig& c) { c.beta2 = -0.1; }, "beta2");
  bad([](AdamWConfig& c) { c.eps = 0; }, "eps");
  bad([](AdamWConfig& c) { c.weight_decay = NAN; }, "weight_decay");
  bad([](AdamWConfig& c) { c.grad_clip = -1; }, "grad_clip");
  bad([](AdamWConfig& c) { c.warmup = -1; }, "warmup");
  bad([](AdamWConfig& c) { c.min_lr_ratio = 2; }, "min_lr_ratio");
  TensorMap half{{"w", Tensor(DType::FP16, {2})}};
  EXPECT_THROW(AdamW(AdamWConfig{}, half), Error);
}

// Several steps with warmup and decay, clipping on some steps and not others,
// weight decay on matrices and not on gains.
TEST(AdamWOpt, MatchesFp64Reference) {
  std::mt19937 rng(17);
  TensorMap params{{"tok", random_tensor({37, 53}, rng, 0.5)},
                   {"gain", random_tensor({53}, rng, 0.1, 1.0)},
                   {"cube", random_tensor({3, 4, 5}, rng, 1.0)},
                   {"big", random_tensor({300, 700}, rng, 0.05)}};  // > one kernel chunk: the threaded path
  AdamWConfig c;
  c.lr = 2e-2, c.weight_decay = 0.3, c.grad_clip = 50.0, c.warmup = 2, c.total_steps = 7, c.min_lr_ratio = 0.2;
  RefAdamW ref(c, params);
  AdamW opt(c, params);
  int clipped = 0;
  for (int s = 0; s < 8; ++s) {
    // Alternate small and large gradients: the norm crosses grad_clip both ways.
    double scale = s % 2 ? 1.0 : 0.01;
    TensorMap grads;
    for (const auto& [k, p] : params) grads.emplace(k, random_tensor(p.shape(), rng, scale));
    double want = ref.step(grads);
    double got = opt.step(params, grads);
    EXPECT_NEAR(got, want, 1e-5 * want) << "step " << s;
    clipped += want > c.grad_clip;
    for (const auto& [k, p] : params) {
      const std::vector<double>& r = ref.p.at(k);
      double worst = 0;
      for (int64_t i = 0; i < p.numel(); ++i) worst = std::max(worst, std::abs(double(p.ptr<float>()[i]) - r[i]));
      // fp32 state over 8 steps of size <= lr: a few ulps of the values (|p| < ~6) per step.
      EXPECT_LT(worst, 2e-5) << k << " step " << s;
    }
  }
  EXPECT_EQ(clipped, 4);  // the large-gradient steps
  EXPECT_EQ(opt.steps_taken(), 8);
}

TEST(AdamWOpt, ZeroGradientsOnlyDecayMatrices) {
  std::mt19937 rng(3);
  TensorMap params{{"w", random_tensor({4, 6}, rng, 1.0)}, {"g", random_tensor({6}, rng, 1.0)}};
  TensorMap before = clone_all(params);
  TensorMap grads{{"w", Tensor(DType::FP32, {4, 6})}, {"g", Tensor(DType::FP32, {6})}};
  AdamWConfig c;
  c.lr = 0.1, c.weight_decay = 0.5, c.warmup = 0;
  AdamW opt(c, params);
  EXPECT_EQ(opt.step(params, grads), 0.0);
  EXPECT_TRUE(params.at("g").same_bytes(before.at("g")));
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_FLOAT_EQ(params.at("w").ptr<float>()[i], before.at("w").ptr<float>()[i] * 0.95f);
}

// Thread counts and kernel paths (generic loop, AVX2 and AVX-512 intrinsics) all give the same bits.
TEST(AdamWOpt, KernelIndependentOfThreadsAndPath) {
  std::mt19937 rng(5);
  const int64_t n = 1000003;  // several chunks and a ragged tail
  Tensor p = random_tensor({n}, rng, 1), g = random_tensor({n}, rng, 1), m = random_tensor({n}, rng, 0.1),
         v = random_tensor({n}, rng, 0.1, 1.0);
  kernels::AdamWStep s{0.9f, 0.95f, 1e-8f, 0.5f, 1e-3f, 1.2f, 0.999f};
  std::vector<Tensor> out;
  std::vector<double> sums;
  std::vector<std::pair<kernels::Isa, int>> runs{{kernels::Isa::generic, 1}, {kernels::Isa::generic, 3}};
  for (kernels::Isa isa : kernels::usable_isas())
    if (isa != kernels::Isa::generic) runs.push_back({isa, 2});
  const char* old_isa = std::getenv("MILRT_ISA");
  std::string saved = old_isa ? old_isa : "";
  for (auto [isa, threads] : runs) {
    setenv("MILRT_ISA", std::string(kernels::isa_name(isa)).c_str(), 1);
    kernels::reload_isa();
    kernels::set_num_threads(threads);
    Tensor pp = p.clone(), mm = m.clone(), vv = v.clone();
    kernels::adamw_update_f32(pp.mutable_ptr<float>(), g.ptr<float>(), mm.mutable_ptr<float>(),
                              vv.mutable_ptr<float>(), n, s);
    out.insert(out.end(), {pp, mm, vv});
    sums.push_back(kernels::sum_squares_f32(g.ptr<float>(), n));
  }
  if (old_isa) setenv("MILRT_ISA", saved.c_str(), 1);
  else unsetenv("MILRT_ISA");
  kernels::reload_isa();
  kernels::set_num_threads(0);
  for (size_t r = 1; r < runs.size(); ++r) {
    SCOPED_TRACE(std::string(kernels::isa_name(runs[r].first)) + " threads " + std::to_string(runs[r].second));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(out[i].same_bytes(out[3 * r + i])) << i;
    EXPECT_EQ(sums[0], sums[r]);
  }
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += double(g.ptr<float>()[i]) * g.ptr<float>()[i];
  EXPECT_NEAR(sums[0], want, 1e-6 * want);
  // Spot-check the fused formula on one element in fp64.
  int64_t i = 777777;
  double gi = double(g.ptr<float>()[i]) * 0.5, mi = 0.9 * m.ptr<float>()[i] + 0.1 * gi,
         vi = 0.95 * v.ptr<float>()[i] + 0.05 * gi * gi;
  double pi = double(p.ptr<float>()[i]) * 0.999 - 1e-3 * mi / (std::sqrt(vi) * 1.2 + 1e-8);
  EXPECT_NEAR(out[0].ptr<float>()[i], pi, 1e-6);
  EXPECT_NEAR(out[1].ptr<float>()[i], mi, 1e-6);
  EXPECT_NEAR(out[2].ptr<float>()[i], vi, 1e-6);
}

// Gradient accumulation's passes: zeroing (NaN and inf included) and the
// float product of each element (as a plain loop here computes it), on 1 and
// 3 threads, over several chunks and a ragged tail, and nothing written past n.
TEST(GradientPasses, ZeroAndScaleMatchAPlainLoop) {
  std::mt19937 rng(9);
  const int64_t n = 200003;
  Tensor acc = random_tensor({n + 1}, rng, 1);
  acc.mutable_ptr<float>()[n] = 42.0f;  // a guard element past the range
  acc.mutable_ptr<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  acc.mutable_ptr<float>()[n - 1] = -std::numeric_limits<float>::infinity();
  for (int threads : {1, 3}) {
    SCOPED_TRACE(threads);
    kernels::set_num_threads(threads);
    Tensor a = acc.clone();
    kernels::scale_f32(a.mutable_ptr<float>(), 0.25f, n);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = acc.ptr<float>()[i] * 0.25f;
      wrong += std::memcmp(&a.ptr<float>()[i], &want, 4) != 0 && !(std::isnan(want) && std::isnan(a.ptr<float>()[i]));
    }
    EXPECT_EQ(wrong, 0);
    kernels::zero_f32(a.mutable_ptr<float>(), n);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t zero = 0;
      nonzero += std::memcmp(&a.ptr<float>()[i], &zero, 4) != 0;
    }
    EXPECT_EQ(nonzero, 0);
    EXPECT_EQ(a.ptr<float>()[n], 42.0f);
  }
  kernels::set_num_threads(0);
}

// Saving the state mid-run and resuming in a fresh optimizer continues exactly.
// Every usable kernel path on sizes around its vector widths (8 and 16 lanes,
// masked tails) and on awkward values (zero gradient and second moment,
// subnormals, large magnitudes): the same bits as the generic loop, each
// element within a few ulps of the formula in fp64, and nothing written past n.
TEST(AdamWOpt, KernelPathsBitIdenticalOnTailsAndEdgeValues) {
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const kernels::AdamWStep s{0.9f, 0.999f, 1e-8f, 0.7f, 3e-3f, 1.3f, 0.98f};
  const char* old_isa = std::getenv("MILRT_ISA");
  const std::string saved = old_isa ? old_isa : "";
  kernels::set_num_threads(1);
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100}) {
    const size_t len = size_t(n);
    std::vector<float> p(len), g(len), m(len), v(len);
    for (int64_t i = 0; i < n; ++i) {
      p[size_t(i)] = nd(rng), g[size_t(i)] = nd(rng), m[size_t(i)] = 0.1f * nd(rng);
      v[size_t(i)] = std::fabs(0.1f * nd(rng));
      switch (i % 7) {
        case 1: g[size_t(i)] = 0, m[size_t(i)] = 0, v[size_t(i)] = 0; break;  // den = eps exactly
        case 3: g[size_t(i)] *= 1e-40f, v[size_t(i)] = 1e-41f; break;          // subnormals
        case 5: g[size_t(i)] *= 1e15f, p[size_t(i)] *= 1e30f; break;           // g² near fp32's range
        default: break;
      }
    }
    const float kSentinel = -12345.0f;
    std::vector<std::vector<float>> outs;
    for (kernels::Isa isa : kernels::usable_isas()) {
      setenv("MILRT_ISA", std::string(kernels::isa_name(isa)).c_str(), 1);
      kernels::reload_isa();
      // One extra element past n that no path may touch.
      std::vector<float> pp(p), mm(m), vv(v);
      for (auto* x : {&pp, &mm, &vv}) x->push_back(kSentinel);
      kernels::adamw_update_f32(pp.data(), g.data(), mm.data(), vv.data(), n, s);
      for (auto* x : {&pp, &mm, &vv}) ASSERT_EQ(x->back(), kSentinel) << kernels::isa_name(isa) << " n " << n;
      std::vector<float> all(pp.begin(), pp.end() - 1);
      all.insert(all.end(), mm.begin(), mm.end() - 1);
      all.insert(all.end(), vv.begin(), vv.end() - 1);
      if (!outs.empty()) {
        ASSERT_EQ(std::memcmp(all.data(), outs[0].data(), all.size() * 4), 0) << kernels::isa_name(isa) << " n " << n;
      }
      outs.push_back(std::move(all));
    }
    // The generic results against the formula in fp64 with the same fp32
    // constants; each bound is a few roundings of the terms' magnitudes
    // (terms may cancel), plus the spacing of subnormals.
    const double u = 0x1p-24, tiny = 1e-44;
    const double b1 = 0.9f, c1 = 1.0f - 0.9f, b2 = 0.999f, c2 = 1.0f - 0.999f;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(g[size_t(i)]) * double(s.grad_scale);
      const double mi = b1 * m[size_t(i)] + c1 * gi, mi_mag = std::fabs(b1 * m[size_t(i)]) + std::fabs(c1 * gi);
      const double vi = b2 * v[size_t(i)] + c2 * gi * gi;  // both terms >= 0
      const double den = std::sqrt(vi) * double(s.inv_sqrt_bc2) + double(s.eps);
      const double step = double(s.step_size) * mi / den, step_mag = double(s.step_size) * mi_mag / den;
      const double pd = double(p[size_t(i)]) * double(s.decay);
      EXPECT_NEAR(outs[0][size_t(i)], pd - step, 8 * u * (std::fabs(pd) + step_mag) + tiny)
          << "p n " << n << " i " << i;
      EXPECT_NEAR(outs[0][size_t(n + i)], mi, 4 * u * mi_mag + tiny) << "m n " << n << " i " << i;
      EXPECT_NEAR(outs[0][size_t(2 * n + i)], vi, 4 * u * vi + tiny) << "v n " << n << " i " << i;
    }
  }
  if (old_isa) setenv("MILRT_ISA", saved.c_str(), 1);
  else unsetenv("MILRT_ISA");
  kernels::reload_isa();
  kernels::set_num_threads(0);
}

TEST(AdamWOpt, StateRoundTripResumesBitIdentical) {
  std::string dir = test::temp_dir("adamw_state");
  std::mt19937 rng(9);
  TensorMap params{{"a", random_tensor({8, 16}, rng, 0.3)}, {"b", random_tensor({16}, rng, 0.1, 1)}};
  std::vector<TensorMap> grads;
  for (int s = 0; s < 6; ++s)
    grads.push_back({{"a", random_tensor({8, 16}, rng, 1)}, {"b", random_tensor({16}, rng, 1)}});
  AdamWConfig c;
  c.warmup = 2, c.total_steps = 6, c.lr = 1e-2, c.grad_clip = 3;
  TensorMap straight = clone_all(params);
  AdamW one(c, straight);
  for (const TensorMap& g : grads) one.step(straight, g);

  TensorMap resumed = clone_all(params);
  {
    AdamW first(c, resumed);
    for (int s = 0; s < 3; ++s) first.step(resumed, grads[s]);
    TrainState st = first.state();
    st.extra = {1, 2, 3};
    save_train_state(dir + "/state.bin", st);
  }
  AdamW second(c, resumed);
  TrainState st = load_train_state(dir + "/state.bin");
  second.restore(st);
  EXPECT_EQ(second.steps_taken(), 3);
  for (int s = 3; s < 6; ++s) second.step(resumed, grads[s]);
  for (const auto& [k, t] : straight) EXPECT_TRUE(t.same_bytes(resumed.at(k))) << k;
  TrainState a = one.state(), b = second.state();
  EXPECT_EQ(a.step, b.step);
  for (const auto& [k, t] : a.m) EXPECT_TRUE(t.same_bytes(b.m.at(k))) << k;
  for (const auto& [k, t] : a.v) EXPECT_TRUE(t.same_bytes(b.v.at(k))) << k;
}

TEST(AdamWOpt, BadInputsThrowAndLeaveParamsUnchanged) {
  std::mt19937 rng(1);
  TensorMap params{{"a", random_tensor({2, 3}, rng, 1)}, {"b", random_tensor({3}, rng, 1)}};
  TensorMap before = clone_all(params);
  AdamW opt(AdamWConfig{}, params);
  auto expect_unchanged = [&] {
    for (const auto& [k, t] : before) EXPECT_TRUE(t.same_bytes(params.at(k))) << k;
    EXPECT_EQ(opt.steps_taken(), 0);
  };
  TensorMap missing{{"a", random_tensor({2, 3}, rng, 1)}};
  EXPECT_NE(error_of([&] { opt.step(params, missing); }).find("gradients lack 'b'"), std::string::npos);
  TensorMap shape{{"a", random_tensor({3, 2}, rng, 1)}, {"b", random_tensor({3}, rng, 1)}};
  EXPECT_NE(error_of([&] { opt.step(params, shape); }).find("gradients 'a' is fp32 [3, 2], expected fp32 [2, 3]"),
            std::string::npos);
  TensorMap extra = shape;
  extra["a"] = random_tensor({2, 3}, rng, 1);
  extra["c"] = random_tensor({1}, rng, 1);
  EXPECT_NE(error_of([&] { opt.step(params, extra); }).find("unknown tensor 'c'"), std::string::npos);
  TensorMap nan{{"a", random_tensor({2, 3}, rng, 1)}, {"b", random_tensor({3}, rng, 1)}};
  nan["b"].mutable_ptr<float>()[1] = NAN;
  EXPECT_NE(error_of([&] { opt.step(params, nan); }).find("gradient norm is nan"), std::string::npos);
  expect_unchanged();
  TrainState st = opt.state();
  st.m.erase("a");
  EXPECT_THROW(opt.restore(st), Error);
  st = opt.state();
  st.v["b"] = Tensor(DType::FP32, {4});
  EXPECT_THROW(opt.restore(st), Error);
}

// ZeRO-1's optimizer: the weights laid out flat and split over 3 "ranks"
// (simulated in one process), each ShardedAdamW updating its part with the
// global norm from the parts' sums of squares. Against the fp64 reference
// (the same tolerance as above) and the unsharded AdamW (the same kernel on
// the same elements: equal to the rounding of the clipping norm). The
// moments gathered in rank order make the unsharded optimizer's state, and a
// state restored into 2 ranks continues as AdamW does.
TEST(ShardedAdamWOpt, PartsTogetherEqualTheUnshardedOptimizer) {
  std::mt19937 rng(23);
  const std::vector<std::pair<std::string, Shape>> order{
      {"tok", {37, 53}}, {"gain", {53}}, {"cube", {3, 4, 5}}, {"big", {300, 700}}, {"last", {7}}};
  TensorMap params;
  for (const auto& [name, shape] : order)
    params.emplace(name, shape.size() == 1 ? random_tensor(shape, rng, 0.1, 1.0) : random_tensor(shape, rng, 0.5));
  AdamWConfig c;
  c.lr = 2e-2, c.weight_decay = 0.3, c.grad_clip = 50.0, c.warmup = 2, c.total_steps = 7, c.min_lr_ratio = 0.2;

  const int world = 3;
  FlatLayout layout = FlatLayout::make(order, world);
  ASSERT_EQ(layout.entries.size(), order.size());
  EXPECT_EQ(layout.shard % 16, 0);
  EXPECT_GE(layout.size(), layout.used);
  EXPECT_LT(layout.size() - layout.used, int64_t(world) * 16 + 16 * world);
  int64_t expect_used = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(layout.entries[i].offset % 16, 0) << order[i].first;
    EXPECT_GE(layout.entries[i].offset, expect_used);
    EXPECT_LT(layout.entries[i].offset, expect_used + 16);
    expect_used = layout.entries[i].offset + shape_numel(order[i].second);
  }
  EXPECT_EQ(layout.used, expect_used);

  RefAdamW ref(c, params);
  TensorMap plain_params = clone_all(params);
  AdamW plain(c, plain_params);
  std::vector<float> w(size_t(layout.size()), 0.0f), g(size_t(layout.size()), 0.0f);
  for (const auto& e : layout.entries) std::memcpy(w.data() + e.offset, params.at(e.name).ptr<float>(), size_t(e.numel) * 4);
  std::vector<ShardedAdamW> parts;
  for (int r = 0; r < world; ++r) parts.emplace_back(c, layout, r);
  int clipped = 0;
  for (int s = 0; s < 8; ++s) {
    const double scale = s % 2 ? 1.0 : 0.01;
    TensorMap grads;
    for (const auto& [name, shape] : order) grads.emplace(name, random_tensor(shape, rng, scale));
    for (const auto& e : layout.entries) std::memcpy(g.data() + e.offset, grads.at(e.name).ptr<float>(), size_t(e.numel) * 4);
    double sq = 0;
    for (int r = 0; r < world; ++r) sq += parts[size_t(r)].sum_squares(g.data() + r * layout.shard);
    const double norm = std::sqrt(sq);
    for (int r = 0; r < world; ++r)
      parts[size_t(r)].step(w.data() + r * layout.shard, g.data() + r * layout.shard, norm);
    const double want = ref.step(grads);
    const double got = plain.step(plain_params, grads);
    EXPECT_NEAR(norm, want, 1e-5 * want) << "step " << s;
    EXPECT_NEAR(norm, got, 1e-9 * got) << "step " << s;
    clipped += want > c.grad_clip;
    for (const auto& e : layout.entries) {
      double worst_ref = 0, worst_plain = 0;
      for (int64_t i = 0; i < e.numel; ++i) {
        const double x = w[size_t(e.offset + i)];
        worst_ref = std::max(worst_ref, std::abs(x - ref.p.at(e.name)[size_t(i)]));
        worst_plain = std::max(worst_plain, std::abs(x - double(plain_params.at(e.name).ptr<float>()[i])));
      }
      EXPECT_LT(worst_ref, 2e-5) << e.name << " step " << s;
      EXPECT_LT(worst_plain, 1e-6) << e.name << " step " << s;
    }
  }
  EXPECT_EQ(clipped, 4);

  // The gathered moments are AdamW's state.
  std::vector<float> all_m, all_v;
  for (int r = 0; r < world; ++r) {
    all_m.insert(all_m.end(), parts[size_t(r)].m().begin(), parts[size_t(r)].m().end());
    all_v.insert(all_v.end(), parts[size_t(r)].v().begin(), parts[size_t(r)].v().end());
  }
  TrainState st;
  st.step = parts[0].steps_taken();
  st.m = ShardedAdamW::unflatten(layout, all_m.data());
  st.v = ShardedAdamW::unflatten(layout, all_v.data());
  TrainState want = plain.state();
  EXPECT_EQ(st.step, want.step);
  for (const auto& [name, shape] : order) {
    auto max_diff = [](const Tensor& a, const Tensor& b) {
      double worst = 0;
      EXPECT_EQ(a.shape(), b.shape());
      for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i)
        worst = std::max(worst, std::abs(double(a.ptr<float>()[i]) - double(b.ptr<float>()[i])));
      return worst;
    };
    EXPECT_LT(max_diff(st.m.at(name), want.m.at(name)), 1e-6) << name;
    EXPECT_LT(max_diff(st.v.at(name), want.v.at(name)), 1e-6) << name;
  }

  // Restored into 2 ranks (another layout), one more step equals AdamW's.
  FlatLayout two = FlatLayout::make(order, 2);
  std::vector<float> w2(size_t(two.size()), 0.0f), g2(size_t(two.size()), 0.0f);
  for (const auto& e : two.entries) std::memcpy(w2.data() + e.offset, plain_params.at(e.name).ptr<float>(), size_t(e.numel) * 4);
  std::vector<ShardedAdamW> halves;
  for (int r = 0; r < 2; ++r) halves.emplace_back(c, two, r), halves.back().restore(want);
  TensorMap grads;
  for (const auto& [name, shape] : order) grads.emplace(name, random_tensor(shape, rng, 1.0));
  for (const auto& e : two.entries) std::memcpy(g2.data() + e.offset, grads.at(e.name).ptr<float>(), size_t(e.numel) * 4);
  double sq = 0;
  for (int r = 0; r < 2; ++r) sq += halves[size_t(r)].sum_squares(g2.data() + r * two.shard);
  for (int r = 0; r < 2; ++r) halves[size_t(r)].step(w2.data() + r * two.shard, g2.data() + r * two.shard, std::sqrt(sq));
  plain.step(plain_params, grads);
  for (const auto& e : two.entries)
    for (int64_t i = 0; i < e.numel; ++i)
      ASSERT_NEAR(w2[size_t(e.offset + i)], plain_params.at(e.name).ptr<float>()[i], 1e-6) << e.name << " " << i;

  // A state of other tensors is refused; a non-finite norm changes nothing.
  TrainState wrong = want;
  wrong.m.erase("gain");
  EXPECT_NE(error_of([&] { halves[0].restore(wrong); }).find("gain"), std::string::npos);
  const std::vector<float> before = w2;
  EXPECT_THROW(halves[0].step(w2.data(), g2.data(), NAN), Error);
  EXPECT_EQ(w2, before);
}
