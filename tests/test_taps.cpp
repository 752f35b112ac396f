// Taps (CompileOptions::taps, Plan::tap, `milrt run --tap`): any value of a
// compiled function read back after a run. Every expected value comes from
// the reference executor's run_reference_all on the same program, never from
// a plan. Programs: a matmul + bias + relu (a GEMM epilogue when untapped),
// an elementwise chain (one fused kernel when untapped), an attention idiom
// (one attention kernel when untapped), reshapes that are views, a stateful
// accumulator, and the silero-vad bundle with every op result tapped.
//
// Tolerances (abs + rel·|want|): fp32 programs 1e-5 + 1e-5·|want| (plan and
// reference both round to fp32, from different summation orders); fp16 ones
// 2e-3 + 4e-3·|want| (the reference rounds to fp16 after every op, the plan
// once at the edge: a few fp16 ulps); attention as in test_pass_fuse_attention.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "milrt/npy.h"
#include "milrt/plan.h"
#include "test_cli_util.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test {
namespace {

using rewrite::const_stmt;
using rewrite::expect_outputs_close;
using rewrite::parse_program;
using rewrite::random;
using rewrite::random_inputs;

constexpr double kRel32 = 1e-5, kAbs32 = 1e-5;

// y = relu(matmul(x, w) + b): one fused GEMM step when nothing is tapped.
Program gemm_program() {
  return parse_program("tensor<fp32, [4, 16]> x, tensor<fp32, [16, 8]> w",
                       const_stmt("b", random(DType::FP32, {8}, 7)) +
                           "tensor<fp32, [4, 8]> h = matmul(x = x, y = w)[name = string(\"h\")];\n"
                           "tensor<fp32, [4, 8]> hb = add(x = h, y = b)[name = string(\"hb\")];\n"
                           "tensor<fp32, [4, 8]> y = relu(x = hb)[name = string(\"y\")];",
                       "y");
}

// Five elementwise ops that fuse into one kernel when nothing is tapped.
Program chain_program(const std::string& dt) {
  const std::string t = "tensor<" + dt + ", [3, 40]>";
  return parse_program(t + " x",
                       t + " a = exp(x = x)[name = string(\"a\")];\n" +
                       t + " m = mul(x = a, y = x)[name = string(\"m\")];\n" +
                       t + " s = sigmoid(x = m)[name = string(\"s\")];\n" +
                       t + " th = tanh(x = s)[name = string(\"th\")];\n" +
                       t + " y = add(x = th, y = x)[name = string(\"y\")];",
                       "y");
}

// softmax(q kᵀ / sqrt(8)) v: one attention step when nothing is tapped.
Program attention_program() {
  const std::string s = "tensor<fp32, [1, 2, 5, 7]>";
  return parse_program(
      "tensor<fp32, [1, 2, 5, 8]> q, tensor<fp32, [1, 2, 7, 8]> k, tensor<fp32, [1, 2, 7, 6]> v",
      s + " sc = matmul(x = q, y = k, transpose_x = bool(false), transpose_y = bool(true))[name = string(\"sc\")];\n" +
          s + " ss = mul(x = sc, y = fp32(0x1.6a09e6p-2))[name = string(\"ss\")];\n" +
          s + " p = softmax(x = ss, axis = int32(-1))[name = string(\"p\")];\n" +
          "tensor<fp32, [1, 2, 5, 6]> o = matmul(x = p, y = v, transpose_x = bool(false), "
          "transpose_y = bool(false))[name = string(\"o\")];",
      "o");
}

CompileOptions tapping(std::vector<std::string> names) {
  CompileOptions o;
  o.taps = std::move(names);
  return o;
}

// The taps of one run, by name, for comparison with the reference's values.
TensorMap taps_of(const Plan& plan) {
  TensorMap r;
  for (auto& port : plan.taps()) r[port.name] = plan.tap(port.name);
  return r;
}

TensorMap subset(const TensorMap& all, const std::vector<std::string>& names) {
  TensorMap r;
  for (auto& n : names) r[n] = all.at(n);
  return r;
}

// Whether some step implements both ops (by output name): they were fused.
bool fused(const Plan& plan, const std::string& a, const std::string& b) {
  for (auto& s : plan.steps())
    if (std::count(s.ops.begin(), s.ops.end(), a) && std::count(s.ops.begin(), s.ops.end(), b)) return true;
  return false;
}

bool same_steps(const Plan& a, const Plan& b) {
  auto sa = a.steps(), sb = b.steps();
  if (sa.size() != sb.size()) return false;
  for (size_t i = 0; i < sa.size(); ++i)
    if (sa[i].kernel != sb[i].kernel || sa[i].ops != sb[i].ops || sa[i].flops != sb[i].flops ||
        sa[i].bytes != sb[i].bytes)
      return false;
  return true;
}

// Compiles `p` tapping `names`, runs it, and expects the taps to equal the
// reference's values and the outputs to equal those of the untapped plan.
void expect_taps_match_reference(const Program& p, const std::vector<std::string>& names, double rel, double abs,
                                 const std::string& what) {
  const TensorMap in = random_inputs(p, 11);
  const TensorMap all = run_reference_all(p, "main", in);
  Plan plan = compile(p, tapping(names));
  ASSERT_EQ(plan.taps().size(), names.size()) << what;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(plan.taps()[i].name, names[i]) << what;
    EXPECT_EQ(plan.taps()[i].dtype, all.at(names[i]).dtype()) << what;
    EXPECT_EQ(plan.taps()[i].shape, all.at(names[i]).shape()) << what;
  }
  const TensorMap out = plan.run(in);
  expect_outputs_close(subset(all, names), taps_of(plan), rel, abs, what + ": taps");
  expect_outputs_close(run_reference(p, "main", in), out, rel, abs, what + ": outputs");
  Plan untapped = compile(p);
  EXPECT_EQ(untapped.outputs().size(), plan.outputs().size()) << what;
  expect_outputs_close(untapped.run(in), out, rel, abs, what + ": outputs vs the untapped plan");
}

// ---- values

TEST(Taps, GemmEpilogueIntermediates) {
  Program p = gemm_program();
  ASSERT_TRUE(fused(compile(p), "h", "y")) << "the untapped plan should fuse matmul, add and relu";
  expect_taps_match_reference(p, {"h"}, kRel32, kAbs32, "tap h");
  expect_taps_match_reference(p, {"hb", "h"}, kRel32, kAbs32, "taps hb, h");
  Plan plan = compile(p, tapping({"h"}));
  EXPECT_FALSE(fused(plan, "h", "y")) << "a tapped matmul result is materialized, not fused away";
}

TEST(Taps, ElementwiseChainInsideAFusedKernel) {
  for (const char* dt : {"fp32", "fp16"}) {
    SCOPED_TRACE(dt);
    Program p = chain_program(dt);
    ASSERT_TRUE(fused(compile(p), "a", "y")) << "the untapped chain should be one kernel";
    const bool f16 = std::string(dt) == "fp16";
    const double rel = f16 ? 4e-3 : kRel32, abs = f16 ? 2e-3 : kAbs32;
    expect_taps_match_reference(p, {"m"}, rel, abs, std::string(dt) + " tap m");
    expect_taps_match_reference(p, {"a", "s", "th"}, rel, abs, std::string(dt) + " taps a, s, th");
    Plan plan = compile(p, tapping({"m"}));
    EXPECT_EQ(plan.taps()[0].dtype, f16 ? DType::FP16 : DType::FP32) << "taps keep the declared dtype";
  }
}

TEST(Taps, AttentionProbabilities) {
  Program p = attention_program();
  ASSERT_TRUE(fused(compile(p), "p", "o")) << "the untapped idiom should be one attention step";
  expect_taps_match_reference(p, {"p"}, 3e-4, 3e-5, "tap p");
  expect_taps_match_reference(p, {"ss", "sc"}, 3e-4, 3e-5, "taps ss, sc");
}

TEST(Taps, ReshapesThatAreViews) {
  // r and o are views of a and y when untapped: no step, no memory of their own.
  Program p = parse_program("tensor<fp32, [4, 8]> x",
                            "tensor<fp32, [4, 8]> a = exp(x = x)[name = string(\"a\")];\n"
                            "tensor<fp32, [32]> r = reshape(x = a, shape = tensor<int32, [1]>([32]))[name = string(\"r\")];\n"
                            "tensor<fp32, [32]> y = relu(x = r)[name = string(\"y\")];\n"
                            "tensor<fp32, [4, 8]> o = reshape(x = y, shape = tensor<int32, [2]>([4, 8]))[name = string(\"o\")];",
                            "o");
  expect_taps_match_reference(p, {"r"}, kRel32, kAbs32, "tap r");
  expect_taps_match_reference(p, {"y", "a"}, kRel32, kAbs32, "taps y, a");
  expect_taps_match_reference(p, {"o", "r", "y"}, kRel32, kAbs32, "taps o, r, y");
}

TEST(Taps, InputsConstantsAndOutputs) {
  Program p = gemm_program();
  expect_taps_match_reference(p, {"x", "b", "y", "h"}, kRel32, kAbs32, "input, constant, output, result");
  // fp16: an input tap is returned in its declared dtype.
  Program c = chain_program("fp16");
  const TensorMap in = random_inputs(c, 5);
  Plan plan = compile(c, tapping({"x"}));
  plan.run(in);
  EXPECT_EQ(plan.tap("x").dtype(), DType::FP16);
  EXPECT_EQ(values(plan.tap("x")), values(in.at("x")));
}

TEST(Taps, StatefulProgram) {
  // a (the state before the update) would live in the state's buffer untapped.
  Program p = parse_program("tensor<fp32, [4]> x, state<tensor<fp32, [4]>> st",
                            "tensor<fp32, [4]> a = read_state(input = st)[name = string(\"a\")];\n"
                            "tensor<fp32, [4]> n = add(x = a, y = x)[name = string(\"n\")];\n"
                            "tensor<fp32, [4]> u = coreml_update_state(state = st, value = n)[name = string(\"u\")];\n"
                            "tensor<fp32, [4]> b = read_state(input = st)[name = string(\"b\")];\n"
                            "tensor<fp32, [4]> y = mul(x = b, y = x)[name = string(\"y\")];",
                            "y");
  Plan plan = compile(p, tapping({"a", "n", "b"}));
  Tensor state = make(DType::FP32, {4}, {1, 2, 3, 4});
  plan.set_state("st", state);
  for (int run = 0; run < 3; ++run) {
    const Tensor x = make(DType::FP32, {4}, {0.5, -1, 2, double(run)});
    const TensorMap all = run_reference_all(p, "main", {{"x", x}, {"st", state}});
    const TensorMap out = plan.run({{"x", x}});
    expect_outputs_close(subset(all, {"a", "n", "b"}), taps_of(plan), kRel32, kAbs32, "run " + std::to_string(run));
    expect_outputs_close(subset(all, {"y"}), out, kRel32, kAbs32, "run " + std::to_string(run));
    state = all.at("u");
  }
}

TEST(Taps, BoundRunsKeepTheRunsValues) {
  Program p = gemm_program();
  const TensorMap in = random_inputs(p, 3);
  const TensorMap all = run_reference_all(p, "main", in);
  Plan plan = compile(p, tapping({"x", "y", "hb"}));
  Tensor x(DType::FP32, {4, 16}), w = in.at("w"), y(DType::FP32, {4, 8});
  std::memcpy(x.mutable_data(), in.at("x").data(), x.nbytes());  // a copy: tensors share their buffers
  plan.bind("x", x);
  plan.bind("w", w);
  plan.bind("y", y);
  plan.run();
  expect_outputs_close(subset(all, {"x", "y", "hb"}), taps_of(plan), kRel32, kAbs32, "bound run");
  // Taps that are inputs or outputs were copied: caller memory may change.
  std::memset(x.mutable_data(), 0, x.nbytes());
  std::memset(y.mutable_data(), 0, y.nbytes());
  expect_outputs_close(subset(all, {"x", "y"}), subset(taps_of(plan), {"x", "y"}), kRel32, kAbs32,
                       "after the caller's memory changed");
}

TEST(Taps, SileroVadEveryOpResult) {
  MILRT_REQUIRE_SHARED();
  const std::string path = shared_dir() + "/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  Program p = rewrite::load_verified(path);
  std::vector<std::string> names;
  for (auto& op : p.function("main")->ops)
    for (auto& o : op.outputs)
      if (op.type != "const" && o.type.is_tensor() && o.type.dtype != DType::String) names.push_back(o.name);
  ASSERT_GE(names.size(), 40u);
  const TensorMap in = random_inputs(p, 21, -0.5, 0.5);
  const TensorMap all = run_reference_all(p, "main", in);
  Plan plan = compile(p, tapping(names));
  Plan untapped = compile(p);
  EXPECT_LT(untapped.steps().size(), plan.steps().size()) << "the untapped plan fuses what taps keep apart";
  const TensorMap out = plan.run(in);
  // fp16 values (per-op rounding in the reference), relative to each tensor's scale.
  double worst_ratio = 0;
  std::string worst_name;
  for (auto& name : names) {
    const Tensor want = all.at(name), got = plan.tap(name);
    ASSERT_EQ(got.dtype(), want.dtype()) << name;
    ASSERT_EQ(got.shape(), want.shape()) << name;
    double scale = 1, worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.at(size_t(i))));
    for (int64_t i = 0; i < want.numel(); ++i)
      worst = std::max(worst, std::fabs(got.at(size_t(i)) - want.at(size_t(i))));
    EXPECT_LE(worst, 1e-2 * scale) << name;
    if (worst / scale > worst_ratio) worst_ratio = worst / scale, worst_name = name;
  }
  std::printf("[taps] silero: %zu taps, %zu steps (untapped %zu), worst |diff| / scale %.3g at '%s'\n", names.size(),
              plan.steps().size(), untapped.steps().size(), worst_ratio, worst_name.c_str());
  expect_outputs_close(untapped.run(in), out, 1e-3, 1e-4, "silero outputs, tapped vs untapped");
}

// ---- the plan without taps

TEST(Taps, UntappedPlansAreUnchanged) {
  for (const Program& p : {gemm_program(), chain_program("fp32"), attention_program()}) {
    Plan plain = compile(p), empty = compile(p, tapping({}));
    EXPECT_TRUE(same_steps(plain, empty));
    EXPECT_EQ(plain.arena_bytes(), empty.arena_bytes());
    EXPECT_TRUE(empty.taps().empty());
    // Tapping a declared output or an input adds nothing to compute or keep.
    Plan outs = compile(p, tapping({p.function("main")->outputs[0], p.function("main")->params[0].name}));
    EXPECT_TRUE(same_steps(plain, outs));
    EXPECT_EQ(plain.arena_bytes(), outs.arena_bytes());
  }
  Program g = gemm_program();
  Plan tapped = compile(g, tapping({"h"}));
  EXPECT_EQ(tapped.outputs().size(), 1u) << "taps are not outputs";
  EXPECT_EQ(tapped.run(random_inputs(g, 1)).size(), 1u) << "run() returns the declared outputs only";
}

// ---- errors

TEST(Taps, Errors) {
  Program p = gemm_program();
  expect_error_containing([&] { compile(p, tapping({"nope"})); }, "'nope' in function 'main'");
  Plan plan = compile(p, tapping({"h"}));
  expect_error_containing([&] { plan.tap("h"); }, "no run");
  expect_error_containing([&] { plan.tap("hb"); }, "'hb' is not tapped");
  plan.run(random_inputs(p, 1));
  EXPECT_NO_THROW(plan.tap("h"));
  expect_error_containing([&] { plan.tap("hb"); }, "'hb' is not tapped");
  // A failed or cancelled run leaves no value to read.
  expect_error_containing([&] { plan.run({{"x", Tensor(DType::FP32, {4, 16})}}); }, "missing input 'w'");
  EXPECT_NO_THROW(plan.tap("h")) << "a run refused before it started changes nothing";
  plan.cancel();
  expect_error_containing([&] { plan.run(random_inputs(p, 1)); }, "cancelled");
  expect_error_containing([&] { plan.tap("h"); }, "no run");

  Program st = parse_program("tensor<fp32, [4]> x, state<tensor<fp32, [4]>> s",
                             "tensor<fp32, [4]> a = read_state(input = s)[name = string(\"a\")];\n"
                             "tensor<fp32, [4]> y = add(x = a, y = x)[name = string(\"y\")];",
                             "y");
  expect_error_containing([&] { compile(st, tapping({"s"})); }, "it is a state");
  CompileOptions alias = tapping({"x"});
  alias.state_aliases = {{"y", "x"}};
  expect_error_containing([&] { compile(st, alias); }, "it is a state");

  Program str = parse_program("tensor<fp32, [4]> x",
                              "string mode = const()[name = string(\"mode\"), val = string(\"valid\")];\n"
                              "tensor<fp32, [4]> y = relu(x = x)[name = string(\"y\")];",
                              "y");
  expect_error_containing([&] { compile(str, tapping({"mode"})); }, "only tensors can be tapped");
}

// ---- the CLI

struct CliFiles {
  std::string dir, mil, x, w;
  TensorMap in;
};

CliFiles write_gemm(const std::string& tag) {
  CliFiles f;
  f.dir = temp_dir(tag);
  Program p = gemm_program();
  save_model(p, f.dir + "/model.mlmodelc");
  f.mil = f.dir + "/model.mlmodelc";
  f.in = random_inputs(p, 9);
  f.x = f.dir + "/x.npy";
  f.w = f.dir + "/w.npy";
  write_npy(f.x, f.in.at("x"));
  write_npy(f.w, f.in.at("w"));
  return f;
}

TEST(TapsCli, RunWritesAndPrintsTaps) {
  CliFiles f = write_gemm("taps_cli");
  const TensorMap all = run_reference_all(gemm_program(), "main", f.in);
  for (const char* engine : {"compiled", "reference"}) {
    SCOPED_TRACE(engine);
    const std::string out = f.dir + "/out_" + engine;
    CliResult r = run_cli({"run", f.mil, "--engine", engine, "--input", "x=" + f.x, "--input", "w=" + f.w, "--tap",
                           "h", "--tap", "hb,b", "--output-dir", out});
    ASSERT_TRUE(Succeeded(r));
    EXPECT_NE(r.out.find("\ntap h: [4, 8] fp32 min "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\ntap hb: [4, 8] fp32 min "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\ntap b: [8] fp32 min "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.rfind("y: [4, 8] fp32", 0), 0u) << "outputs first, as without taps: " << r.out;
    TensorMap got;
    for (const char* name : {"h", "hb", "b"}) got[name] = read_npy(out + "/taps/" + name + ".npy");
    expect_outputs_close(subset(all, {"h", "hb", "b"}), got, kRel32, kAbs32, std::string(engine) + " --tap");
    EXPECT_TRUE(std::filesystem::exists(out + "/y.npy"));
    EXPECT_FALSE(std::filesystem::exists(out + "/h.npy")) << "taps are not written as outputs";
  }
  // --compare accepts a tap: compiled against what the reference wrote.
  CliResult r = run_cli({"run", f.mil, "--input", "x=" + f.x, "--input", "w=" + f.w, "--tap", "h", "--compare",
                         "h=" + f.dir + "/out_reference/taps/h.npy", "--tolerance", "1e-4"});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_NE(r.out.find("compare h: "), std::string::npos) << r.out;
}

TEST(TapsCli, UnknownTapIsAOneLineError) {
  CliFiles f = write_gemm("taps_cli_err");
  for (const char* engine : {"compiled", "reference"}) {
    SCOPED_TRACE(engine);
    CliResult r = run_cli({"run", f.mil, "--engine", engine, "--input", "x=" + f.x, "--input", "w=" + f.w, "--tap",
                           "h,nope"});
    ASSERT_TRUE(IsOneLineError(r));
    EXPECT_NE(r.err.find("cannot tap 'nope' in function 'main'"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace milrt::test
