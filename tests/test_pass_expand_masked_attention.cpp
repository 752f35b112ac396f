// expand-masked-attention on its own IR: scaled_dot_product_attention with
// an attn_mask becomes matmul, mul, add, softmax, matmul (a constant bool
// mask folded into an additive constant, a runtime one through select), an
// op without a mask is left alone, and the reference executor gives the
// original op's results (fp64, rounded to the declared dtype) for the
// expanded program within a bound.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "milrt/passes.h"
#include "milrt/reference.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

// A causal [L, L] bool mask as a MIL literal: key j takes part for query i when j <= i.
std::string causal_literal(int L) {
  std::string s = "tensor<bool, [" + std::to_string(L) + ", " + std::to_string(L) + "]>([";
  for (int i = 0; i < L; ++i) {
    s += i ? ", [" : "[";
    for (int j = 0; j < L; ++j) s += std::string(j ? ", " : "") + (j <= i ? "true" : "false");
    s += "]";
  }
  return s + "])";
}

const char* kQkv = "tensor<DT, [1, 2, 8, 16]> q, tensor<DT, [1, 2, 8, 16]> k, tensor<DT, [1, 2, 8, 16]> v";

std::string with_dtype(std::string s, const std::string& dt) {
  for (size_t at; (at = s.find("DT")) != std::string::npos;) s.replace(at, 2, dt);
  return s;
}

Program sdpa_program(const std::string& dt, const std::string& extra_params, const std::string& mask_arg) {
  return parse_program(with_dtype(std::string(kQkv) + extra_params, dt),
                       with_dtype("tensor<DT, [1, 2, 8, 16]> o = scaled_dot_product_attention(query = q, key = k, "
                                  "value = v" + mask_arg + ")[name = string(\"o\")];",
                                  dt),
                       "o");
}

TensorMap inputs(const Program& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  TensorMap in;
  for (auto& prm : p.function("main")->params) {
    Tensor t(prm.type.dtype, prm.type.shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      // bool masks: the diagonal always takes part, so no row is masked out entirely
      t.set(size_t(i), prm.type.dtype == DType::Bool ? (i % 9 == 0 || u(rng) > 0 ? 1 : 0) : u(rng));
    in[prm.name] = t;
  }
  return in;
}

void expect_same_outputs(const Program& before, const Program& after, const TensorMap& in, double tol) {
  TensorMap want = run_reference(before, "main", in), got = run_reference(after, "main", in);
  const Tensor& w = want.at("o");
  const Tensor& g = got.at("o");
  ASSERT_EQ(g.shape(), w.shape());
  for (int64_t i = 0; i < w.numel(); ++i)
    ASSERT_NEAR(g.at(size_t(i)), w.at(size_t(i)), tol * (1 + std::fabs(w.at(size_t(i))))) << "o[" << i << "]";
}

Program expanded(const Program& p) {
  Program q = p;
  run_passes(q, {"expand-masked-attention"});
  verify(q);
  return q;
}

// fp32: the expansion rounds to fp32 after each of its five ops where the
// fused op rounds once (a few fp32 ulps); fp16: after each op to fp16, and
// softmax's probabilities times values over 8 keys: about 2^-9 relative.
TEST(ExpandMaskedAttention, ConstantBoolMaskBecomesAnAdditiveConstant) {
  for (const char* dt : {"fp32", "fp16"}) {
    SCOPED_TRACE(dt);
    Program p = sdpa_program(dt, "", ", attn_mask = " + causal_literal(8));
    Program q = expanded(p);
    EXPECT_EQ(op_types(q), (std::vector<std::string>{"matmul", "mul", "add", "softmax", "matmul"}));
    const Op& add = producer(q, "o__masked");
    const std::string mask = var_of(add, "y");
    const Op& c = producer(q, mask);
    ASSERT_EQ(c.type, "const");
    const Tensor& m = c.arg("val")->lit->value;
    EXPECT_EQ(m.dtype(), std::string(dt) == "fp16" ? DType::FP16 : DType::FP32);
    EXPECT_EQ(m.at(1), std::string(dt) == "fp16" ? -65504.0 : double(std::numeric_limits<float>::lowest()));  // [0, 1]: key 1 after query 0
    EXPECT_EQ(m.at(8), 0.0);  // [1, 0]
    for (uint32_t seed : {1u, 2u}) expect_same_outputs(p, q, inputs(p, seed), std::string(dt) == "fp16" ? 4e-3 : 1e-5);
  }
}

TEST(ExpandMaskedAttention, RuntimeMasks) {
  Program b = sdpa_program("fp32", ", tensor<bool, [1, 1, 8, 8]> m", ", attn_mask = m");
  Program bq = expanded(b);
  EXPECT_EQ(op_types(bq), (std::vector<std::string>{"matmul", "mul", "select", "add", "softmax", "matmul"}));
  expect_same_outputs(b, bq, inputs(b, 3), 1e-5);
  Program f = sdpa_program("fp16", ", tensor<fp16, [8, 8]> m", ", attn_mask = m");
  Program fq = expanded(f);
  EXPECT_EQ(op_types(fq), (std::vector<std::string>{"matmul", "mul", "add", "softmax", "matmul"}));
  expect_same_outputs(f, fq, inputs(f, 4), 4e-3);
}

TEST(ExpandMaskedAttention, LeavesAttentionWithoutAMaskAlone) {
  Program p = sdpa_program("fp32", "", "");
  Program q = expanded(p);
  EXPECT_EQ(op_types(q), (std::vector<std::string>{"scaled_dot_product_attention"}));
}

}  // namespace
}  // namespace milrt::test::rewrite
