// Plan::set_step_hook: each output is reported once per run, only when the
// run will neither read nor write its memory again (checked by the hook
// overwriting each ready output with NaN and the other outputs coming out
// right), most outputs before the run ends, and values checked against fp64
// computed here.
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>

#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt {
namespace {

Program parse(const std::string& text) {
  Program p = parse_mil(text, "hook.mil", ".");
  verify(p);
  return p;
}

// a = 2x and u = sin(x) are outputs computed early; u is also read by the
// product v = u·w, so it is ready only after that product.
Program program() {
  return parse(test::program_text(
      "tensor<fp32, [4, 8]> x, tensor<fp32, [8, 8]> w",
      "tensor<fp32, [4, 8]> a = mul(x = x, y = fp32(2))[name = string(\"a\")];\n"
      "tensor<fp32, [4, 8]> u = sin(x = x)[name = string(\"u\")];\n"
      "tensor<fp32, [4, 8]> m = matmul(x = x, y = w)[name = string(\"m\")];\n"
      "tensor<fp32, [4, 1]> r = reduce_sum(x = m, axes = tensor<int32, [1]>([1]), keep_dims = bool(true))"
      "[name = string(\"r\")];\n"
      "tensor<fp32, [4, 8]> v = matmul(x = u, y = w)[name = string(\"v\")];",
      "a, u, r, v"));
}

struct Data {
  std::vector<float> x = std::vector<float>(32), w = std::vector<float>(64);
  std::vector<double> a, u, r, v;  // fp64, by hand
  Data() {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& f : x) f = d(rng);
    for (float& f : w) f = d(rng);
    a.resize(32), u.resize(32), r.assign(4, 0), v.assign(32, 0);
    for (int i = 0; i < 32; ++i) a[size_t(i)] = 2.0 * x[size_t(i)], u[size_t(i)] = std::sin(double(x[size_t(i)]));
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 8; ++j)
        for (int k = 0; k < 8; ++k) {
          r[size_t(i)] += double(x[size_t(i * 8 + k)]) * w[size_t(k * 8 + j)];
          v[size_t(i * 8 + j)] += u[size_t(i * 8 + k)] * w[size_t(k * 8 + j)];
        }
  }
};

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << what << "[" << i << "]";
}

TEST(PlanStepHook, ReadyOutputsAreFinalAndNoLongerTouched) {
  Data d;
  Plan plan = compile(program());
  const size_t n_steps = plan.steps().size();
  ASSERT_GE(n_steps, 4u);
  std::vector<std::vector<float>> mem(4);  // bound memory per output, in outputs() order
  std::vector<std::vector<float>> seen(4);  // each output as the hook first saw it
  std::vector<int> times(4, 0), at_call(4, -1);
  plan.bind("x", d.x.data());
  plan.bind("w", d.w.data());
  for (size_t o = 0; o < 4; ++o) {
    mem[o].assign(size_t(shape_numel(plan.outputs()[o].shape)), 0.0f);
    plan.bind(plan.outputs()[o].name, mem[o].data());
  }
  int call = 0;
  plan.set_step_hook([&](std::span<const size_t> ready) {
    for (size_t o : ready) {
      ++times[o];
      at_call[o] = call;
      seen[o] = mem[o];
      for (float& f : mem[o]) f = NAN;  // the run must not read it again
    }
    ++call;
  });
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    std::fill(times.begin(), times.end(), 0);
    call = 0;
    plan.run();
    EXPECT_EQ(size_t(call), n_steps + 1) << "a call per step and one at the end";
    int early = 0;
    for (size_t o = 0; o < 4; ++o) {
      EXPECT_EQ(times[o], 1) << plan.outputs()[o].name;
      early += at_call[o] < int(n_steps);
    }
    EXPECT_GE(early, 3) << "outputs computed into bound memory are ready before the run ends";
    std::map<std::string, const std::vector<double>*> want{{"a", &d.a}, {"u", &d.u}, {"r", &d.r}, {"v", &d.v}};
    for (size_t o = 0; o < 4; ++o) expect_close(seen[o], *want.at(plan.outputs()[o].name), plan.outputs()[o].name.c_str());
  }
  // u is read by v's product: it cannot be ready before v is computed.
  std::map<std::string, int> call_of;
  for (size_t o = 0; o < 4; ++o) call_of[plan.outputs()[o].name] = at_call[o];
  EXPECT_GE(call_of.at("u"), call_of.at("v"));
}

TEST(PlanStepHook, UnboundOutputsAreReadyAtTheEndAndRunWithInputsSkipsTheHook) {
  Data d;
  Plan plan = compile(program());
  std::vector<float> a(32);
  plan.bind("x", d.x.data());
  plan.bind("w", d.w.data());
  plan.bind("a", a.data());
  const size_t n_steps = plan.steps().size();
  std::map<std::string, int> at;
  int call = 0;
  plan.set_step_hook([&](std::span<const size_t> ready) {
    for (size_t o : ready) at[plan.outputs()[o].name] = call;
    ++call;
  });
  plan.run();
  ASSERT_EQ(at.size(), 4u);
  EXPECT_LT(at["a"], int(n_steps));
  for (const char* name : {"u", "r", "v"}) EXPECT_EQ(at[name], int(n_steps)) << name << " is not bound: ready in the final call";
  call = 0;
  Tensor x(DType::FP32, {4, 8}), w(DType::FP32, {8, 8});
  plan.run({{"x", x}, {"w", w}});
  EXPECT_EQ(call, 0);
  plan.set_step_hook({});
  plan.run();
  EXPECT_EQ(call, 0) << "an empty hook removes it";
}

// The trainer's case: a gradient accumulated over runs (the product's
// residual is the output's own memory) is ready only after its last write.
TEST(PlanStepHook, AccumulatedOutputIsReadyAfterItsSum) {
  Data d;
  CompileOptions o;
  o.accumulate_outputs = {"r", "v"};
  Plan plan = compile(program(), o);
  std::vector<std::vector<float>> mem(4);
  std::map<std::string, std::vector<float>> seen;
  plan.bind("x", d.x.data());
  plan.bind("w", d.w.data());
  for (size_t k = 0; k < 4; ++k) {
    mem[k].assign(size_t(shape_numel(plan.outputs()[k].shape)), 0.0f);
    plan.bind(plan.outputs()[k].name, mem[k].data());
  }
  plan.run();
  plan.set_step_hook([&](std::span<const size_t> ready) {
    for (size_t k : ready) seen[plan.outputs()[k].name] = mem[k];
  });
  plan.run();
  std::vector<double> r2 = d.r, v2 = d.v;
  for (double& f : r2) f *= 2;
  for (double& f : v2) f *= 2;
  expect_close(seen.at("r"), r2, "r after two runs");
  expect_close(seen.at("v"), v2, "v after two runs");
  expect_close(seen.at("a"), d.a, "a");
}

// An output that is a reshape of a product (as a weight's gradient is) gets
// the product computed straight into its bound memory: it is ready once the
// product is done, not copied at the end.
TEST(PlanStepHook, AReshapedOutputIsComputedInItsBoundMemory) {
  Data d;
  Program p = parse(test::program_text(
      "tensor<fp32, [4, 8]> x, tensor<fp32, [8, 8]> w",
      "tensor<fp32, [4, 8]> m = matmul(x = x, y = w)[name = string(\"m\")];\n"
      "tensor<fp32, [32]> g = reshape(x = m, shape = tensor<int32, [1]>([32]))[name = string(\"g\")];\n"
      "tensor<fp32, [4, 8]> u = sin(x = x)[name = string(\"u\")];\n"
      "tensor<fp32, [4, 8]> v = matmul(x = u, y = w)[name = string(\"v\")];",
      "g, v"));
  Plan plan = compile(p);
  const size_t n_steps = plan.steps().size();
  std::vector<float> g(32), v(32);
  plan.bind("x", d.x.data());
  plan.bind("w", d.w.data());
  plan.bind("g", g.data());
  plan.bind("v", v.data());
  std::map<std::string, int> at;
  std::vector<float> g_seen;
  int call = 0;
  plan.set_step_hook([&](std::span<const size_t> ready) {
    for (size_t o : ready) {
      at[plan.outputs()[o].name] = call;
      if (plan.outputs()[o].name == "g") g_seen = g;
    }
    ++call;
  });
  plan.run();
  ASSERT_EQ(at.size(), 2u);
  EXPECT_LT(at.at("g"), int(n_steps)) << "the reshaped product is ready before the run ends";
  std::vector<double> m(32, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < 8; ++k) m[size_t(i * 8 + j)] += double(d.x[size_t(i * 8 + k)]) * d.w[size_t(k * 8 + j)];
  expect_close(g_seen, m, "g when reported");
  expect_close(g, m, "g");
  expect_close(v, d.v, "v");
  // Unbound, then run with inputs: plan memory again, and the same values.
  plan.unbind("g");
  plan.set_step_hook({});
  std::fill(v.begin(), v.end(), 0.0f);
  plan.run();
  expect_close(v, d.v, "v after g is unbound");
  Tensor x(DType::FP32, {4, 8}), w(DType::FP32, {8, 8});
  std::copy(d.x.begin(), d.x.end(), x.mutable_ptr<float>());
  std::copy(d.w.begin(), d.w.end(), w.mutable_ptr<float>());
  TensorMap out = plan.run({{"x", x}, {"w", w}});
  expect_close(std::vector<float>(out.at("g").ptr<float>(), out.at("g").ptr<float>() + 32), m, "g from run(inputs)");
}

TEST(PlanStepHook, AnExceptionFromTheHookEndsTheRun) {
  Data d;
  Plan plan = compile(program());
  plan.bind("x", d.x.data());
  plan.bind("w", d.w.data());
  plan.set_step_hook([](std::span<const size_t>) { throw std::runtime_error("stop here"); });
  EXPECT_THROW(plan.run(), std::runtime_error);
  plan.set_step_hook({});
  EXPECT_NO_THROW(plan.run());
}

}  // namespace
}  // namespace milrt
