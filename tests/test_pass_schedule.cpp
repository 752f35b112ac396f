// schedule: ops reordered to shorten value lifetimes. The order stays
// topological (verify), outputs stay bit-identical, state ops keep their
// relative order, the arena never grows, and it shrinks where the input order
// computed everything first and consumed it later.
#include "passes/pass_registry.h"
#include "runtime/memory_plan.h"
#include "test_pass_util.h"

namespace milrt::test::pass {
namespace {

Program scheduled(const Program& p) {
  Program q = p;
  run_passes(q, {"schedule"});
  return q;
}

std::vector<std::string> defined(const Program& p) {
  std::vector<std::string> r;
  for (const Op& op : p.functions.at(0).ops)
    for (const Output& o : op.outputs) r.push_back(o.name);
  return r;
}

// Four branches, each a big intermediate reduced to a small one; the input
// order computes all four big ones before any reduction.
const char* kBranches =
    "    tensor<fp32, [64, 64]> a = exp(x = x)[name = string(\"a\")];\n"
    "    tensor<fp32, [64, 64]> b = sin(x = x)[name = string(\"b\")];\n"
    "    tensor<fp32, [64, 64]> c = cos(x = x)[name = string(\"c\")];\n"
    "    tensor<fp32, [64, 64]> d = tanh(x = x)[name = string(\"d\")];\n"
    "    tensor<int32, [1]> ax = const()[name = string(\"ax\"), val = tensor<int32, [1]>([1])];\n"
    "    tensor<fp32, [64]> ra = reduce_sum(x = a, axes = ax)[name = string(\"ra\")];\n"
    "    tensor<fp32, [64]> rb = reduce_sum(x = b, axes = ax)[name = string(\"rb\")];\n"
    "    tensor<fp32, [64]> rc = reduce_sum(x = c, axes = ax)[name = string(\"rc\")];\n"
    "    tensor<fp32, [64]> rd = reduce_sum(x = d, axes = ax)[name = string(\"rd\")];\n"
    "    tensor<fp32, [64]> s1 = add(x = ra, y = rb)[name = string(\"s1\")];\n"
    "    tensor<fp32, [64]> s2 = add(x = rc, y = rd)[name = string(\"s2\")];\n"
    "    tensor<fp32, [64]> y = mul(x = s1, y = s2)[name = string(\"y\")];";

TEST(Schedule, ProducesEachValueJustBeforeItsFirstUse) {
  const Program before = parse18("tensor<fp32, [64, 64]> x", kBranches, "y");
  const Program after = scheduled(before);
  EXPECT_EQ(defined(after), (std::vector<std::string>{"a", "ax", "ra", "b", "rb", "s1", "c", "rc", "d", "rd", "s2",
                                                      "y"}));
  expect_same_outputs(before, after);
}

TEST(Schedule, ShrinksTheArenaWhenBranchesWereComputedUpFront) {
  const Program before = parse18("tensor<fp32, [64, 64]> x", kBranches, "y");
  const Program after = scheduled(before);
  const size_t big = 64 * 64 * 4;
  size_t arena_before = plan_memory(before.functions[0]).arena_bytes;
  size_t arena_after = plan_memory(after.functions[0]).arena_bytes;
  // Before: the four 16 KiB branch values are live at once; after: one at a time.
  EXPECT_GE(arena_before, 4 * big);
  EXPECT_LT(arena_after, 2 * big);
}

TEST(Schedule, KeepsStateOpsInTheirOrder) {
  // The read must see the state before the update, although nothing else
  // orders them and the read's value is used only at the end.
  const Program before = parse18(
      "tensor<fp16, [4]> x, state<tensor<fp16, [4]>> s",
      "    tensor<fp16, [4]> old = read_state(input = s)[name = string(\"old\")];\n"
      "    tensor<fp16, [4]> nx = add(x = x, y = x)[name = string(\"nx\")];\n"
      "    tensor<fp16, [4]> upd = coreml_update_state(state = s, value = nx)[name = string(\"upd\")];\n"
      "    tensor<fp16, [4]> now = read_state(input = s)[name = string(\"now\")];\n"
      "    tensor<fp16, [4]> y = sub(x = now, y = old)[name = string(\"y\")];",
      "y");
  const Program after = scheduled(before);
  std::vector<std::string> order = defined(after);
  auto pos = [&](const std::string& v) { return std::find(order.begin(), order.end(), v) - order.begin(); };
  EXPECT_LT(pos("old"), pos("upd"));
  EXPECT_LT(pos("upd"), pos("now"));
  EXPECT_LT(pos("now"), pos("y"));
}

TEST(Schedule, KeepsOpsThatReachNoOutput) {
  const Program before = parse18("tensor<fp32, [3]> x",
                                 "    tensor<fp32, [3]> dead = exp(x = x)[name = string(\"dead\")];\n"
                                 "    tensor<fp32, [3]> y = relu(x = x)[name = string(\"y\")];",
                                 "y");
  std::vector<std::string> after = defined(scheduled(before));
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<std::string>{"dead", "y"}));
}

TEST(Schedule, PreservesEveryCorpusProgramAndNeverGrowsItsArena) {
  if (shared_dir().empty()) GTEST_SKIP() << "../shared is absent: only the seed programs are checked";
  for (const auto* corpus : {&shared_corpus(), &seed_corpus()}) {
    expect_preserved(*corpus, {"schedule"}, [](const std::string& name, const Program& b, const Program& a) {
      EXPECT_EQ(total_ops(b), total_ops(a)) << name;
      const Function& fb = b.functions.at(0);
      const Function& fa = a.functions.at(0);
      if (fb.params.size() && std::any_of(fb.params.begin(), fb.params.end(),
                                          [](const Param& p) { return p.type.has_unknown_dims(); }))
        return;  // flexible shapes cannot be memory-planned
      size_t before = plan_memory(fb).arena_bytes, after = plan_memory(fa).arena_bytes;
      std::printf("  %-45s arena %8zu -> %8zu bytes\n", name.c_str(), before, after);
      EXPECT_LE(after, before) << name << ": the input order is a candidate, so the schedule is never worse";
    });
  }
}

}  // namespace
}  // namespace milrt::test::pass
