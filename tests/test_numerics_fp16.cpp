// CompileOptions::numerics = fp16: a plan rounds every fp16 value after the
// step that computes it, as the reference executor (fp64, rounded to the
// declared dtype after every op) does. Checked against the reference on the
// same fp16 programs:
//  - bit-identical for exactly rounded ops (add, sub, mul, real_div, sqrt, square:
//    an fp32 result of fp16 operands rounded to fp16 equals the exact result
//    rounded once, fp32 having more than 2 * 11 + 2 significand bits) and for
//    ops that select values (relu, maximum, minimum, abs, select, concat,
//    reshape, transpose, slice), also inside fused elementwise chains;
//  - within 2 fp16 ulp (or a small absolute bound where a sum cancels) for
//    GEMM, conv, reductions, softmax, norms and transcendentals: the plan
//    accumulates and evaluates in fp32 where the reference uses fp64, so a
//    result near a rounding boundary of fp16 can land on the other side;
//  - fp16 binds of inputs and outputs, converted inside run();
//  - a real fp16 Core ML model (Silero VAD) as a whole.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "milrt/dtype.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "milrt/plan.h"
#include "support/grad_check.h"
#include "support/test_util.h"
#include "test_cli_util.h"

#include "support/count_allocations.h"  // this executable's global operator new, counted

namespace milrt {
namespace {

using Numerics = CompileOptions::Numerics;
using test::mil_bools;
using test::mil_ints;

Program parse(const std::string& text) {
  Program p = parse_mil(text, "numerics.mil", ".");
  verify(p);
  return p;
}

Plan compile_with(const Program& p, Numerics n) {
  CompileOptions o;
  o.numerics = n;
  return compile(p, o);
}

// fp16 bits of element i of an fp16 tensor.
uint16_t bits(const Tensor& t, int64_t i) { return static_cast<const uint16_t*>(t.data())[i]; }

// The distance in fp16 steps between two fp16 values (0 for two NaNs; equal
// infinities are 0 apart, an infinity and a finite value far apart).
int64_t ulps(uint16_t a, uint16_t b) {
  auto nan = [](uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); };
  if (nan(a) || nan(b)) return nan(a) && nan(b) ? 0 : 1 << 20;
  auto ordered = [](uint16_t h) { return h & 0x8000 ? -int64_t(h & 0x7FFF) : int64_t(h); };
  return std::llabs(ordered(a) - ordered(b));
}

Tensor random_f16(const Shape& s, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t(DType::FP16, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), u(rng));
  return t;
}

void expect_bit_identical(const TensorMap& got, const TensorMap& want, const std::string& what) {
  for (auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    ASSERT_EQ(g.dtype(), DType::FP16) << what << " " << name;
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < w.numel(); ++i)
      if (ulps(bits(g, i), bits(w, i)) != 0 && diff++ == 0) first = i;
    EXPECT_EQ(diff, 0) << what << ": output " << name << " differs from the reference in " << diff << " of "
                       << w.numel() << " elements; first at " << first << ": "
                       << (first >= 0 ? std::to_string(g.at(size_t(first))) + " vs " +
                                            std::to_string(w.at(size_t(first)))
                                      : "");
  }
}

// Largest distance in fp16 ulps, ignoring elements within `abs_tol` (sums
// that cancel: an fp32 accumulation error of ~K * 2^-24 * sum|terms| is many
// ulps of a result much smaller than its terms).
int64_t max_ulps(const Tensor& g, const Tensor& w, double abs_tol) {
  int64_t m = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (std::fabs(g.at(size_t(i)) - w.at(size_t(i))) <= abs_tol) continue;
    m = std::max(m, ulps(bits(g, i), bits(w, i)));
  }
  return m;
}

// The spacing of fp16 values at |v| (the subnormal spacing near 0).
double ulp_f16(double v) {
  int e = 0;
  std::frexp(std::fabs(v), &e);
  return std::ldexp(1.0, std::max(e - 1, -14) - 10);
}

// ---------------------------------------------------------------- exact ops

// A random fp16 chain of exactly rounded and value-selecting ops over three
// inputs (one broadcast), with fp16 literals; the optimizer fuses most of it
// into milrt_elementwise steps.
std::string random_chain(std::mt19937& rng, int n_ops) {
  const std::string T = "tensor<fp16, [4, 37]>";
  std::vector<std::string> vals = {"x0", "x1", "x2"};
  std::string body;
  std::uniform_int_distribution<int> pick_op(0, 11);
  std::uniform_real_distribution<double> lit(-3, 3);
  auto operand = [&](bool allow_lit) {
    std::uniform_int_distribution<size_t> d(0, vals.size() - (allow_lit ? 0 : 1));
    size_t k = d(rng);
    if (k == vals.size()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "fp16(%.4f)", lit(rng));
      return std::string(buf);
    }
    return vals[vals.size() - 1 - k];  // recent values more often through the chain
  };
  for (int i = 0; i < n_ops; ++i) {
    const std::string v = "v" + std::to_string(i);
    const int op = pick_op(rng);
    std::string a = operand(false), b = operand(true), expr;
    if (a == "x2") a = "x0";  // the first operand has the full shape, so every result does
    switch (op) {
      case 0: expr = "add(x = " + a + ", y = " + b + ")"; break;
      case 1: expr = "sub(x = " + a + ", y = " + b + ")"; break;
      case 2: case 3: expr = "mul(x = " + a + ", y = " + b + ")"; break;
      case 4: expr = "real_div(x = " + a + ", y = " + b + ")"; break;
      case 5: expr = "maximum(x = " + a + ", y = " + b + ")"; break;
      case 6: expr = "minimum(x = " + a + ", y = " + b + ")"; break;
      case 7: expr = "relu(x = " + a + ")"; break;
      case 8: expr = "abs(x = " + a + ")"; break;
      case 9: expr = "square(x = " + a + ")"; break;
      case 10: {
        body += test::stmt("tensor<bool, [4, 37]>", "c" + std::to_string(i), "greater(x = " + a + ", y = " + b + ")");
        expr = "select(cond = c" + std::to_string(i) + ", a = " + a + ", b = " + operand(false) + ")";
        break;
      }
      case 11: {  // of a non-negative value: NaNs would test NaN semantics, not rounding
        body += test::stmt(T, "p" + std::to_string(i), "abs(x = " + a + ")");
        expr = "sqrt(x = p" + std::to_string(i) + ")";
        break;
      }
    }
    body += test::stmt(T, v, expr);
    vals.push_back(v);
  }
  return test::program_text("tensor<fp16, [4, 37]> x0, tensor<fp16, [4, 37]> x1, tensor<fp16, [1, 37]> x2", body,
                            vals.back() + ", " + vals[vals.size() / 2]);
}

TEST(Fp16Numerics, RandomExactElementwiseChainsAreBitIdenticalToTheReference) {
  std::mt19937 rng(13);
  int fused_steps = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const std::string text = random_chain(rng, 4 + trial % 12);
    Program p = parse(text);
    TensorMap in = {{"x0", random_f16({4, 37}, rng, -4, 4)},
                    {"x1", random_f16({4, 37}, rng, -4, 4)},
                    {"x2", random_f16({1, 37}, rng, -2, 2)}};
    Plan plan = compile_with(p, Numerics::fp16);
    for (auto& s : plan.steps()) fused_steps += s.kernel.rfind("elementwise:", 0) == 0 && s.ops.size() > 1;
    expect_bit_identical(plan.run(in), run_reference(p, "main", in), "trial " + std::to_string(trial) + "\n" + text);
    if (HasFailure()) return;
  }
  EXPECT_GT(fused_steps, 20) << "the chains should mostly run as fused elementwise programs";
}

TEST(Fp16Numerics, DataMovementAndSelectionAreBitIdentical) {
  Program p = parse(test::program_text(
      "tensor<fp16, [2, 3, 8]> x, tensor<fp16, [2, 3, 8]> y",
      test::stmt("tensor<fp16, [2, 3, 8]>", "s", "add(x = x, y = y)") +
          test::stmt("tensor<fp16, [2, 8, 3]>", "t", "transpose(x = s, perm = " + mil_ints({0, 2, 1}) + ")") +
          test::stmt("tensor<fp16, [6, 8]>", "r", "reshape(x = s, shape = " + mil_ints({6, 8}) + ")") +
          test::stmt("tensor<fp16, [6, 16]>", "c", "concat(values = (r, r), axis = int32(1), interleave = bool(false))") +
          test::stmt("tensor<fp16, [6, 4]>", "sl",
                     "slice_by_index(x = c, begin = " + mil_ints({0, 2}) + ", end = " + mil_ints({6, 6}) +
                         ", begin_mask = " + mil_bools({0, 0}) + ", end_mask = " + mil_bools({0, 0}) + ")") +
          test::stmt("tensor<fp16, [6, 4]>", "m", "mul(x = sl, y = fp16(1.3))") +
          test::stmt("tensor<fp16, [6, 4]>", "mx", "maximum(x = m, y = sl)") +
          test::stmt("tensor<fp16, [6, 4]>", "rl", "relu(x = mx)") +
          test::stmt("tensor<fp16, [2, 8, 3]>", "tm", "real_div(x = t, y = fp16(3.0))"),
      "rl, tm, c"));
  std::mt19937 rng(7);
  TensorMap in = {{"x", random_f16({2, 3, 8}, rng, -5, 5)}, {"y", random_f16({2, 3, 8}, rng, -5, 5)}};
  expect_bit_identical(compile_with(p, Numerics::fp16).run(in), run_reference(p, "main", in), "data movement");
}

// -------------------------------------------------- ops within 2 fp16 ulp

TEST(Fp16Numerics, GemmConvReductionsNormsAndTranscendentalsWithinTwoUlp) {
  const std::string body =
      test::stmt("tensor<fp16, [8, 16]>", "mm", "matmul(x = a, y = b)") +
      test::stmt("tensor<fp16, [8, 16]>", "lin", "linear(x = a, weight = w, bias = bias)") +
      test::stmt("tensor<fp16, [8, 16]>", "act", "relu(x = lin)") +
      test::stmt("tensor<fp16, [8, 16]>", "sm", "softmax(x = mm, axis = int32(-1))") +
      test::stmt("tensor<fp16, [8]>", "rs", "reduce_sum(x = mm, axes = " + mil_ints({1}) + ", keep_dims = bool(false))") +
      test::stmt("tensor<fp16, [16]>", "rm", "reduce_mean(x = mm, axes = " + mil_ints({0}) + ", keep_dims = bool(false))") +
      test::stmt("tensor<fp16, [8, 16]>", "ln",
                 "layer_norm(x = mm, axes = " + mil_ints({-1}) + ", gamma = gamma, beta = bias, epsilon = fp16(0.00001))") +
      test::stmt("tensor<fp16, [8, 16]>", "ex", "exp(x = sm)") +
      test::stmt("tensor<fp16, [8, 16]>", "th", "tanh(x = mm)") +
      test::stmt("tensor<fp16, [8, 16]>", "sg", "sigmoid(x = mm)") +
      test::stmt("tensor<fp16, [8, 16]>", "ge", "gelu(x = mm, mode = string(\"EXACT\"))") +
      test::stmt("tensor<fp16, [1, 4, 30]>", "cv",
                 "conv(x = sig, weight = k, pad_type = string(\"valid\"), strides = " + mil_ints({1}) +
                     ", dilations = " + mil_ints({1}) + ", groups = int32(1))");
  Program p = parse(test::program_text(
      "tensor<fp16, [8, 64]> a, tensor<fp16, [64, 16]> b, tensor<fp16, [16, 64]> w, tensor<fp16, [16]> bias, "
      "tensor<fp16, [16]> gamma, tensor<fp16, [1, 3, 32]> sig, tensor<fp16, [4, 3, 3]> k",
      body, "mm, lin, act, sm, rs, rm, ln, ex, th, sg, ge, cv"));
  std::mt19937 rng(3);
  TensorMap in = {{"a", random_f16({8, 64}, rng, -1, 1)},     {"b", random_f16({64, 16}, rng, -1, 1)},
                  {"w", random_f16({16, 64}, rng, -1, 1)},    {"bias", random_f16({16}, rng, -1, 1)},
                  {"gamma", random_f16({16}, rng, 0.5, 1.5)}, {"sig", random_f16({1, 3, 32}, rng, -1, 1)},
                  {"k", random_f16({4, 3, 3}, rng, -1, 1)}};
  TensorMap want = run_reference(p, "main", in);
  TensorMap got = compile_with(p, Numerics::fp16).run(in);
  for (auto& [name, w] : want) {
    if (name == "lin" || name == "act") continue;
    const int64_t u = max_ulps(got.at(name), w, 1e-4);
    EXPECT_LE(u, 2) << name;
    std::printf("[fp16 numerics] %-4s max %lld ulp from the reference\n", name.c_str(), (long long)u);
  }
  // canonicalize splits linear into matmul + add, so the plan rounds the
  // product before adding the bias where the reference rounds once: up to
  // half an ulp of the product more, many ulps of a sum that cancels.
  for (const char* name : {"lin", "act"})
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < 16; ++c) {
        double product = 0;  // x . W^T, in fp64
        for (int64_t k = 0; k < 64; ++k) product += in.at("a").at(size_t(r * 64 + k)) * in.at("w").at(size_t(c * 64 + k));
        const size_t i = size_t(r * 16 + c);
        const double w = want.at(name).at(i), g = got.at(name).at(i);
        ASSERT_LE(std::fabs(g - w), 0.5 * ulp_f16(product) + ulp_f16(w)) << name << " " << i;
      }
}

// ------------------------------------- where fp16 rounding changes results

// x + 1e-4, ten times (1 + 1e-4 is 1 in fp16: its ulp at 1 is 2^-10), and a
// product that overflows fp16 (90000 > 65504) before coming back in range.
Program rounding_sensitive() {
  std::string body;
  std::string prev = "x";
  for (int i = 0; i < 10; ++i) {
    body += test::stmt("tensor<fp16, [16]>", "a" + std::to_string(i), "add(x = " + prev + ", y = fp16(0.0001))");
    prev = "a" + std::to_string(i);
  }
  body += test::stmt("tensor<fp16, [16]>", "m1", "mul(x = x, y = fp16(300))") +
          test::stmt("tensor<fp16, [16]>", "m2", "mul(x = m1, y = fp16(300))") +
          test::stmt("tensor<fp16, [16]>", "m3", "mul(x = m2, y = fp16(0.001))");
  return parse(test::program_text("tensor<fp16, [16]> x", body, prev + ", m3"));
}

TEST(Fp16Numerics, RoundingMattersFp32DiffersFromTheReferenceAndFp16MatchesIt) {
  Program p = rounding_sensitive();
  std::vector<double> xs(16);
  for (int i = 0; i < 16; ++i) xs[size_t(i)] = 1.0 + i / 16.0;
  TensorMap in = {{"x", test::make(DType::FP16, {16}, xs)}};
  TensorMap want = run_reference(p, "main", in);
  EXPECT_EQ(want.at("a9").at(0), 1.0);            // the increments vanish in fp16
  EXPECT_TRUE(std::isinf(want.at("m3").at(0)));   // the overflow sticks
  TensorMap f32 = compile_with(p, Numerics::fp32).run(in);
  EXPECT_GT(f32.at("a9").at(0), 1.0);             // fp32 keeps them: not what fp16 hardware gives
  EXPECT_FALSE(std::isinf(f32.at("m3").at(0)));
  expect_bit_identical(compile_with(p, Numerics::fp16).run(in), want, "numerics fp16");
}

// The overflow happens in the middle of a fused chain, and the inputs arrive
// as fp32 values that are not fp16 numbers: both are rounded.
TEST(Fp16Numerics, Fp32InputsOfFp16PortsAreRoundedOnTheWayIn) {
  Program p = rounding_sensitive();
  Tensor x(DType::FP32, {16});
  for (int i = 0; i < 16; ++i) x.set(size_t(i), 1.0 + i * 1e-4);  // all round to 1 or 1 + 2^-10 in fp16
  TensorMap want = run_reference(p, "main", {{"x", x.cast(DType::FP16)}});
  expect_bit_identical(compile_with(p, Numerics::fp16).run({{"x", x}}), want, "fp32 input");
}

// A state set from fp32 values holds fp16 numbers, as its declared dtype says.
TEST(Fp16Numerics, StatesSetFromFp32AreRounded) {
  Program p = parse(test::program_text("tensor<fp16, [4]> x, tensor<fp16, [4]> s",
                                       test::stmt("tensor<fp16, [4]>", "y", "add(x = s, y = x)"), "y"));
  Tensor s32 = test::make(DType::FP32, {4}, {1.0003, 1.0003, 2.0007, -1.0003});
  TensorMap in = {{"x", test::make(DType::FP16, {4}, {3e-4, 3e-4, 6e-4, -3e-4})}};
  TensorMap ref_in = in;
  ref_in["s"] = s32.cast(DType::FP16);
  const TensorMap want = run_reference(p, "main", ref_in);
  for (Numerics n : {Numerics::fp32, Numerics::fp16}) {
    CompileOptions o;
    o.numerics = n;
    o.state_aliases = {{"y", "s"}};
    Plan plan = compile(p, o);
    plan.set_state("s", s32);
    const TensorMap got = plan.run(in);
    int64_t differ = 0;
    for (int64_t i = 0; i < 4; ++i) differ += bits(got.at("y"), i) != bits(want.at("y"), i);
    if (n == Numerics::fp16) EXPECT_EQ(differ, 0) << "numerics fp16";
    else EXPECT_GT(differ, 0) << "numerics fp32 keeps the state's fp32 digits";
  }
}

// ------------------------------------------------------------------ binds

Program bind_program() {
  return parse(test::program_text(
      "tensor<fp16, [4, 16]> x, tensor<fp16, [16, 8]> w",
      test::stmt("tensor<fp16, [4, 8]>", "h", "matmul(x = x, y = w)") +
          test::stmt("tensor<fp16, [4, 8]>", "y", "add(x = h, y = fp16(0.0001))") +
          test::stmt("tensor<fp32, [4, 8]>", "z", "cast(x = y, dtype = string(\"fp32\"))"),
      "y, z"));
}

TEST(Fp16Numerics, Fp16BindsOfInputsAndOutputsAreConvertedInsideRun) {
  Program p = bind_program();
  Plan plan = compile_with(p, Numerics::fp16);
  std::mt19937 rng(5);
  Tensor x = random_f16({4, 16}, rng, -1, 1), w = random_f16({16, 8}, rng, -1, 1);
  Tensor y(DType::FP16, {4, 8}), z(DType::FP32, {4, 8});
  plan.bind("x", x);
  plan.bind_input("w", w);
  plan.bind("y", y);  // caller fp16 memory for an fp16 output
  plan.bind("z", z);
  plan.run();  // kernels' per-thread scratch grows on a first run
  const long allocs = allocations_during([&] { plan.run(); });
  EXPECT_EQ(allocs, 0) << "operator new calls during a bound fp16 run";
  const TensorMap want = run_reference(p, "main", {{"x", x}, {"w", w}});
  expect_bit_identical({{"y", y}}, {{"y", want.at("y")}}, "bound fp16 output");
  for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(z.at(size_t(i)), want.at("z").at(size_t(i))) << i;
  // The plan reads the caller's fp16 memory at every run: no copy was taken.
  for (int64_t i = 0; i < x.numel(); ++i) x.set(size_t(i), -x.at(size_t(i)));
  plan.run();
  expect_bit_identical({{"y", y}}, {{"y", run_reference(p, "main", {{"x", x}, {"w", w}}).at("y")}}, "rebound run");
  // fp32 memory still binds; an fp16 port's fp32 input is rounded, not read as is.
  Tensor x32 = x.cast(DType::FP32);
  for (int64_t i = 0; i < x32.numel(); ++i) x32.set(size_t(i), x32.at(size_t(i)) + 1e-5);
  Tensor y32(DType::FP32, {4, 8});
  plan.bind("x", x32);
  plan.bind("y", y32);
  plan.run();
  Tensor y16 = y32.cast(DType::FP16);
  expect_bit_identical({{"y", y16}}, {{"y", run_reference(p, "main", {{"x", x32.cast(DType::FP16)}, {"w", w}}).at("y")}},
                       "fp32 binds");
  for (int64_t i = 0; i < y32.numel(); ++i) ASSERT_EQ(double(float(y16.at(size_t(i)))), y32.at(size_t(i)));
}

TEST(Fp16Numerics, Fp16BindsNeedNumericsFp16AndBf16IsRefused) {
  Program p = bind_program();
  Tensor x(DType::FP16, {4, 16}), y(DType::FP16, {4, 8}), xb(DType::BF16, {4, 16});
  Plan f32 = compile_with(p, Numerics::fp32);
  test::expect_error_containing([&] { f32.bind("x", x); }, "numerics fp16");
  test::expect_error_containing([&] { f32.bind("y", y); }, "numerics fp16");
  EXPECT_EQ(f32.bind_dtypes(DType::FP16), std::vector<DType>{DType::FP32});
  Plan f16 = compile_with(p, Numerics::fp16);
  EXPECT_EQ(f16.numerics(), Numerics::fp16);
  EXPECT_EQ(f16.bind_dtypes(DType::FP16), (std::vector<DType>{DType::FP32, DType::FP16}));
  test::expect_error_containing([&] { f16.bind("x", xb); }, "cannot bind input 'x' to bf16 memory");
  Tensor z16(DType::FP16, {4, 8});
  test::expect_error_containing([&] { f16.bind("z", z16); }, "declared fp32");  // an fp32 port stays fp32
  CompileOptions o;
  o.numerics = Numerics::fp16;
  o.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  test::expect_error_containing([&] { compile(p, o); }, "cannot be combined");
}

// -------------------------------------------------------- a real fp16 model

// Silero VAD declares fp16 everywhere inside (fp32 at its edges): numerics
// fp16 follows the reference where fp32 numerics drifts from it.
TEST(Fp16Numerics, SileroVadIsCloserToTheReferenceThanFp32Numerics) {
  MILRT_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  Program p = load_model(dir);
  legalize_layout_idioms(p);
  verify(p);
  const Function* f = p.function("main");
  ASSERT_TRUE(f);
  TensorMap in;
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0, 0.02);
  for (auto& prm : f->params) {
    Tensor t(prm.type.dtype, prm.type.shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.set(size_t(i), prm.name == "audio_input" ? 0.3 * std::sin(double(i) * 0.07) + noise(rng) : 2 * noise(rng));
    in[prm.name] = t;
  }
  const TensorMap want = run_reference(p, "main", in);
  const TensorMap f16 = compile_with(p, Numerics::fp16).run(in), f32 = compile_with(p, Numerics::fp32).run(in);
  for (auto& [name, w] : want) {
    double d16 = 0, d32 = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      d16 = std::max(d16, std::fabs(f16.at(name).at(size_t(i)) - w.at(size_t(i))));
      d32 = std::max(d32, std::fabs(f32.at(name).at(size_t(i)) - w.at(size_t(i))));
    }
    std::printf("[fp16 numerics] silero %-16s max |diff| from the reference: numerics fp16 %.3g, fp32 %.3g\n",
                name.c_str(), d16, d32);
    EXPECT_LE(d16, d32) << name;
  }
}

// ----------------------------------------------------------------------- CLI

TEST(Fp16Numerics, CliRunNumericsFp16MatchesTheReferenceEngine) {
  const std::string dir = test::temp_dir("numerics_cli");
  const std::string mil = dir + "/r.mil", xnpy = dir + "/x.npy";
  {
    std::string body;
    for (int i = 0; i < 10; ++i)
      body += test::stmt("tensor<fp16, [4]>", "a" + std::to_string(i),
                         "add(x = " + (i ? "a" + std::to_string(i - 1) : std::string("x")) + ", y = fp16(0.0001))");
    std::ofstream(mil) << test::program_text("tensor<fp16, [4]> x", body, "a9");
  }
  write_npy(xnpy, test::make(DType::FP16, {4}, {1, 1, 2, 0.5}));
  auto ref = test::run_cli({"run", mil, "--input", "x=" + xnpy, "--engine", "reference", "--output-dir", dir + "/ref"});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::string cmp = "a9=" + dir + "/ref/a9.npy";
  auto f16 = test::run_cli({"run", mil, "--input", "x=" + xnpy, "--numerics", "fp16", "--compare", cmp, "--tolerance", "0"});
  EXPECT_EQ(f16.exit_code, 0) << f16.out << f16.err;
  auto f32 = test::run_cli({"run", mil, "--input", "x=" + xnpy, "--compare", cmp, "--tolerance", "0"});
  EXPECT_EQ(f32.exit_code, 1) << f32.out << f32.err;
  auto bad = test::run_cli({"run", mil, "--input", "x=" + xnpy, "--numerics", "fp8"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--numerics"), std::string::npos) << bad.err;
  auto bench = test::run_cli({"bench", mil, "--numerics", "fp16", "--runs", "3"});
  EXPECT_EQ(bench.exit_code, 0) << bench.out << bench.err;
}

}  // namespace
}  // namespace milrt
