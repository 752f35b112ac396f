// differentiate(): the derived function's shape (names, outputs, what is
// kept), gradient accumulation, paths without gradients, errors, the
// finite-difference harness itself, and `milrt grad`.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "autodiff/grad_rule.h"
#include "milrt/autodiff.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/grad_check.h"
#include "support/test_util.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {

const char* kMlp = R"(program(1.3)
{
  func main<ios18>(tensor<fp32, [2, 3]> x, tensor<fp32, [3, 4]> W, tensor<fp32, [2, 4]> t) {
    tensor<fp32, [2, 4]> h = matmul(x = x, y = W)[name = string("h")];
    tensor<fp32, [2, 4]> a = sigmoid(x = h)[name = string("a")];
    tensor<fp32, [2, 4]> d = sub(x = a, y = t)[name = string("d")];
    tensor<fp32, [2, 4]> sq = mul(x = d, y = d)[name = string("sq")];
    fp32 loss = reduce_mean(x = sq)[name = string("loss")];
  } -> (loss, a);
}
)";

Program parse(const std::string& text) {
  Program p = parse_mil(text, "<test>", ".");
  verify(p);
  return p;
}

GradOptions opts(const std::string& loss, std::vector<std::string> wrt) {
  GradOptions o;
  o.loss = loss;
  o.wrt = std::move(wrt);
  return o;
}

std::string error_of(const Program& p, const GradOptions& o) {
  try {
    differentiate(p, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Autodiff, DerivedFunctionNamesAndOutputs) {
  Program p = parse(kMlp);
  Program g = differentiate(p, opts("loss", {"W", "x"}));
  ASSERT_EQ(g.functions.size(), 2u);
  EXPECT_EQ(ir_diff(make_program({p.functions[0]}), make_program({g.functions[0]})), "") << "main must stay as it was";
  const Function* f = g.function("main_grad");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->outputs, (std::vector<std::string>{"loss", "W_grad", "x_grad"}));
  EXPECT_EQ(f->params.size(), 3u);
  // Readable names: every op the backward half adds names itself after a value and "_grad".
  for (const Op& op : f->ops) {
    bool forward = std::any_of(p.functions[0].ops.begin(), p.functions[0].ops.end(),
                               [&](const Op& o) { return o.outputs[0].name == op.outputs[0].name; });
    if (!forward) {
      EXPECT_NE(op.outputs[0].name.find("_grad"), std::string::npos) << op.outputs[0].name;
    }
  }

  GradOptions o = opts("loss", {"W"});
  o.keep_outputs = true;
  o.out_function = "train_step";
  Program k = differentiate(p, o);
  ASSERT_NE(k.function("train_step"), nullptr);
  EXPECT_EQ(k.function("train_step")->outputs, (std::vector<std::string>{"loss", "W_grad", "a"}));
  expect_gradients_match(p, "loss", {"W", "x"});
}

// A value with several consumers gets the sum of their gradients; an input
// used twice (x * x, and x again below) too.
TEST(Autodiff, GradientsOfSharedValuesAdd) {
  std::string body = stmt("tensor<fp32, [3]>", "sq", "mul(x = x, y = x)") +
                     stmt("tensor<fp32, [3]>", "e", "exp(x = sq)") + stmt("tensor<fp32, [3]>", "s", "add(x = e, y = sq)") +
                     stmt("tensor<fp32, [3]>", "u", "mul(x = s, y = x)") + stmt("fp32", "loss", "reduce_sum(x = u)");
  auto r = expect_gradients_match(program_text("tensor<fp32, [3]> x", body, "loss"), "loss", {"x"}, 3);
  // Independently: d/dx sum((e^(x^2) + x^2) x) = e^(x^2)(2x^2 + 1) + 3x^2.
  for (int i = 0; i < 3; ++i) {
    double x = r.inputs.at("x").at(size_t(i));
    EXPECT_NEAR(r.grads.at("x_grad").at(size_t(i)), std::exp(x * x) * (2 * x * x + 1) + 3 * x * x, 1e-5);
  }
}

// A non-scalar loss is summed: the gradient of sum(x * y) wrt x is y.
TEST(Autodiff, NonScalarLossIsSummed) {
  Program p = parse(program_text("tensor<fp32, [2, 3]> x, tensor<fp32, [2, 3]> y",
                                 stmt("tensor<fp32, [2, 3]>", "z", "mul(x = x, y = y)"), "z"));
  TensorMap in{{"x", random_tensor(DType::FP32, {2, 3}, 1)}, {"y", random_tensor(DType::FP32, {2, 3}, 2)}};
  TensorMap g = run_reference(differentiate(p, opts("z", {"x"})), "main_grad", in);
  EXPECT_TRUE(g.at("x_grad").same_bytes(in.at("y")));
  EXPECT_EQ(g.at("z").shape(), (Shape{2, 3}));
  expect_gradients_match(p, "z", {"x", "y"});
}

// An input the loss does not depend on gets zeros of its type (a constant),
// also when it is large (then built from small literals).
TEST(Autodiff, UnreachedInputGetsZeros) {
  std::string body = stmt("tensor<fp32, [2]>", "sq", "mul(x = x, y = x)") + stmt("fp32", "loss", "reduce_sum(x = sq)") +
                     stmt("tensor<fp32, [64, 128]>", "v2", "mul(x = v, y = v)");
  Program p = parse(program_text("tensor<fp32, [2]> x, tensor<fp32, [64, 128]> v, tensor<fp16, [3]> h", body, "loss, v2"));
  Program g = differentiate(p, opts("loss", {"x", "v", "h"}));
  TensorMap in{{"x", random_tensor(DType::FP32, {2}, 1)}, {"v", random_tensor(DType::FP32, {64, 128}, 2)},
               {"h", random_tensor(DType::FP16, {3}, 3)}};
  TensorMap out = run_reference(g, "main_grad", in);
  EXPECT_EQ(out.at("v_grad").shape(), (Shape{64, 128}));
  EXPECT_EQ(out.at("h_grad").dtype(), DType::FP16);
  for (const char* k : {"v_grad", "h_grad"})
    for (double v : values(out.at(k))) ASSERT_EQ(v, 0.0) << k;
  // No 8192-element literal: the zeros come from [1, 1], [64, 1] and [1, 128] constants.
  std::string text = print_mil(g);
  EXPECT_LT(text.size(), 8000u);
  // The forward op that only feeds another output is dropped.
  for (const Op& op : g.function("main_grad")->ops) EXPECT_NE(op.outputs[0].name, "v2");
  CompileOptions grad_fn;
  grad_fn.function = "main_grad";
  Plan plan = compile(g, grad_fn);
  EXPECT_TRUE(plan.run(in).at("v_grad").same_bytes(out.at("v_grad")));
}

// Integer and bool values carry no gradient: a path through an int32 cast
// contributes nothing, and ops off the path (comparisons, integer ops, an
// op without a rule applied to a non-wrt input) need no rule.
TEST(Autodiff, IntegerPathsCarryNoGradient) {
  std::string body = stmt("tensor<int32, [4]>", "xi", "cast(x = x, dtype = string(\"int32\"))") +
                     stmt("tensor<fp32, [4]>", "xf", "cast(x = xi, dtype = string(\"fp32\"))") +
                     stmt("tensor<bool, [4]>", "pos", "greater(x = x, y = fp32(0.5))") +
                     stmt("tensor<fp32, [4]>", "tt", "tan(x = t)") +
                     stmt("tensor<fp32, [4]>", "sq", "mul(x = x, y = tt)") +
                     stmt("tensor<fp32, [4]>", "s", "select(cond = pos, a = sq, b = xf)") +
                     stmt("fp32", "loss", "reduce_sum(x = s)");
  std::string text = program_text("tensor<fp32, [4]> x, tensor<fp32, [4]> t", body, "loss");
  // x in [1.2, 1.8] and [0.1, 0.4]: the int cast and the comparison do not
  // change within the finite-difference step.
  TensorMap in{{"x", make(DType::FP32, {4}, {1.3, 0.2, 1.7, 0.35})}};
  auto r = expect_gradients_match(text, "loss", {"x"}, in);
  // The elements that took the int path have exactly zero gradient.
  EXPECT_EQ(r.grads.at("x_grad").at(1), 0.0);
  EXPECT_EQ(r.grads.at("x_grad").at(3), 0.0);
  EXPECT_NE(r.grads.at("x_grad").at(0), 0.0);
}

TEST(Autodiff, OpWithoutRuleOnThePathIsAnError) {
  std::string body = stmt("tensor<fp32, [4]>", "z", "tan(x = x)") + stmt("fp32", "loss", "reduce_sum(x = z)");
  Program p = parse(program_text("tensor<fp32, [4]> x", body, "loss"));
  ASSERT_EQ(autodiff::find_grad_rule("tan"), nullptr) << "pick another op without a rule for this test";
  std::string e = error_of(p, opts("loss", {"x"}));
  EXPECT_NE(e.find("<test>:4:"), std::string::npos) << e;
  EXPECT_NE(e.find("tan 'z'"), std::string::npos) << e;
  EXPECT_NE(e.find("no gradient rule"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(Autodiff, BadNamesAreErrors) {
  Program p = parse(program_text("tensor<fp32, [2]> x, tensor<int32, [2]> n",
                                 stmt("tensor<fp32, [2]>", "y", "mul(x = x, y = x)") +
                                     stmt("tensor<int32, [2]>", "m", "add(x = n, y = n)"),
                                 "y, m"));
  auto expect_error = [&](GradOptions o, const std::string& fragment) {
    std::string e = error_of(p, o);
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  };
  expect_error(opts("nope", {"x"}), "no value named 'nope'");
  expect_error(opts("y", {"q"}), "'q' is not an input");
  expect_error(opts("y", {"n"}), "must be an fp16 or fp32 tensor");
  expect_error(opts("m", {"x"}), "the loss 'm' must be an fp16 or fp32 tensor");
  expect_error(opts("y", {"x", "x"}), "named twice");
  expect_error(opts("y", {}), "no input to differentiate");
  expect_error(opts("", {"x"}), "no loss");
  GradOptions o = opts("y", {"x"});
  o.function = "other";
  expect_error(o, "no function named 'other'");
  o = opts("y", {"x"});
  o.out_function = "main";
  expect_error(o, "already has a function named 'main'");
}

// The failures `f` reports (intercepted, so they do not fail this test),
// joined into one string; "" when it passes.
template <class F> std::string failures_of(F f) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    f();
  }
  std::string all;
  for (int i = 0; i < results.size(); ++i) all += std::string(results.GetTestPartResult(i).message()) + "\n";
  return all;
}

// The harness fails on wrong rules: a rule for sin that is off by a sign, by
// 1%, and one that forgets to sum a broadcast (caught by the shape check).
TEST(Autodiff, HarnessCatchesWrongRules) {
  using autodiff::GradRule;
  using autodiff::RuleContext;
  GradRule saved = *autodiff::find_grad_rule("sin");
  std::string body = stmt("tensor<fp32, [2, 3]>", "z", "sin(x = x)") + stmt("tensor<fp32, [2, 3]>", "p", "mul(x = z, y = w)") +
                     stmt("fp32", "loss", "reduce_sum(x = p)");
  std::string text = program_text("tensor<fp32, [2, 3]> x, tensor<fp32, [2, 3]> w", body, "loss");
  for (double factor : {-1.0, 1.01}) {
    autodiff::register_grad_rule("sin", [factor](const RuleContext& c) -> std::map<std::string, Value> {
      Value cs = c.emit("cos", "d", {{"x", c.in("x")}});
      Value d = c.emit("mul", "d", {{"x", cs}, {"y", autodiff::scalar_of(DType::FP32, factor)}});
      return {{"x", c.emit("mul", "x", {{"x", *c.dout[0]}, {"y", d}})}};
    });
    std::string f = failures_of([&] { expect_gradients_match(text, "loss", {"x"}, 1); });
    EXPECT_NE(f.find("finite difference"), std::string::npos) << "factor " << factor << ": " << f;
  }
  autodiff::register_grad_rule("sin", [](const RuleContext& c) -> std::map<std::string, Value> {
    return {{"x", c.emit("cos", "x", {{"x", c.in("x")}})}};   // ignores the incoming gradient w
  });
  std::string f = failures_of([&] { expect_gradients_match(text, "loss", {"x"}, 1); });
  EXPECT_NE(f.find("finite difference"), std::string::npos) << f;
  autodiff::register_grad_rule("sin", saved);
  expect_gradients_match(text, "loss", {"x"}, 1);

  // A broadcast add whose rule returns the unsummed gradient: differentiate refuses it.
  GradRule add_saved = *autodiff::find_grad_rule("add");
  autodiff::register_grad_rule("add", [](const RuleContext& c) -> std::map<std::string, Value> {
    return {{"x", *c.dout[0]}, {"y", *c.dout[0]}};
  });
  Program p = parse(program_text("tensor<fp32, [2, 3]> x, tensor<fp32, [3]> b",
                                 stmt("tensor<fp32, [2, 3]>", "z", "add(x = x, y = b)"), "z"));
  std::string e = error_of(p, opts("z", {"b"}));
  autodiff::register_grad_rule("add", add_saved);
  EXPECT_NE(e.find("a bug in the rule"), std::string::npos) << e;
  EXPECT_NE(e.find("add 'z'"), std::string::npos) << e;
}

// GradOptions::recompute: a cheap activation the backward pass needs (silu's
// output, read by V's gradient) is computed again from a value kept anyway
// (its input h, read by silu's rule), so it is not a tap; the gradients are
// those of the program that keeps it, exactly (the same ops on the same values).
TEST(Autodiff, RecomputeRepeatsCheapTapsWithSameGradients) {
  std::string body = stmt("tensor<fp32, [4, 6]>", "h", "matmul(x = x, y = W)") + stmt("tensor<fp32, [4, 6]>", "a", "silu(x = h)") +
                     stmt("tensor<fp32, [4, 5]>", "y", "matmul(x = a, y = V)") + stmt("tensor<fp32, [4, 5]>", "y2", "mul(x = y, y = y)") +
                     stmt("fp32", "loss", "reduce_sum(x = y2)");
  Program p = parse_mil(program_text("tensor<fp32, [4, 3]> x, tensor<fp32, [3, 6]> W, tensor<fp32, [6, 5]> V", body, "loss"),
                        "<recompute>", ".");
  GradOptions keep, again;
  keep.loss = again.loss = "loss";
  keep.wrt = again.wrt = {"W", "V"};
  again.recompute = true;
  Program pk = differentiate(p, keep), pr = differentiate(p, again);
  const Function* fr = pr.function("main_grad");
  auto defines = [](const Function& f, const std::string& n) {
    return std::any_of(f.ops.begin(), f.ops.end(), [&](const Op& op) { return op.outputs[0].name == n; });
  };
  EXPECT_TRUE(defines(*fr, "a_recomputed")) << print_mil(pr);
  EXPECT_FALSE(defines(*pk.function("main_grad"), "a_recomputed"));
  // No backward op reads the forward `a` any more: only y's matmul does.
  int readers = 0;
  for (const Op& op : fr->ops)
    for (const Input& in : op.inputs) readers += in.arg.kind == Arg::Kind::Var && in.arg.var == "a";
  EXPECT_EQ(readers, 1);
  TensorMap in{{"x", random_tensor(DType::FP32, {4, 3}, 1)}, {"W", random_tensor(DType::FP32, {3, 6}, 2)},
               {"V", random_tensor(DType::FP32, {6, 5}, 3)}};
  TensorMap gk = run_reference(pk, "main_grad", in), gr = run_reference(pr, "main_grad", in);
  for (const char* g : {"W_grad", "V_grad"}) EXPECT_TRUE(gk.at(g).same_bytes(gr.at(g))) << g;
  // And the compiled plan of the recomputing program agrees with the reference.
  CompileOptions co;
  co.function = "main_grad";
  TensorMap gc = compile(pr, co).run(in);
  for (const char* g : {"W_grad", "V_grad"})
    for (int64_t i = 0; i < gk.at(g).numel(); ++i)
      EXPECT_NEAR(gc.at(g).at(size_t(i)), gk.at(g).at(size_t(i)), 1e-5 * (1 + std::fabs(gk.at(g).at(size_t(i))))) << g << i;
}

TEST(Autodiff, DifferentiableOpsListsTheRules) {
  std::vector<std::string> ops = differentiable_ops();
  std::set<std::string> have(ops.begin(), ops.end());
  for (const char* op : {"add", "sub", "mul", "real_div", "maximum", "minimum", "pow", "exp", "log", "sqrt", "rsqrt",
                         "inverse", "square", "abs", "tanh", "sigmoid", "relu", "silu", "gelu", "softplus", "erf",
                         "sin", "cos", "clip", "cast", "select", "identity", "leaky_relu", "elu", "matmul", "linear",
                         "reduce_sum", "reduce_mean", "reduce_sum_square", "reduce_max", "reduce_min",
                         "reduce_log_sum_exp", "reduce_l2_norm"})
    EXPECT_TRUE(have.count(op)) << op;
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
}

// ---- milrt grad ---------------------------------------------------------------

TEST(AutodiffCli, PrintsTheDerivedProgram) {
  std::string dir = temp_dir("grad_cli");
  write_bytes(dir + "/mlp.mil", kMlp);
  CliResult r = run_cli({"grad", dir + "/mlp.mil", "--loss", "loss", "--wrt", "W,x"});
  ASSERT_TRUE(Succeeded(r));
  Program back = parse(r.out);
  ASSERT_NE(back.function("main_grad"), nullptr);
  EXPECT_EQ(back.function("main_grad")->outputs, (std::vector<std::string>{"loss", "W_grad", "x_grad"}));
  // The printed program computes what the library's does.
  Program want = differentiate(parse(kMlp), opts("loss", {"W", "x"}));
  EXPECT_EQ(ir_diff(want, back), "");

  CliResult w = run_cli({"grad", dir + "/mlp.mil", "--loss", "loss", "--wrt", "W", "--function", "main", "--out",
                         dir + "/g.mil", "--keep-outputs"});
  ASSERT_TRUE(Succeeded(w));
  EXPECT_EQ(w.out, "");
  Program file = parse(read_bytes(dir + "/g.mil"));
  EXPECT_EQ(file.function("main_grad")->outputs, (std::vector<std::string>{"loss", "W_grad", "a"}));

  CliResult l = run_cli({"grad", "--list"});
  ASSERT_TRUE(Succeeded(l));
  EXPECT_NE(l.out.find("\nmatmul\n"), std::string::npos) << l.out;
}

TEST(AutodiffCli, BadNamesAreOneLineErrors) {
  std::string dir = temp_dir("grad_cli_bad");
  write_bytes(dir + "/mlp.mil", kMlp);
  std::string m = dir + "/mlp.mil";
  for (auto args : std::vector<std::vector<std::string>>{{"grad", m, "--loss", "nope", "--wrt", "W"},
                                                          {"grad", m, "--loss", "loss", "--wrt", "W,Q"},
                                                          {"grad", m, "--loss", "loss", "--wrt", "W", "--function", "f"},
                                                          {"grad", m, "--wrt", "W"},
                                                          {"grad", m, "--loss", "loss"},
                                                          {"grad", dir + "/missing.mil", "--loss", "loss", "--wrt", "W"}}) {
    CliResult r = run_cli(args);
    EXPECT_TRUE(IsOneLineError(r)) << args[2];
  }
  CliResult r = run_cli({"grad", m, "--loss", "loss", "--wrt", "W,Q"});
  EXPECT_NE(r.err.find("'Q'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace milrt::test
