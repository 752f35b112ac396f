// The one activation vocabulary (kernels/activation.h): its names, its scalar
// definition against fp64 written in the test, the kernels that accept every
// activation (convolutions, conv chains) and the ones that refuse some (GEMM
// epilogues) with a one-line error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/gemm.h"
#include "kernels/generic/conv.h"
#include "kernels/generic/conv_chain.h"
#include "kernels/weight_gemm.h"
#include "milrt/error.h"
#include "support/activation_fp64.h"

namespace {

namespace k = milrt::kernels;
using k::Activation;
using milrt::test::act64;

constexpr Activation kAll[] = {Activation::none,    Activation::relu,      Activation::clip, Activation::sigmoid,
                               Activation::silu,    Activation::gelu_tanh, Activation::tanh, Activation::hard_sigmoid};

TEST(Activation, NamesRoundTripAndUnknownNamesAreRefused) {
  for (Activation a : kAll) {
    auto back = k::activation_from_name(k::activation_name(a));
    ASSERT_TRUE(back.has_value()) << k::activation_name(a);
    EXPECT_EQ(*back, a);
  }
  EXPECT_STREQ(k::activation_name(Activation::gelu_tanh), "gelu_tanh");
  EXPECT_FALSE(k::activation_from_name("Tanh").has_value());
  EXPECT_FALSE(k::activation_from_name("linear").has_value());   // the recurrent alias is the caller's business
  EXPECT_FALSE(k::activation_from_name("").has_value());
}

TEST(Activation, ScalarDefinitionMatchesFp64) {
  const k::ActivationBounds b{-0.75f, 1.5f};
  for (Activation a : kAll)
    for (double x = -9.0; x <= 9.0; x += 0.0625) {
      const double want = act64(a, x, b.lo, b.hi);
      EXPECT_NEAR(k::activate(a, float(x), b), want, 4e-7 * std::max(1.0, std::abs(want)))
          << k::activation_name(a) << " at " << x;
    }
  // Hand-computed points.
  EXPECT_FLOAT_EQ(k::activate(Activation::hard_sigmoid, 1.0f), 0.7f);
  EXPECT_FLOAT_EQ(k::activate(Activation::hard_sigmoid, 4.0f), 1.0f);
  EXPECT_FLOAT_EQ(k::activate(Activation::clip, 3.0f, {0.0f, 6.0f}), 3.0f);
  EXPECT_FLOAT_EQ(k::activate(Activation::clip, 7.0f, {0.0f, 6.0f}), 6.0f);
  EXPECT_FLOAT_EQ(k::activate(Activation::relu, -2.0f), 0.0f);
}

TEST(Activation, GemmEpiloguesRefuseWhatTheyCannotApplyInOneLine) {
  EXPECT_TRUE(k::gemm_supports(Activation::silu));
  EXPECT_FALSE(k::gemm_supports(Activation::tanh));
  std::vector<float> a(4 * 8, 0.5f), b(8 * 3, 0.25f), c(4 * 3, 0.0f);
  for (Activation act : {Activation::clip, Activation::tanh, Activation::hard_sigmoid}) {
    k::Epilogue ep;
    ep.act = act;
    try {
      k::gemm(4, 3, 8, k::MatrixRef{a.data(), k::ElemType::f32, 8}, k::MatrixRef{b.data(), k::ElemType::f32, 3},
              k::OutputRef{c.data(), k::ElemType::f32, 3}, ep);
      ADD_FAILURE() << "gemm accepted " << k::activation_name(act);
    } catch (const milrt::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("cannot apply ") + k::activation_name(act)), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    std::vector<int8_t> q(3 * 8, 1);
    std::vector<float> scales(3, 1.0f);
    k::WeightRef w{k::WeightFormat::q8, q.data(), 3, 8, 8, scales.data(), 8};
    EXPECT_THROW(k::weight_gemm(1, a.data(), 8, w, c.data(), 3, ep), milrt::Error) << k::activation_name(act);
  }
}

// y = act(bias + conv) in fp64, 1-D, stride 1, no padding.
std::vector<double> conv1d64(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                             int64_t cin, int64_t cout, int64_t groups, int64_t len, int64_t taps, Activation act,
                             k::ActivationBounds bd) {
  const int64_t out = len - taps + 1, cig = cin / groups, cog = cout / groups;
  std::vector<double> y(size_t(cout * out));
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t p = 0; p < out; ++p) {
      double s = bias[size_t(o)];
      const int64_t g = o / cog;
      for (int64_t i = 0; i < cig; ++i)
        for (int64_t t = 0; t < taps; ++t)
          s += double(w[size_t((o * cig + i) * taps + t)]) * x[size_t((g * cig + i) * len + p + t)];
      y[size_t(o * out + p)] = act64(act, s, bd.lo, bd.hi);
    }
  return y;
}

// Both ConvKernel paths (GEMM with many channels per group, the plain loop
// for depthwise) apply every activation, including those GEMM epilogues lack.
TEST(Activation, ConvolutionsApplyEveryActivation) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const k::ActivationBounds bd{-0.3f, 0.4f};
  for (int64_t groups : {int64_t(1), int64_t(16)}) {
    const int64_t cin = 16, cout = 16, len = 11, taps = 3, out = len - taps + 1;
    std::vector<float> x(size_t(cin * len)), w(size_t(cout * (cin / groups) * taps)), bias(static_cast<size_t>(cout));
    for (float& v : x) v = u(rng);
    for (float& v : w) v = u(rng);
    for (float& v : bias) v = u(rng);
    k::ConvGeometry g;
    g.cin = cin;
    g.cout = cout;
    g.groups = groups;
    g.in[2] = len;
    g.kernel[2] = taps;
    g.out[2] = out;
    for (Activation act : kAll) {
      k::ConvKernel kern(g, w.data(), act, bd);
      EXPECT_EQ(kern.uses_gemm(), groups == 1);
      std::vector<float> y(size_t(cout * out));
      kern.run(x.data(), w.data(), bias.data(), y.data());
      const std::vector<double> want = conv1d64(x, w, bias, cin, cout, groups, len, taps, act, bd);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], want[i], 2e-5 * std::max(1.0, std::abs(want[i])))
            << k::activation_name(act) << " groups " << groups << " element " << i;
    }
  }
}

// A chain link whose activation the GEMM epilogue lacks runs it over the tile.
TEST(Activation, ConvChainLinksApplyEveryActivation) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t positions = 37, c0 = 8, c1 = 12, c2 = 8;
  std::vector<float> x(size_t(c0 * positions)), w1(size_t(c1 * c0)), b1(static_cast<size_t>(c1)), w2(size_t(c2 * c1)),
      b2(static_cast<size_t>(c2));
  for (auto* v : {&x, &w1, &b1, &w2, &b2})
    for (float& e : *v) e = u(rng);
  for (Activation act : kAll) {
    const k::ActivationBounds bd{-0.2f, 0.5f};
    k::ConvChainKernel chain(1, positions, {c0, c1, c2},
                             {k::ConvChainLink{w1.data(), b1.data(), act, bd},
                              k::ConvChainLink{w2.data(), b2.data(), Activation::hard_sigmoid, {}}});
    std::vector<float> y(size_t(c2 * positions));
    chain.run(x.data(), y.data());
    const std::vector<double> h = conv1d64(x, w1, b1, c0, c1, 1, positions, 1, act, bd);
    std::vector<float> hf(h.begin(), h.end());
    const std::vector<double> want = conv1d64(hf, w2, b2, c1, c2, 1, positions, 1, Activation::hard_sigmoid, {});
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y[i], want[i], 2e-5) << k::activation_name(act) << " element " << i;
  }
}

}  // namespace
