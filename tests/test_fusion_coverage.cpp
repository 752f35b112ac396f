// What the default pipeline makes of the programs milrt trains and runs: the
// compiled plan of a Llama loss (and of its gradient) must hold one fused
// kernel per idiom of the architecture, counted here from the architecture
// itself, not from the passes. A fusion that silently stops matching (a
// renamed op, a reordered idiom) leaves the outputs right and the plan slow;
// these counts are what fails then.
//
// Per layer a Llama block has: two RMSNorms (attention, FFN) and a final one;
// seven products (q, k, v, o, w1, w3, w2) and the classifier; one attention;
// RoPE on q and k; a SwiGLU (silu(x·W1) · x·W3); four head transposes (q, k,
// v to heads, the attention output back); two residual adds, each the
// epilogue of the product before it (o and w2).
// The gradient adds, per product, a dX and a dW product; per norm,
// attention, RoPE and SwiGLU one backward kernel; a transpose per forward
// transpose; and the sums of dX over the uses of a shared input as residual
// epilogues: the attention norm's output feeds q, k and v (two sums), the
// FFN norm's feeds w1 and w3 (one).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "llm/llama_builder.h"
#include "llm/llama_config.h"
#include "llm/seed_layer_builder.h"
#include "milrt/autodiff.h"
#include "milrt/plan.h"

namespace milrt::test {
namespace {

// Steps per kernel, the kernel's name cut at its first tag ("gemm[onednn]+residual"
// counts as "gemm"), and the GEMM steps with a fused residual apart.
struct Kernels {
  std::map<std::string, int> by_name;
  int gemm_residual = 0;
  int operator[](const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? 0 : it->second;
  }
};

Kernels kernels_of(const Plan& plan) {
  Kernels k;
  for (const Plan::StepInfo& s : plan.steps()) {
    const std::string base = s.kernel.substr(0, s.kernel.find_first_of("[+"));
    ++k.by_name[base];
    if (base == "gemm" && s.kernel.find("+residual") != std::string::npos) ++k.gemm_residual;
  }
  return k;
}

std::string listing(const Kernels& k) {
  std::string s;
  for (const auto& [name, n] : k.by_name) s += "  " + std::to_string(n) + " " + name + "\n";
  return s;
}

llm::LlamaConfig small_llama(int64_t layers) { return llm::LlamaConfig{64, 128, layers, 4, 4, 97, 16}; }

Program with_gradients(const Program& p, const std::vector<llm::WeightSpec>& weights) {
  GradOptions go;
  go.loss = "loss";
  for (const llm::WeightSpec& w : weights) go.wrt.push_back(w.name);
  return differentiate(p, go);
}

CompileOptions gradient_function() {
  CompileOptions o;
  o.function = "main_grad";
  return o;
}

class LlamaFusion : public ::testing::TestWithParam<int64_t> {};

TEST_P(LlamaFusion, LossPlanHasOneKernelPerIdiom) {
  const int64_t L = GetParam();
  const Kernels k = kernels_of(compile(llm::build_llama_loss(small_llama(L))));
  SCOPED_TRACE(listing(k));
  EXPECT_EQ(k["attention"], L);
  EXPECT_EQ(k["softmax"], 0) << "the attention idiom left a softmax";
  EXPECT_EQ(k["rms_norm"], 2 * L + 1);
  EXPECT_EQ(k["silu_mul"], L);
  EXPECT_EQ(k["rope"], 2 * L);
  EXPECT_EQ(k["gemm"], 7 * L + 1);
  EXPECT_EQ(k.gemm_residual, 2 * L) << "the residual adds after o and w2 are GEMM epilogues";
  EXPECT_EQ(k["transpose"], 4 * L);
  EXPECT_EQ(k["binary:add"], 0) << "a residual add was left unfused";
}

TEST_P(LlamaFusion, GradientPlanHasOneKernelPerIdiomAndItsBackward) {
  const int64_t L = GetParam();
  const llm::LlamaConfig cfg = small_llama(L);
  const Program derived = with_gradients(llm::build_llama_loss(cfg), llm::llama_weight_specs(cfg));
  const Kernels k = kernels_of(compile(derived, gradient_function()));
  SCOPED_TRACE(listing(k));
  EXPECT_EQ(k["attention"], L);
  EXPECT_EQ(k["attention_grad"], L);
  EXPECT_EQ(k["softmax"], 0);
  EXPECT_EQ(k["rms_norm"], 2 * L + 1);
  EXPECT_EQ(k["rms_norm_grad"], 2 * L + 1);
  EXPECT_EQ(k["silu_mul"], L);
  EXPECT_EQ(k["silu_mul_grad"], L);
  EXPECT_EQ(k["rope"], 4 * L);
  EXPECT_EQ(k["gemm"], 3 * (7 * L + 1)) << "each product, its dX and its dW";
  EXPECT_EQ(k.gemm_residual, 2 * L + 3 * L) << "forward residuals, then the dX sums of the norms' outputs";
  EXPECT_EQ(k["transpose"], 8 * L);
}

INSTANTIATE_TEST_SUITE_P(Layers, LlamaFusion, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "_layers"; });

// The seed layer (one block, a mean-squared-error loss): the step `milrt
// bench train --config seed-layer` times.
TEST(SeedLayerFusion, GradientPlanHasOneKernelPerIdiomAndItsBackward) {
  const llm::SeedLayerConfig cfg{64, 128, 4, 16};
  const Program derived = with_gradients(llm::build_seed_layer_loss(cfg), llm::seed_layer_weight_specs(cfg));
  const Kernels k = kernels_of(compile(derived, gradient_function()));
  SCOPED_TRACE(listing(k));
  EXPECT_EQ(k["attention"], 1);
  EXPECT_EQ(k["attention_grad"], 1);
  EXPECT_EQ(k["rms_norm"], 2);
  EXPECT_EQ(k["rms_norm_grad"], 2);
  EXPECT_EQ(k["silu_mul"], 1);
  EXPECT_EQ(k["silu_mul_grad"], 1);
  EXPECT_EQ(k["rope"], 0) << "the seed layer has no RoPE";
  EXPECT_EQ(k["gemm"], 3 * 7);
  EXPECT_EQ(k.gemm_residual, 2 + 3);
  EXPECT_EQ(k["transpose"], 8);
}

}  // namespace
}  // namespace milrt::test
