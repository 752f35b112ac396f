// CompileOptions::accumulate_outputs: each run adds an output's value to its
// memory. Values are checked against fp64 sums written here; the plan's
// steps show the add folded into the GEMM as its residual (the in-place path
// the training step relies on); bad names are one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt {
namespace {

constexpr int kM = 5, kK = 7, kN = 6;

// y: a bare matmul (its sum fuses into the GEMM); h = 2·y, a matmul whose
// value also feeds another op (the add stays a step of its own); e: elementwise;
// r: a reduction; n: an output left plain.
Program program() {
  Program p = parse_mil(
      test::program_text(
          "tensor<fp32, [5, 7]> x, tensor<fp32, [7, 6]> w, tensor<fp32, [5, 6]> b",
          test::stmt("tensor<fp32, [5, 6]>", "y", "matmul(x = x, y = w)") +
              test::stmt("tensor<fp32, [5, 7]>", "x2", "mul(x = x, y = fp32(2))") +
              test::stmt("tensor<fp32, [5, 6]>", "h", "matmul(x = x2, y = w)") +
              test::stmt("tensor<fp32, [5, 6]>", "e", "mul(x = h, y = b)") +
              test::stmt("tensor<fp32, [1, 7]>", "r", "reduce_sum(x = x, axes = tensor<int32, [1]>([0]), keep_dims = bool(true))") +
              test::stmt("tensor<fp32, [5, 6]>", "n", "sigmoid(x = b)"),
          "y, h, e, r, n"),
      "acc.mil", ".");
  verify(p);
  return p;
}

struct Case {
  Tensor x{DType::FP32, {kM, kK}}, w{DType::FP32, {kK, kN}}, b{DType::FP32, {kM, kN}};
  // One run's values in fp64.
  std::vector<double> y, e, r, n;
  Case() {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1, 1);
    for (Tensor* t : {&x, &w, &b})
      for (int64_t i = 0; i < t->numel(); ++i) t->mutable_ptr<float>()[i] = u(rng);
    const float *X = x.ptr<float>(), *W = w.ptr<float>(), *B = b.ptr<float>();
    y.assign(kM * kN, 0), e.assign(kM * kN, 0), r.assign(kK, 0), n.assign(kM * kN, 0);
    for (int i = 0; i < kM; ++i)
      for (int j = 0; j < kN; ++j) {
        double s = 0;
        for (int k = 0; k < kK; ++k) s += double(X[i * kK + k]) * W[k * kN + j];
        y[size_t(i * kN + j)] = s;
        e[size_t(i * kN + j)] = 2 * s * B[i * kN + j];
        n[size_t(i * kN + j)] = 1 / (1 + std::exp(-double(B[i * kN + j])));
      }
    for (int i = 0; i < kM; ++i)
      for (int k = 0; k < kK; ++k) r[size_t(k)] += X[i * kK + k];
  }
};

void expect_sum(const float* got, const std::vector<double>& one_run, double start, int runs, const char* what) {
  for (size_t i = 0; i < one_run.size(); ++i)
    ASSERT_NEAR(got[i], start + runs * one_run[i], 1e-5 * (1 + std::abs(start + runs * one_run[i])))
        << what << " element " << i << " after " << runs << " runs";
}

CompileOptions accumulating() {
  CompileOptions o;
  o.accumulate_outputs = {"y", "h", "e", "r"};
  return o;
}

TEST(AccumulateOutputs, BoundMemoryGainsEachRunsValue) {
  const Case c;
  Plan plan = compile(program(), accumulating());
  // The accumulators are not inputs the caller sees.
  ASSERT_EQ(plan.inputs().size(), 3u);
  ASSERT_EQ(plan.outputs().size(), 5u);
  EXPECT_EQ(plan.outputs()[0].name, "y");
  Tensor x = c.x, w = c.w, b = c.b;
  plan.bind("x", x), plan.bind("w", w), plan.bind("b", b);
  // Bound memory starts at 0.5 (not zero): the first run adds to it too.
  TensorMap out;
  for (const char* name : {"y", "h", "e", "n"}) out[name] = Tensor(DType::FP32, {kM, kN});
  out["r"] = Tensor(DType::FP32, {1, kK});
  for (auto& [name, t] : out) {
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_ptr<float>()[i] = 0.5f;
    plan.bind(name, t);
  }
  for (int runs = 1; runs <= 3; ++runs) {
    plan.run();
    expect_sum(out["y"].ptr<float>(), c.y, 0.5, runs, "y");
    std::vector<double> h2(c.y);
    for (double& v : h2) v *= 2;
    expect_sum(out["h"].ptr<float>(), h2, 0.5, runs, "h");
    expect_sum(out["e"].ptr<float>(), c.e, 0.5, runs, "e");
    expect_sum(out["r"].ptr<float>(), c.r, 0.5, runs, "r");
    expect_sum(out["n"].ptr<float>(), c.n, 0, 1, "n (not accumulated)");
  }
}

TEST(AccumulateOutputs, TheBareProductAddsInItsGemmEpilogue) {
  const Plan plan = compile(program(), accumulating());
  bool fused = false;
  for (const auto& s : plan.steps())
    for (const std::string& op : s.ops)
      if (op == "y") fused = s.kernel.find("gemm") != std::string::npos && s.kernel.find("+residual") != std::string::npos;
  EXPECT_TRUE(fused) << "y's sum is not the GEMM's residual";
}

TEST(AccumulateOutputs, RunWithInputsAccumulatesInPlanMemory) {
  const Case c;
  Plan plan = compile(program(), accumulating());
  for (int runs = 1; runs <= 2; ++runs) {
    TensorMap out = plan.run({{"x", c.x}, {"w", c.w}, {"b", c.b}});
    expect_sum(out.at("y").ptr<float>(), c.y, 0, runs, "y");
    expect_sum(out.at("r").ptr<float>(), c.r, 0, runs, "r");
    expect_sum(out.at("n").ptr<float>(), c.n, 0, 1, "n");
  }
}

// A tied embedding table's gradient: the classifier's product plus the rows
// the tokens gathered, scattered into zeros (what autodiff writes). The sum
// becomes the GEMM adding into the output's memory and the scatter writing
// its rows there in place (fold-scatter-add, then an accumulator chain): no
// add step, no table-sized buffer in the arena. Indices repeat.
TEST(AccumulateOutputs, ATiedTableGradientAccumulatesInOutputMemory) {
  constexpr int kV = 40, kD = 8, kT = 6;
  const int idx[kT] = {3, 17, 3, 39, 0, 17};
  std::string ids;
  for (int i = 0; i < kT; ++i) ids += (i ? ", " : "") + std::to_string(idx[i]);
  Program p = parse_mil(
      test::program_text(
          "tensor<fp32, [6, 40]> dl, tensor<fp32, [6, 8]> h, tensor<fp32, [6, 8]> u",
          test::stmt("tensor<fp32, [40, 8]>", "gc", "matmul(x = dl, y = h, transpose_x = bool(true))") +
              test::stmt("tensor<fp32, [40, 8]>", "z", "fill(shape = tensor<int32, [2]>([40, 8]), value = fp32(0))") +
              test::stmt("tensor<fp32, [40, 8]>", "ge",
                         "scatter(data = z, indices = tensor<int32, [6]>([" + ids + "]), updates = u, axis = int32(0), "
                         "mode = string(\"add\"))") +
              test::stmt("tensor<fp32, [40, 8]>", "g", "add(x = gc, y = ge)"),
          "g"),
      "tied.mil", ".");
  verify(p);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-1, 1);
  Tensor dl(DType::FP32, {kT, kV}), h(DType::FP32, {kT, kD}), u(DType::FP32, {kT, kD});
  for (Tensor* t : {&dl, &h, &u})
    for (int64_t i = 0; i < t->numel(); ++i) t->mutable_ptr<float>()[i] = uni(rng);
  std::vector<double> one(kV * kD, 0.0);
  for (int v = 0; v < kV; ++v)
    for (int d = 0; d < kD; ++d)
      for (int t = 0; t < kT; ++t) one[size_t(v * kD + d)] += double(dl.ptr<float>()[t * kV + v]) * h.ptr<float>()[t * kD + d];
  for (int t = 0; t < kT; ++t)
    for (int d = 0; d < kD; ++d) one[size_t(idx[t] * kD + d)] += u.ptr<float>()[t * kD + d];

  CompileOptions o;
  o.accumulate_outputs = {"g"};
  Plan plan = compile(p, o);
  for (const auto& s : plan.steps()) EXPECT_EQ(s.kernel.find("binary"), std::string::npos) << s.kernel;
  EXPECT_LT(plan.arena_bytes(), size_t(kV * kD * 4)) << "the table's sum is not computed in the output's memory";
  plan.bind("dl", dl), plan.bind("h", h), plan.bind("u", u);
  Tensor g(DType::FP32, {kV, kD});
  for (int64_t i = 0; i < g.numel(); ++i) g.mutable_ptr<float>()[i] = 0.5f;
  plan.bind("g", g);
  for (int runs = 1; runs <= 3; ++runs) {
    plan.run();
    expect_sum(g.ptr<float>(), one, 0.5, runs, "g");
  }
}

TEST(AccumulateOutputs, BadNamesAreErrors) {
  auto error_of = [](CompileOptions o) -> std::string {
    try {
      compile(program(), o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  CompileOptions o;
  o.accumulate_outputs = {"nope"};
  EXPECT_NE(error_of(o).find("'nope' of function 'main': not an output"), std::string::npos) << error_of(o);
  o.accumulate_outputs = {"y", "y"};
  EXPECT_NE(error_of(o).find("named twice"), std::string::npos) << error_of(o);
  o.accumulate_outputs = {"y"};
  o.taps = {"y"};
  EXPECT_NE(error_of(o).find("cannot also be tapped"), std::string::npos) << error_of(o);
  o.taps.clear();
  o.numerics = CompileOptions::Numerics::fp16;
  EXPECT_NE(error_of(o).find("numerics fp16"), std::string::npos) << error_of(o);

  Program ints = parse_mil(test::program_text("tensor<int32, [3]> k", test::stmt("tensor<int32, [3]>", "k2", "add(x = k, y = k)"), "k2"),
                           "ints.mil", ".");
  CompileOptions io;
  io.accumulate_outputs = {"k2"};
  try {
    compile(ints, io);
    FAIL() << "an int32 output accumulated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only fp32 tensors accumulate"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace milrt
