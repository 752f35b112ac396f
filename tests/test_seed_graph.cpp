// The first seed's three Neural Engine graph tests (mil_infer graph.rs:
// graph_scheduler_rms_q8_swiglu_exec, graph_fuses_conv_chain_and_conv_silu,
// ane_onchip_backprop_training_exec) rebuilt for the reference executor.
//
// The programs live in tests/data/seed1/ exactly as the seed writes them, with
// BLOBFILE paths made relative. Their weights are generated here with the
// seed's formulas (raw little-endian arrays at offset 0), then each program is
// loaded, legalized (the seed mixes [1, C, 1, 1] and [1, 1, 1, C] layouts),
// verified and run. Expected values come from plain C++ written here, in two
// flavours:
//  - `kF16`: every op's result rounded to fp16 (ties to even), as the program
//    declares. Sums are taken in double, as one op, so the reference executor
//    should agree to the last bit; the bound used is kUlps fp16 ulps (see below).
//  - `kExact`: no rounding at all, the math the seed's CPU references compute.
//    Checked with the seed's own hardware bound (0.03 + 5%, 0.04 + 5% in the
//    training test), to show fp16 execution stays close to the real-valued math.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "milrt/dtype.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

namespace fs = std::filesystem;
using Vec = std::vector<double>;

// Tolerance against the per-op fp16 references. Measured: the reference
// executor and these references agree bit for bit on all three programs
// (0 ulps over every output, and over y, W1_new and W2_new at all 16 training
// steps). One ulp of slack allows for both sides summing in double in a
// different order, which can move a result lying on an fp16 rounding boundary
// by one step. Anything more is a real discrepancy: a single intermediate off
// by one ulp, or one op rounded differently, already shows up as many ulps
// in outputs near zero (leaving Wu unrounded puts y[36] 4352 ulps off), far
// inside the seed's 0.03 + 5% hardware bound.
constexpr double kUlps = 1;

// ---- fp16 helpers, independent of the library's conversions ---------------

// The spacing of fp16 values at |v| (the subnormal spacing near 0).
double ulp_f16(double v) {
  int e = 0;
  std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, -14) - 10);
}

// Rounds a double straight to the nearest fp16 value (ties to even), with
// subnormals and overflow to infinity.
double round_f16(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  double step = ulp_f16(v);
  double r = std::nearbyint(std::fabs(v) / step) * step;  // default mode: ties to even
  if (r > 65504) r = INFINITY;
  return std::copysign(r, v);
}

// A seed weight as the seed computes it: an f32 expression rounded to fp16.
double seed_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// How a reference rounds each op's result.
using Round = std::function<double(double)>;
const Round kF16 = round_f16;
const Round kExact = [](double v) { return v; };

// ---- seed weights and programs ----------------------------------------------

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

// Raw little-endian fp16 array, as the seed writes with `f16::to_le_bytes`.
void write_f16(const fs::path& path, const Vec& v) {
  std::vector<uint8_t> b;
  for (double x : v) {
    uint16_t h = f32_to_f16(float(x));
    b.push_back(uint8_t(h & 0xff));
    b.push_back(uint8_t(h >> 8));
  }
  write_bytes(path, b);
}

void write_i8(const fs::path& path, const std::vector<int8_t>& v) {
  write_bytes(path, std::vector<uint8_t>(v.begin(), v.end()));
}

fs::path seed_data_dir() { return fs::path(MILRT_SOURCE_DIR) / "tests" / "data" / "seed1"; }

// Copies tests/data/seed1/<mil> into a fresh temp dir, where the weights go.
fs::path stage(const std::string& mil) {
  fs::path dir = temp_dir("seed1");
  fs::copy_file(seed_data_dir() / mil, fs::path(dir) / mil);
  return fs::path(dir) / mil;
}

struct Loaded {
  Program p;
  std::vector<std::string> notes;
  bool verified_as_written;
};

// Loads, legalizes and verifies a program; also records whether it verified
// before legalization, i.e. whether the notes were needed at all.
Loaded load(const fs::path& mil) {
  Loaded l{load_model(mil.string()), {}, true};
  try {
    verify(l.p);
  } catch (const Error&) {
    l.verified_as_written = false;
  }
  l.notes = legalize_layout_idioms(l.p);
  verify(l.p);
  return l;
}

// The ops (by output name) that legalize_layout_idioms rewrote: each note
// reads "<loc>: note: <op type> '<name>': ...".
std::set<std::string> noted_ops(const std::vector<std::string>& notes) {
  std::set<std::string> names;
  for (auto& n : notes) {
    size_t a = n.find('\''), b = a == std::string::npos ? a : n.find('\'', a + 1);
    EXPECT_NE(b, std::string::npos) << "note without an op name: " << n;
    if (b != std::string::npos) names.insert(n.substr(a + 1, b - a - 1));
  }
  return names;
}

// Tensors shaped as the programs declare them.
Tensor f16_tensor(Shape s, const Vec& v) { return make(DType::FP16, std::move(s), v); }

// ---- reference math ---------------------------------------------------------

// out[r] = round(sum_c w[r * cols + c] * v[c]): matmul by a transposed
// weight, or a 1x1 conv, on one vector.
Vec matvec(const Vec& w, const Vec& v, size_t rows, const Round& round) {
  size_t cols = v.size();
  Vec out(rows);
  for (size_t r = 0; r < rows; ++r) {
    double s = 0;
    for (size_t c = 0; c < cols; ++c) s += w[r * cols + c] * v[c];
    out[r] = round(s);
  }
  return out;
}

// out[c] = round(sum_r w[r * cols + c] * v[r]): a vector times w, untransposed.
Vec vecmat(const Vec& v, const Vec& w, size_t cols, const Round& round) {
  Vec out(cols);
  for (size_t c = 0; c < cols; ++c) {
    double s = 0;
    for (size_t r = 0; r < v.size(); ++r) s += v[r] * w[r * cols + c];
    out[c] = round(s);
  }
  return out;
}

Vec zip(const Vec& a, const Vec& b, const Round& round, const std::function<double(double, double)>& f) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = round(f(a[i], b[i]));
  return out;
}

Vec sigmoid(const Vec& a, const Round& round) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = round(1 / (1 + std::exp(-a[i])));
  return out;
}

double add(double a, double b) { return a + b; }
double sub(double a, double b) { return a - b; }
double mul(double a, double b) { return a * b; }

// `got` is within kUlps fp16 ulps of the per-op-rounded reference. Reports
// the worst element and how many are off, once per vector.
void expect_f16_close(const std::string& what, const Vec& got, const Vec& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0, bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double ulps = std::fabs(got[i] - want[i]) / ulp_f16(want[i]);
    bad += ulps > kUlps;
    if (ulps > worst) worst = ulps, at = i;
  }
  ::testing::Test::RecordProperty(what + "_max_ulps", std::to_string(worst));
  EXPECT_LE(worst, kUlps) << what << ": " << bad << " of " << got.size() << " elements off; worst [" << at
                          << "]: got " << got[at] << ", fp16 reference " << want[at];
}

// `got` is within the seed's hardware bound, abs + 5%, of the exact math.
void expect_seed_bound(const std::string& what, const Vec& got, const Vec& exact, double abs) {
  ASSERT_EQ(got.size(), exact.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - exact[i]) < abs + std::fabs(exact[i]) * 0.05) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements outside the seed's bound; first ["
                     << first << "]: got " << got[first] << ", exact reference " << exact[first];
}

// ---- graph_scheduler_rms_q8_swiglu_exec --------------------------------------

constexpr size_t kD = 64, kFF = 128;

struct SwigluWeights {
  Vec gam, wu_sc, wg, wd;
  std::vector<int8_t> wu_q8;
};

SwigluWeights swiglu_weights() {
  SwigluWeights w;
  for (size_t i = 0; i < kD; ++i) w.gam.push_back(seed_f16(0.8f + float(i % 7) * 0.05f));
  for (size_t i = 0; i < kFF * kD; ++i) w.wu_q8.push_back(int8_t(int((i * 23 + 7) % 199) - 99));
  for (size_t i = 0; i < kFF * 2; ++i) w.wu_sc.push_back(seed_f16(0.002f * (float(i * 11 % 31) + 1.0f)));
  for (size_t i = 0; i < kFF * kD; ++i) w.wg.push_back(seed_f16(float((i * 17 + 3) % 29) / 64.0f - 0.22f));
  for (size_t i = 0; i < kD * kFF; ++i) w.wd.push_back(seed_f16(float((i * 13 + 5) % 23) / 64.0f - 0.17f));
  return w;
}

// rms_norm -> SwiGLU FFN with an int8 up-projection dequantized per 32-wide
// block -> residual add, one rounding per op of the program.
Vec swiglu_reference(const SwigluWeights& w, const Vec& x, const Round& round) {
  Vec wu(kFF * kD);  // constexpr_blockwise_shift_scale: scale[j, i / 32] * q[j, i]
  for (size_t j = 0; j < kFF; ++j)
    for (size_t i = 0; i < kD; ++i) wu[j * kD + i] = round(w.wu_q8[j * kD + i] * w.wu_sc[j * 2 + i / 32]);
  double ms = 0;
  for (double v : x) ms += v * v / double(kD);
  double eps = round(1e-5);  // the literal is fp16(0.00001)
  Vec xn(kD);
  for (size_t i = 0; i < kD; ++i) xn[i] = round(x[i] / std::sqrt(ms + eps) * w.gam[i]);
  Vec u = matvec(wu, xn, kFF, round);
  Vec g = matvec(w.wg, xn, kFF, round);
  Vec gsl = zip(g, sigmoid(g, round), round, mul);
  Vec fu = zip(u, gsl, round, mul);
  Vec dn = matvec(w.wd, fu, kD, round);
  return zip(x, dn, round, add);
}

TEST(SeedGraph, RmsQ8SwigluMatchesReference) {
  fs::path mil = stage("rms_q8_swiglu.mil");
  SwigluWeights w = swiglu_weights();
  fs::path dir = mil.parent_path();
  write_f16(dir / "gam.bin", w.gam);
  write_i8(dir / "wu_q8.bin", w.wu_q8);
  write_f16(dir / "wu_sc.bin", w.wu_sc);
  write_f16(dir / "wg.bin", w.wg);
  write_f16(dir / "wd.bin", w.wd);

  Loaded l = load(mil);
  // Well-typed already: the constants, the dequantization and rms_norm (whose
  // [64] weight lies along the channel axis of [1, 64, 1, 1]). Every op after
  // it mixes [1, 1, 1, C] and [1, C, 1, 1], or multiplies a [1, 64, 1, 1]
  // activation by a [N, 64] matrix.
  EXPECT_EQ(noted_ops(l.notes), (std::set<std::string>{"u", "g", "gs", "gsl", "fu", "dn", "y"}));
  EXPECT_FALSE(l.verified_as_written);

  Vec x;
  for (size_t i = 0; i < kD; ++i) x.push_back(seed_f16(float((i * 9 + 4) % 17) / 16.0f - 0.5f));
  TensorMap out = run_reference(l.p, "main", {{"x", f16_tensor({1, 64, 1, 1}, x)}});
  const Tensor& y = out.at("y");
  ASSERT_EQ(y.dtype(), DType::FP16);
  ASSERT_EQ(y.shape(), (Shape{1, 64, 1, 1}));
  expect_f16_close("y", values(y), swiglu_reference(w, x, kF16));
  expect_seed_bound("y", values(y), swiglu_reference(w, x, kExact), 0.03);
}

// ---- graph_fuses_conv_chain_and_conv_silu -------------------------------------

Vec conv_weight(size_t tag, size_t rows, size_t cols) {
  Vec w;
  for (size_t i = 0; i < rows * cols; ++i) w.push_back(seed_f16(float((i * 11 + tag * 7) % 23) / 64.0f - 0.17f));
  return w;
}

// conv 64 -> 96 -> 64, then conv 64 -> 64 with SiLU (g * sigmoid(g)), plus
// the residual from the chain's output.
Vec conv_reference(const Vec& w1, const Vec& w2, const Vec& w3, const Vec& x, const Round& round) {
  Vec c1 = matvec(w1, x, 96, round);
  Vec c2 = matvec(w2, c1, 64, round);
  Vec g = matvec(w3, c2, 64, round);
  Vec gsl = zip(g, sigmoid(g, round), round, mul);
  return zip(c2, gsl, round, add);
}

// The conv-chain program staged with its three weight blobs, and its input.
struct ConvChain {
  Vec w1 = conv_weight(1, 96, 64), w2 = conv_weight(2, 64, 96), w3 = conv_weight(3, 64, 64), x;
  Loaded l;
  ConvChain() {
    fs::path mil = stage("conv_chain_silu.mil");
    write_f16(mil.parent_path() / "w1.bin", w1);
    write_f16(mil.parent_path() / "w2.bin", w2);
    write_f16(mil.parent_path() / "w3.bin", w3);
    l = load(mil);
    for (size_t i = 0; i < 64; ++i) x.push_back(seed_f16(float((i * 5 + 3) % 13) / 16.0f - 0.35f));
  }
  TensorMap inputs() const { return {{"x", f16_tensor({1, 64, 1, 1}, x)}}; }
};

TEST(SeedGraph, ConvChainSiluMatchesReference) {
  ConvChain cc;
  const Vec &w1 = cc.w1, &w2 = cc.w2, &w3 = cc.w3, &x = cc.x;
  // Every op is well-typed MIL as written: nothing to legalize.
  EXPECT_EQ(cc.l.notes, std::vector<std::string>{});
  EXPECT_TRUE(cc.l.verified_as_written);

  TensorMap out = run_reference(cc.l.p, "main", cc.inputs());
  const Tensor& y = out.at("y");
  ASSERT_EQ(y.dtype(), DType::FP16);
  ASSERT_EQ(y.shape(), (Shape{1, 64, 1, 1}));
  expect_f16_close("y", values(y), conv_reference(w1, w2, w3, x, kF16));
  expect_seed_bound("y", values(y), conv_reference(w1, w2, w3, x, kExact), 0.03);
}

// The seed's fusion test: its scheduler turns the six logical ops (c1, c2, g,
// gs, gsl, y) into three Neural Engine programs, and a milrt plan runs the
// same three kernels: the two chain convs as one conv_chain (fuse-conv-chain;
// c2 is read twice, so the chain ends there), the third conv with its SiLU as
// one GEMM, and the residual add. Reshapes are views, not kernels. Values:
// the plan computes in fp32 and rounds once to fp16, so it is within one fp16
// ulp of the unrounded math.
TEST(SeedGraph, ConvChainSiluCompilesToThreeKernels) {
  ConvChain cc;
  Plan plan = compile(cc.l.p);
  std::vector<Plan::StepInfo> steps = plan.steps();
  std::string listing;
  for (const auto& st : steps) {
    listing += st.kernel + ":";
    for (const auto& o : st.ops) listing += " " + o;
    listing += "\n";
  }
  ASSERT_EQ(steps.size(), 3u) << listing;
  // Passes name the values they make after the op they came from: "g__matmul" is conv g's product.
  auto origin = [](const std::string& v) { return v.substr(0, v.find("__")); };
  std::vector<std::set<std::string>> origins;
  for (const auto& st : steps) {
    origins.emplace_back();
    for (const auto& o : st.ops) origins.back().insert(origin(o));
  }
  EXPECT_EQ(origins[0], (std::set<std::string>{"c1", "c2"})) << listing;
  EXPECT_EQ(origins[1], (std::set<std::string>{"g", "gs", "gsl"})) << listing;
  EXPECT_EQ(origins[2], (std::set<std::string>{"y"})) << listing;

  TensorMap out = plan.run(cc.inputs());
  Vec got = values(out.at("y")), want = conv_reference(cc.w1, cc.w2, cc.w3, cc.x, kExact);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(std::fabs(got[i] - want[i]), ulp_f16(want[i])) << "y[" << i << "]";
}

// ---- ane_onchip_backprop_training_exec -----------------------------------------

// One step of the training program: forward through a 2-layer sigmoid MLP,
// backward for the squared error, and the SGD update, one rounding per op.
struct MlpStep {
  Vec y, w1_new, w2_new;
};

MlpStep mlp_step(const Vec& x, const Vec& target, double neg_lr, const Vec& w1, const Vec& w2, const Round& round) {
  const size_t d = x.size();
  Vec nlr(d, neg_lr), one(d, 1.0);
  Vec h = sigmoid(matvec(w1, x, d, round), round);
  Vec y = matvec(w2, h, d, round);
  Vec dy = zip(y, target, round, sub);
  Vec ndy = zip(dy, nlr, round, mul);
  Vec dh = vecmat(dy, w2, d, round);  // W2^T dy
  Vec ds = zip(h, zip(one, h, round, sub), round, mul);
  Vec ndz1 = zip(zip(dh, ds, round, mul), nlr, round, mul);
  MlpStep s{y, Vec(d * d), Vec(d * d)};
  for (size_t r = 0; r < d; ++r)
    for (size_t c = 0; c < d; ++c) {
      s.w2_new[r * d + c] = round(w2[r * d + c] + round(ndy[r] * h[c]));
      s.w1_new[r * d + c] = round(w1[r * d + c] + round(ndz1[r] * x[c]));
    }
  return s;
}

double mse(const Vec& y, const Vec& target) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += (y[i] - target[i]) * (y[i] - target[i]);
  return s / double(y.size());
}

TEST(SeedGraph, BackpropTrainingConvergesAndMatchesReference) {
  Loaded l = load(stage("backprop_train.mil"));
  // Legalized: y (a [1, 64, 1, 1] activation times a [1, 64, 1, 64] weight
  // has inner dims 1 vs 64), dh (as written, W2^T dy would pair each dy[c]
  // with row c: [1, 64, 1, 64]), dz1 ([1, 1, 1, 64] * [1, 64, 1, 1]) and dW2
  // (ndy^T h as written is [1, 64, 1, 1]). z1 (x [1, 1, 1, 64] against W1's
  // 64 batched [1, 64] rows) and dW1 (ndz1^T x, [1, 64, 1, 64]) are already
  // well-typed, like the elementwise ops on matching layouts.
  EXPECT_EQ(noted_ops(l.notes), (std::set<std::string>{"y", "dh", "dz1", "dW2"}));
  EXPECT_FALSE(l.verified_as_written);

  constexpr size_t d = 64;
  const double neg_lr = seed_f16(-0.15f);
  Vec x, target, w1, w2;
  for (size_t i = 0; i < d; ++i) x.push_back(seed_f16(float((i * 7 + 3) % 19) / 19.0f - 0.45f));
  for (size_t i = 0; i < d; ++i) target.push_back(seed_f16(float((i * 11 + 5) % 23) / 23.0f - 0.5f));
  for (size_t i = 0; i < d * d; ++i) w1.push_back(seed_f16((float((i * 13 + 7) % 31) - 15.0f) * 0.015f));
  for (size_t i = 0; i < d * d; ++i) w2.push_back(seed_f16((float((i * 17 + 11) % 29) - 14.0f) * 0.015f));

  TensorMap in{{"x", f16_tensor({1, 1, 1, 64}, x)},
               {"target", f16_tensor({1, 64, 1, 1}, target)},
               {"neg_lr", f16_tensor({1, 64, 1, 1}, Vec(d, neg_lr))},
               {"one", f16_tensor({1, 64, 1, 1}, Vec(d, 1.0))},
               {"W1", f16_tensor({1, 64, 1, 64}, w1)},
               {"W2", f16_tensor({1, 64, 1, 64}, w2)}};
  // Each reference follows its own trajectory, as the seed's CPU reference
  // does, so drift would accumulate rather than be reset every step.
  Vec w1_f16 = w1, w2_f16 = w2, w1_exact = w1, w2_exact = w2;
  double loss_first = 0, loss_last = 0;
  for (int step = 0; step < 16; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    TensorMap out = run_reference(l.p, "main", in);
    MlpStep want = mlp_step(x, target, neg_lr, w1_f16, w2_f16, kF16);
    MlpStep exact = mlp_step(x, target, -0.15, w1_exact, w2_exact, kExact);
    Vec y = values(out.at("y"));
    expect_f16_close("y", y, want.y);
    expect_seed_bound("y", y, exact.y, 0.04);
    // The updated weights follow the fp16 trajectory (this is what catches a
    // transposed outer product). The exact trajectory's weights are not
    // compared: fp16 drops part of each small update, by design of the program.
    ASSERT_EQ(out.at("W1_new").shape(), (Shape{1, 64, 1, 64}));
    ASSERT_EQ(out.at("W2_new").shape(), (Shape{1, 64, 1, 64}));
    expect_f16_close("W1_new", values(out.at("W1_new")), want.w1_new);
    expect_f16_close("W2_new", values(out.at("W2_new")), want.w2_new);

    double loss = mse(y, target);
    if (step == 0) loss_first = loss;
    loss_last = loss;
    in["W1"] = out.at("W1_new");
    in["W2"] = out.at("W2_new");
    w1_f16 = want.w1_new, w2_f16 = want.w2_new, w1_exact = exact.w1_new, w2_exact = exact.w2_new;
  }
  ::testing::Test::RecordProperty("loss_first", std::to_string(loss_first));
  ::testing::Test::RecordProperty("loss_last", std::to_string(loss_last));
  EXPECT_LT(loss_last, loss_first * 0.05) << "MSE " << loss_first << " -> " << loss_last;
}

}  // namespace
}  // namespace milrt::test
