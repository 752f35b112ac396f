// decompose-all: rms_norm, layer_norm, silu, gelu (three modes), softplus,
// sigmoid_hard, relu6 and leaky_relu become primitive MIL ops. The default
// `decompose` expands only those the compiled engine has no kernel for
// (tests at the end, "---- decompose: only what has no kernel"). Each rule is
// shown as IR (the op list and the inputs that matter: axes, literals and
// their dtypes, reshaped weights) and run against the reference executor on
// the unmodified program, in fp32 and in fp16.
//
// Tolerances (|got - want| <= abs + rel·|want|):
//  - fp32: rel 1e-5, abs 1e-6. Each primitive op rounds its result to fp32
//    (relative error <= 2^-24 = 6e-8) and a chain has at most 11 ops whose
//    error amplification is O(1) for inputs in [-3, 3] (the largest, x·x·x
//    in gelu's tanh mode, is 3 x^2 · 0.044715 <= 1.3), so the total stays
//    near 1e-6 relative; 1e-5 leaves a margin of ten. Outputs near zero
//    (gelu of negative x, a normalized value next to the mean) carry errors
//    relative to the intermediates' size, hence the absolute floor.
//    Measured (printed per rule, "[decompose]" lines): at most 2.4e-7
//    absolute on outputs of magnitude <= 4, 9.5e-7 on softplus outputs up
//    to 100, 6.2e-6 relative (gelu next to zero).
//  - fp16: the composite op rounds once, its expansion after every op
//    (2^-11 = 4.9e-4 each). Measured: at most 1.95e-3 absolute on outputs
//    of magnitude <= 4 (one fp16 ulp in [2, 4)), 3.9e-3 on softplus outputs
//    up to 100. Bound: abs 4e-3 + rel 4e-3 (8 ulps), twice that.
//    layer_norm's error also grows as the normalized values get close to
//    each other (LayerNormFp16ErrorFollowsTheConditioning); the table's
//    groups hold >= 3 values spread over [-3, 3].
//  - fp16 x·x (rms_norm) and (x - mean)^2 (layer_norm) overflow for
//    |x| >= 256, where the single ops computed in higher precision: an fp16
//    program with larger activations needs these ops kept whole.
#include <cstdio>
#include <functional>

#include "milrt/plan.h"
#include "passes/pass_registry.h"
#include "runtime/lowering.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

using Strings = std::vector<std::string>;

constexpr double kRelF32 = 1e-5, kAbsF32 = 1e-6;
constexpr double kRelF16 = 4e-3, kAbsF16 = 4e-3;

Program decomposed(const Program& p) {
  Program q = p;
  run_passes(q, {"decompose-all"});
  return q;
}

std::string dt_name(DType dt) { return std::string(dtype_name(dt)); }
std::string tensor_type(DType dt, const std::string& dims) { return "tensor<" + dt_name(dt) + ", [" + dims + "]>"; }

// The value and dtype of a scalar literal input.
double literal_value(const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  EXPECT_TRUE(a && a->kind == Arg::Kind::Const) << op.type << " input " << key;
  return a && a->kind == Arg::Kind::Const ? a->lit->value.at(0) : NAN;
}
DType literal_dtype(const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  return a && a->kind == Arg::Kind::Const ? a->lit->value.dtype() : DType::Bool;
}

// One rule: a program of one composite op `y` (built for a dtype), the ops
// it becomes, and the input range that exercises it.
struct Rule {
  std::string what;
  std::function<std::string(DType)> params, body;
  Strings ops;
  double lo = -3, hi = 3;
};

std::string unary(const std::string& expr, DType dt) {
  return stmt(tensor_type(dt, "2, 3, 4"), "y", expr);
}

std::vector<Rule> rules() {
  auto x234 = [](DType dt) { return tensor_type(dt, "2, 3, 4") + " x"; };
  auto scalar = [](DType dt, double v) { return dt_name(dt) + "(" + std::to_string(v) + ")"; };
  return {
      {"silu", x234, [](DType dt) { return unary("silu(x = x)", dt); }, {"sigmoid", "mul"}},
      {"gelu (default: EXACT)", x234, [](DType dt) { return unary("gelu(x = x)", dt); },
       {"mul", "erf", "add", "mul", "mul"}},
      {"gelu EXACT", x234, [](DType dt) { return unary("gelu(x = x, mode = string(\"EXACT\"))", dt); },
       {"mul", "erf", "add", "mul", "mul"}},
      {"gelu TANH_APPROXIMATION", x234,
       [](DType dt) { return unary("gelu(x = x, mode = string(\"TANH_APPROXIMATION\"))", dt); },
       {"mul", "mul", "mul", "add", "mul", "tanh", "add", "mul", "mul"}},
      {"gelu SIGMOID_APPROXIMATION", x234,
       [](DType dt) { return unary("gelu(x = x, mode = string(\"SIGMOID_APPROXIMATION\"))", dt); },
       {"mul", "sigmoid", "mul"}},
      {"softplus", x234, [](DType dt) { return unary("softplus(x = x)", dt); },
       {"abs", "mul", "exp", "add", "log", "maximum", "add"}},
      {"softplus far from 0", x234, [](DType dt) { return unary("softplus(x = x)", dt); },
       {"abs", "mul", "exp", "add", "log", "maximum", "add"}, -100, 100},
      {"sigmoid_hard", x234,
       [=](DType dt) {
         return unary("sigmoid_hard(x = x, alpha = " + scalar(dt, 0.2) + ", beta = " + scalar(dt, 0.5) + ")", dt);
       },
       {"mul", "add", "clip"}, -5, 5},
      {"relu6", x234, [](DType dt) { return unary("relu6(x = x)", dt); }, {"clip"}, -2, 8},
      {"leaky_relu, alpha in [0, 1]", x234,
       [=](DType dt) { return unary("leaky_relu(x = x, alpha = " + scalar(dt, 0.01) + ")", dt); },
       {"mul", "maximum"}},
      {"leaky_relu, alpha > 1", x234,
       [=](DType dt) { return unary("leaky_relu(x = x, alpha = " + scalar(dt, 1.5) + ")", dt); },
       {"mul", "less", "select"}},
      {"leaky_relu, alpha < 0", x234,
       [=](DType dt) { return unary("leaky_relu(x = x, alpha = " + scalar(dt, -0.5) + ")", dt); },
       {"mul", "less", "select"}},
      {"rms_norm [1, C, 1, S]", [](DType dt) { return tensor_type(dt, "1, 8, 1, 3") + " x"; },
       [](DType dt) {
         return const_stmt("w", random(dt, {8}, 1)) +
                stmt(tensor_type(dt, "1, 8, 1, 3"), "y", "rms_norm(x = x, w = w, eps = " + dt_name(dt) + "(0.001))");
       },
       {"mul", "reduce_mean", "add", "rsqrt", "mul", "mul"}},
      {"rms_norm [N, L, C], default eps", [](DType dt) { return tensor_type(dt, "2, 3, 8") + " x"; },
       [](DType dt) {
         return const_stmt("w", random(dt, {8}, 2)) + stmt(tensor_type(dt, "2, 3, 8"), "y", "rms_norm(x = x, w = w)");
       },
       {"mul", "reduce_mean", "add", "rsqrt", "mul", "mul"}},
      {"rms_norm without w", [](DType dt) { return tensor_type(dt, "5") + " x"; },
       [](DType dt) { return stmt(tensor_type(dt, "5"), "y", "rms_norm(x = x)"); },
       {"mul", "reduce_mean", "add", "rsqrt", "mul"}},
      {"layer_norm over axis 1", x234,
       [](DType dt) {
         return const_stmt("g", random(dt, {3}, 3)) + const_stmt("b", random(dt, {3}, 4)) +
                unary("layer_norm(x = x, axes = tensor<int32, [1]>([1]), gamma = g, beta = b, epsilon = " +
                          dt_name(dt) + "(0.01))",
                      dt);
       },
       {"reduce_mean", "sub", "mul", "reduce_mean", "add", "rsqrt", "mul", "mul", "add"}},
      {"layer_norm over all axes, no gamma or beta", x234,
       [](DType dt) { return unary("layer_norm(x = x)", dt); },
       {"reduce_mean", "sub", "mul", "reduce_mean", "add", "rsqrt", "mul"}},
      {"layer_norm over axes -2, -1, gamma only", x234,
       [](DType dt) {
         return const_stmt("g", random(dt, {3, 4}, 5)) +
                unary("layer_norm(x = x, axes = tensor<int32, [2]>([-1, -2]), gamma = g)", dt);
       },
       {"reduce_mean", "sub", "mul", "reduce_mean", "add", "rsqrt", "mul", "mul"}},
      {"layer_norm over axis 0, beta only", [](DType dt) { return tensor_type(dt, "6, 2, 2") + " x"; },
       [](DType dt) {
         return const_stmt("b", random(dt, {6}, 6)) +
                stmt(tensor_type(dt, "6, 2, 2"), "y", "layer_norm(x = x, axes = tensor<int32, [1]>([0]), beta = b)");
       },
       {"reduce_mean", "sub", "mul", "reduce_mean", "add", "rsqrt", "mul", "add"}},
  };
}

TEST(Decompose, EveryRuleGivesItsPrimitivesAndTheSameValues) {
  for (const Rule& rule : rules()) {
    for (DType dt : {DType::FP32, DType::FP16}) {
      std::string what = rule.what + " (" + dt_name(dt) + ")";
      SCOPED_TRACE(what);
      const Program before = parse_program(rule.params(dt), rule.body(dt), "y");
      const Program after = decomposed(before);
      EXPECT_EQ(op_types(after), rule.ops);
      // The last op computes the output under its own name and position.
      const Op& y = producer(after, "y");
      EXPECT_EQ(y.name, "y");
      for (const Op& op : after.function("main")->ops) {
        if (op.type != "const") {
          EXPECT_EQ(op.loc.line, producer(before, "y").loc.line) << op.type;
        }
      }
      bool f32 = dt == DType::FP32;
      Deviation dev = expect_same_function(before, after, f32 ? kRelF32 : kRelF16, f32 ? kAbsF32 : kAbsF16, what, 3,
                                           rule.lo, rule.hi);
      std::printf("[decompose] %-48s max |diff| %.3g, max rel %.3g\n", what.c_str(), dev.abs, dev.rel);
    }
  }
}

// leaky_relu and relu6 only multiply once (or not at all) and select, so
// they round exactly as the single op does, also where alpha·x overflows
// fp16 or x is infinite (inputs up to ±70000 become ±inf in fp16).
TEST(Decompose, LeakyReluAndRelu6AreExact) {
  for (double alpha : {0.01, 1.0, 1.5, -0.5}) {
    const Program before = parse_program(
        "tensor<fp16, [64]> x", stmt("tensor<fp16, [64]>", "y", "leaky_relu(x = x, alpha = fp16(" + std::to_string(alpha) + "))"),
        "y");
    expect_same_function(before, decomposed(before), 0, 0, "leaky_relu " + std::to_string(alpha), 3, -70000, 70000);
  }
  const Program r6 = parse_program("tensor<fp16, [64]> x", stmt("tensor<fp16, [64]>", "y", "relu6(x = x)"), "y");
  expect_same_function(r6, decomposed(r6), 0, 0, "relu6", 3, -10, 10);
}

// layer_norm in fp16 rounds x's mean before subtracting it, so the centered
// values carry an error of about an ulp of |x|, not of |x - mean|, which
// normalizing divides by the standard deviation: the error follows
// k = max|x| / sqrt(var + eps) of each group. Two values near 1 make k as
// large as it gets (up to 1 / sqrt(eps) = 316 for equal values). Measured:
// |diff| <= 1.02 · 2^-11 (k + 1) (printed); the bound is 2 · 2^-11 (k + 1).
TEST(Decompose, LayerNormFp16ErrorFollowsTheConditioning) {
  const Program before = parse_program(
      "tensor<fp16, [2, 64]> x", stmt("tensor<fp16, [2, 64]>", "y", "layer_norm(x = x, axes = tensor<int32, [1]>([0]))"),
      "y");
  const Program after = decomposed(before);
  double worst = 0, worst_k = 0;
  for (uint64_t seed : {1, 2, 3}) {
    std::mt19937_64 rng(seed);
    Tensor x = random_tensor(DType::FP16, {2, 64}, rng, 0.95, 1.05);
    Tensor want = run_reference(before, "main", {{"x", x}}).at("y");
    Tensor got = run_reference(after, "main", {{"x", x}}).at("y");
    for (int64_t j = 0; j < 64; ++j) {
      double a = x.at(size_t(j)), b = x.at(size_t(64 + j)), mean = (a + b) / 2;
      double var = ((a - mean) * (a - mean) + (b - mean) * (b - mean)) / 2;
      double k = std::max(std::fabs(a), std::fabs(b)) / std::sqrt(var + 1e-5);
      for (int64_t i : {j, 64 + j}) {
        double d = std::fabs(got.at(size_t(i)) - want.at(size_t(i))) / std::ldexp(1.0, -11);
        EXPECT_LE(d, 2 * (k + 1)) << "element " << i << ": k " << k << ", got " << got.at(size_t(i)) << ", want "
                                << want.at(size_t(i));
        if (d / (k + 1) > worst) worst = d / (k + 1), worst_k = k;
      }
    }
  }
  std::printf("[decompose] layer_norm fp16, 2-element groups near 1: max |diff| / (2^-11 (k + 1)) = %.3g (k %.3g)\n",
              worst, worst_k);
}

// ---- the inputs that matter ------------------------------------------------

TEST(Decompose, RmsNormOnChannelsReducesAxis1AndReshapesTheWeight) {
  Tensor w = random(DType::FP32, {8}, 7);
  const Program before = parse_program(
      "tensor<fp16, [1, 8, 1, 3]> x",
      const_stmt("w", w) + stmt("tensor<fp16, [1, 8, 1, 3]>", "y", "rms_norm(x = x, w = w, eps = fp32(0.001))"), "y");
  const Program after = decomposed(before);
  std::string text = print_mil(after);
  EXPECT_NE(text.find("tensor<fp16, [1, 1, 1, 3]> y__mean_sq = reduce_mean(x = y__sq, axes = tensor<int32, [1]>([1]), "
                      "keep_dims = bool(true))"),
            std::string::npos)
      << text;
  const Op& y = producer(after, "y");
  const Op& normed = producer(after, var_of(y, "x"));
  const Op& rsqrt = producer(after, var_of(normed, "y"));
  const Op& shifted = producer(after, var_of(rsqrt, "x"));
  const Op& mean = producer(after, var_of(shifted, "x"));
  const Op& sq = producer(after, var_of(mean, "x"));
  EXPECT_EQ(var_of(sq, "x"), "x");
  EXPECT_EQ(var_of(sq, "y"), "x");
  EXPECT_EQ(values(*const_input(after, mean, "axes")), (std::vector<double>{1}));
  EXPECT_EQ(values(*const_input(after, mean, "keep_dims")), (std::vector<double>{1}));
  EXPECT_EQ(mean.outputs[0].type.shape, (Shape{1, 1, 1, 3}));
  // eps and rsqrt's epsilon are literals of x's dtype (fp16), eps rounded.
  EXPECT_EQ(literal_dtype(shifted, "y"), DType::FP16);
  EXPECT_EQ(literal_value(shifted, "y"), f16_to_f32(f32_to_f16(0.001f)));
  EXPECT_EQ(literal_value(rsqrt, "epsilon"), 0);
  EXPECT_EQ(literal_dtype(rsqrt, "epsilon"), DType::FP16);
  // The fp32 [8] weight became an fp16 [8, 1, 1] constant; the old one is gone.
  const Tensor* w2 = const_input(after, y, "y");
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->dtype(), DType::FP16);
  EXPECT_EQ(w2->shape(), (Shape{8, 1, 1}));
  EXPECT_EQ(values(*w2), values(w.cast(DType::FP16)));
  Strings all = op_types(after, true);
  EXPECT_EQ(std::count(all.begin(), all.end(), "const"), 1);
  expect_same_function(before, after, kRelF16, kAbsF16, "rms_norm fp32 w, fp16 x");
}

// A weight that is not a constant is reshaped (and cast) by ops.
TEST(Decompose, RmsNormWithAComputedWeight) {
  const Program before = parse_program(
      "tensor<fp32, [1, 4, 1, 2]> x, tensor<fp16, [1, 4]> w",
      stmt("tensor<fp32, [1, 4, 1, 2]>", "y", "rms_norm(x = x, w = w)"), "y");
  const Program after = decomposed(before);
  EXPECT_EQ(op_types(after), (Strings{"mul", "reduce_mean", "add", "rsqrt", "cast", "reshape", "mul", "mul"}));
  const Op& reshape = producer(after, var_of(producer(after, "y"), "y"));
  EXPECT_EQ(reshape.outputs[0].type, Type::tensor(DType::FP32, {4, 1, 1}));
  EXPECT_EQ(producer(after, var_of(reshape, "x")).type, "cast");
  // The default eps, 1e-5 in fp32, added to the mean square.
  const Op& shifted = producer(after, "y__mean_sq_eps");
  EXPECT_EQ(shifted.type, "add");
  EXPECT_EQ(literal_value(shifted, "y"), double(1e-5f));
  expect_same_function(before, after, kRelF32, kAbsF32, "rms_norm computed w");
}

TEST(Decompose, LayerNormReducesItsAxesAndBroadcastsGammaBeta) {
  Tensor g = random(DType::FP32, {3}, 8), b = random(DType::FP32, {3}, 9);
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      const_stmt("g", g) + const_stmt("b", b) +
          stmt("tensor<fp32, [2, 3, 4]>", "y", "layer_norm(x = x, axes = tensor<int32, [1]>([-2]), gamma = g, beta = b)"),
      "y");
  const Program after = decomposed(before);
  const Op& y = producer(after, "y");
  const Op& scaled = producer(after, var_of(y, "x"));
  const Op& normed = producer(after, var_of(scaled, "x"));
  const Op& centered = producer(after, var_of(normed, "x"));
  const Op& mean = producer(after, var_of(centered, "y"));
  const Op& rsqrt = producer(after, var_of(normed, "y"));
  const Op& shifted = producer(after, var_of(rsqrt, "x"));
  const Op& var = producer(after, var_of(shifted, "x"));
  EXPECT_EQ(centered.type, "sub");
  EXPECT_EQ(var_of(centered, "x"), "x");
  for (const Op* r : {&mean, &var}) {
    EXPECT_EQ(r->type, "reduce_mean");
    EXPECT_EQ(values(*const_input(after, *r, "axes")), (std::vector<double>{1}));
    EXPECT_EQ(r->outputs[0].type.shape, (Shape{2, 1, 4}));
  }
  EXPECT_EQ(literal_value(shifted, "y"), double(1e-5f));  // the default epsilon, fp32
  EXPECT_EQ(const_input(after, scaled, "y")->shape(), (Shape{3, 1}));
  EXPECT_EQ(values(*const_input(after, scaled, "y")), values(g));
  EXPECT_EQ(const_input(after, y, "y")->shape(), (Shape{3, 1}));
  EXPECT_EQ(values(*const_input(after, y, "y")), values(b));
  expect_same_function(before, after, kRelF32, kAbsF32, "layer_norm axis -2");
}

TEST(Decompose, GeluConstantsAreInXsDtype) {
  const Program before = parse_program(
      "tensor<fp16, [4]> x", stmt("tensor<fp16, [4]>", "y", "gelu(x = x, mode = string(\"TANH_APPROXIMATION\"))"), "y");
  const Program after = decomposed(before);
  std::vector<double> consts;
  for (const Op& op : after.function("main")->ops)
    if (op.has("y") && op.arg("y")->kind == Arg::Kind::Const) {
      EXPECT_EQ(literal_dtype(op, "y"), DType::FP16) << op.outputs[0].name;
      consts.push_back(literal_value(op, "y"));
    }
  auto h = [](double v) { return double(f16_to_f32(f32_to_f16(float(v)))); };
  EXPECT_EQ(consts, (std::vector<double>{h(0.044715), h(std::sqrt(2 / 3.14159265358979323846)), 1, 0.5}));
}

TEST(Decompose, SigmoidHardTakesParametersOfAnotherDtypeAsLiteralsOfXs) {
  const Program before = parse_program(
      "tensor<fp16, [8]> x", stmt("tensor<fp16, [8]>", "y", "sigmoid_hard(x = x, alpha = fp32(0.25), beta = fp32(0.5))"),
      "y");
  const Program after = decomposed(before);
  const Op& clip = producer(after, "y");
  const Op& shifted = producer(after, var_of(clip, "x"));
  const Op& scaled = producer(after, var_of(shifted, "x"));
  EXPECT_EQ(literal_dtype(scaled, "y"), DType::FP16);
  EXPECT_EQ(literal_value(scaled, "y"), 0.25);
  EXPECT_EQ(literal_value(shifted, "y"), 0.5);
  EXPECT_EQ(literal_value(clip, "alpha"), 0);
  EXPECT_EQ(literal_value(clip, "beta"), 1);
  expect_same_function(before, after, kRelF16, kAbsF16, "sigmoid_hard", 3, -5, 5);
}

// ---- what stays -------------------------------------------------------------------

TEST(Decompose, FusedAndPrimitiveOpsStay) {
  const Program before = parse_program(
      "tensor<fp32, [1, 2, 4]> x, tensor<fp32, [3, 2, 1]> w, tensor<fp32, [1, 4, 2]> q",
      stmt("tensor<fp32, [1, 2, 4]>", "s", "softmax(x = x, axis = int32(-1))") +
          stmt("tensor<fp32, [1, 3, 4]>", "c", "conv(x = s, weight = w)") +
          stmt("tensor<fp32, [1, 4, 4]>", "m", "matmul(x = q, y = x)") +
          stmt("tensor<fp32, [1, 4, 2]>", "a", "scaled_dot_product_attention(query = q, key = q, value = q)") +
          stmt("tensor<fp32, [1, 4, 2]>", "r", "relu(x = a)") + stmt("tensor<fp32, [1, 4, 2]>", "t", "tanh(x = r)") +
          stmt("tensor<fp32, [1, 4, 2]>", "e", "clip(x = t, alpha = fp32(0), beta = fp32(1))"),
      "c, m, e");
  EXPECT_EQ(ir_diff(before, decomposed(before)), "");
}

// The op that becomes several keeps its output name, so a value that is both
// a function output and used further stays both.
TEST(Decompose, OutputsKeepTheirNames) {
  const Program before = parse_program(
      "tensor<fp32, [3]> x",
      stmt("tensor<fp32, [3]>", "y", "silu(x = x)") + stmt("tensor<fp32, [3]>", "z", "relu6(x = y)"), "y, z");
  const Program after = decomposed(before);
  EXPECT_EQ(after.function("main")->outputs, (Strings{"y", "z"}));
  EXPECT_EQ(op_types(after), (Strings{"sigmoid", "mul", "clip"}));
  EXPECT_EQ(producer(after, "y").type, "mul");
  EXPECT_EQ(var_of(producer(after, "z"), "x"), "y");
  expect_same_function(before, after, kRelF32, kAbsF32, "outputs");
}

TEST(Decompose, RegisteredRightAfterCanonicalize) {
  std::vector<std::string> names;
  for (const PassInfo& p : all_passes()) names.push_back(p.name);
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  ASSERT_LT(at("decompose"), int64_t(names.size()));
  EXPECT_EQ(at("canonicalize") + 1, at("decompose"));
}

// ---- real programs -----------------------------------------------------------------

// Only the FFN has a composite op (its rms_norm); fp16 bound as above.
TEST(Decompose, SeedProgramsComputeTheSame) {
  for (const std::string& mil : seed1_programs()) {
    SCOPED_TRACE(mil);
    const Program before = load_seed1(mil, 11);
    const Program after = decomposed(before);
    Deviation dev = expect_same_function(before, after, kRelF16, kAbsF16, mil, 2);
    std::printf("[decompose] seed1/%s: %zu ops -> %zu, max |diff| %.3g\n", mil.c_str(), count_ops(before),
                count_ops(after), dev.abs);
  }
}

// The bundles have none of the composite ops (their activations are relu,
// clip, sigmoid; lstm and conv stay): the IR is unchanged, so are the outputs.
TEST(Decompose, CoreMLBundlesAreUnchanged) {
  MILRT_REQUIRE_SHARED();
  for (const std::string& path : coreml_bundles()) {
    SCOPED_TRACE(path);
    const Program before = load_verified(path);
    EXPECT_EQ(ir_diff(before, decomposed(before)), "");
    Program kept = before;
    run_passes(kept, {"decompose"});
    EXPECT_EQ(ir_diff(before, kept), "");
  }
}

// The measured effect on the seed's FFN (rms_norm: 1 op -> 6, its [64]
// weight now a [64, 1, 1] constant) and on the Silero 32 ms fp16 bundle
// (nothing to expand; 73 constants, canonicalize having dropped the two
// pow exponents), after canonicalize as in the pipeline.
TEST(Decompose, OpCounts) {
  struct Expect {
    std::string what;
    Program before;
    size_t ops, ops_after, consts_after;
  };
  std::vector<Expect> cases = {{"seed1/rms_q8_swiglu", load_seed1("rms_q8_swiglu.mil", 11), 19, 24, 6}};
  if (!shared_dir().empty())
    cases.push_back({"silero-vad-unified-v6.0.0",
                     load_verified(shared_dir() + "/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc"), 41,
                     41, 73});
  for (Expect& e : cases) {
    run_passes(e.before, {"canonicalize"});
    const Program after = decomposed(e.before);
    size_t ops = count_ops(e.before), ops_after = count_ops(after), consts_after = count_ops(after, true) - ops_after;
    std::printf("[decompose] %s after canonicalize: %zu ops -> %zu ops + %zu consts\n", e.what.c_str(), ops,
                ops_after, consts_after);
    EXPECT_EQ((std::vector<size_t>{ops, ops_after, consts_after}),
              (std::vector<size_t>{e.ops, e.ops_after, e.consts_after}))
        << e.what;
  }
}

// ---- decompose: only what has no kernel ---------------------------------------------

Program kernel_decomposed(const Program& p) {
  Program q = p;
  run_passes(q, {"decompose"});
  return q;
}

// The compiled plan of `p` (passes: `decompose` only) against the reference
// on the unmodified program. The plan computes in fp32 and rounds once at
// the output: fp32 within 1e-5 relative (the norm kernels' sums, see
// test_norm_kernels), fp16 within 2 ulps (2^-10 relative) of the reference,
// which rounded once too.
Deviation expect_compiles_like_reference(const Program& p, DType dt, const std::string& what, double lo, double hi) {
  CompileOptions opt;
  opt.passes = {"decompose"};
  Plan plan = compile(p, opt);
  Deviation dev;
  for (uint64_t seed : {21, 22}) {
    TensorMap in = random_inputs(p, seed, lo, hi);
    bool f32 = dt == DType::FP32;
    dev.merge(expect_outputs_close(run_reference(p, "main", in), plan.run(in), f32 ? 1e-5 : 1.0 / 1024,
                                   f32 ? 1e-6 : 1e-3, what));
  }
  return dev;
}

// Every rule's op has a kernel in its table form (constant parameters, one
// run of axes): `decompose` leaves it whole, the op has a lowering, and the
// plan computes what the reference computes.
TEST(DecomposeDefault, KeepsEveryOpThatHasAKernel) {
  for (const Rule& rule : rules()) {
    for (DType dt : {DType::FP32, DType::FP16}) {
      std::string what = rule.what + " (" + dt_name(dt) + ")";
      SCOPED_TRACE(what);
      const Program before = parse_program(rule.params(dt), rule.body(dt), "y");
      EXPECT_EQ(ir_diff(before, kernel_decomposed(before)), "");
      const std::string& type = producer(before, "y").type;
      EXPECT_NE(rt::find_lowering(type), nullptr) << type;
      Deviation dev = expect_compiles_like_reference(before, dt, what, rule.lo, rule.hi);
      std::printf("[decompose] kept %-48s plan vs reference: max |diff| %.3g, max rel %.3g\n", what.c_str(), dev.abs,
                  dev.rel);
    }
  }
}

// layer_norm over axes 1 and 3 of [2, 3, 1, 4]: the size-1 dim between them
// leaves one run, which the kernel normalizes.
TEST(DecomposeDefault, LayerNormAcrossASize1DimStays) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 1, 4]> x",
      const_stmt("g", random(DType::FP32, {3, 4}, 12)) +
          stmt("tensor<fp32, [2, 3, 1, 4]>", "y", "layer_norm(x = x, axes = tensor<int32, [2]>([1, 3]), gamma = g)"),
      "y");
  EXPECT_EQ(ir_diff(before, kernel_decomposed(before)), "");
  expect_compiles_like_reference(before, DType::FP32, "layer_norm axes 1, 3", -3, 3);
}

// What has no kernel is expanded as decompose-all does: layer_norm over
// axes that are not one run, parameters that are not constants, and the
// ops that have no kernel in any form.
TEST(DecomposeDefault, ExpandsWhatHasNoKernel) {
  struct Case {
    std::string what, params, body;
    Strings ops;
  };
  std::vector<Case> cases = {
      // Its reductions over axes 0 and 2, not one run, become a transpose
      // that puts them last, a reduction over those and a reshape back.
      {"layer_norm over axes 0 and 2", "tensor<fp32, [2, 3, 4]> x",
       stmt("tensor<fp32, [2, 3, 4]>", "y", "layer_norm(x = x, axes = tensor<int32, [2]>([0, 2]))"),
       {"transpose", "reduce_mean", "reshape", "sub", "mul", "transpose", "reduce_mean", "reshape", "add", "rsqrt",
        "mul"}},
      {"leaky_relu with a computed alpha", "tensor<fp32, [2, 3, 4]> x, tensor<fp32, []> a",
       stmt("tensor<fp32, [2, 3, 4]>", "y", "leaky_relu(x = x, alpha = a)"), {"mul", "less", "select"}},
      {"sigmoid_hard with a computed beta", "tensor<fp32, [2, 3, 4]> x, tensor<fp32, []> b",
       stmt("tensor<fp32, [2, 3, 4]>", "y", "sigmoid_hard(x = x, alpha = fp32(0.2), beta = b)"),
       {"mul", "add", "clip"}},
      // Ops with no kernel at all (test_op_coverage.cpp compiles each).
      {"stack", "tensor<fp32, [2, 3]> x, tensor<fp32, [2, 3]> z",
       stmt("tensor<fp32, [2, 2, 3]>", "y", "stack(values = (x, z), axis = int32(1))"),
       {"reshape", "reshape", "concat"}},
      {"interleaved concat", "tensor<fp32, [2, 3]> x, tensor<fp32, [2, 3]> z",
       stmt("tensor<fp32, [2, 6]>", "y", "concat(values = (x, z), axis = int32(-1), interleave = bool(true))"),
       {"reshape", "reshape", "concat", "reshape"}},
      {"shape", "tensor<fp32, [2, 3, 4]> x", stmt("tensor<int32, [3]>", "y", "shape(x = x)"), {}},
      {"reverse", "tensor<fp32, [2, 3, 4]> x",
       stmt("tensor<fp32, [2, 3, 4]>", "y", "reverse(x = x, axes = tensor<int32, [2]>([0, -1]))"),
       {"slice_by_index"}},
      {"prelu", "tensor<fp32, [2, 3, 4]> x, tensor<fp32, [3]> a",
       stmt("tensor<fp32, [2, 3, 4]>", "y", "prelu(x = x, alpha = a)"),
       {"reshape", "mul", "greater", "select"}},
      {"batch_norm", "tensor<fp32, [2, 3, 4]> x, tensor<fp32, [3]> m, tensor<fp32, [3]> g",
       const_stmt("v", random(DType::FP32, {3}, 31, 0.5, 2)) +
           stmt("tensor<fp32, [2, 3, 4]>", "y", "batch_norm(x = x, mean = m, variance = v, gamma = g)"),
       {"reshape", "reshape", "add", "rsqrt", "sub", "mul", "mul"}},
      {"l2_norm", "tensor<fp32, [2, 3, 4]> x", stmt("tensor<fp32, [2, 3, 4]>", "y", "l2_norm(x = x)"),
       {"mul", "reduce_sum", "add", "rsqrt", "mul"}},
      {"local_response_norm", "tensor<fp32, [1, 5, 2, 3]> x",
       stmt("tensor<fp32, [1, 5, 2, 3]>", "y", "local_response_norm(x = x, size = int32(4))"),
       {"mul", "reshape", "conv", "reshape", "mul", "add", "pow", "real_div"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Program before = parse_program(c.params, c.body, "y");
    const Program after = kernel_decomposed(before);
    EXPECT_EQ(op_types(after), c.ops);
    EXPECT_EQ(ir_diff(after, decomposed(before)), "");
    expect_same_function(before, after, kRelF32, kAbsF32, c.what, 2, -3, 3);
  }
}

// The seed's FFN keeps its rms_norm whole (decompose-all made it 6 ops).
TEST(DecomposeDefault, SeedRmsNormStays) {
  Program p = load_seed1("rms_q8_swiglu.mil", 11);
  run_passes(p, {"canonicalize"});
  const Program after = kernel_decomposed(p);
  EXPECT_EQ(ir_diff(p, after), "");
  Strings types = op_types(after);
  EXPECT_EQ(std::count(types.begin(), types.end(), "rms_norm"), 1);
}

}  // namespace
}  // namespace milrt::test::rewrite
