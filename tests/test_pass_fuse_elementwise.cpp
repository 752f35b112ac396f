// fuse-elementwise and its op milrt_elementwise: the expression language,
// the op's typing, the pass's IR in → IR out, and numerics of three paths:
// the reference executor on the unfused program, the reference on the fused
// program (fp64, rounded once) and compiled plans (the register-machine
// kernel), on random inputs.
//
// Tolerances (|d| <= abs + rel·|want|):
//  - fp32, fused vs unfused reference: the unfused program rounds to fp32
//    after each op, <= 2^-24 relative each; a 10-op chain of well-conditioned
//    ops stays within ~10·2^-24·(condition) — we allow rel 1e-5, abs 1e-6.
//  - compiled kernel vs reference, one function: fp32 libm (exp, tanh, erf, ...)
//    is within a few ulps: rel 2e-6, abs 1e-6 (floor_div/mod/floor-like
//    functions are exact here since inputs keep away from integer steps).
//  - fp16 programs: the unfused reference rounds to fp16 after every op
//    (2^-11 relative each), the fused one and the plans once: 10 ops ->
//    rel 1e-2, abs 1e-3.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ir/elementwise_expr.h"
#include "milrt/plan.h"
#include "passes/pass_registry.h"
#include "test_pass_rewrite_util.h"
#include "test_pass_util.h"

namespace milrt::test::rewrite {
namespace {

using Strings = std::vector<std::string>;

Program fused(const Program& p) {
  Program q = p;
  run_passes(q, {"fuse-elementwise"});
  return q;
}

std::string expr_of(const Program& p, const std::string& out) {
  const Op& op = producer(p, out);
  const Tensor* t = const_input(p, op, "expr");
  return t ? t->strings().at(0) : "";
}

std::string fused_from(const Program& p, const std::string& out) {
  const Tensor* t = const_input(p, producer(p, out), "fused_from");
  return t ? t->strings().at(0) : "";
}

std::vector<std::string> input_names(const Program& p, const std::string& out) {
  std::vector<std::string> r;
  const Arg* a = producer(p, out).arg("inputs");
  if (!a) return r;
  for (const Arg& e : a->elems) r.push_back(e.kind == Arg::Kind::Var ? e.var : "<literal>");
  return r;
}

CompileOptions without_fusion() {
  CompileOptions o;
  std::erase(o.passes, std::string("fuse-elementwise"));
  return o;
}

// Reference(unfused) vs reference(fused) vs plan(with fusion) vs plan(without).
void expect_three_way(const Program& before, const Program& after, double rel, double abs, const std::string& what,
                      double lo = -1, double hi = 1) {
  Plan with = compile(before), without = compile(before, without_fusion());
  for (int k = 0; k < 3; ++k) {
    TensorMap in = random_inputs(before, uint64_t(77 + k), lo, hi);
    TensorMap want = run_reference(before, "main", in);
    expect_outputs_close(want, run_reference(after, "main", in), rel, abs, what + ": fused reference");
    expect_outputs_close(want, with.run(in), rel, abs, what + ": fused plan");
    expect_outputs_close(without.run(in), with.run(in), rel, abs, what + ": fused vs unfused plan");
  }
}

std::string print_parse_print(const Program& p) {
  std::string text = print_mil(p);
  Program q = parse_mil(text, "t.mil", ".");
  verify(q);
  EXPECT_EQ(ir_diff(p, q), "") << text;
  return text;
}

// ---- the expression language --------------------------------------------------

TEST(ElementwiseExpr, ParsesAndPrintsBackExactly) {
  for (std::string s : {"add(%1, mul(%0, sigmoid(%0)))", "clip(mul(%0, 0.5), 0, 6)", "log(%0, 1e-45)",
                        "sub(-inf, real_div(%2, 0.10000000149011612))", "maximum(%0, nan)", "rsqrt(%0)"}) {
    ew::Expr e = ew::parse_expr(s, 3);
    EXPECT_EQ(ew::print_expr(e), s);
  }
  ew::Expr e = ew::parse_expr("  mul ( %0 ,0.5 )  ");
  EXPECT_EQ(ew::print_expr(e), "mul(%0, 0.5)");
  ASSERT_EQ(e.args.size(), 2u);
  EXPECT_EQ(e.args[1].value, 0.5);
  EXPECT_EQ(ew::count_calls(ew::parse_expr("add(%0, exp(tanh(%0)))")), 3);
}

TEST(ElementwiseExpr, BadTextIsAClearError) {
  auto err = [](const std::string& s, int n) {
    try {
      ew::parse_expr(s, n);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(err("frob(%0)", 1).find("unknown function 'frob'"), std::string::npos) << err("frob(%0)", 1);
  EXPECT_NE(err("add(%0)", 1).find("add takes 2 arguments, got 1"), std::string::npos) << err("add(%0)", 1);
  EXPECT_NE(err("clip(%0, %0, 1)", 1).find("must be a literal"), std::string::npos);
  EXPECT_NE(err("exp(%2)", 2).find("%2 but the op has 2 inputs"), std::string::npos);
  EXPECT_NE(err("exp(%0))", 1).find("column 8"), std::string::npos) << err("exp(%0))", 1);
  EXPECT_NE(err("exp(%0", 1).find("expected ',' or ')'"), std::string::npos);
  EXPECT_NE(err("", 1).find("expected an expression"), std::string::npos);
  EXPECT_NE(err("exp", 1).find("expected '('"), std::string::npos);
}

// ---- the op --------------------------------------------------------------------

TEST(ElementwiseOp, TypesAsTheBroadcastOfItsInputs) {
  std::string body = stmt("tensor<fp32, [4, 3, 8]>", "z",
                          "milrt_elementwise(inputs = (x, y), expr = string(\"add(%0, mul(%1, 2))\"))");
  const Program p = parse_program("tensor<fp32, [4, 1, 8]> x, tensor<fp32, [3, 1]> y", body, "z");
  TensorMap in = random_inputs(p, 5);
  Tensor z = run_reference(p, "main", in).at("z");
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 8; ++k) {
        double want = in.at("x").at(size_t(i * 8 + k)) + 2.0 * in.at("y").at(size_t(j));
        EXPECT_EQ(z.at(size_t((i * 3 + j) * 8 + k)), float(want));
      }
}

TEST(ElementwiseOp, BadExprOrInputsAreErrorsAtTheOp) {
  auto err = [](const std::string& params, const std::string& call) {
    try {
      parse_program(params, stmt("tensor<fp32, [4]>", "z", call), "z");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e1 = err("tensor<fp32, [4]> x", "milrt_elementwise(inputs = (x), expr = string(\"exp(%1)\"))");
  EXPECT_NE(e1.find("milrt_elementwise"), std::string::npos) << e1;
  EXPECT_NE(e1.find("%1 but the op has 1 inputs"), std::string::npos) << e1;
  std::string e2 = err("tensor<fp32, [4]> x", "milrt_elementwise(inputs = (x), expr = string(\"exp(%0\"))");
  EXPECT_NE(e2.find("expected ',' or ')'"), std::string::npos) << e2;
  std::string e3 = err("tensor<int32, [4]> x", "milrt_elementwise(inputs = (x), expr = string(\"abs(%0)\"))");
  EXPECT_NE(e3.find("must be a tensor of fp16 or fp32"), std::string::npos) << e3;
  std::string e4 = err("tensor<fp32, [4]> x, tensor<fp32, [3]> y",
                       "milrt_elementwise(inputs = (x, y), expr = string(\"add(%0, %1)\"))");
  EXPECT_NE(e4.find("milrt_elementwise"), std::string::npos) << e4;
}

// ---- the pass: IR in, IR out -------------------------------------------------------

// 10 ops in a chain: each value is read once, by the next op.
std::string chain10(const std::string& t) {
  std::string dt = t.substr(7, 4);  // "fp32" or "fp16"
  return stmt(t, "a1", "mul(x = x, y = y)") + stmt(t, "a2", "add(x = a1, y = x)") +
         stmt(t, "a3", "sigmoid(x = a2)") + stmt(t, "a4", "mul(x = a3, y = y)") +
         stmt(t, "a5", "tanh(x = a4)") + stmt(t, "a6", "sub(x = a5, y = y)") +
         stmt(t, "a7", "exp(x = a6)") + stmt(t, "a8", "real_div(x = a7, y = " + dt + "(2))") +
         stmt(t, "a9", "clip(x = a8, alpha = " + dt + "(-0.5), beta = " + dt + "(0.75))") +
         stmt(t, "z", "abs(x = a9)");
}
const char* kChainExpr =
    "abs(clip(real_div(exp(sub(tanh(mul(sigmoid(add(mul(%0, %1), %0)), %1)), %1)), 2), -0.5, 0.75))";

TEST(FuseElementwise, ChainOfTenOpsBecomesOne) {
  const Program before =
      parse_program("tensor<fp32, [5, 17]> x, tensor<fp32, [17]> y", chain10("tensor<fp32, [5, 17]>"), "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after, true), (Strings{"milrt_elementwise"}));
  const Op& op = producer(after, "z");
  EXPECT_EQ(op.name, "z");
  EXPECT_EQ(op.outputs[0].type.str(), "tensor<fp32, [5, 17]>");
  EXPECT_EQ(fused_from(after, "z"), "a1 a2 a3 a4 a5 a6 a7 a8 a9 z");
  EXPECT_EQ(input_names(after, "z"), (Strings{"x", "y"}));
  EXPECT_EQ(expr_of(after, "z"), kChainExpr);
  expect_three_way(before, after, 1e-5, 1e-6, "10-op chain");
  // What `milrt inspect` lists for the step: the ten original ops.
  Plan plan = compile(before);
  ASSERT_EQ(plan.steps().size(), 1u);
  EXPECT_EQ(plan.steps()[0].ops, (Strings{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "z"}));
}

TEST(FuseElementwise, Fp16ChainInTheOlderDialect) {
  const Program before = pass::parse16("tensor<fp16, [3, 33]> x, tensor<fp16, [33]> y",
                                       chain10("tensor<fp16, [3, 33]>"), "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after, true), (Strings{"milrt_elementwise"}));
  EXPECT_EQ(producer(after, "z").outputs[0].type.dtype, DType::FP16);
  EXPECT_EQ(expr_of(after, "z"), kChainExpr);
  std::string text = print_parse_print(after);
  EXPECT_NE(text.find("expr = tensor<string, []>(\"abs(clip("), std::string::npos) << text;
  expect_three_way(before, after, 1e-2, 1e-3, "fp16 chain");
}

// SiLU as decompose leaves it: x feeds both sigmoid and the mul.
TEST(FuseElementwise, DiamondFusesWithItsSourceAsOneInput) {
  std::string t = "tensor<fp32, [2, 257]>";
  const Program before = parse_program(
      "tensor<fp32, [2, 257]> x, tensor<fp32, [2, 257]> r",
      stmt(t, "s", "sigmoid(x = x)") + stmt(t, "m", "mul(x = x, y = s)") + stmt(t, "z", "add(x = m, y = r)"), "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"milrt_elementwise"}));
  EXPECT_EQ(input_names(after, "z"), (Strings{"x", "r"}));
  EXPECT_EQ(expr_of(after, "z"), "add(mul(%0, sigmoid(%0)), %1)");
  EXPECT_EQ(fused_from(after, "z"), "s m z");
  expect_three_way(before, after, 1e-5, 1e-6, "silu + residual", -4, 4);
}

// a2 feeds a3 and a4 (SiLU of an intermediate): it cannot be absorbed, so
// {a1, a2} and {a3, ..., z} are fused separately.
TEST(FuseElementwise, IntermediateUsedTwiceStopsTheFusionThere) {
  std::string t = "tensor<fp32, [5, 17]>";
  const Program before = parse_program(
      "tensor<fp32, [5, 17]> x, tensor<fp32, [17]> y",
      stmt(t, "a1", "mul(x = x, y = y)") + stmt(t, "a2", "add(x = a1, y = x)") + stmt(t, "a3", "sigmoid(x = a2)") +
          stmt(t, "a4", "mul(x = a3, y = a2)") + stmt(t, "z", "exp(x = a4)"),
      "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"milrt_elementwise", "milrt_elementwise"}));
  EXPECT_EQ(fused_from(after, "a2"), "a1 a2");
  EXPECT_EQ(expr_of(after, "a2"), "add(mul(%0, %1), %0)");
  EXPECT_EQ(fused_from(after, "z"), "a3 a4 z");
  EXPECT_EQ(input_names(after, "z"), (Strings{"a2"}));
  EXPECT_EQ(expr_of(after, "z"), "exp(mul(sigmoid(%0), %0))");
  expect_three_way(before, after, 1e-5, 1e-6, "shared intermediate");
}

// A function output in the middle of a chain ends the group there; a value
// read by a non-elementwise op (reduce) too; a group of one stays as it is.
TEST(FuseElementwise, OutputsAndOtherConsumersStopTheFusion) {
  std::string t = "tensor<fp32, [4, 8]>";
  const Program before = parse_program(
      "tensor<fp32, [4, 8]> x",
      stmt(t, "a", "exp(x = x)") + stmt(t, "b", "tanh(x = a)") + stmt(t, "c", "sigmoid(x = b)") +
          stmt(t, "d", "relu(x = c)") + stmt("tensor<fp32, [4, 1]>", "e", "reduce_sum(x = d, axes = tensor<int32, [1]>([1]), keep_dims = bool(true))") +
          stmt(t, "f", "mul(x = e, y = x)"),
      "b, f");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"milrt_elementwise", "milrt_elementwise", "reduce_sum", "mul"}));
  EXPECT_EQ(fused_from(after, "b"), "a b");
  EXPECT_EQ(fused_from(after, "d"), "c d");
  EXPECT_EQ(producer(after, "f").type, "mul");
  expect_three_way(before, after, 1e-5, 1e-6, "stops");
}

// The seeds' layout idioms: reshapes between a SiLU's parts that only add or
// drop leading 1s are absorbed (listed in fused_from); x is read once.
TEST(FuseElementwise, ReshapesThatKeepTheElementOrderAreAbsorbed) {
  const Program before = parse_program(
      "tensor<fp32, [1, 1, 1, 8]> x",
      stmt("tensor<fp32, [8]>", "g", "reshape(x = x, shape = tensor<int32, [1]>([8]))") +
          stmt("tensor<fp32, [8]>", "s", "sigmoid(x = g)") +
          stmt("tensor<fp32, [1, 1, 1, 8]>", "s4", "reshape(x = s, shape = tensor<int32, [4]>([1, 1, 1, 8]))") +
          stmt("tensor<fp32, [1, 1, 1, 8]>", "z", "mul(x = x, y = s4)"),
      "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"milrt_elementwise"}));
  EXPECT_EQ(input_names(after, "z"), (Strings{"x"}));
  EXPECT_EQ(expr_of(after, "z"), "mul(%0, sigmoid(%0))");
  EXPECT_EQ(fused_from(after, "z"), "g s s4 z");
  expect_three_way(before, after, 1e-5, 1e-6, "silu through reshapes", -4, 4);
}

// A reshape that changes which elements meet ([2, 4] -> [4, 2], or a
// channel-first [1, 4, 1, 1] read as [4] beside a [1, 1, 1, 4]) is not absorbed.
TEST(FuseElementwise, ReshapesThatMoveElementsStayOut) {
  const Program a = parse_program(
      "tensor<fp32, [2, 4]> x, tensor<fp32, [4, 2]> y",
      stmt("tensor<fp32, [2, 4]>", "e", "exp(x = x)") +
          stmt("tensor<fp32, [4, 2]>", "r", "reshape(x = e, shape = tensor<int32, [2]>([4, 2]))") +
          stmt("tensor<fp32, [4, 2]>", "z", "add(x = r, y = y)"),
      "z");
  EXPECT_EQ(op_types(fused(a)), (Strings{"exp", "reshape", "add"}));
  const Program b = parse_program(
      "tensor<fp32, [1, 4, 1, 1]> x, tensor<fp32, [1, 1, 1, 4]> y",
      stmt("tensor<fp32, [4]>", "r", "reshape(x = x, shape = tensor<int32, [1]>([4]))") +
          stmt("tensor<fp32, [4]>", "t", "tanh(x = r)") + stmt("tensor<fp32, [1, 1, 1, 4]>", "z", "add(x = t, y = y)"),
      "z");
  const Program bf = fused(b);
  EXPECT_EQ(op_types(bf), (Strings{"reshape", "milrt_elementwise"}));
  EXPECT_EQ(fused_from(bf, "z"), "t z");
  expect_three_way(b, bf, 1e-5, 1e-6, "reshape kept");
}

// Parameters that are not constant, a different dtype across a cast, and a
// rank-widening one-element constant keep ops out of a group.
TEST(FuseElementwise, NonConstantParametersAndCastsAreNotFused) {
  std::string t = "tensor<fp32, [4]>";
  const Program before = parse_program(
      "tensor<fp32, [4]> x, tensor<fp32, []> lo",
      stmt(t, "a", "exp(x = x)") + stmt(t, "b", "clip(x = a, alpha = lo, beta = fp32(2))") +
          stmt("tensor<fp16, [4]>", "c", "cast(x = b, dtype = string(\"fp16\"))") +
          stmt("tensor<fp16, [4]>", "d", "sigmoid(x = c)") +
          stmt("tensor<fp16, [1, 4]>", "e", "add(x = d, y = tensor<fp16, [1, 1]>([[1]]))"),
      "e");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after), (Strings{"exp", "clip", "cast", "sigmoid", "add"}));
}

// [4, 1, 8] with [3, 1], a scalar constant (a literal) and a [8] constant
// (an input): the fused op broadcasts them all.
TEST(FuseElementwise, BroadcastingInputsScalarsAndConstants) {
  std::mt19937_64 rng(3);
  Tensor w = random_tensor(DType::FP32, {8}, rng, -1, 1);
  std::string t = "tensor<fp32, [4, 3, 8]>";
  const Program before = parse_program(
      "tensor<fp32, [4, 1, 8]> x, tensor<fp32, [3, 1]> y",
      const_stmt("w", w) + const_stmt("half", Tensor::scalar(DType::FP32, 0.5)) +
          stmt(t, "a", "add(x = x, y = y)") + stmt(t, "b", "mul(x = a, y = half)") +
          stmt(t, "c", "sub(x = b, y = w)") + stmt(t, "d", "maximum(x = c, y = tensor<fp32, [1]>([0.25]))") +
          stmt(t, "z", "pow(x = d, y = fp32(2))"),
      "z");
  const Program after = fused(before);
  EXPECT_EQ(op_types(after, true), (Strings{"const", "milrt_elementwise"})) << "half is inlined and dropped";
  EXPECT_EQ(input_names(after, "z"), (Strings{"x", "y", "w"}));
  EXPECT_EQ(expr_of(after, "z"), "pow(maximum(sub(mul(add(%0, %1), 0.5), %2), 0.25), 2)");
  print_parse_print(after);
  expect_three_way(before, after, 1e-6, 1e-7, "broadcast");
}

// Every MIL op the pass fuses, with its parameters and defaults, through
// fusion: the same function as unfused.
TEST(FuseElementwise, EveryFusableOpKeepsItsMeaning) {
  struct Case { std::string call; double lo, hi; };
  std::vector<Case> cases = {
      {"abs(x = a)", -1, 1}, {"exp(x = a)", -1, 1}, {"exp2(x = a)", -1, 1}, {"sqrt(x = a)", 0.1, 2},
      {"sin(x = a)", -1, 1}, {"cos(x = a)", -1, 1}, {"tan(x = a)", -1, 1}, {"asin(x = a)", -0.4, 0.4},
      {"acos(x = a)", -0.4, 0.4}, {"atan(x = a)", -1, 1}, {"atanh(x = a)", -0.4, 0.4}, {"sinh(x = a)", -1, 1},
      {"cosh(x = a)", -1, 1}, {"tanh(x = a)", -1, 1}, {"erf(x = a)", -1, 1}, {"floor(x = a)", -3, 3},
      {"ceil(x = a)", -3, 3}, {"round(x = a)", -3, 3}, {"sign(x = a)", -1, 1}, {"square(x = a)", -1, 1},
      {"relu(x = a)", -1, 1}, {"relu6(x = a)", -9, 9}, {"sigmoid(x = a)", -3, 3}, {"silu(x = a)", -3, 3},
      {"softplus(x = a)", -3, 3}, {"softsign(x = a)", -3, 3}, {"gelu(x = a)", -3, 3},
      {"gelu(x = a, mode = string(\"TANH_APPROXIMATION\"))", -3, 3}, {"gelu(x = a, mode = string(\"SIGMOID_APPROXIMATION\"))", -3, 3},
      {"log(x = a)", 0.1, 2}, {"log(x = a, epsilon = fp32(0.5))", 0.1, 2}, {"rsqrt(x = a)", 0.1, 2},
      {"inverse(x = a)", 0.1, 2}, {"leaky_relu(x = a, alpha = fp32(0.1))", -1, 1},
      {"elu(x = a, alpha = fp32(0.7))", -1, 1}, {"thresholded_relu(x = a, alpha = fp32(0.2))", -1, 1},
      {"threshold(x = a, alpha = fp32(0.2))", -1, 1}, {"clip(x = a, alpha = fp32(-0.3), beta = fp32(0.4))", -1, 1},
      {"sigmoid_hard(x = a, alpha = fp32(0.3), beta = fp32(0.4))", -3, 3},
      {"scaled_tanh(x = a, alpha = fp32(1.5), beta = fp32(0.5))", -3, 3},
      {"linear_activation(x = a, alpha = fp32(1.5), beta = fp32(0.5))", -3, 3},
      {"clamped_relu(x = a, alpha = fp32(0.1), beta = fp32(0.5))", -3, 3}, {"add(x = a, y = y)", -1, 1},
      {"sub(x = y, y = a)", -1, 1}, {"mul(x = a, y = y)", -1, 1}, {"real_div(x = a, y = y)", 0.5, 2},
      {"maximum(x = a, y = y)", -1, 1}, {"minimum(x = a, y = y)", -1, 1}, {"pow(x = a, y = y)", 0.5, 2},
      {"floor_div(x = a, y = y)", 0.5, 2}, {"mod(x = a, y = y)", 0.5, 2},
  };
  std::string t = "tensor<fp32, [3, 15]>";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.call);
    // a = identity-like first op so that every case is a group of two.
    const Program before = parse_program("tensor<fp32, [3, 15]> x, tensor<fp32, [15]> y",
                                         stmt(t, "a", "abs(x = x)") + stmt(t, "z", c.call), "z");
    const Program after = fused(before);
    EXPECT_EQ(op_types(after), (Strings{"milrt_elementwise"}));
    print_parse_print(after);
    expect_three_way(before, after, 2e-6, 1e-6, c.call, c.lo, c.hi);
  }
}

// ---- the kernel against the reference, one function at a time ---------------------

struct Domain { double lo, hi; };
Domain domain_of(const std::string& fn) {
  if (fn == "sqrt" || fn == "log" || fn == "rsqrt" || fn == "inverse" || fn == "pow" || fn == "real_div" ||
      fn == "floor_div" || fn == "mod")
    return {0.3, 3};
  if (fn == "asin" || fn == "acos" || fn == "atanh") return {-0.9, 0.9};
  if (fn == "sinh" || fn == "cosh" || fn == "exp" || fn == "exp2") return {-4, 4};
  if (fn == "tan") return {-1.2, 1.2};
  return {-4, 4};
}

std::string call_text(const ew::FnInfo& f) {
  std::string r = std::string(f.name) + "(%0";
  if (f.operands == 2) r += ", %1";
  const char* params[] = {"0.25", "1.5"};
  for (int k = 0; k < f.min_params; ++k) r += std::string(", ") + params[k];
  return r + ")";
}

TEST(ElementwiseKernel, EveryFunctionOnAwkwardSizesMatchesTheReference) {
  CompileOptions none;
  none.passes = {};
  for (const ew::FnInfo& f : ew::functions()) {
    for (int64_t n : {1, 15, 17, 33, 257}) {
      std::string call = call_text(f);
      SCOPED_TRACE(call + " n=" + std::to_string(n));
      // x is [3, n]; y is [n] (binary) so y is re-read per row.
      std::string out = "tensor<fp32, [3, " + std::to_string(n) + "]>";
      std::string ins = f.operands == 2 ? "(x, y)" : "(x)";
      const Program p = parse_program(
          "tensor<fp32, [3, " + std::to_string(n) + "]> x, tensor<fp32, [" + std::to_string(n) + "]> y",
          stmt(out, "z", "milrt_elementwise(inputs = " + ins + ", expr = string(\"" + call + "\"))"), "z");
      Domain d = domain_of(f.name);
      TensorMap in = random_inputs(p, uint64_t(n), d.lo, d.hi);
      Plan plan = compile(p, none);
      expect_outputs_close(run_reference(p, "main", in), plan.run(in), 2e-6, 1e-6, call);
    }
  }
}

// The kernel's own exp/tanh (vectorized) at the edges of their ranges:
// overflow, denormal results, signed zeros, infinities, NaN, and the switch
// between tanh's two formulas.
TEST(ElementwiseKernel, FastFunctionsAtTheEdgesMatchTheReference) {
  CompileOptions none;
  none.passes = {};
  std::vector<double> v = {-200, -104, -103.5, -100, -88, -87.5, -20, -1, -0.0626, -0.0624, -1e-3, -1e-8, -0.0, 0.0,
                           1e-8, 1e-3, 0.0624, 0.0626, 0.5, 1, 9, 20, 88, 88.5, 88.72, 88.8, 200, INFINITY, -INFINITY,
                           NAN};
  Tensor x(DType::FP32, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) x.set(i, v[i]);
  for (std::string fn : {"exp", "sigmoid", "silu", "tanh", "abs", "relu", "square", "clip"}) {
    std::string call = fn == "clip" ? "clip(%0, -0.5, 0.75)" : fn + "(%0)";
    SCOPED_TRACE(call);
    const Program p = parse_program(
        "tensor<fp32, [" + std::to_string(v.size()) + "]> x",
        stmt("tensor<fp32, [" + std::to_string(v.size()) + "]>", "z",
             "milrt_elementwise(inputs = (x), expr = string(\"" + call + "\"))"),
        "z");
    TensorMap in = {{"x", x}};
    // Denormal results (exp of -100) may lose bits: 1e-37 absolute covers them.
    expect_outputs_close(run_reference(p, "main", in), compile(p, none).run(in), 2e-6, 1e-37, call);
  }
}

// Broadcast along the inner dim (y [n, 1] against x [1, n]), a scalar
// input, literals and a result longer than one block.
TEST(ElementwiseKernel, BroadcastPatternsMatchTheReference) {
  CompileOptions none;
  none.passes = {};
  struct Case { std::string params, out, ins; };
  for (const Case& c : std::vector<Case>{
           {"tensor<fp32, [1, 33]> x, tensor<fp32, [17, 1]> y, tensor<fp32, []> s", "[17, 33]", "(x, y, s)"},
           {"tensor<fp32, [2, 1, 257]> x, tensor<fp32, [3, 1]> y, tensor<fp32, [1]> s", "[2, 3, 257]", "(x, y, s)"},
           {"tensor<fp32, [600]> x, tensor<fp32, [600]> y, tensor<fp32, [1]> s", "[600]", "(x, y, s)"},
           {"tensor<fp32, [1]> x, tensor<fp32, [1, 1]> y, tensor<fp32, []> s", "[1, 1]", "(x, y, s)"},
           {"tensor<fp32, [4, 1, 8]> x, tensor<fp32, [3, 1]> y, tensor<fp32, []> s", "[4, 3, 8]", "(x, y, s)"},
       }) {
    SCOPED_TRACE(c.params);
    const Program p = parse_program(
        c.params,
        stmt("tensor<fp32, " + c.out + ">", "z",
             "milrt_elementwise(inputs = " + c.ins +
                 ", expr = string(\"add(mul(sigmoid(%0), sub(%1, 0.5)), maximum(%2, mul(%0, %1)))\"))"),
        "z");
    TensorMap in = random_inputs(p, 9);
    Plan plan = compile(p, none);
    expect_outputs_close(run_reference(p, "main", in), plan.run(in), 2e-6, 1e-6, c.params);
  }
}

// ---- the corpus ------------------------------------------------------------------------

// The default pipeline up to fuse-elementwise, then the pass: the reference
// on both must agree. fp16 programs round after every op unfused and once
// fused; the differences then propagate through the rest of the network.
void check_corpus(const std::vector<pass::CorpusProgram>& corpus, int& fused_groups) {
  std::vector<std::string> pre = CompileOptions{}.passes;
  pre.erase(std::find(pre.begin(), pre.end(), "fuse-elementwise"), pre.end());
  for (const pass::CorpusProgram& c : corpus) {
    SCOPED_TRACE(c.name);
    Program before = c.program;
    run_passes(before, pre);
    Program after = before;
    run_passes(after, {"fuse-elementwise", "dce"});
    int groups = pass::op_counts(after)["milrt_elementwise"];
    fused_groups += groups;
    bool fp16 = false;
    for (const Op& op : before.functions.at(0).ops)
      for (const Output& o : op.outputs) fp16 |= o.type.dtype == DType::FP16;
    double rel = fp16 ? 2e-2 : 1e-4, abs = fp16 ? 2e-2 : 1e-4;
    TensorMap in = pass::inputs_for(before.functions.at(0), 5);
    TensorMap want = run_reference(before, before.functions.at(0).name, in);
    Deviation d = expect_outputs_close(want, run_reference(after, after.functions.at(0).name, in), rel, abs, c.name);
    std::printf("[fuse-elementwise] %s: %d fused ops, max |d| %.3g, rel %.3g\n", c.name.c_str(), groups, d.abs, d.rel);
    // EW_DUMP=1 in the environment prints each program after the pass, to look at.
    if (std::getenv("EW_DUMP")) std::printf("%s\n", print_mil(after).c_str());
  }
}

TEST(FuseElementwiseCorpus, SeedProgramsKeepTheirOutputs) {
  int groups = 0;
  check_corpus(pass::seed_corpus(), groups);
  EXPECT_GT(groups, 0) << "the seeds' residual adds and SiLUs are fusion targets";
}

TEST(FuseElementwiseCorpus, CoreMlBundlesKeepTheirOutputs) {
  MILRT_REQUIRE_SHARED();
  int groups = 0;
  check_corpus(pass::shared_corpus(), groups);
}

// ---- measurement (not a test: run with --gtest_also_run_disabled_tests) -----------

TEST(FuseElementwiseMeasure, DISABLED_TenOpChainOnOneMillionElements) {
  std::string t = "tensor<fp32, [1024, 1024]>";
  const Program p = parse_program("tensor<fp32, [1024, 1024]> x, tensor<fp32, [1024]> y", chain10(t), "z");
  Plan with = compile(p), without = compile(p, without_fusion());
  TensorMap in = random_inputs(p, 1);
  auto median_ms = [&](Plan& plan) {
    std::vector<double> ms;
    for (int k = 0; k < 21; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      plan.run(in);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  double f = median_ms(with), u = median_ms(without);
  std::printf("10-op chain, 1M fp32 elements: fused %.3f ms (%zu step), unfused %.3f ms (%zu steps), %.2fx\n", f,
              with.steps().size(), u, without.steps().size(), u / f);
}

}  // namespace
}  // namespace milrt::test::rewrite
