// fuse-norms: the RMSNorm idiom and its variants become one milrt_rms_norm;
// what does not fit (an intermediate read twice or returned, eps not a
// constant, a scale that is not 1/n of the reduced dims, the reduction and the
// multiply over different x) stays as it is.
//
// Numerics: the reference on the unfused program vs the reference on the
// fused one vs the compiled plan, on random inputs in [-3, 3]:
//  - fp32: the chain rounds after each of its 7 ops (2^-24 each, amplified
//    at most by 1/2 in the inverse root), the fused op once: rel 1e-5,
//    abs 1e-6 leaves a margin of ten over ~1e-6.
//  - fp16: the chain rounds after every op (2^-11 each), and the 1/n
//    constant itself is 1/n rounded to fp16 (2^-12 relative for n = 24);
//    the fused op and the plan round once. Bound rel 4e-3 + abs 4e-3 (8 ulps
//    of the outputs, |y| <~ 2), as for decompose's expansions.
// Measured deviations are printed as "[fuse-norms]" lines.
#include <cstdio>

#include "llm/seed_kernels.h"
#include "milrt/plan.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

using Strings = std::vector<std::string>;

constexpr double kRelF32 = 1e-5, kAbsF32 = 1e-6;
constexpr double kRelF16 = 4e-3, kAbsF16 = 4e-3;

// Every pass of the default pipeline up to fuse-norms, without the other fusions.
const Strings kUpToNorms = {"legalize-layout-idioms", "fold-constexpr", "canonicalize", "decompose", "cse", "dce",
                            "fuse-norms"};

Program fused(const Program& p) {
  Program q = p;
  run_passes(q, {"fuse-norms"});
  return q;
}

std::string dt_name(DType dt) { return std::string(dtype_name(dt)); }
std::string ty(DType dt, const Shape& s) { return "tensor<" + dt_name(dt) + ", " + shape_str(s) + ">"; }
std::string num(DType dt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s(%a)", dt_name(dt).c_str(), v);
  return buf;
}
std::string ints(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t a : v) s += (s.empty() ? "" : ", ") + std::to_string(a);
  return "tensor<int32, [" + std::to_string(v.size()) + "]>([" + s + "])";
}

// One way of writing RMSNorm.
struct Variant {
  std::string what;
  Shape x;                           // x's shape
  int64_t axis;                      // the reduced axis
  std::string square = "mul";        // mul | square | pow
  std::string mean = "sum_mul";      // sum_mul | sum_div | mean
  std::string root = "pow";          // pow | rsqrt | sqrt_div
  bool add_eps = true;
  bool gamma = true;
  bool commuted = false;             // operands of the muls swapped
};

// The idiom as MIL text (output y), with gamma along the reduced axis.
std::string idiom(const Variant& v, DType dt) {
  Shape red = v.x;
  int64_t rank = int64_t(v.x.size()), axis = v.axis < 0 ? v.axis + rank : v.axis;
  red[size_t(axis)] = 1;
  int64_t n = v.x[size_t(axis)];
  std::string X = ty(dt, v.x), R = ty(dt, red), b;
  auto mul = [&](const std::string& a, const std::string& c) {
    return v.commuted ? "mul(x = " + c + ", y = " + a + ")" : "mul(x = " + a + ", y = " + c + ")";
  };
  b += stmt(X, "sq", v.square == "square" ? "square(x = x)"
                     : v.square == "pow"  ? "pow(x = x, y = " + num(dt, 2) + ")"
                                          : "mul(x = x, y = x)");
  std::string red_args = "(x = sq, axes = " + ints({v.axis}) + ", keep_dims = bool(true))";
  if (v.mean == "mean") {
    b += stmt(R, "ms", "reduce_mean" + red_args);
  } else {
    b += stmt(R, "ss", "reduce_sum" + red_args);
    b += stmt(R, "ms", v.mean == "sum_div" ? "real_div(x = ss, y = " + num(dt, double(n)) + ")"
                                           : mul("ss", num(dt, 1.0 / double(n))));
  }
  std::string v_name = "ms";
  if (v.add_eps) {
    b += stmt(R, "ms_eps", v.commuted ? "add(x = " + num(dt, 1e-5) + ", y = ms)" : "add(x = ms, y = " + num(dt, 1e-5) + ")");
    v_name = "ms_eps";
  }
  std::string normed = v.gamma ? "xn" : "y";
  if (v.root == "sqrt_div") {
    b += stmt(R, "root", "sqrt(x = " + v_name + ")");
    b += stmt(X, normed, "real_div(x = x, y = root)");
  } else {
    b += stmt(R, "root", v.root == "rsqrt" ? "rsqrt(x = " + v_name + ")" : "pow(x = " + v_name + ", y = " + num(dt, -0.5) + ")");
    b += stmt(X, normed, mul("x", "root"));
  }
  if (v.gamma) {
    Shape gs(size_t(rank - axis), 1);
    gs[0] = n;
    std::mt19937_64 rng(5);
    b += const_stmt("g", random_tensor(dt, gs, rng, 0.5, 1.5));
    b += stmt(X, "y", mul("xn", "g"));
  }
  return b;
}

std::vector<Variant> variants() {
  std::vector<Variant> r = {
      {"the seed's idiom [1, C, 1, S]", {1, 24, 1, 5}, 1},
      {"over the last dim [N, L, C]", {2, 3, 24}, -1},
      {"square, reduce_mean, rsqrt", {1, 24, 1, 5}, 1, "square", "mean", "rsqrt"},
      {"x·x, reduce_sum / n, sqrt and real_div", {2, 3, 24}, 2, "mul", "sum_div", "sqrt_div"},
      {"pow(x, 2), operands commuted", {1, 24, 1, 5}, 1, "pow", "sum_mul", "pow", true, true, true},
      {"no gamma", {2, 3, 24}, -1, "mul", "mean", "rsqrt", true, false},
      {"eps only in rsqrt's epsilon", {2, 3, 24}, -1, "mul", "mean", "rsqrt", false},
      {"n = 1", {3, 1}, 1},
  };
  return r;
}

// Types of main's non-const ops.
Strings types_of(const Program& p) { return op_types(p); }

const Op* find_op(const Program& p, const std::string& type) {
  for (const Op& op : p.function("main")->ops)
    if (op.type == type) return &op;
  return nullptr;
}

Deviation check_numerics(const Program& before, const Program& after, DType dt, const std::string& what) {
  bool f32 = dt == DType::FP32;
  double rel = f32 ? kRelF32 : kRelF16, abs = f32 ? kAbsF32 : kAbsF16;
  Deviation dev = expect_same_function(before, after, rel, abs, what + ": reference fused", 2, -3, 3);
  CompileOptions opt;
  opt.passes = kUpToNorms;
  opt.passes.insert(opt.passes.end(), {"dce", "schedule"});
  Plan plan = compile(before, opt);
  for (uint64_t seed : {31, 32}) {
    TensorMap in = random_inputs(before, seed, -3, 3);
    dev.merge(expect_outputs_close(run_reference(before, "main", in), plan.run(in), rel, abs, what + ": plan"));
  }
  return dev;
}

TEST(FuseNorms, EveryVariantBecomesOneOp) {
  for (const Variant& v : variants())
    for (DType dt : {DType::FP32, DType::FP16}) {
      std::string what = v.what + " (" + dt_name(dt) + ")";
      SCOPED_TRACE(what);
      const Program before = parse_program(ty(dt, v.x) + " x", idiom(v, dt), "y");
      const Program after = fused(before);
      ASSERT_EQ(types_of(after), Strings{"milrt_rms_norm"});
      const Op& op = producer(after, "y");
      EXPECT_EQ(op.name, "y");
      int64_t rank = int64_t(v.x.size());
      EXPECT_EQ(values(*const_input(after, op, "axes")), std::vector<double>{double(v.axis < 0 ? v.axis + rank : v.axis)});
      // eps: the add's fp16/fp32 constant, or rsqrt's default 1e-12 alone.
      double eps = v.add_eps ? Tensor::scalar(dt, 1e-5).at(0) : 0;
      if (v.root == "rsqrt") eps += 1e-12;
      EXPECT_EQ(const_input(after, op, "eps")->at(0), double(float(eps)));
      EXPECT_EQ(op.has("gamma"), v.gamma);
      if (v.gamma) {
        EXPECT_EQ(const_input(after, op, "gamma")->shape(), Shape{v.x[size_t(v.axis < 0 ? v.axis + rank : v.axis)]});
      }
      // fused_from lists the replaced ops in program order, in the attribute block.
      Strings from;
      for (const Op& o : before.function("main")->ops)
        if (o.type != "const") from.push_back(o.outputs[0].name);
      std::string joined;
      for (auto& s : from) joined += (joined.empty() ? "" : " ") + s;
      const Input* ff = op.find("fused_from");
      ASSERT_NE(ff, nullptr);
      EXPECT_TRUE(ff->in_attr_block);
      EXPECT_EQ(ff->arg.lit->value.strings()[0], joined);
      EXPECT_EQ(count_ops(after, true), v.gamma ? 2u : 1u) << "constants the chain read are dropped";
      Deviation dev = check_numerics(before, after, dt, what);
      std::printf("[fuse-norms] %-44s max |diff| %.3g, max rel %.3g\n", what.c_str(), dev.abs, dev.rel);
    }
}

// The printed program parses back to the same IR and computes the same.
TEST(FuseNorms, PrintedProgramParsesBack) {
  for (DType dt : {DType::FP32, DType::FP16}) {
    const Variant v = variants()[0];
    const Program after = fused(parse_program(ty(dt, v.x) + " x", idiom(v, dt), "y"));
    std::string text = print_mil(after);
    EXPECT_NE(text.find("milrt_rms_norm("), std::string::npos) << text;
    EXPECT_NE(text.find("fused_from = string(\"sq ss ms ms_eps root xn y\")"), std::string::npos) << text;
    Program again = parse_mil(text, "printed.mil", ".");
    verify(again);
    EXPECT_EQ(ir_diff(after, again), "");
    expect_same_function(after, again, 0, 0, "reparsed");
  }
}

// ---- what must not fuse ---------------------------------------------------------

Strings with(Strings a, const std::string& b) {
  a.push_back(b);
  return a;
}

struct Negative {
  std::string what, params, body, outs;
  Strings after;  // op types after the pass
};

std::vector<Negative> negatives() {
  const DType dt = DType::FP32;
  Variant seed = variants()[0];
  std::string x = ty(dt, seed.x) + " x";
  std::string body = idiom(seed, dt);
  Variant s_axis{"over S", seed.x, 3};
  s_axis.gamma = false;
  std::string over_s = idiom(s_axis, dt);
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? s : s.replace(at, from.size(), to);
  };
  Strings unfused = {"mul", "reduce_sum", "mul", "add", "pow", "mul", "mul"};
  std::string R = ty(dt, {1, 1, 1, 5}), X = ty(dt, seed.x);
  return {
      {"x·x also returned", x, body, "y, sq", unfused},
      {"x·x read twice", x, body + stmt(X, "z", "add(x = sq, y = x)"), "y, z", with(unfused, "add")},
      {"the mean square returned", x, body, "y, ms", unfused},
      {"the inverse root read twice", x, body + stmt(R, "z", "exp(x = root)"), "y, z", with(unfused, "exp")},
      {"eps not a constant", x + ", " + ty(dt, {}) + " e", replace(body, "add(x = ms, y = " + num(dt, 1e-5) + ")", "add(x = ms, y = e)"), "y", unfused},
      {"reduced over S but scaled by 1/C", x, replace(over_s, num(dt, 1.0 / 5), num(dt, 1.0 / 24)), "y",
       {"mul", "reduce_sum", "mul", "add", "pow", "mul"}},
      {"a root other than -1/2", x, replace(body, num(dt, -0.5), num(dt, -0.25)), "y", unfused},
      {"the multiply reads another tensor than the square", x + ", " + X + " w",
       replace(body, "mul(x = x, y = root)", "mul(x = w, y = root)"), "y", unfused},
      // The normalized value is returned too: its part fuses, gamma's mul stays.
      {"the normalized value returned", x, body, "y, xn", {"milrt_rms_norm", "mul"}},
  };
}

TEST(FuseNorms, NegativesStayUnfused) {
  for (const Negative& n : negatives()) {
    SCOPED_TRACE(n.what);
    Program before = parse_program(n.params, n.body, n.outs);
    const Program after = fused(before);
    EXPECT_EQ(types_of(after), n.after);
    if (n.after == types_of(before)) {
      EXPECT_EQ(ir_diff(before, after), "");
    }
    expect_same_function(before, after, kRelF32, kAbsF32, n.what, 2, -3, 3);
  }
}

// Reducing over S and scaling by 1/S normalizes over S: that fuses, but
// gamma lies along C, not along the normalized dim, so its mul stays.
TEST(FuseNorms, GammaAlongAnotherDimStaysOutside) {
  Variant v{"over S", {1, 24, 1, 5}, 3};
  v.gamma = false;
  std::mt19937_64 rng(3);
  std::string body = idiom(v, DType::FP32);
  body.replace(body.find("> y ="), 5, "> xn =");
  body.replace(body.find("name = string(\"y\")"), 18, "name = string(\"xn\")");
  body += const_stmt("g", random_tensor(DType::FP32, {24, 1, 1}, rng, 0.5, 1.5)) +
          stmt(ty(DType::FP32, {1, 24, 1, 5}), "y", "mul(x = xn, y = g)");
  const Program before = parse_program(ty(DType::FP32, v.x) + " x", body, "y");
  const Program after = fused(before);
  EXPECT_EQ(types_of(after), (Strings{"milrt_rms_norm", "mul"}));
  EXPECT_EQ(values(*const_input(after, producer(after, "xn"), "axes")), std::vector<double>{3});
  check_numerics(before, after, DType::FP32, "gamma along C");
}

// ---- the op itself -------------------------------------------------------------

// Bad milrt_rms_norm ops fail verification or compilation with a message
// naming the problem, never crash.
TEST(FuseNorms, BadOpsAreErrors) {
  auto prog = [](const std::string& expr, const std::string& extra = "") {
    return program_text("tensor<fp32, [2, 3, 4]> x" + extra,
                        stmt("tensor<fp32, [2, 3, 4]>", "y", expr), "y");
  };
  struct Bad {
    std::string text, fragment;
  };
  std::vector<Bad> bad = {
      {prog("milrt_rms_norm(x = x, axes = tensor<int32, [2]>([1, -2]), eps = fp32(0.001))"), "given twice"},
      {prog("milrt_rms_norm(x = x, axes = tensor<int32, [1]>([3]), eps = fp32(0.001))"), "axis"},
      {prog("milrt_rms_norm(x = x, axes = tensor<int32, [1]>([2]), eps = e)", ", tensor<fp32, []> e"), "eps"},
      {prog("milrt_rms_norm(x = x, axes = tensor<int32, [1]>([2]), eps = fp32(0.001), gamma = g)",
            ", tensor<fp32, [3]> g"),
       "gamma must be a float tensor of shape [4]"},
  };
  for (const Bad& b : bad) {
    try {
      Program p = parse_mil(b.text, "t.mil", ".");
      verify(p);
      ADD_FAILURE() << "accepted: " << b.text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.fragment), std::string::npos) << e.what();
    }
  }
  // Valid IR (the reference runs it) that the kernel's one-run view cannot take.
  Program p = parse_mil(prog("milrt_rms_norm(x = x, axes = tensor<int32, [2]>([0, 2]), eps = fp32(0.001))"), "t.mil", ".");
  verify(p);
  run_reference(p, "main", random_inputs(p, 1));
  try {
    compile(p);
    ADD_FAILURE() << "compiled non-adjacent axes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-adjacent"), std::string::npos) << e.what();
  }
}

// The reference of milrt_rms_norm against a loop written here, with gamma
// over two normalized dims ([2, 3, 4] over axes 1 and 2, gamma [3, 4]).
TEST(FuseNorms, ReferenceOfTheOpMatchesALoop) {
  std::mt19937_64 rng(9);
  Tensor g = random_tensor(DType::FP32, {3, 4}, rng, 0.5, 1.5);
  const Program p = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      const_stmt("g", g) + stmt("tensor<fp32, [2, 3, 4]>", "y",
                                "milrt_rms_norm(x = x, gamma = g, axes = tensor<int32, [2]>([1, 2]), eps = fp32(0.01))"),
      "y");
  TensorMap in = random_inputs(p, 3, -2, 2);
  Tensor y = run_reference(p, "main", in).at("y");
  CompileOptions none;
  none.passes = {};
  Tensor planned = compile(p, none).run(in).at("y");
  const Tensor& x = in.at("x");
  for (int64_t b = 0; b < 2; ++b) {
    double ss = 0;
    for (int64_t k = 0; k < 12; ++k) ss += x.at(size_t(b * 12 + k)) * x.at(size_t(b * 12 + k));
    for (int64_t k = 0; k < 12; ++k) {
      double want = x.at(size_t(b * 12 + k)) / std::sqrt(ss / 12 + double(0.01f)) * g.at(size_t(k));
      EXPECT_NEAR(y.at(size_t(b * 12 + k)), want, 1e-6 * std::fabs(want) + 1e-7);
      EXPECT_NEAR(planned.at(size_t(b * 12 + k)), want, 1e-5 * std::fabs(want) + 1e-6);
    }
  }
}

// ---- the seed kernels --------------------------------------------------------------

llm::SeedLayerWeights seed_weights(const llm::SeedLayerConfig& c) {
  std::mt19937_64 rng(17);
  auto t = [&](Shape s, double lo, double hi) { return random_tensor(DType::FP16, std::move(s), rng, lo, hi); };
  llm::SeedLayerWeights w;
  w.rms1 = t({c.dim}, 0.5, 1.5);
  w.rms2 = t({c.dim}, 0.5, 1.5);
  for (Tensor* m : {&w.wq, &w.wk, &w.wv, &w.wo}) *m = t({c.dim, c.dim}, -0.2, 0.2);
  w.w1 = t({c.hidden, c.dim}, -0.2, 0.2);
  w.w3 = t({c.hidden, c.dim}, -0.2, 0.2);
  w.w2 = t({c.dim, c.hidden}, -0.2, 0.2);
  return w;
}

// Both forward kernels of the second seed normalize their input with the
// in-kernel RMSNorm: one milrt_rms_norm each, no pow left, the same values
// (reference and plan; the plan also through the whole default pipeline).
TEST(FuseNorms, SeedKernelsFuseTheirRmsNorms) {
  const llm::SeedLayerConfig c{32, 64, 2, 8};
  llm::SeedLayerWeights w = seed_weights(c);
  for (auto [name, before] : {std::pair{"sdpa_fwd_taps", llm::seed_sdpa_fwd_taps(c, w)},
                              std::pair{"ffn_fwd_taps", llm::seed_ffn_fwd_taps(c, w)}}) {
    SCOPED_TRACE(name);
    Program after = before;
    run_passes(after, kUpToNorms);
    auto counts = [&](const std::string& t) {
      Strings types = op_types(after);
      return std::count(types.begin(), types.end(), t);
    };
    EXPECT_EQ(counts("milrt_rms_norm"), 1);
    EXPECT_EQ(counts("pow"), 0);
    EXPECT_EQ(counts("reduce_sum"), 0);
    const Op* norm = find_op(after, "milrt_rms_norm");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->outputs[0].name, "xn");
    Deviation dev = expect_same_function(before, after, kRelF16, kAbsF16, name, 2, -2, 2);
    TensorMap in = random_inputs(before, 41, -2, 2);
    Deviation plan_dev = expect_outputs_close(run_reference(before, "main", in), compile(before).run(in), kRelF16,
                                              4 * kAbsF16, std::string(name) + ": default pipeline plan");
    std::printf("[fuse-norms] seed %-14s reference fused max |diff| %.3g; default-pipeline plan max |diff| %.3g\n",
                name, dev.abs, plan_dev.abs);
  }
}

// ---- the corpus --------------------------------------------------------------------

// The seed1 programs and the Core ML bundles through the pipeline up to
// fuse-norms: outputs within the fp16 bound of the unfused program (they
// are fp16 or fp32; none has the idiom but the fp16 seed's rms_norm, which
// decompose now keeps whole).
TEST(FuseNorms, CorpusKeepsItsOutputs) {
  std::vector<std::pair<std::string, Program>> progs;
  for (const std::string& mil : seed1_programs()) progs.push_back({"seed1/" + mil, load_seed1(mil, 11)});
  if (shared_dir().empty()) {
    std::printf("[fuse-norms] ../shared is absent: only the seed1 programs\n");
  } else {
    for (const std::string& path : coreml_bundles()) progs.push_back({path, load_verified(path)});
  }
  for (auto& [name, before] : progs) {
    SCOPED_TRACE(name);
    Program upto = before, after = before;
    Strings pre(kUpToNorms.begin(), kUpToNorms.end() - 1);
    run_passes(upto, pre);
    run_passes(after, kUpToNorms);
    Strings t = op_types(after);
    int fused_count = int(std::count(t.begin(), t.end(), "milrt_rms_norm"));
    if (fused_count == 0) {
      EXPECT_EQ(ir_diff(upto, after), "");
      continue;
    }
    Deviation dev = expect_same_function(upto, after, kRelF16, kAbsF16, name, 1);
    std::printf("[fuse-norms] %s: %d fused, max |diff| %.3g\n", name.c_str(), fused_count, dev.abs);
  }
  if (shared_dir().empty()) GTEST_SKIP() << "../shared is absent: the Core ML bundles were not checked";
}

}  // namespace
}  // namespace milrt::test::rewrite
