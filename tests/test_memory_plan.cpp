// Memory planning: no two live values share bytes, dead buffers are reused,
// and the arena is reported against the sum of the intermediates.
#include <random>

#include "milrt/builder.h"
#include "milrt/passes.h"
#include "milrt/plan.h"
#include "runtime/memory_plan.h"
#include "support/test_util.h"
#include "test_pass_util.h"

namespace milrt {
namespace {

// Checks every pair of simultaneously live buffers for overlapping bytes;
// the one exception is an in-place pair, which meets at exactly one op.
void expect_no_conflicts(const MemoryPlan& plan) {
  for (size_t i = 0; i < plan.slots.size(); ++i)
    for (size_t j = i + 1; j < plan.slots.size(); ++j) {
      const BufferSlot &a = plan.slots[i], &b = plan.slots[j];
      bool live_together = !(a.last < b.first || b.last < a.first);
      bool bytes_overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      bool in_place_pair = (b.in_place_of == a.value && a.last == b.first && a.offset == b.offset) ||
                           (a.in_place_of == b.value && b.last == a.first && a.offset == b.offset);
      EXPECT_FALSE(live_together && bytes_overlap && !in_place_pair) << a.value << " and " << b.value;
    }
  for (auto& s : plan.slots) {
    EXPECT_EQ(s.offset % 64, 0u) << s.value;
    EXPECT_LE(s.offset + s.bytes, plan.arena_bytes) << s.value;
  }
}

TEST(MemoryPlan, ChainReusesTwoBuffers) {
  // x -> a -> b -> c -> d -> y: at most two intermediates are alive at once.
  FunctionBuilder f("main");
  Value v = f.input("x", Type::tensor(DType::FP32, {1024}));
  for (const char* n : {"a", "b", "c", "d"}) v = f.op("relu", n, {{"x", v}});
  Value y = f.op("relu", "y", {{"x", v}});
  f.output(y);
  MemoryPlan plan = plan_memory(f.build());
  ASSERT_EQ(plan.slots.size(), 4u);  // y is the caller's buffer
  EXPECT_EQ(plan.total_bytes, 4u * 4096u);
  EXPECT_EQ(plan.arena_bytes, 2u * 4096u);
  expect_no_conflicts(plan);
  EXPECT_EQ(plan.find("a")->first, 0);
  EXPECT_EQ(plan.find("a")->last, 1);
}

TEST(MemoryPlan, LongLivedValueKeepsItsBytes) {
  // a is used at the very end: nothing may overwrite it in between.
  FunctionBuilder f("main");
  Value x = f.input("x", Type::tensor(DType::FP16, {256}));
  Value a = f.op("relu", "a", {{"x", x}});
  Value b = f.op("sigmoid", "b", {{"x", a}});
  Value c = f.op("tanh", "c", {{"x", b}});
  Value d = f.op("exp", "d", {{"x", c}});
  Value y = f.op("add", "y", {{"x", a}, {"y", d}});
  f.output(y);
  MemoryPlan plan = plan_memory(f.build());
  expect_no_conflicts(plan);
  EXPECT_EQ(plan.find("a")->last, 4);
  EXPECT_EQ(plan.arena_bytes, 3u * 512u);  // a plus two of b, c, d at a time
}

TEST(MemoryPlan, RandomProgramsNeverShareLiveBytes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    FunctionBuilder f("main");
    std::vector<Value> vals{f.input("x", Type::tensor(DType::FP32, {64}))};
    int n = 5 + int(rng() % 30);
    for (int i = 0; i < n; ++i) {
      const Value& a = vals[rng() % vals.size()];
      const Value& b = vals[rng() % vals.size()];
      vals.push_back(f.op(rng() % 2 ? "add" : "mul", "v" + std::to_string(i), {{"x", a}, {"y", b}}));
    }
    f.output(vals.back());
    MemoryPlan plan = plan_memory(f.build());
    expect_no_conflicts(plan);
    EXPECT_LE(plan.arena_bytes, plan.total_bytes + 64 * plan.slots.size());
  }
}

TEST(MemoryPlan, UnknownDimsAreAnError) {
  FunctionBuilder f("main");
  Value x = f.input("x", Type::tensor(DType::FP32, {-1, 4}));
  Function fn = f.build();
  Op op;
  op.type = "relu";
  op.inputs.push_back({"x", Arg::of_var("x"), false});
  op.outputs.push_back({"r", Type::tensor(DType::FP32, {-1, 4})});
  fn.ops.push_back(op);
  op.outputs[0].name = "y";
  op.inputs[0].arg = Arg::of_var("r");
  fn.ops.push_back(op);
  fn.outputs = {"y"};
  EXPECT_THROW(plan_memory(fn), Error);
}

TEST(MemoryPlan, RealModelsPlanWithinTheirIntermediates) {
  MILRT_REQUIRE_SHARED();
  for (const char* m : {"silero-vad-unified-v6.0.0", "silero-vad-unified-256ms-v6.0.0"}) {
    Program p = load_model(test::shared_dir() + "/testdata/coreml/silero-vad/" + m + ".mlmodelc");
    MemoryPlan plan = plan_memory(p.functions[0]);
    expect_no_conflicts(plan);
    EXPECT_LT(plan.arena_bytes, plan.total_bytes) << m;
    std::printf("[memory] %s: arena %zu bytes, intermediates %zu bytes (%zu values)\n", m, plan.arena_bytes,
                plan.total_bytes, plan.slots.size());
  }
}

// Every variable input of the op's shape and dtype (what compile() allows for elementwise ops).
std::vector<std::string> same_shape_inputs(const Function& f, const Op& op) {
  std::vector<std::string> r;
  for (auto& in : op.inputs) {
    if (in.arg.kind != Arg::Kind::Var) continue;
    for (auto& o : f.ops)
      if (!o.outputs.empty() && o.outputs[0].name == in.arg.var && o.outputs[0].type == op.outputs[0].type)
        r.push_back(in.arg.var);
  }
  return r;
}

MemoryPlanOptions in_place_options(const Function& f) {
  MemoryPlanOptions o;
  o.in_place = [&f](const Op& op) { return same_shape_inputs(f, op); };
  return o;
}

TEST(MemoryPlanInPlace, ChainRunsInOneBuffer) {
  FunctionBuilder b("main");
  Value v = b.input("x", Type::tensor(DType::FP32, {1024}));
  for (const char* n : {"a", "b", "c", "d"}) v = b.op("relu", n, {{"x", v}});
  b.output(b.op("relu", "y", {{"x", v}}));
  Function f = b.build();
  MemoryPlan plan = plan_memory(f, in_place_options(f));
  expect_no_conflicts(plan);
  EXPECT_EQ(plan.arena_bytes, 4096u);  // was 2 * 4096 without in place
  EXPECT_EQ(plan.find("a")->in_place_of, "");  // x is the caller's
  EXPECT_EQ(plan.find("b")->in_place_of, "a");
  EXPECT_EQ(plan.find("d")->in_place_of, "c");
}

TEST(MemoryPlanInPlace, OnlyAnInputDyingAtTheOpIsOverwritten) {
  FunctionBuilder b("main");
  Value x = b.input("x", Type::tensor(DType::FP32, {256}));
  Value a = b.op("relu", "a", {{"x", x}});
  Value c = b.op("tanh", "c", {{"x", a}});        // a lives on: c gets its own bytes
  Value d = b.op("add", "d", {{"x", a}, {"y", c}});  // a and c both die here: d takes one
  Value small = b.op("reduce_sum", "s", {{"x", d}, {"axes", lit_i32s({0})},
                                          {"keep_dims", lit_bool(true)}});
  b.output(b.op("mul", "y", {{"x", d}, {"y", small}}));
  Function f = b.build();
  MemoryPlan plan = plan_memory(f, in_place_options(f));
  expect_no_conflicts(plan);
  EXPECT_EQ(plan.find("c")->in_place_of, "");
  EXPECT_TRUE(plan.find("d")->in_place_of == "a" || plan.find("d")->in_place_of == "c");
  EXPECT_EQ(plan.find("s")->in_place_of, "");  // a different size
}

TEST(MemoryPlanInPlace, RandomProgramsStayValidAndNeverGrow) {
  std::mt19937 rng(17);
  int shrunk = 0;
  for (int trial = 0; trial < 100; ++trial) {
    FunctionBuilder b("main");
    std::vector<Value> vals{b.input("x", Type::tensor(DType::FP32, {64}))};
    int n = 5 + int(rng() % 30);
    const char* unary[] = {"relu", "tanh", "exp"};
    for (int i = 0; i < n; ++i) {
      const Value& a = vals[rng() % vals.size()];
      const Value& c = vals[rng() % vals.size()];
      std::string name = "v" + std::to_string(i);
      if (rng() % 3 == 0) vals.push_back(b.op(unary[rng() % 3], name, {{"x", a}}));
      else vals.push_back(b.op(rng() % 2 ? "add" : "mul", name, {{"x", a}, {"y", c}}));
    }
    b.output(vals.back());
    Function f = b.build();
    MemoryPlan with = plan_memory(f, in_place_options(f)), without = plan_memory(f);
    expect_no_conflicts(with);
    EXPECT_LE(with.arena_bytes, without.arena_bytes);
    EXPECT_EQ(with.total_bytes, without.total_bytes);
    shrunk += with.arena_bytes < without.arena_bytes;
    for (auto& s : with.slots)
      if (!s.in_place_of.empty()) {
        EXPECT_EQ(with.find(s.in_place_of)->last, s.first) << s.value;
      }
  }
  EXPECT_GT(shrunk, 10);  // in place actually happens
}

TEST(MemoryPlanInPlace, CompiledRandomProgramsAgreeWithTheReference) {
  // Elementwise chains with broadcasts (a broadcast operand is never
  // overwritten: only an input of the output's shape is), on fp32 programs:
  // plan and reference differ by fp32 rounding only, 1e-5 * (1 + |ref|).
  std::mt19937 rng(23);
  for (int trial = 0; trial < 40; ++trial) {
    FunctionBuilder b("main");
    std::vector<Value> full{b.input("x", Type::tensor(DType::FP32, {4, 8}))};
    Value row = b.input("r", Type::tensor(DType::FP32, {1, 8}));
    const char* unary[] = {"relu", "tanh", "sigmoid", "abs"};
    int n = 4 + int(rng() % 20);
    for (int i = 0; i < n; ++i) {
      std::string name = "v" + std::to_string(i);
      const Value& a = full[rng() % full.size()];
      switch (rng() % 4) {
        case 0: full.push_back(b.op(unary[rng() % 4], name, {{"x", a}})); break;
        case 1: full.push_back(b.op("add", name, {{"x", row}, {"y", a}})); break;
        case 2: full.push_back(b.op("mul", name, {{"x", a}, {"y", full[rng() % full.size()]}})); break;
        default: full.push_back(b.op("sub", name, {{"x", a}, {"y", a}})); break;
      }
    }
    b.output(full.back());
    b.output(full[full.size() / 2]);
    Program p = make_program({b.build()});
    CompileOptions opts;
    opts.passes = {};  // the program as built, so in-place chains stay long
    Plan plan = compile(p, opts);
    EXPECT_LE(plan.arena_bytes(), plan_memory(p.functions[0]).arena_bytes);
    std::uniform_real_distribution<double> u(-1, 1);
    Tensor x(DType::FP32, {4, 8}), r(DType::FP32, {1, 8});
    for (int i = 0; i < 32; ++i) x.set(size_t(i), u(rng));
    for (int i = 0; i < 8; ++i) r.set(size_t(i), u(rng));
    TensorMap want = run_reference(p, "main", {{"x", x}, {"r", r}});
    for (int run = 0; run < 2; ++run) {
      TensorMap got = plan.run({{"x", x}, {"r", r}});
      for (auto& [name, w] : want)
        for (int64_t i = 0; i < w.numel(); ++i)
          ASSERT_NEAR(got.at(name).at(size_t(i)), w.at(size_t(i)), 1e-5 * (1 + std::fabs(w.at(size_t(i)))))
              << "trial " << trial << " " << name << "[" << i << "]";
    }
  }
}

// Peak arena of every corpus program through the default pipeline, without
// and with in-place reuse (the numbers `milrt inspect` reports as the arena).
TEST(MemoryPlanInPlace, CorpusArenasShrinkOrStay) {
  std::vector<const std::vector<test::pass::CorpusProgram>*> corpora{&test::pass::seed_corpus()};
  if (!test::shared_dir().empty()) corpora.push_back(&test::pass::shared_corpus());
  else std::printf("[memory] ../shared is absent: only the seed programs\n");
  for (auto* corpus : corpora)
    for (auto& c : *corpus) {
      Plan plan;
      try {
        plan = compile(c.program);
      } catch (const Error& e) {
        std::printf("[memory] %s: not compiled (%s)\n", c.name.c_str(), e.what());
        continue;
      }
      Program opt = c.program;
      run_passes(opt, CompileOptions{}.passes);
      Function sized = opt.functions[0];
      for (auto& op : sized.ops)
        for (auto& o : op.outputs)
          if (o.type.is_tensor() && o.type.dtype != DType::String) o.type.dtype = Plan::storage_dtype(o.type.dtype);
      size_t before = plan_memory(sized).arena_bytes;
      EXPECT_LE(plan.arena_bytes(), before) << c.name;
      std::printf("[memory] %-45s arena %9zu -> %9zu bytes (intermediates %zu)\n", c.name.c_str(), before,
                  plan.arena_bytes(), plan.intermediate_bytes());
    }
}

}  // namespace
}  // namespace milrt
