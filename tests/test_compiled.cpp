// Differential tests of compiled plans against the reference executor.
//
// Tolerances: a plan computes in fp32 whatever the declared float dtype, the
// reference in fp64 rounded to the declared dtype after every op. For fp32
// programs the two differ by fp32 rounding: |d| <= 1e-4 * (1 + |ref|) over
// these short, well-conditioned chains (K <= 64 products). For fp16 programs
// the reference's per-op fp16 rounding dominates: each op adds up to 2^-11
// relative, so a chain of up to 12 ops stays within 12 * 2^-11 ~ 0.6% of the
// values' scale; we allow 1e-2 * (1 + |ref|).
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "milrt/builder.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt {
namespace {

double tolerance(DType t) { return t == DType::FP16 ? 1e-2 : 1e-4; }

// Largest |compiled - reference| / (1 + |reference|) over all outputs.
double worst_error(const TensorMap& got, const TensorMap& want) {
  double worst = 0;
  for (auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.shape(), w.shape()) << name;
    EXPECT_EQ(g.dtype(), w.dtype()) << name;
    for (int64_t i = 0; i < w.numel(); ++i) {
      double a = g.at(size_t(i)), b = w.at(size_t(i));
      if (std::isnan(a) && std::isnan(b)) continue;
      worst = std::max(worst, std::fabs(a - b) / (1 + std::fabs(b)));
    }
  }
  return worst;
}

Tensor random_tensor(std::mt19937& rng, DType dt, const Shape& s, double scale = 1.0) {
  std::uniform_real_distribution<double> u(-scale, scale);
  Tensor t(dt, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), u(rng));
  return t;
}

// A random program: a DAG of elementwise, broadcast, matmul, reduction,
// reshape/transpose/slice/concat, softmax, tile, band_part and cumsum ops
// over small random shapes.
struct RandomProgram {
  Program program;
  TensorMap inputs;
};

RandomProgram random_program(std::mt19937& rng, DType dt) {
  auto pick = [&](int n) { return int(rng() % unsigned(n)); };
  FunctionBuilder f("main");
  RandomProgram r;
  std::vector<Value> vals;
  int d0 = 1 + pick(5), d1 = 1 + pick(6), d2 = 1 + pick(7);
  for (int i = 0; i < 2; ++i) {
    Shape s = {d0, d1, d2};
    std::string name = "in" + std::to_string(i);
    vals.push_back(f.input(name, Type::tensor(dt, s)));
    r.inputs[name] = random_tensor(rng, dt, s);
  }
  int n_ops = 3 + pick(10);
  for (int i = 0; i < n_ops; ++i) {
    std::string out = "v" + std::to_string(i);
    const Value& a = vals[size_t(pick(int(vals.size())))];
    const Value& b = vals[size_t(pick(int(vals.size())))];
    const Shape& sa = a.type.shape;
    int rank = int(sa.size());
    try {
      switch (pick(13)) {
        case 0: vals.push_back(f.op(pick(2) ? "add" : "sub", out, {{"x", a}, {"y", b}})); break;
        case 1: vals.push_back(f.op(pick(2) ? "mul" : "maximum", out, {{"x", a}, {"y", b}})); break;
        case 2: {  // broadcast against a reduced copy of itself
          Value m = f.op("reduce_mean", out + "_m", {{"x", a}, {"axes", lit_i32s({-1})}, {"keep_dims", lit_bool(true)}});
          vals.push_back(f.op("sub", out, {{"x", a}, {"y", m}}));
          break;
        }
        case 3: {
          const char* u[] = {"relu", "sigmoid", "tanh", "silu", "abs", "square"};
          vals.push_back(f.op(u[pick(6)], out, {{"x", a}}));
          break;
        }
        case 4:
          if (rank >= 1) vals.push_back(f.op("softmax", out, {{"x", a}, {"axis", lit_i32(-1 - pick(rank))}}));
          break;
        case 5:
          if (rank >= 2) vals.push_back(f.op("matmul", out, {{"x", a}, {"y", a}, {"transpose_y", lit_bool(true)}}));
          break;
        case 6: {
          const char* red[] = {"reduce_sum", "reduce_max", "reduce_mean"};
          if (rank >= 1)
            vals.push_back(f.op(red[pick(3)], out, {{"x", a}, {"axes", lit_i32s({pick(rank)})}, {"keep_dims", lit_bool(pick(2))}}));
          break;
        }
        case 7: {
          std::vector<int64_t> perm(static_cast<size_t>(rank));
          for (int k = 0; k < rank; ++k) perm[size_t(k)] = k;
          std::shuffle(perm.begin(), perm.end(), rng);
          vals.push_back(f.op("transpose", out, {{"x", a}, {"perm", lit_i32s(perm)}}));
          break;
        }
        case 8: vals.push_back(f.op("reshape", out, {{"x", a}, {"shape", lit_i32s({-1})}})); break;
        case 9:
          if (rank >= 1 && sa.back() > 1) {
            std::vector<int64_t> begin(static_cast<size_t>(rank), 0), size(sa.begin(), sa.end());
            begin.back() = 1;
            size.back() = sa.back() - 1;
            vals.push_back(f.op("slice_by_size", out, {{"x", a}, {"begin", lit_i32s(begin)}, {"size", lit_i32s(size)}}));
          }
          break;
        case 10:
          if (rank >= 1) vals.push_back(f.op("concat", out, {{"values", tuple({a, a})}, {"axis", lit_i32(pick(rank))}}));
          break;
        case 11: vals.push_back(f.op("mul", out, {{"x", a}, {"y", dt == DType::FP16 ? lit_f16(0.5) : lit_f32(0.5)}})); break;
        case 12:  // index-shaped ops (lower/scatter_gather.cpp)
          if (rank >= 2 && pick(3) == 0)
            vals.push_back(f.op("band_part", out, {{"x", a}, {"lower", lit_i32(pick(3) - 1)}, {"upper", lit_i32(pick(3) - 1)}}));
          else if (rank >= 1 && pick(2))
            vals.push_back(f.op("cumsum", out, {{"x", a}, {"axis", lit_i32(-1 - pick(rank))}, {"reverse", lit_bool(pick(2))}}));
          else if (rank >= 1) {
            std::vector<int64_t> reps(static_cast<size_t>(rank), 1);
            reps[size_t(pick(rank))] = 2;
            vals.push_back(f.op("tile", out, {{"x", a}, {"reps", lit_i32s(reps)}}));
          }
          break;
      }
    } catch (const Error&) {
      // Shapes that do not combine (e.g. add of unrelated shapes): draw again.
    }
  }
  f.output(vals.back());
  if (vals.size() > 3) f.output(vals[vals.size() / 2]);
  r.program = make_program({f.build()});
  return r;
}

TEST(Compiled, RandomProgramsAgreeWithTheReference) {
  std::mt19937 rng(2026);
  int runs = 0;
  for (int trial = 0; trial < 400; ++trial) {
    DType dt = trial % 3 == 0 ? DType::FP16 : DType::FP32;
    RandomProgram r = random_program(rng, dt);
    std::set<std::string> outs(r.program.functions[0].outputs.begin(), r.program.functions[0].outputs.end());
    if (outs.size() != r.program.functions[0].outputs.size()) continue;  // the same value twice
    TensorMap want = run_reference(r.program, "main", r.inputs);
    Plan plan = compile(r.program);
    TensorMap got = plan.run(r.inputs);
    double err = worst_error(got, want);
    EXPECT_LE(err, tolerance(dt)) << "trial " << trial << ": compiled and reference differ by " << err
                                  << "; the program:\n" << print_mil(r.program);
    if (err > tolerance(dt)) break;  // one printed program is enough to debug
    ++runs;
  }
  EXPECT_GE(runs, 300);
}

TEST(Compiled, PlanReportsStepsAndArena) {
  FunctionBuilder f("main");
  Value x = f.input("x", Type::tensor(DType::FP32, {4, 8}));
  std::mt19937 rng1(1);
  Value w = f.constant("w", random_tensor(rng1, DType::FP32, {8, 8}));
  Value h = f.op("matmul", "h", {{"x", x}, {"y", w}});
  Value a = f.op("relu", "a", {{"x", h}});
  Value y = f.op("softmax", "y", {{"x", a}, {"axis", lit_i32(-1)}});
  f.output(y);
  Plan plan = compile(make_program({f.build()}));
  auto steps = plan.steps();
  ASSERT_EQ(steps.size(), 2u);                 // the relu is fused into the GEMM (fuse-gemm-epilogue)
  EXPECT_EQ(steps[0].kernel, "gemm[B packed]+relu");
  EXPECT_EQ(steps[0].ops, (std::vector<std::string>{"h", "a"}));
  EXPECT_EQ(steps[0].flops, 2.0 * 4 * 8 * 8);
  EXPECT_EQ(plan.arena_bytes(), 128u);         // a (y is the caller's)
  EXPECT_EQ(plan.inputs().size(), 1u);
  EXPECT_EQ(plan.outputs()[0].shape, (Shape{4, 8}));
  // Runs repeat with the same results (no state leaks between runs).
  std::mt19937 rng(3);
  Tensor in = random_tensor(rng, DType::FP32, {4, 8});
  TensorMap first = plan.run({{"x", in}});
  TensorMap second = plan.run({{"x", in}});
  EXPECT_TRUE(first["y"].same_bytes(second["y"]));
}

TEST(Compiled, BadInputsAreErrors) {
  FunctionBuilder f("main");
  Value x = f.input("x", Type::tensor(DType::FP32, {2, 3}));
  f.output(f.op("relu", "y", {{"x", x}}));
  Plan plan = compile(make_program({f.build()}));
  EXPECT_THROW(plan.run({}), Error);
  EXPECT_THROW(plan.run({{"x", Tensor(DType::FP32, {3, 2})}}), Error);
  EXPECT_THROW(plan.run({{"x", Tensor(DType::FP32, {2, 3})}, {"z", Tensor(DType::FP32, {1})}}), Error);
  // An fp64 input is converted, as for the reference executor.
  TensorMap out = plan.run({{"x", test::make(DType::FP64, {2, 3}, {-1, 2, -3, 4, -5, 6})}});
  EXPECT_EQ(test::values(out["y"]), (std::vector<double>{0, 2, 0, 4, 0, 6}));
}

}  // namespace
}  // namespace milrt

// ---- real programs: the seeds' and the Core ML bundles

#include "llm/seed_kernels.h"
#include "test_pass_util.h"

namespace milrt {
namespace {

void expect_compiled_matches_reference(const std::string& name, const Program& p, uint64_t seed, double tol) {
  SCOPED_TRACE(name);
  TensorMap in = test::pass::inputs_for(p.functions[0], seed);
  TensorMap want = run_reference(p, "main", in);
  TensorMap got = compile(p).run(in);
  double err = worst_error(got, want);
  std::printf("[compiled] %s: worst |compiled - reference| / (1 + |reference|) = %.3g\n", name.c_str(), err);
  EXPECT_LE(err, tol);
}

// The first seed's three fp16 programs: up to ~20 chained fp16 ops with
// K <= 128 products; the reference rounds each to fp16, so 2e-2 bounds it.
TEST(Compiled, FirstSeedProgramsAgreeWithTheReference) {
  for (auto& c : test::pass::seed_corpus()) expect_compiled_matches_reference(c.name, c.program, 11, 2e-2);
}

// The second seed's six training kernels at DIM 64, HIDDEN 128, HEADS 4, SEQ 16 (fp16).
TEST(Compiled, SecondSeedKernelsAgreeWithTheReference) {
  llm::SeedLayerConfig cfg{64, 128, 4, 16};
  std::mt19937 rng(5);
  llm::SeedLayerWeights w;
  auto rnd = [&](Shape s, double scale) { return random_tensor(rng, DType::FP16, s, scale); };
  w.rms1 = rnd({64}, 1.0);
  w.rms2 = rnd({64}, 1.0);
  for (Tensor* t : {&w.wq, &w.wk, &w.wv, &w.wo}) *t = rnd({64, 64}, 0.125);
  w.w1 = rnd({128, 64}, 0.125);
  w.w3 = rnd({128, 64}, 0.125);
  w.w2 = rnd({64, 128}, 0.09);
  std::vector<std::pair<std::string, Program>> kernels = {
      {"fwdAttn", llm::seed_sdpa_fwd_taps(cfg, w)}, {"fwdFFN", llm::seed_ffn_fwd_taps(cfg, w)},
      {"ffnBwd", llm::seed_ffn_bwd(cfg, w)},        {"qkvBwd", llm::seed_qkv_bwd(cfg, w)},
      {"sdpaBwd1", llm::seed_sdpa_bwd1(cfg, w)},    {"sdpaBwd2", llm::seed_sdpa_bwd2(cfg)}};
  for (auto& [name, p] : kernels) expect_compiled_matches_reference(name, p, 3, 2e-2);
}

// Every bundle with static input shapes compiles and agrees (a bundle that
// stops compiling fails here). Flexible-shape bundles need shapes given at
// compile time; they are listed, not run.
TEST(Compiled, CoreMlBundlesCompileAndAgree) {
  MILRT_REQUIRE_SHARED();
  int compiled = 0;
  for (auto& c : test::pass::shared_corpus()) {
    bool flexible = false;
    for (auto& prm : c.program.functions[0].params) flexible |= prm.type.has_unknown_dims();
    if (flexible) {
      std::printf("[compiled] %s: flexible input shapes, not compiled here\n", c.name.c_str());
      continue;
    }
    expect_compiled_matches_reference(c.name, c.program, 13, 2e-2);
    ++compiled;
  }
  EXPECT_EQ(compiled, 18);
}

}  // namespace
}  // namespace milrt
