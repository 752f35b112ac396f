// Memory planning: no two live values share bytes, dead buffers are reused,
// and the arena is reported against the sum of the intermediates.
#include <random>

#include "milrt/builder.h"
#include "runtime/memory_plan.h"
#include "support/test_util.h"

namespace milrt {
namespace {

// Checks every pair of simultaneously live buffers for overlapping bytes.
void expect_no_conflicts(const MemoryPlan& plan) {
  for (size_t i = 0; i < plan.slots.size(); ++i)
    for (size_t j = i + 1; j < plan.slots.size(); ++j) {
      const BufferSlot &a = plan.slots[i], &b = plan.slots[j];
      bool live_together = !(a.last < b.first || b.last < a.first);
      bool bytes_overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(live_together && bytes_overlap) << a.value << " and " << b.value;
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

}  // namespace
}  // namespace milrt
