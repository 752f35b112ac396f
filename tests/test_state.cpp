// iOS18 state: read_state / coreml_update_state in the verifier, the
// reference executor (states persist across calls) and compiled plans
// (persistent plan-owned buffers, read in place when safe); and state aliases
// (in-place accumulation) on the first seed's training program.
//
// Tolerances: plan vs reference on fp32 programs 1e-5 * (1 + |ref|) (a few
// fp32 roundings of additions and products); on fp16 programs the reference
// rounds every op to fp16 while the plan keeps fp32, 2e-2 * (1 + |ref|) over
// a few runs of 3-4 ops on values of size ~3 (each op adds up to 2^-11 relative).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "milrt/mil.h"
#include "milrt/passes.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt {
namespace {

using test::make;
using test::values;

Program parse(const std::string& text) {
  Program p = parse_mil(text, "state.mil", ".");
  verify(p);
  return p;
}

// acc += x; y = acc * 2, read back after the update.
std::string accumulator(const std::string& dt, const std::string& opset = "ios18") {
  return "program(1.3)\n{\n  func main<" + opset + ">(tensor<" + dt + ", [2, 3]> x, state<tensor<" + dt +
         ", [2, 3]>> acc) {\n"
         "    tensor<" + dt + ", [2, 3]> a = read_state(input = acc)[name = string(\"a\")];\n"
         "    tensor<" + dt + ", [2, 3]> s = add(x = a, y = x)[name = string(\"s\")];\n"
         "    tensor<" + dt + ", [2, 3]> u = coreml_update_state(state = acc, value = s)[name = string(\"u\")];\n"
         "    tensor<" + dt + ", [2, 3]> b = read_state(input = acc)[name = string(\"b\")];\n"
         "    tensor<" + dt + ", [2, 3]> y = mul(x = b, y = b)[name = string(\"y\")];\n"
         "  } -> (y);\n}\n";
}

void expect_near_all(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(size_t(got.numel()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.at(i), want[i], tol * (1 + std::fabs(want[i]))) << what << " [" << i << "]";
}

// ---- the verifier

TEST(StateOps, VerifyAndRoundTripThroughText) {
  Program p = parse(accumulator("fp16"));
  Program back = parse_mil(print_mil(p), "back.mil", ".");
  EXPECT_EQ(ir_diff(p, back), "");
  verify(back);
}

TEST(StateOps, VerifierRejectsMisuse) {
  auto fails = [](const std::string& params, const std::string& body, const std::string& fragment) {
    std::string text = test::program_text(params, body, "y");
    try {
      parse(text);
      ADD_FAILURE() << "verified: " << body;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  const std::string params = "tensor<fp32, [4]> x, state<tensor<fp32, [4]>> s";
  fails(params, "tensor<fp32, [4]> y = read_state(input = x);", "must be a state");
  fails(params, "tensor<fp32, [4]> y = add(x = s, y = x);", "is a state");
  fails(params, "tensor<fp32, [4]> y = coreml_update_state(state = x, value = x);", "must be a state");
  fails("tensor<fp16, [4]> x, state<tensor<fp32, [4]>> s",
        "tensor<fp16, [4]> y = coreml_update_state(state = s, value = x);", "the state holds");
  fails("tensor<fp32, [5]> x, state<tensor<fp32, [4]>> s",
        "tensor<fp32, [5]> y = coreml_update_state(state = s, value = x);", "the state holds");
  fails(params, "tensor<fp16, [4]> y = read_state(input = s);", "declared");
  EXPECT_THROW(parse(accumulator("fp32", "ios17")), Error);
}

// ---- the reference executor

TEST(StateReference, StatesPersistAcrossCallsAndStartAtZero) {
  Program p = parse(accumulator("fp32"));
  TensorMap states;
  std::vector<double> acc(6, 0.0);
  for (int call = 0; call < 3; ++call) {
    std::vector<double> x;
    for (int i = 0; i < 6; ++i) x.push_back(0.5 * i - call);
    TensorMap out = run_reference(p, "main", {{"x", make(DType::FP32, {2, 3}, x)}}, states);
    std::vector<double> y;
    for (int i = 0; i < 6; ++i) {
      acc[size_t(i)] += x[size_t(i)];
      y.push_back(acc[size_t(i)] * acc[size_t(i)]);
    }
    expect_near_all(out.at("y"), y, 1e-6, "y");
    ASSERT_TRUE(states.count("acc"));
    expect_near_all(states.at("acc"), acc, 1e-6, "acc");
  }
  // A state is not an input; the plain entry point takes its initial value among the inputs.
  EXPECT_THROW(run_reference(p, "main", {{"x", make(DType::FP32, {2, 3}, std::vector<double>(6, 1))},
                                         {"acc", make(DType::FP32, {2, 3}, std::vector<double>(6, 1))}},
                             states),
               Error);
  TensorMap out = run_reference(p, "main", {{"x", make(DType::FP32, {2, 3}, std::vector<double>(6, 1))},
                                            {"acc", make(DType::FP32, {2, 3}, std::vector<double>(6, 2))}});
  expect_near_all(out.at("y"), std::vector<double>(6, 9), 0, "y");
}

// ---- compiled plans

TEST(StatePlan, AccumulatesAcrossRunsAndMatchesTheReference) {
  for (const char* dt : {"fp32", "fp16"}) {
    SCOPED_TRACE(dt);
    DType dtype = std::string(dt) == "fp16" ? DType::FP16 : DType::FP32;
    double tol = dtype == DType::FP16 ? 2e-2 : 1e-5;
    Program p = parse(accumulator(dt));
    Plan plan = compile(p);
    ASSERT_EQ(plan.inputs().size(), 1u);
    ASSERT_EQ(plan.states().size(), 1u);
    EXPECT_EQ(plan.states()[0].name, "acc");
    EXPECT_EQ(plan.states()[0].dtype, dtype);
    expect_near_all(plan.state("acc"), std::vector<double>(6, 0), 0, "zero at compile");
    // Both reads are consumed before any later update: neither copies.
    int in_place = 0;
    for (auto& s : plan.steps()) in_place += s.kernel == "read_state (in place)";
    EXPECT_EQ(in_place, 2);
    for (auto& s : plan.steps())
      if (s.ops == std::vector<std::string>{"u"}) {
        EXPECT_EQ(s.kernel, "coreml_update_state (result in place)");
      }

    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u(-1, 1);
    TensorMap ref_states;
    for (int run = 0; run < 4; ++run) {
      std::vector<double> x;
      for (int i = 0; i < 6; ++i) x.push_back(u(rng));
      Tensor xt = make(dtype, {2, 3}, x);
      TensorMap want = run_reference(p, "main", {{"x", xt}}, ref_states);
      TensorMap got = plan.run({{"x", xt}});
      expect_near_all(got.at("y"), values(want.at("y")), tol, "y");
      expect_near_all(plan.state("acc"), values(ref_states.at("acc")), tol, "acc");
    }
    // set_state / reset_state, and a state is not an input.
    plan.set_state("acc", make(DType::FP32, {2, 3}, {1, 2, 3, 4, 5, 6}));
    expect_near_all(plan.state("acc"), {1, 2, 3, 4, 5, 6}, 0, "set_state");
    TensorMap got = plan.run({{"x", make(dtype, {2, 3}, std::vector<double>(6, 1))}});
    expect_near_all(got.at("y"), {4, 9, 16, 25, 36, 49}, 0, "y after set_state");
    plan.reset_state();
    expect_near_all(plan.state("acc"), std::vector<double>(6, 0), 0, "reset");
    EXPECT_THROW(plan.run({{"x", make(dtype, {2, 3}, std::vector<double>(6, 1))},
                           {"acc", make(dtype, {2, 3}, std::vector<double>(6, 1))}}),
                 Error);
    EXPECT_THROW(plan.set_state("acc", make(DType::FP32, {3, 2}, std::vector<double>(6, 1))), Error);
    EXPECT_THROW(plan.set_state("nope", make(DType::FP32, {2, 3}, std::vector<double>(6, 1))), Error);
    EXPECT_THROW(plan.state("x"), Error);
  }
}

TEST(StatePlan, ReadUsedAfterAnUpdateIsACopy) {
  // `a` (the old state) is used after the update: it must not be the state's
  // buffer, or y would see the new value.
  Program p = parse(test::program_text(
      "tensor<fp32, [4]> x, state<tensor<fp32, [4]>> s",
      "tensor<fp32, [4]> a = read_state(input = s)[name = string(\"a\")];\n"
      "tensor<fp32, [4]> n = add(x = a, y = x)[name = string(\"n\")];\n"
      "tensor<fp32, [4]> u = coreml_update_state(state = s, value = n)[name = string(\"u\")];\n"
      "tensor<fp32, [4]> b = read_state(input = s)[name = string(\"b\")];\n"
      "tensor<fp32, [4]> y = sub(x = a, y = b)[name = string(\"y\")];\n"
      "tensor<fp32, [4]> z = mul(x = u, y = u)[name = string(\"z\")];",
      "y, z"));
  CompileOptions no_schedule;
  no_schedule.passes = {"canonicalize", "cse", "dce"};
  for (const CompileOptions& opts : {CompileOptions{}, no_schedule}) {
    Plan plan = compile(p, opts);
    int in_place = 0;
    for (auto& s : plan.steps()) in_place += s.kernel == "read_state (in place)";
    EXPECT_EQ(in_place, 1);  // only b
    plan.set_state("s", make(DType::FP32, {4}, {1, 2, 3, 4}));
    TensorMap ref_states{{"s", make(DType::FP32, {4}, {1, 2, 3, 4})}};
    for (int run = 0; run < 3; ++run) {
      Tensor x = make(DType::FP32, {4}, {0.5, -1, 2, run * 1.0});
      TensorMap want = run_reference(p, "main", {{"x", x}}, ref_states);
      TensorMap got = plan.run({{"x", x}});
      expect_near_all(got.at("y"), values(want.at("y")), 0, "y");
      expect_near_all(got.at("z"), values(want.at("z")), 1e-6, "z");
      expect_near_all(plan.state("s"), values(ref_states.at("s")), 0, "s");
    }
  }
}

TEST(StatePlan, UpdateResultUsedAfterTheNextUpdateIsACopy) {
  // u1 is the state's value between the two updates only: y = u1 - u2 = a - b.
  Program p = parse(test::program_text(
      "tensor<fp32, [4]> a, tensor<fp32, [4]> b, state<tensor<fp32, [4]>> s",
      "tensor<fp32, [4]> u1 = coreml_update_state(state = s, value = a)[name = string(\"u1\")];\n"
      "tensor<fp32, [4]> u2 = coreml_update_state(state = s, value = b)[name = string(\"u2\")];\n"
      "tensor<fp32, [4]> y = sub(x = u1, y = u2)[name = string(\"y\")];",
      "y"));
  Plan plan = compile(p);
  int in_place = 0;
  for (auto& s : plan.steps()) in_place += s.kernel == "coreml_update_state (result in place)";
  EXPECT_EQ(in_place, 1);  // only u2
  TensorMap got = plan.run({{"a", make(DType::FP32, {4}, {1, 2, 3, 4})}, {"b", make(DType::FP32, {4}, {4, 3, 2, 1})}});
  expect_near_all(got.at("y"), {-3, -1, 1, 3}, 0, "y");
  expect_near_all(plan.state("s"), {4, 3, 2, 1}, 0, "s");
}

TEST(StatePlan, KvCacheStyleUpdatesMatchTheReference) {
  // Two states, each read, shifted by slicing + concat with the new row, and written back.
  Program p = parse(test::program_text(
      "tensor<fp16, [1, 4]> k, tensor<fp16, [1, 4]> v, state<tensor<fp16, [3, 4]>> kc, state<tensor<fp16, [3, 4]>> vc",
      "tensor<fp16, [3, 4]> ko = read_state(input = kc)[name = string(\"ko\")];\n"
      "tensor<fp16, [2, 4]> kt = slice_by_index(x = ko, begin = tensor<int32, [2]>([1, 0]), end = tensor<int32, [2]>([3, 4]))[name = string(\"kt\")];\n"
      "tensor<fp16, [3, 4]> kn = concat(values = (kt, k), axis = int32(0), interleave = bool(false))[name = string(\"kn\")];\n"
      "tensor<fp16, [3, 4]> ku = coreml_update_state(state = kc, value = kn)[name = string(\"ku\")];\n"
      "tensor<fp16, [3, 4]> vo = read_state(input = vc)[name = string(\"vo\")];\n"
      "tensor<fp16, [3, 4]> vn = add(x = vo, y = v)[name = string(\"vn\")];\n"
      "tensor<fp16, [3, 4]> vu = coreml_update_state(state = vc, value = vn)[name = string(\"vu\")];\n"
      "tensor<fp16, [3, 4]> y = mul(x = ku, y = vu)[name = string(\"y\")];",
      "y"));
  Plan plan = compile(p);
  TensorMap ref_states;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int run = 0; run < 5; ++run) {
    std::vector<double> k, v;
    for (int i = 0; i < 4; ++i) k.push_back(u(rng)), v.push_back(u(rng));
    TensorMap in{{"k", make(DType::FP16, {1, 4}, k)}, {"v", make(DType::FP16, {1, 4}, v)}};
    TensorMap want = run_reference(p, "main", in, ref_states);
    TensorMap got = plan.run(in);
    expect_near_all(got.at("y"), values(want.at("y")), 2e-2, "y");
    expect_near_all(plan.state("kc"), values(ref_states.at("kc")), 2e-3, "kc");
    expect_near_all(plan.state("vc"), values(ref_states.at("vc")), 2e-2, "vc");
  }
}

TEST(StatePlan, KvCacheWrittenAtARunTimePositionMatchesTheReference) {
  // The ios18 decode pattern: the cache is a state, each run writes one row
  // at position `pos` with slice_update and reads the whole cache back.
  Program p = parse(test::program_text(
      "tensor<fp32, [1, 4]> kv, tensor<int32, [2]> b, tensor<int32, [2]> e, state<tensor<fp32, [6, 4]>> cache",
      "tensor<fp32, [6, 4]> old = read_state(input = cache)[name = string(\"old\")];\n"
      "tensor<fp32, [6, 4]> upd = slice_update(x = old, update = kv, begin = b, end = e)[name = string(\"upd\")];\n"
      "tensor<fp32, [6, 4]> now = coreml_update_state(state = cache, value = upd)[name = string(\"now\")];\n"
      "tensor<fp32, [6, 4]> y = mul(x = now, y = fp32(2))[name = string(\"y\")];",
      "y"));
  Plan plan = compile(p);
  TensorMap ref_states;
  for (int pos = 0; pos < 6; ++pos) {
    std::vector<double> row;
    for (int i = 0; i < 4; ++i) row.push_back(pos * 10 + i);
    TensorMap in{{"kv", make(DType::FP32, {1, 4}, row)},
                 {"b", make(DType::Int32, {2}, {double(pos), 0})},
                 {"e", make(DType::Int32, {2}, {double(pos + 1), 4})}};
    TensorMap want = run_reference(p, "main", in, ref_states);
    TensorMap got = plan.run(in);
    EXPECT_TRUE(got.at("y").same_bytes(want.at("y"))) << "position " << pos;
    EXPECT_TRUE(plan.state("cache").same_bytes(ref_states.at("cache"))) << "position " << pos;
  }
  // After six runs every row holds its position's values.
  std::vector<double> cache = values(plan.state("cache"));
  for (int r = 0; r < 6; ++r)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(cache[size_t(r * 4 + i)], r * 10 + i);
  plan.reset_state();
  for (double v : values(plan.state("cache"))) EXPECT_EQ(v, 0);
}

// ---- state aliases: the first seed's training program as one plan

namespace fs = std::filesystem;

Tensor f16(Shape s, const std::vector<double>& v) { return make(DType::FP16, std::move(s), v); }
double seed_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

double mse(const Tensor& y, const std::vector<double>& target) {
  double s = 0;
  for (size_t i = 0; i < target.size(); ++i) s += (y.at(i) - target[i]) * (y.at(i) - target[i]);
  return s / double(target.size());
}

// Loaded and legalized as test_seed_graph does.
Program backprop_program() {
  fs::path dir = test::temp_dir("state_seed");
  fs::copy_file(fs::path(MILRT_SOURCE_DIR) / "tests/data/seed1/backprop_train.mil", dir / "backprop_train.mil");
  Program p = load_model((dir / "backprop_train.mil").string());
  legalize_layout_idioms(p);
  verify(p);
  return p;
}

TEST(StateAlias, SeedTrainingAsOnePlanMatchesTheReferenceLoop) {
  Program p = backprop_program();
  // Weights and inputs exactly as test_seed_graph makes them.
  constexpr size_t d = 64;
  const double neg_lr = seed_f16(-0.15f);
  std::vector<double> x, target, w1, w2;
  for (size_t i = 0; i < d; ++i) x.push_back(seed_f16(float((i * 7 + 3) % 19) / 19.0f - 0.45f));
  for (size_t i = 0; i < d; ++i) target.push_back(seed_f16(float((i * 11 + 5) % 23) / 23.0f - 0.5f));
  for (size_t i = 0; i < d * d; ++i) w1.push_back(seed_f16((float((i * 13 + 7) % 31) - 15.0f) * 0.015f));
  for (size_t i = 0; i < d * d; ++i) w2.push_back(seed_f16((float((i * 17 + 11) % 29) - 14.0f) * 0.015f));
  TensorMap data{{"x", f16({1, 1, 1, 64}, x)},
                 {"target", f16({1, 64, 1, 1}, target)},
                 {"neg_lr", f16({1, 64, 1, 1}, std::vector<double>(d, neg_lr))},
                 {"one", f16({1, 64, 1, 1}, std::vector<double>(d, 1.0))}};

  CompileOptions opts;
  opts.state_aliases = {{"W1_new", "W1"}, {"W2_new", "W2"}};
  Plan plan = compile(p, opts);
  ASSERT_EQ(plan.inputs().size(), 4u);  // x, target, neg_lr, one: the weights are states
  ASSERT_EQ(plan.states().size(), 2u);
  for (auto& s : plan.steps())
    for (auto& op : s.ops)
      if (op == "W1_new" || op == "W2_new") std::printf("[state alias] %s computed by %s\n", op.c_str(), s.kernel.c_str());
  plan.set_state("W1", f16({1, 64, 1, 64}, w1));
  plan.set_state("W2", f16({1, 64, 1, 64}, w2));

  TensorMap ref_in = data;
  ref_in["W1"] = f16({1, 64, 1, 64}, w1);
  ref_in["W2"] = f16({1, 64, 1, 64}, w2);
  double loss_first = 0, loss_last = 0, worst_w = 0;
  for (int step = 0; step < 16; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    TensorMap got = plan.run(data);
    TensorMap want = run_reference(p, "main", ref_in);
    double loss = mse(got.at("y"), target);
    if (step == 0) loss_first = loss;
    loss_last = loss;
    // The returned W*_new equal the state written back.
    EXPECT_TRUE(got.at("W1_new").same_bytes(plan.state("W1")));
    EXPECT_TRUE(got.at("W2_new").same_bytes(plan.state("W2")));
    for (const char* w : {"W1", "W2"}) {
      Tensor s = plan.state(w), r = want.at(std::string(w) + "_new");
      for (int64_t i = 0; i < s.numel(); ++i) worst_w = std::max(worst_w, std::fabs(s.at(size_t(i)) - r.at(size_t(i))));
    }
    ref_in["W1"] = want.at("W1_new");
    ref_in["W2"] = want.at("W2_new");
  }
  std::printf("[state alias] MSE %g -> %g over 16 runs; max |W_plan - W_ref| = %g\n", loss_first, loss_last, worst_w);
  EXPECT_LT(loss_last, loss_first * 0.05) << "MSE " << loss_first << " -> " << loss_last;
  // The plan keeps fp32 between steps, the reference rounds every op and each
  // stored weight to fp16 (ulp 2^-13..2^-12 at |w| ~ 0.1-0.25) and drops the
  // part of small updates below half an ulp: over 16 steps the two
  // trajectories separate by a few fp16 ulps of the weights, not more.
  EXPECT_LT(worst_w, 2e-3);
}

TEST(StateAlias, DirectWriteAndCopyAtTheEndAgree) {
  // acc_new = acc + x is elementwise on acc: computed straight into acc's
  // buffer. In `late`, acc is still read after acc_new is produced, so
  // acc_new must be copied back at the end of the run instead.
  Program direct = parse(test::program_text(
      "tensor<fp32, [8]> x, tensor<fp32, [8]> acc",
      "tensor<fp32, [8]> acc_new = add(x = acc, y = x)[name = string(\"acc_new\")];\n"
      "tensor<fp32, [8]> y = mul(x = acc_new, y = x)[name = string(\"y\")];",
      "y, acc_new"));
  Program late = parse(test::program_text(
      "tensor<fp32, [8]> x, tensor<fp32, [8]> acc",
      "tensor<fp32, [8]> acc_new = add(x = acc, y = x)[name = string(\"acc_new\")];\n"
      "tensor<fp32, [8]> y = mul(x = acc_new, y = acc)[name = string(\"y\")];",
      "y, acc_new"));
  CompileOptions opts;
  opts.state_aliases = {{"acc_new", "acc"}};
  for (Program* p : {&direct, &late}) {
    Plan plan = compile(*p, opts);
    std::vector<double> acc(8, 0.25);
    plan.set_state("acc", make(DType::FP32, {8}, acc));
    for (int run = 0; run < 3; ++run) {
      std::vector<double> x;
      for (int i = 0; i < 8; ++i) x.push_back(0.5 * i + run);
      Tensor xt = make(DType::FP32, {8}, x);
      TensorMap want = run_reference(*p, "main", {{"x", xt}, {"acc", make(DType::FP32, {8}, acc)}});
      TensorMap got = plan.run({{"x", xt}});
      expect_near_all(got.at("y"), values(want.at("y")), 0, "y");
      acc = values(want.at("acc_new"));
      expect_near_all(plan.state("acc"), acc, 0, "acc");
    }
    // Bound: acc_new reaches the caller's memory too, whichever way it was computed.
    std::vector<float> x(8, 1.0f), y(8), acc_new(8);
    plan.bind("x", x.data());
    plan.bind("y", y.data());
    plan.bind("acc_new", acc_new.data());
    plan.run();
    std::vector<double> now = values(plan.state("acc"));
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(acc_new[i], now[i]);
      EXPECT_EQ(now[i], acc[i] + 1.0);
    }
  }
  // Bad aliases are errors.
  auto bad = [&](std::map<std::string, std::string> a) {
    CompileOptions o;
    o.state_aliases = std::move(a);
    EXPECT_THROW(compile(direct, o), Error);
  };
  bad({{"y", "nope"}});
  bad({{"nope", "acc"}});
  bad({{"acc_new", "acc"}, {"y", "acc"}});
  Program other = parse(test::program_text("tensor<fp32, [8]> x, tensor<fp32, [4]> acc",
                                           "tensor<fp32, [8]> y = add(x = x, y = x)[name = string(\"y\")];", "y"));
  CompileOptions o;
  o.state_aliases = {{"y", "acc"}};
  EXPECT_THROW(compile(other, o), Error);
}

}  // namespace
}  // namespace milrt
