// The seed's weight-bearing kernels with their weights packed into the one
// input (llm/seed_dynamic_weights.h): each dynamic kernel, compiled once on
// the simulated device, against its constant-weight twin rebuilt for every
// weight set; the packing round trip; the layouts at the seed's size; and
// the engine's size limit refusing a packed input that is too wide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "ane/executor.h"
#include "ane/partition.h"
#include "ane/sim_device.h"
#include "llm/seed_dynamic_weights.h"
#include "llm/seed_kernels.h"
#include "milrt/dtype.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

using namespace milrt::llm;

// dim 64, hidden 128, 4 heads, seq 32: small, and hidden != dim so a matrix
// placed or sliced with its dims swapped cannot go unnoticed.
constexpr SeedLayerConfig kSmall{64, 128, 4, 32};
constexpr SeedWeightKernel kAll[] = {SeedWeightKernel::SdpaFwdTaps, SeedWeightKernel::FfnFwdTaps,
                                     SeedWeightKernel::FfnBwd, SeedWeightKernel::QkvBwd, SeedWeightKernel::SdpaBwd1};

Tensor fp16_uniform(Shape shape, uint64_t seed, float lo, float hi) {
  Tensor t(DType::FP16, shape);
  const std::vector<float> v = uniform_floats(size_t(t.numel()), seed, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_ptr<uint16_t>()[i] = f32_to_f16(v[size_t(i)]);
  return t;
}

// Random fp16 weights in the seed's shapes, scaled by 1/sqrt(fan-in) as the
// seed draws them; the gains away from 1, so a gain read from the wrong
// column (or a matrix's) shows.
SeedLayerWeights random_weights(const SeedLayerConfig& c, uint64_t seed) {
  const float sd = 1 / std::sqrt(float(c.dim)), sh = 1 / std::sqrt(float(c.hidden));
  SeedLayerWeights w;
  w.rms1 = fp16_uniform({c.dim}, seed + 1, 0.5f, 1.5f);
  w.rms2 = fp16_uniform({c.dim}, seed + 2, 0.5f, 1.5f);
  w.wq = fp16_uniform({c.dim, c.dim}, seed + 3, -sd, sd);
  w.wk = fp16_uniform({c.dim, c.dim}, seed + 4, -sd, sd);
  w.wv = fp16_uniform({c.dim, c.dim}, seed + 5, -sd, sd);
  w.wo = fp16_uniform({c.dim, c.dim}, seed + 6, -sd, sd);
  w.w1 = fp16_uniform({c.hidden, c.dim}, seed + 7, -sd, sd);
  w.w3 = fp16_uniform({c.hidden, c.dim}, seed + 8, -sd, sd);
  w.w2 = fp16_uniform({c.dim, c.hidden}, seed + 9, -sh, sh);
  return w;
}

// One kernel through the backend as the trainer runs it: one engine program
// on a simulated device, compiled on first use.
struct OnSim {
  explicit OnSim(const Program& p, ane::SimLimits limits = {}) : part(ane::partition(p)), dev(limits) {
    EXPECT_EQ(part.engine_programs(), 1u);
    EXPECT_EQ(part.host_steps(), 0u);
    exec = std::make_unique<ane::Executor>(part, dev.table());
  }
  Tensor run(const Tensor& x) { return exec->run({{"x", x}}).begin()->second; }
  size_t compiles() { return dev.table()->compile_count(dev.table()->context); }
  ane::Partition part;
  ane::SimDevice dev;
  std::unique_ptr<ane::Executor> exec;
};

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(double(f16_to_f32(t.ptr<uint16_t>()[i]))));
  return m;
}

// The twins compute the same op sequence except conv(W, x) -> matmul(W, x),
// and the reference executor sums both in input-channel order from zero in
// fp64 (fp16 products are exact there) before rounding once to fp16, so
// the outputs must agree bit for bit, not merely within a tolerance. One
// compile of the dynamic kernel serves two weight sets; the constant twin is
// rebuilt and compiled for each.
TEST(AneDynamicWeights, EachKernelEqualsItsConstantTwin) {
  const SeedLayerWeights wa = random_weights(kSmall, 100), wb = random_weights(kSmall, 200);
  for (SeedWeightKernel k : kAll) {
    SCOPED_TRACE(seed_kernel_name(k));
    const SeedDynamicLayout l = seed_dynamic_layout(k, kSmall);
    const Tensor act = fp16_uniform({1, l.channels, 1, kSmall.seq}, 7, -1, 1);
    OnSim dynamic(seed_dynamic_kernel(k, kSmall));
    Tensor outs[2];
    int i = 0;
    for (const SeedLayerWeights* w : {&wa, &wb}) {
      OnSim constant(seed_kernel(k, kSmall, *w));
      const Tensor want = constant.run(act);
      outs[i] = dynamic.run(seed_pack_dynamic(l, act, *w));
      EXPECT_EQ(outs[i].shape(), want.shape());
      EXPECT_TRUE(outs[i].same_bytes(want)) << "weight set " << i;
      EXPECT_GT(max_abs(want), 0.01);
      ++i;
    }
    EXPECT_FALSE(outs[0].same_bytes(outs[1])) << "the weights in the input change the output";
    EXPECT_EQ(dynamic.compiles(), 1u);
  }
}

// Pack, then read back: every weight the kernel holds returns bit for bit,
// the activations sit in columns [0, seq) of their channels, the rectangles
// overlap neither each other nor the activations, and the rest is zero.
TEST(AneDynamicWeights, PackingRoundTrip) {
  const SeedLayerWeights w = random_weights(kSmall, 300);
  for (SeedWeightKernel k : kAll) {
    SCOPED_TRACE(seed_kernel_name(k));
    const SeedDynamicLayout l = seed_dynamic_layout(k, kSmall);
    ASSERT_EQ(l.width % 32, 0);
    const Tensor act = fp16_uniform({1, l.channels, 1, kSmall.seq}, 11, -1, 1);
    const Tensor packed = seed_pack_dynamic(l, act, w);
    ASSERT_EQ(packed.shape(), l.shape());
    const SeedLayerWeights back = seed_unpack_dynamic_weights(l, packed);
    for (const char* name : {"rms1", "rms2", "wq", "wk", "wv", "wo", "w1", "w3", "w2"}) {
      bool held = false;
      for (const SeedPackedWeight& p : l.weights) held = held || p.name == name;
      const Tensor& got = seed_weight(back, name);
      if (held)
        EXPECT_TRUE(got.same_bytes(seed_weight(w, name))) << name;
      else
        EXPECT_TRUE(got.empty()) << name;
    }
    std::vector<int> cover(size_t(l.channels * l.width), 0);
    const uint16_t* p16 = packed.ptr<uint16_t>();
    for (int64_t ch = 0; ch < l.channels; ++ch)
      for (int64_t s = 0; s < kSmall.seq; ++s) {
        ++cover[size_t(ch * l.width + s)];
        ASSERT_EQ(p16[ch * l.width + s], act.ptr<uint16_t>()[ch * kSmall.seq + s]);
      }
    for (const SeedPackedWeight& p : l.weights)
      for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t col = 0; col < p.cols; ++col) ++cover[size_t((p.channel + r) * l.width + p.column + col)];
    for (size_t i = 0; i < cover.size(); ++i) {
      ASSERT_LE(cover[i], 1) << "overlap at element " << i;
      if (!cover[i]) {
        ASSERT_EQ(p16[i], 0) << "padding at element " << i;
      }
    }
  }
  expect_error_containing([&] { seed_pack_dynamic(seed_dynamic_layout(SeedWeightKernel::QkvBwd, kSmall),
                                                  fp16_uniform({1, 64, 1, 32}, 1, -1, 1), w); },
                          "activations must be fp16 [1, 192, 1, 32]");
}

// At the seed's size every kernel's packed input fits the engine's limits
// (no axis above 16384), with the shapes seed_dynamic_weights.h lists, and
// each dynamic kernel declares exactly that input.
TEST(AneDynamicWeights, TheSeedsSizeFits) {
  const SeedLayerConfig seed;
  const int64_t want[][2] = {{768, 3616}, {768, 6688}, {4864, 2048}, {2304, 1280}, {3072, 1280}};
  for (size_t i = 0; i < std::size(kAll); ++i) {
    SCOPED_TRACE(seed_kernel_name(kAll[i]));
    const SeedDynamicLayout l = seed_dynamic_layout(kAll[i], seed);
    EXPECT_EQ(l.channels, want[i][0]);
    EXPECT_EQ(l.width, want[i][1]);
    const Program p = seed_dynamic_kernel(kAll[i], seed);
    EXPECT_EQ(p.functions.at(0).params.at(0).type.shape, l.shape());
  }
}

// A layer whose FFN weights do not fit beside the activations: the layout
// refuses with its reason, and the simulated device's limits validator
// refuses a packed input wider than its limit when asked to compile one.
TEST(AneDynamicWeights, OversizedPackedInputsAreRefused) {
  const SeedLayerConfig wide{64, 5500, 4, 32};  // ffn_fwd_taps: 32 + 3·5500 + 1 columns
  expect_error_containing([&] { seed_dynamic_layout(SeedWeightKernel::FfnFwdTaps, wide); },
                          "ffn_fwd_taps's packed input [1, 64, 1, 16544] (seq 32 + 16501 weight columns) has an axis "
                          "above the engine's 16384");
  expect_error_containing([&] { seed_dynamic_kernel(SeedWeightKernel::FfnFwdTaps, wide); }, "above the engine's 16384");
  // The small layer's ffn_fwd_taps input is [1, 64, 1, 448]; a device
  // limited to 256 per axis must refuse it at compile, saying why.
  OnSim limited(seed_dynamic_kernel(SeedWeightKernel::FfnFwdTaps, kSmall), ane::SimLimits{119, 256});
  const SeedDynamicLayout l = seed_dynamic_layout(SeedWeightKernel::FfnFwdTaps, kSmall);
  const Tensor x = seed_pack_dynamic(l, fp16_uniform({1, 64, 1, 32}, 3, -1, 1), random_weights(kSmall, 1));
  expect_error_containing([&] { limited.run(x); }, "has a dim above 256: tensor<fp16, [1, 64, 1, 448]>");
}

}  // namespace
}  // namespace milrt::test
