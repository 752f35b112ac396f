// Control flow (`while_loop`, `cond`: coremltools iOS15 control_flow.py) in
// every layer: text and protobuf front ends, the verifier, the reference
// executor, the passes and compiled plans, and autodiff's refusal. Expected
// values are computed in the test by plain loops over the same inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "milrt/autodiff.h"
#include "milrt/mil.h"
#include "milrt/passes.h"
#include "milrt/plan.h"
#include "milrt/reference.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

// acc ← acc·w + w, n times (i counts), reading w and n from the enclosing function.
const char* kLoop = R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [3]> x, tensor<fp32, [3]> w, int32 n) {
        int32 i0 = const()[name = string("i0"), val = int32(0)];
        int32 i_out, tensor<fp32, [3]> x_out = while_loop(loop_vars = (i0, x))[name = string("loop")]
            cond(int32 i, tensor<fp32, [3]> acc) {
                bool c = less(x = i, y = n)[name = string("c")];
            } -> (c)
            body(int32 i, tensor<fp32, [3]> acc) {
                int32 one = const()[name = string("one"), val = int32(1)];
                int32 i1 = add(x = i, y = one)[name = string("i1")];
                tensor<fp32, [3]> m = mul(x = acc, y = w)[name = string("m")];
                tensor<fp32, [3]> acc1 = add(x = m, y = w)[name = string("acc1")];
            } -> (i1, acc1);
    } -> (i_out, x_out);
}
)";

// s > 0 ? (a + b, a) : (a · b, b); the second result is an outer value, and
// both branches name their value `t`.
std::string cond_program(const std::string& pred_type, const std::string& s_type) {
  return R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [2]> a, tensor<fp32, [2]> b, )" + s_type + R"( s) {
        fp32 zero = const()[name = string("zero"), val = fp32(0)];
        )" + pred_type + R"( p = greater(x = s, y = zero)[name = string("p")];
        tensor<fp32, [2]> r, tensor<fp32, [2]> q = cond(pred = p)[name = string("br")]
            true_fn() {
                tensor<fp32, [2]> t = add(x = a, y = b)[name = string("t")];
            } -> (t, a)
            false_fn() {
                tensor<fp32, [2]> t = mul(x = a, y = b)[name = string("t")];
            } -> (t, b);
    } -> (r, q);
}
)";
}

// n iterations of v ← (i even) ? v · 0.5 : v + 3: a cond inside a loop's body.
const char* kNested = R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [2]> x, int32 n) {
        int32 i0 = const()[name = string("i0"), val = int32(0)];
        int32 i_out, tensor<fp32, [2]> y = while_loop(loop_vars = (i0, x))[name = string("loop")]
            cond(int32 i, tensor<fp32, [2]> v) {
                bool c = less(x = i, y = n)[name = string("c")];
            } -> (c)
            body(int32 i, tensor<fp32, [2]> v) {
                int32 two = const()[name = string("two"), val = int32(2)];
                int32 r = mod(x = i, y = two)[name = string("r")];
                int32 zero = const()[name = string("zero"), val = int32(0)];
                bool even = equal(x = r, y = zero)[name = string("even")];
                tensor<fp32, [2]> v1 = cond(pred = even)[name = string("pick")]
                    true_fn() {
                        fp32 h = const()[name = string("h"), val = fp32(0.5)];
                        tensor<fp32, [2]> a = mul(x = v, y = h)[name = string("a")];
                    } -> (a)
                    false_fn() {
                        fp32 t = const()[name = string("t"), val = fp32(3)];
                        tensor<fp32, [2]> a = add(x = v, y = t)[name = string("a")];
                    } -> (a);
                int32 one = const()[name = string("one"), val = int32(1)];
                int32 i1 = add(x = i, y = one)[name = string("i1")];
            } -> (i1, v1);
    } -> (i_out, y);
}
)";

// Values around a loop that the passes must keep apart: m = a·b feeds both an
// add (a GEMM epilogue candidate) and the loop body; w2 and w2b compute the
// same value (CSE merges them, and the body's read of w2b must follow); k is
// read only inside the body (DCE must keep it).
const char* kPasses = R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [2, 2]> a, tensor<fp32, [2, 2]> b, tensor<fp32, [2, 2]> c, int32 n) {
        tensor<fp32, [2, 2]> m = matmul(x = a, y = b)[name = string("m")];
        tensor<fp32, [2, 2]> z = add(x = m, y = c)[name = string("z")];
        tensor<fp32, [2, 2]> w2 = mul(x = c, y = c)[name = string("w2")];
        tensor<fp32, [2, 2]> w2b = mul(x = c, y = c)[name = string("w2b")];
        fp32 k = const()[name = string("k"), val = fp32(0.25)];
        int32 i0 = const()[name = string("i0"), val = int32(0)];
        int32 i_out, tensor<fp32, [2, 2]> acc = while_loop(loop_vars = (i0, z))[name = string("loop")]
            cond(int32 i, tensor<fp32, [2, 2]> v) {
                bool go = less(x = i, y = n)[name = string("go")];
            } -> (go)
            body(int32 i, tensor<fp32, [2, 2]> v) {
                tensor<fp32, [2, 2]> s = mul(x = v, y = k)[name = string("s")];
                tensor<fp32, [2, 2]> s2 = add(x = s, y = m)[name = string("s2")];
                tensor<fp32, [2, 2]> s3 = add(x = s2, y = w2b)[name = string("s3")];
                int32 one = const()[name = string("one"), val = int32(1)];
                int32 i1 = add(x = i, y = one)[name = string("i1")];
            } -> (i1, s3);
        tensor<fp32, [2, 2]> out = add(x = acc, y = w2)[name = string("out")];
    } -> (z, out, i_out);
}
)";

Program parse(const std::string& text) {
  Program p = parse_mil(text, "cf.mil", ".");
  verify(p);
  return p;
}

Tensor scalar_i32(int v) { return make(DType::Int32, {}, {double(v)}); }

// Runs `p` on the reference executor and as a compiled plan (fp32), expecting
// the same outputs from both, and returns the reference's.
TensorMap run_both(const Program& p, const TensorMap& in) {
  TensorMap ref = run_reference(p, "main", in);
  CompileOptions co;
  co.tune = CompileOptions::Tune::off;
  Plan plan = compile(p, co);
  TensorMap got = plan.run(in);
  for (auto& [name, t] : ref) {
    EXPECT_EQ(got.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(values(got.at(name)), values(t)) << name;
  }
  // Twice: a plan holds no state between runs.
  TensorMap again = plan.run(in);
  for (auto& [name, t] : ref) EXPECT_EQ(values(again.at(name)), values(t)) << name;
  return ref;
}

std::vector<double> loop_expected(std::vector<double> x, const std::vector<double>& w, int n) {
  for (int i = 0; i < n; ++i)
    for (size_t k = 0; k < x.size(); ++k) x[k] = float(float(x[k] * w[k]) + w[k]);
  return x;
}

TEST(ControlFlowReference, WhileLoopCountsAndCarriesATensor) {
  Program p = parse(kLoop);
  const std::vector<double> x = {1, 2, 0.5}, w = {2, -1, 0.5};
  for (int n : {0, 1, 3, 7}) {
    TensorMap out = run_both(p, {{"x", make(DType::FP32, {3}, x)}, {"w", make(DType::FP32, {3}, w)}, {"n", scalar_i32(n)}});
    EXPECT_EQ(values(out.at("i_out")), std::vector<double>{double(n)}) << n;
    EXPECT_EQ(values(out.at("x_out")), loop_expected(x, w, n)) << n;
  }
}

TEST(ControlFlowReference, WhileLoopWithZeroIterationsReturnsItsInitialValues) {
  Program p = parse(kLoop);
  const std::vector<double> x = {4, -5, 6};
  TensorMap out = run_both(p, {{"x", make(DType::FP32, {3}, x)}, {"w", make(DType::FP32, {3}, {9, 9, 9})}, {"n", scalar_i32(-2)}});
  EXPECT_EQ(values(out.at("i_out")), std::vector<double>{0});
  EXPECT_EQ(values(out.at("x_out")), x);
}

TEST(ControlFlowReference, CondTakesEitherBranchOnAScalarPredicate) {
  Program p = parse(cond_program("bool", "fp32"));
  const std::vector<double> a = {1.5, -2}, b = {4, 3};
  for (double s : {1.0, -1.0, 0.0}) {
    TensorMap out = run_both(p, {{"a", make(DType::FP32, {2}, a)}, {"b", make(DType::FP32, {2}, b)},
                                 {"s", make(DType::FP32, {}, {s})}});
    const bool t = s > 0;
    EXPECT_EQ(values(out.at("r")), (t ? std::vector<double>{5.5, 1} : std::vector<double>{6, -6})) << s;
    EXPECT_EQ(values(out.at("q")), t ? a : b) << s;
  }
}

TEST(ControlFlowReference, CondTakesAOneElementBoolTensorAsPredicate) {
  // coremltools' pred is a bool tensor whose value is one truth value: [1] works, [2] does not.
  Program p = parse(cond_program("tensor<bool, [1]>", "tensor<fp32, [1]>"));
  const std::vector<double> a = {1, 2}, b = {10, 20};
  for (double s : {2.0, -3.0}) {
    TensorMap out = run_both(p, {{"a", make(DType::FP32, {2}, a)}, {"b", make(DType::FP32, {2}, b)},
                                 {"s", make(DType::FP32, {1}, {s})}});
    EXPECT_EQ(values(out.at("r")), (s > 0 ? std::vector<double>{11, 22} : std::vector<double>{10, 40}));
    EXPECT_EQ(values(out.at("q")), s > 0 ? a : b);
  }
  expect_error_containing([] { parse(cond_program("tensor<bool, [2]>", "tensor<fp32, [2]>")); },
                          "'pred' must be a bool with one element");
}

TEST(ControlFlowReference, CondInsideALoopBody) {
  Program p = parse(kNested);
  for (int n : {0, 1, 4, 5}) {
    std::vector<double> v = {8, -2};
    for (int i = 0; i < n; ++i)
      for (double& e : v) e = i % 2 == 0 ? e * 0.5 : e + 3;
    TensorMap out = run_both(p, {{"x", make(DType::FP32, {2}, {8, -2})}, {"n", scalar_i32(n)}});
    EXPECT_EQ(values(out.at("y")), v) << n;
  }
}

TEST(ControlFlowReference, MalformedProgramsErrorInsteadOfCrashing) {
  // Not verified: the executor itself must refuse, at the op.
  std::string text = kLoop;
  text.replace(text.find("y = w)[name = string(\"m\")"), 5, "y = zz");
  Program p = parse_mil(text, "cf.mil", ".");
  expect_error_containing(
      [&] {
        run_reference(p, "main", {{"x", make(DType::FP32, {3}, {1, 2, 3})}, {"w", make(DType::FP32, {3}, {1, 1, 1})},
                                  {"n", scalar_i32(2)}});
      },
      "uses undefined value 'zz'");
}

// ---- the text form

TEST(ControlFlowParser, PrintParsesBackToTheSameProgram) {
  for (const std::string& text : {std::string(kLoop), cond_program("bool", "fp32"), std::string(kNested), std::string(kPasses)}) {
    Program p = parse(text);
    const std::string printed = print_mil(p);
    Program q = parse_mil(printed, "printed.mil", ".");
    EXPECT_EQ(ir_diff(p, q), "") << printed;
    EXPECT_EQ(print_mil(q), printed);
    ASSERT_FALSE(p.functions[0].ops.empty());
  }
  Program p = parse(kNested);
  const Op& loop = p.functions[0].ops[1];
  ASSERT_EQ(loop.blocks.size(), 2u);
  EXPECT_EQ(loop.blocks[1].inputs.size(), 2u);
  EXPECT_EQ(loop.blocks[1].outputs, (std::vector<std::string>{"i1", "v1"}));
  EXPECT_EQ(loop.blocks[1].ops[4].blocks.size(), 2u);  // the cond inside the body
  // A changed block is a difference.
  Program q = p;
  q.functions[0].ops[1].blocks[1].ops[4].blocks[0].outputs[0] = "v";
  EXPECT_NE(ir_diff(p, q), "");
}

TEST(ControlFlowParser, ConvertedGruPrintsAndParsesBack) {
  // coremltools' while_loop (tests/data/coreml_zoo): blocks reuse parameter
  // names between cond and body, and the body holds its own weights.
  const Program p = load_model(std::string(MILRT_SOURCE_DIR) + "/tests/data/coreml_zoo/gru_fp32/model.mlpackage");
  verify(p);
  Program q = parse_mil(print_mil(p), "gru.mil", p.base_dir);
  load_blobs(q);
  EXPECT_EQ(ir_diff(p, q), "");
  size_t ops = 0;
  walk_ops(p.functions[0].ops, [&](const Op&) { ++ops; });
  EXPECT_GT(ops, p.functions[0].ops.size());
}

// The 1-based line of the first line of `text` containing `marker`.
int line_of(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  EXPECT_NE(at, std::string::npos) << marker;
  return 1 + int(std::count(text.begin(), text.begin() + long(at), '\n'));
}

void expect_error_at(const std::string& text, const std::string& marker, const std::string& fragment) {
  const std::string where = "cf.mil:" + std::to_string(line_of(text, marker)) + ":";
  try {
    parse(text);
    ADD_FAILURE() << "no error; expected " << fragment;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(where, 0), 0u) << msg << " (expected at " << where << ")";
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(ControlFlowVerifier, BadNestingAndTypingAreOneLineErrorsAtTheirPosition) {
  // The cond block returns an fp32, not a bool.
  expect_error_at(replaced(kLoop, "bool c = less(x = i, y = n)", "fp32 c = cast(x = i, dtype = string(\"fp32\"))"),
                  "cond(int32 i", "the cond block must return one bool");
  // The body returns an fp32 tensor for the int32 counter.
  expect_error_at(replaced(kLoop, "} -> (i1, acc1);", "} -> (acc1, acc1);"), "body(int32 i",
                  "the body returns tensor<fp32, [3]> for loop variable 'i'");
  // The body returns one value for two loop variables.
  expect_error_at(replaced(kLoop, "} -> (i1, acc1);", "} -> (i1);"), "body(int32 i", "the body returns 1 values for 2");
  // An unknown name inside a block: the op that reads it.
  expect_error_at(replaced(kLoop, "mul(x = acc, y = w)", "mul(x = acc, y = zz)"), "mul(x = acc", "uses undefined value 'zz'");
  // A value of the body is not visible in the cond block, nor after the loop.
  expect_error_at(replaced(kLoop, "less(x = i, y = n)", "less(x = i1, y = n)"), "less(x = i1", "uses undefined value 'i1'");
  expect_error_at(replaced(kLoop, "} -> (i_out, x_out);", "} -> (i_out, acc1);"), "func main", "undefined value 'acc1'");
  // A block name redefines a visible value.
  expect_error_at(replaced(kLoop, "tensor<fp32, [3]> m = mul", "tensor<fp32, [3]> x = mul"), "tensor<fp32, [3]> x = mul",
                  "redefines value 'x'");
  // A block parameter of the wrong type for its loop variable.
  expect_error_at(replaced(kLoop, "cond(int32 i, tensor<fp32, [3]> acc)", "cond(int32 i, tensor<fp16, [3]> acc)"),
                  "cond(int32 i", "is tensor<fp16, [3]> but loop variable 1 is tensor<fp32, [3]>");
  // The branches of a cond disagree.
  expect_error_at(replaced(cond_program("bool", "fp32"), "} -> (t, b);", "} -> (t, s);"), "false_fn()",
                  "the branches return");
  // A missing '->' after a block is a syntax error at the token found.
  std::string text = replaced(kLoop, "} -> (c)", "} (c)");
  try {
    parse_mil(text, "cf.mil", ".");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cf.mil:" + std::to_string(line_of(text, "} (c)")) + ":15: error: expected '->'"),
              std::string::npos)
        << e.what();
  }
}

// ---- passes: each keeps the program's meaning; blocks are opaque to them

TensorMap passes_inputs(int n) {
  return {{"a", make(DType::FP32, {2, 2}, {1, 2, 3, 4})},
          {"b", make(DType::FP32, {2, 2}, {0.5, -1, 2, 0.25})},
          {"c", make(DType::FP32, {2, 2}, {1, -2, 0.5, 3})},
          {"n", scalar_i32(n)}};
}

TEST(ControlFlowPass, EveryPassKeepsALoopsMeaning) {
  for (const std::string& text : {std::string(kPasses), std::string(kLoop), std::string(kNested)}) {
    const Program p = parse(text);
    TensorMap in = text == kPasses ? passes_inputs(3)
                   : text == kLoop ? TensorMap{{"x", make(DType::FP32, {3}, {1, 2, 3})},
                                               {"w", make(DType::FP32, {3}, {0.5, 2, -1})}, {"n", scalar_i32(4)}}
                                   : TensorMap{{"x", make(DType::FP32, {2}, {1, 2})}, {"n", scalar_i32(5)}};
    const TensorMap want = run_reference(p, "main", in);
    for (const PassInfo& pass : all_passes()) {
      Program q = p;
      run_passes(q, {pass.name});
      const TensorMap got = run_reference(q, "main", in);
      for (auto& [name, t] : want) EXPECT_EQ(values(got.at(name)), values(t)) << pass.name << " " << name;
      Program back = parse_mil(print_mil(q), "after.mil", ".");  // no captures input leaks into the text
      EXPECT_EQ(ir_diff(q, back), "") << pass.name;
    }
    Program all = p;
    run_passes(all, CompileOptions().passes);
    const TensorMap got = run_reference(all, "main", in);
    for (auto& [name, t] : want) EXPECT_EQ(values(got.at(name)), values(t)) << "pipeline " << name;
  }
}

const Op* find_op(const Function& f, const std::string& out) {
  for (const Op& op : f.ops)
    for (const Output& o : op.outputs)
      if (o.name == out) return &op;
  return nullptr;
}

TEST(ControlFlowPass, UsesInsideBlocksCountAndNothingCrossesABlockBoundary) {
  Program p = parse(kPasses);
  run_passes(p, CompileOptions().passes);
  const Function& f = p.functions[0];
  // dce kept k (read only in the body); cse merged w2b into w2 and renamed the body's read.
  const Op* loop = find_op(f, "acc");
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->type, "while_loop");
  EXPECT_NE(find_op(f, "k"), nullptr);
  EXPECT_EQ(find_op(f, "w2b"), nullptr);
  bool reads_w2 = false;
  for (const Op& op : loop->blocks[1].ops)
    for (const Input& in : op.inputs) reads_w2 |= in.arg.kind == Arg::Kind::Var && in.arg.var == "w2";
  EXPECT_TRUE(reads_w2);
  // m stays a value of its own: the body reads it, so the GEMM epilogue did not absorb it.
  ASSERT_NE(find_op(f, "m"), nullptr);
  // No op outside came into the loop's blocks and no block op left them.
  EXPECT_EQ(loop->blocks[1].ops.size(), 5u);
  EXPECT_EQ(loop->blocks[0].ops.size(), 1u);
  for (const Op& op : f.ops) EXPECT_FALSE(op.has("_captures"));

  // Two loops with the same inputs but different bodies are not merged by cse.
  std::string two = replaced(kLoop, "    } -> (i_out, x_out);", R"(        int32 j_out, tensor<fp32, [3]> y_out = while_loop(loop_vars = (i0, x))[name = string("loop2")]
            cond(int32 i, tensor<fp32, [3]> acc) {
                bool c = less(x = i, y = n)[name = string("c")];
            } -> (c)
            body(int32 i, tensor<fp32, [3]> acc) {
                int32 one = const()[name = string("one"), val = int32(1)];
                int32 i1 = add(x = i, y = one)[name = string("i1")];
                tensor<fp32, [3]> acc1 = sub(x = acc, y = w)[name = string("acc1")];
            } -> (i1, acc1);
    } -> (i_out, x_out, y_out);)");
  Program q = parse(two);
  run_passes(q, {"cse"});
  EXPECT_NE(find_op(q.functions[0], "y_out"), nullptr);
  EXPECT_EQ(q.functions[0].ops.size(), 3u);
}

TEST(ControlFlowCompiled, PassesAroundALoopMatchTheReference) {
  const Program p = parse(kPasses);
  for (int n : {0, 2, 5}) {
    const TensorMap in = passes_inputs(n);
    TensorMap out = run_both(p, in);
    // By hand: z = a·b + c; acc ← acc·0.25 + a·b + c·c, n times; out = acc + c·c.
    const std::vector<double> a = values(in.at("a")), b = values(in.at("b")), c = values(in.at("c"));
    std::vector<double> m(4), z(4), acc(4);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) m[size_t(i * 2 + j)] = a[size_t(i * 2)] * b[size_t(j)] + a[size_t(i * 2 + 1)] * b[size_t(2 + j)];
    for (size_t k = 0; k < 4; ++k) acc[k] = z[k] = m[k] + c[k];
    for (int it = 0; it < n; ++it)
      for (size_t k = 0; k < 4; ++k) acc[k] = acc[k] * 0.25 + m[k] + c[k] * c[k];
    std::vector<double> want(4);
    for (size_t k = 0; k < 4; ++k) want[k] = acc[k] + c[k] * c[k];
    EXPECT_EQ(values(out.at("z")), z);
    const std::vector<double> got = values(out.at("out"));
    for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(got[k], want[k], 1e-5 * std::max(1.0, std::fabs(want[k]))) << n;
  }
}

TEST(ControlFlowCompiled, Fp16NumericsMatchTheReference) {
  std::string text = kLoop;
  for (size_t at; (at = text.find("fp32, [3]")) != std::string::npos;) text.replace(at, 9, "fp16, [3]");
  const Program p = parse(text);
  const TensorMap in = {{"x", make(DType::FP16, {3}, {1, 2, 0.5})}, {"w", make(DType::FP16, {3}, {1.5, -0.5, 0.25})},
                        {"n", scalar_i32(5)}};
  const TensorMap ref = run_reference(p, "main", in);
  CompileOptions co;
  co.tune = CompileOptions::Tune::off;
  co.numerics = CompileOptions::Numerics::fp16;
  Plan plan = compile(p, co);
  EXPECT_EQ(values(plan.run(in).at("x_out")), values(ref.at("x_out")));
}

TEST(ControlFlowCompiled, BoundMemoryAndCancellation) {
  const Program p = parse(kLoop);
  Plan plan = compile(p);
  Tensor x = make(DType::FP32, {3}, {1, 2, 3}), w = make(DType::FP32, {3}, {2, 2, 2}), n = scalar_i32(3);
  Tensor i_out(DType::Int32, {}), x_out(DType::FP32, {3});
  plan.bind("x", x);
  plan.bind("w", w);
  plan.bind("n", n);
  plan.bind("i_out", i_out);
  plan.bind("x_out", x_out);
  plan.run();
  EXPECT_EQ(values(x_out), loop_expected({1, 2, 3}, {2, 2, 2}, 3));
  // Other memory for a captured value: the loop reads the new binding.
  Tensor w2 = make(DType::FP32, {3}, {1, 1, 1});
  plan.bind("w", w2);
  plan.run();
  EXPECT_EQ(values(x_out), loop_expected({1, 2, 3}, {1, 1, 1}, 3));
  EXPECT_EQ(values(i_out), std::vector<double>{3});

  // A loop that never ends (i never reaches n: the body does not count) ends with cancel().
  Program forever = parse(replaced(kLoop, "} -> (i1, acc1);", "} -> (i, acc1);"));
  Plan endless = compile(forever);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    endless.cancel();
  });
  expect_error_containing([&] { endless.run({{"x", x}, {"w", w2}, {"n", n}}); }, "cancelled");
  canceller.join();
}

TEST(ControlFlowMlpackage, PackagesKeepBlocks) {
  for (const std::string& text : {std::string(kLoop), std::string(kNested)}) {
    const Program p = parse(text);
    const std::string dir = temp_dir("cf") + "/m.mlpackage";
    save_mlpackage(p, dir);
    const Program q = load_model(dir);
    verify(q);
    ASSERT_EQ(q.functions[0].ops.size(), p.functions[0].ops.size());
    EXPECT_EQ(q.functions[0].ops[1].blocks.size(), 2u);
    const TensorMap in = text == kLoop ? TensorMap{{"x", make(DType::FP32, {3}, {1, 2, 3})},
                                                   {"w", make(DType::FP32, {3}, {0.5, 2, -1})}, {"n", scalar_i32(4)}}
                                       : TensorMap{{"x", make(DType::FP32, {2}, {1, 2})}, {"n", scalar_i32(5)}};
    const TensorMap a = run_reference(p, "main", in), b = run_both(q, in);
    for (auto& [name, t] : a) EXPECT_EQ(values(b.at(name)), values(t)) << name;
    // And as text again.
    EXPECT_EQ(ir_diff(q, parse_mil(print_mil(q), "q.mil", ".")), "");
  }
}

TEST(ControlFlowAutodiff, RefusesControlFlowWithAClearError) {
  const Program p = parse(kLoop);
  GradOptions o;
  o.loss = "x_out";
  o.wrt = {"w"};
  expect_error_containing([&] { differentiate(p, o); }, "does not differentiate programs with nested blocks");
}

}  // namespace
}  // namespace milrt::test
