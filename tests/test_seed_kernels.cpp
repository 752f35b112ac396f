// Tests of the second seed's six training kernels (src/llm/seed_kernels.*):
// each is built, saved as a bundle (model.mil + weights/weight.bin), loaded
// back, verified and run on the reference executor, and its outputs are
// compared with a plain fp64 transformer layer (forward and backward) written
// here. The fp64 layer's own gradients are first checked against central
// finite differences, so it is an independent oracle.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "llm/seed_kernels.h"
#include "milrt/builder.h"
#include "milrt/dtype.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

using llm::SeedLayerConfig;
using llm::SeedLayerWeights;

constexpr int D = 64, HID = 128, NH = 4, S = 16, HD = D / NH, SC = NH * S;
constexpr SeedLayerConfig kCfg{D, HID, NH, S};
constexpr double kScale = 0.25;      // 1/sqrt(HD), exact in fp16
constexpr double kEps = 1e-5;
constexpr double kU = 1.0 / 2048;    // fp16's unit roundoff (half an ulp at 1)

// ---------------------------------------------------------------------------
// Plain fp64 linear algebra on row-major matrices. Activations are
// channel-first [channels, S], as in the seed's CPU buffers.

struct Mat {
  int rows = 0, cols = 0;
  std::vector<double> v;
  Mat() = default;
  Mat(int r, int c) : rows(r), cols(c), v(size_t(r) * c, 0.0) {}
  double& operator()(int r, int c) { return v[size_t(r) * cols + c]; }
  double operator()(int r, int c) const { return v[size_t(r) * cols + c]; }
};

Mat matmul(const Mat& a, const Mat& b) {
  Mat c(a.rows, b.cols);
  for (int i = 0; i < a.rows; ++i)
    for (int k = 0; k < a.cols; ++k)
      for (int j = 0; j < b.cols; ++j) c(i, j) += a(i, k) * b(k, j);
  return c;
}
Mat transposed(const Mat& a) {
  Mat t(a.cols, a.rows);
  for (int i = 0; i < a.rows; ++i)
    for (int j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  return t;
}
Mat plus(const Mat& a, const Mat& b) {
  Mat c = a;
  for (size_t i = 0; i < c.v.size(); ++i) c.v[i] += b.v[i];
  return c;
}
double max_abs(const Mat& a) {
  double m = 0;
  for (double x : a.v) m = std::max(m, std::fabs(x));
  return m;
}
// max |got - want| / max |want|: the error relative to the output's scale.
double rel_err(const Mat& got, const Mat& want) {
  double e = 0;
  for (size_t i = 0; i < got.v.size(); ++i) e = std::max(e, std::fabs(got.v[i] - want.v[i]));
  return e / max_abs(want);
}

double round16(double x) { return f16_to_f32(f32_to_f16(float(x))); }

// Deterministic uniform numbers in [-1, 1) (a 64-bit LCG's high bits).
struct Rng {
  uint64_t s;
  double next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return double(s >> 11) / double(uint64_t(1) << 52) - 1.0;
  }
  Mat mat(int r, int c, double scale, double offset = 0) {
    Mat m(r, c);
    for (double& x : m.v) x = round16(offset + scale * next());
    return m;
  }
};

// ---------------------------------------------------------------------------
// The fp64 layer: y = x2 + W2 (silu(W1 n2) * W3 n2), n2 = rmsnorm(x2, rms2),
// x2 = x + Wo attn(n1), n1 = rmsnorm(x, rms1), causal multi-head attention.

struct Weights {
  Mat rms1, rms2;  // [D, 1]
  Mat wq, wk, wv, wo, w1, w3, w2;
};

Mat rmsnorm(const Mat& x, const Mat& w) {
  Mat out(x.rows, x.cols);
  for (int t = 0; t < x.cols; ++t) {
    double ss = 0;
    for (int i = 0; i < x.rows; ++i) ss += x(i, t) * x(i, t);
    double r = 1.0 / std::sqrt(ss / x.rows + kEps);
    for (int i = 0; i < x.rows; ++i) out(i, t) = x(i, t) * r * w(i, 0);
  }
  return out;
}

// Returns dL/dx given dL/d(rmsnorm(x, w)); accumulates dL/dw into dw.
Mat rmsnorm_bwd(const Mat& dy, const Mat& x, const Mat& w, Mat& dw) {
  Mat dx(x.rows, x.cols);
  for (int t = 0; t < x.cols; ++t) {
    double ss = 0, dot = 0;
    for (int i = 0; i < x.rows; ++i) {
      ss += x(i, t) * x(i, t);
      dot += dy(i, t) * w(i, 0) * x(i, t);
    }
    double r = 1.0 / std::sqrt(ss / x.rows + kEps);
    for (int i = 0; i < x.rows; ++i) {
      dx(i, t) = r * w(i, 0) * dy(i, t) - x(i, t) * r * r * r * dot / x.rows;
      dw(i, 0) += dy(i, t) * x(i, t) * r;
    }
  }
  return dx;
}

double sigmoid(double h) { return 1.0 / (1.0 + std::exp(-h)); }

struct Forward {
  Mat xn, q, k, v, probs, attn, o, x2, x2n, h1, h3, gate, ffn, y;  // probs: [SC, S], row h*S + query
};

Forward forward(const Weights& w, const Mat& x) {
  Forward f;
  f.xn = rmsnorm(x, w.rms1);
  f.q = matmul(w.wq, f.xn);
  f.k = matmul(w.wk, f.xn);
  f.v = matmul(w.wv, f.xn);
  f.probs = Mat(SC, S);
  f.attn = Mat(D, S);
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < S; ++t) {
      std::vector<double> s(t + 1);
      double mx = -1e300, sum = 0;
      for (int u = 0; u <= t; ++u) {
        for (int d = 0; d < HD; ++d) s[u] += f.q(h * HD + d, t) * f.k(h * HD + d, u);
        s[u] *= kScale;
        mx = std::max(mx, s[u]);
      }
      for (int u = 0; u <= t; ++u) sum += std::exp(s[u] - mx);
      for (int u = 0; u <= t; ++u) f.probs(h * S + t, u) = std::exp(s[u] - mx) / sum;
      for (int d = 0; d < HD; ++d)
        for (int u = 0; u <= t; ++u) f.attn(h * HD + d, t) += f.probs(h * S + t, u) * f.v(h * HD + d, u);
    }
  f.o = matmul(w.wo, f.attn);
  f.x2 = plus(x, f.o);
  f.x2n = rmsnorm(f.x2, w.rms2);
  f.h1 = matmul(w.w1, f.x2n);
  f.h3 = matmul(w.w3, f.x2n);
  f.gate = Mat(HID, S);
  for (size_t i = 0; i < f.gate.v.size(); ++i) f.gate.v[i] = f.h1.v[i] * sigmoid(f.h1.v[i]) * f.h3.v[i];
  f.ffn = matmul(w.w2, f.gate);
  f.y = plus(f.x2, f.ffn);
  return f;
}

struct Backward {
  Mat dh1, dh3, dx_ffn, dx2, dattn, dv, dp, dq, dk, dx_attn, dx;  // dp: [SC, S] like probs
  Mat gwq, gwk, gwv, gwo, gw1, gw3, gw2, grms1, grms2;
};

// The gradients of L = sum(y * dy).
Backward backward(const Weights& w, const Mat& x, const Forward& f, const Mat& dy) {
  Backward b;
  Mat dgate = matmul(transposed(w.w2), dy);
  b.dh1 = Mat(HID, S);
  b.dh3 = Mat(HID, S);
  for (size_t i = 0; i < dgate.v.size(); ++i) {
    double h = f.h1.v[i], sg = sigmoid(h);
    b.dh3.v[i] = dgate.v[i] * h * sg;
    b.dh1.v[i] = dgate.v[i] * f.h3.v[i] * sg * (1 + h * (1 - sg));
  }
  b.dx_ffn = plus(matmul(transposed(w.w1), b.dh1), matmul(transposed(w.w3), b.dh3));
  b.grms2 = Mat(D, 1);
  b.dx2 = plus(dy, rmsnorm_bwd(b.dx_ffn, f.x2, w.rms2, b.grms2));
  b.dattn = matmul(transposed(w.wo), b.dx2);
  b.dv = Mat(D, S);
  b.dp = Mat(SC, S);
  b.dq = Mat(D, S);
  b.dk = Mat(D, S);
  for (int h = 0; h < NH; ++h)
    for (int t = 0; t < S; ++t) {
      // dp covers masked keys too: the kernel's dp is a plain matmul.
      for (int u = 0; u < S; ++u)
        for (int d = 0; d < HD; ++d) b.dp(h * S + t, u) += b.dattn(h * HD + d, t) * f.v(h * HD + d, u);
      double pdp = 0;
      for (int u = 0; u < S; ++u) pdp += f.probs(h * S + t, u) * b.dp(h * S + t, u);
      for (int u = 0; u < S; ++u) {
        double p = f.probs(h * S + t, u), ds = p * (b.dp(h * S + t, u) - pdp) * kScale;
        for (int d = 0; d < HD; ++d) {
          b.dv(h * HD + d, u) += p * b.dattn(h * HD + d, t);
          b.dq(h * HD + d, t) += ds * f.k(h * HD + d, u);
          b.dk(h * HD + d, u) += ds * f.q(h * HD + d, t);
        }
      }
    }
  b.dx_attn = plus(plus(matmul(transposed(w.wq), b.dq), matmul(transposed(w.wk), b.dk)),
                   matmul(transposed(w.wv), b.dv));
  b.grms1 = Mat(D, 1);
  b.dx = plus(b.dx2, rmsnorm_bwd(b.dx_attn, x, w.rms1, b.grms1));
  b.gw2 = matmul(dy, transposed(f.gate));
  b.gw1 = matmul(b.dh1, transposed(f.x2n));
  b.gw3 = matmul(b.dh3, transposed(f.x2n));
  b.gwo = matmul(b.dx2, transposed(f.attn));
  b.gwq = matmul(b.dq, transposed(f.xn));
  b.gwk = matmul(b.dk, transposed(f.xn));
  b.gwv = matmul(b.dv, transposed(f.xn));
  return b;
}

// ---------------------------------------------------------------------------
// The data: the seed's initialisation scales, except RMSNorm scales of
// 1 +- 0.25 instead of exactly 1 (so a misapplied scale shows), and a
// well-scaled upstream gradient dy.

struct LayerData {
  Weights w;
  Mat x, dy;
  Forward f;
  Backward b;
  SeedLayerWeights seed;
};

Tensor fp16_matrix(const Mat& m) {
  Tensor t(DType::FP16, {m.rows, m.cols});
  for (size_t i = 0; i < m.v.size(); ++i) t.set(i, m.v[i]);
  return t;
}

const LayerData& layer_data() {
  static const LayerData s = [] {
    LayerData s;
    Rng r{42};
    double sd = 1 / std::sqrt(double(D)), sh = 1 / std::sqrt(double(HID));
    s.w.wq = r.mat(D, D, sd);
    s.w.wk = r.mat(D, D, sd);
    s.w.wv = r.mat(D, D, sd);
    s.w.wo = r.mat(D, D, sd);
    s.w.w1 = r.mat(HID, D, sh);
    s.w.w3 = r.mat(HID, D, sh);
    s.w.w2 = r.mat(D, HID, sd);
    s.w.rms1 = r.mat(D, 1, 0.25, 1.0);
    s.w.rms2 = r.mat(D, 1, 0.25, 1.0);
    s.x = r.mat(D, S, 0.1);
    s.dy = r.mat(D, S, 1.0);
    s.f = forward(s.w, s.x);
    s.b = backward(s.w, s.x, s.f, s.dy);
    s.seed.rms1 = fp16_matrix(s.w.rms1).reshaped({D});
    s.seed.rms2 = fp16_matrix(s.w.rms2).reshaped({D});
    s.seed.wq = fp16_matrix(s.w.wq);
    s.seed.wk = fp16_matrix(s.w.wk);
    s.seed.wv = fp16_matrix(s.w.wv);
    s.seed.wo = fp16_matrix(s.w.wo);
    s.seed.w1 = fp16_matrix(s.w.w1);
    s.seed.w3 = fp16_matrix(s.w.w3);
    s.seed.w2 = fp16_matrix(s.w.w2);
    return s;
  }();
  return s;
}

// ---------------------------------------------------------------------------
// Kernel I/O: matrices stacked along channels into fp16 [1, C, 1, S] and back.

Tensor pack(const std::vector<const Mat*>& parts) {
  int64_t ch = 0;
  for (auto* m : parts) ch += m->rows;
  Tensor t(DType::FP16, {1, ch, 1, S});
  size_t i = 0;
  for (auto* m : parts)
    for (double x : m->v) t.set(i++, x);
  return t;
}

Mat unpack(const Tensor& t, int ch0, int rows) {
  Mat m(rows, S);
  for (size_t i = 0; i < m.v.size(); ++i) m.v[i] = t.at(size_t(ch0) * S + i);
  return m;
}

// Saves the kernel as a bundle, loads it back, verifies it and runs it.
// Weights (and the mask) must have moved to weights/weight.bin.
Tensor run_bundle(const Program& p, const std::string& tag, const Tensor& x, bool has_weights = true) {
  std::string dir = temp_dir("seed_" + tag);
  save_model(p, dir);
  EXPECT_EQ(std::filesystem::exists(dir + "/weights/weight.bin"), has_weights) << tag;
  Program loaded = load_model(dir);
  verify(loaded);
  return run_reference(loaded, "main", {{"x", x}}).at("out");
}

// One output of a kernel: its fp64 value (its channel count gives its place
// in the kernel's concatenated output) and the bound on its error.
struct Part {
  std::string name;
  const Mat* want;
  double tol_u;  // bound on max|err| / max|want|, in units of u
};

// Splits `out` into the parts, prints each one's error and checks it.
void check_parts(const std::string& kernel, const Tensor& out, const std::vector<Part>& parts) {
  int64_t ch = 0;
  for (auto& p : parts) ch += p.want->rows;
  ASSERT_EQ(out.dtype(), DType::FP16);
  ASSERT_EQ(out.shape(), (Shape{1, ch, 1, S}));
  int ch0 = 0;
  for (auto& p : parts) {
    Mat got = unpack(out, ch0, p.want->rows);
    ch0 += p.want->rows;
    double e = rel_err(got, *p.want), scale = max_abs(*p.want);
    std::printf("[ seed     ] %-14s %-6s max|err| %.3e  scale %.3e  = %.2f u  (tol %.1f u)\n", kernel.c_str(),
                p.name.c_str(), e * scale, scale, e / kU, p.tol_u);
    EXPECT_LE(e, p.tol_u * kU) << kernel << " output " << p.name;
  }
}

// ---------------------------------------------------------------------------
// Tolerances: bounds on max|err| / max|want| in units of u = 2^-11, fp16's
// unit roundoff. Each kernel test feeds the kernel the fp64 layer's values
// rounded to fp16, so only the kernel's own rounding is measured. Every op
// rounds its result to fp16 (error <= u |value|). An output that is one
// rounded conv or matmul of rounded inputs errs by about u (|W| |x|), 1 to 2 u
// of the output's largest value for these random weights; every further
// rounded op on the path (the RMSNorm's pow and muls, silu's sigmoid and
// muls, the softmax and its backward) adds up to about u of its own values.
// The bounds are the largest error measured over 65 data sets (this file's
// generator seeded 1..64 and 42) times 1.25, rounded up to half units; they
// sit at 1.5 to 3 times the typical error. A wrong layout, flag or weight
// errs by 270 u or more on every one of those data sets
// (BrokenKernelsAreCaught).
namespace tol {
constexpr double o = 3, q = 2.5, k = 2.5, v = 2, attn = 3.5, xnorm = 3;  // sdpa_fwd_taps
constexpr double ffn = 5, h1 = 3, h3 = 3, gate = 5.5, x2norm = 3;        // ffn_fwd_taps
constexpr double dx_ffn = 2.5, dh1 = 3.5, dh3 = 3.5;                     // ffn_bwd
constexpr double dx_attn = 2;                                            // qkv_bwd
constexpr double dv = 2, probs = 1, dp = 2;                              // sdpa_bwd1
constexpr double dq = 3, dk = 3.5;                                       // sdpa_bwd2
}  // namespace tol

// ---------------------------------------------------------------------------

TEST(SeedKernels, ReferenceGradientsMatchFiniteDifferences) {
  const LayerData& s = layer_data();
  // L = sum(y * dy), so backward() gives dL/d(everything).
  auto loss = [&](const Weights& w, const Mat& x) {
    Mat y = forward(w, x).y;
    double l = 0;
    for (size_t i = 0; i < y.v.size(); ++i) l += y.v[i] * s.dy.v[i];
    return l;
  };
  struct Probe {
    std::string name;
    std::function<Mat&(Weights&, Mat&)> of;  // the perturbed tensor
    const Mat* grad;
  };
  std::vector<Probe> probes;
  auto add = [&](const std::string& n, Mat Weights::*m, const Mat* g) {
    probes.push_back({n, [m](Weights& w, Mat&) -> Mat& { return w.*m; }, g});
  };
  add("wq", &Weights::wq, &s.b.gwq);
  add("wk", &Weights::wk, &s.b.gwk);
  add("wv", &Weights::wv, &s.b.gwv);
  add("wo", &Weights::wo, &s.b.gwo);
  add("w1", &Weights::w1, &s.b.gw1);
  add("w3", &Weights::w3, &s.b.gw3);
  add("w2", &Weights::w2, &s.b.gw2);
  add("rms1", &Weights::rms1, &s.b.grms1);
  add("rms2", &Weights::rms2, &s.b.grms2);
  probes.push_back({"x", [](Weights&, Mat& x) -> Mat& { return x; }, &s.b.dx});
  const double h = 1e-5;
  Rng r{7};
  for (auto& p : probes)
    for (int rep = 0; rep < 4; ++rep) {
      size_t i = size_t((r.next() + 1) / 2 * double(p.grad->v.size()));
      Weights w = s.w;
      Mat x = s.x;
      double* e = &p.of(w, x).v[i];
      double orig = *e;
      *e = orig + h;
      double lp = loss(w, x);
      *e = orig - h;
      double lm = loss(w, x);
      double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(p.grad->v[i], fd, 1e-6 * max_abs(*p.grad)) << p.name << "[" << i << "]";
    }
}

// ---------------------------------------------------------------------------
// Programs as lists of statements "name = type(key=value,...)", keys sorted,
// values the names of variables or "(a,b,...)" for tuples; const ops are
// listed without their values.

std::string describe_op(const std::string& name, const std::string& type,
                        const std::map<std::string, std::string>& args) {
  std::string d = name + " = " + type + "(";
  for (auto& [k, v] : args) d += k + "=" + v + ",";
  return d + ")";
}

// "x=a,values=(b,c)" as {x: a, values: (b,c)}.
std::map<std::string, std::string> parse_seed_args(const std::string& args) {
  std::map<std::string, std::string> m;
  int depth = 0;
  std::string cur;
  auto flush = [&] {
    auto eq = cur.find('=');
    if (eq != std::string::npos) m[cur.substr(0, eq)] = cur.substr(eq + 1);
    cur.clear();
  };
  for (char ch : args) {
    depth += (ch == '(') - (ch == ')');
    if (ch == ',' && depth == 0) flush();
    else if (ch != ' ') cur += ch;
  }
  flush();
  return m;
}

// The statements the seed's generator `gen` writes, read from its source
// (the CONV_CONST macro expanded).
std::vector<std::string> seed_statements(const std::vector<std::string>& src, const std::string& gen) {
  static const std::regex stmt(R"((\w+) = (\w+)\((.*?)\)\[name=)");
  auto parse = [&](const std::string& line, std::vector<std::string>& out) {
    std::smatch m;
    if (!std::regex_search(line, m, stmt)) return;
    std::string type = m[2];
    auto args = type == "const" ? std::map<std::string, std::string>{} : parse_seed_args(m[3]);
    out.push_back(describe_op(m[1], type, args));
  };
  std::vector<std::string> conv_consts, out;
  for (size_t i = 0; i < src.size(); ++i)
    if (src[i].rfind("#define CONV_CONST", 0) == 0)
      for (size_t k = i + 1; k < src.size() && src[k].rfind("    ", 0) == 0; ++k) parse(src[k], conv_consts);
  size_t i = 0;
  while (i < src.size() && src[i].find("static NSString *" + gen + "(void)") == std::string::npos) ++i;
  if (i == src.size()) ADD_FAILURE() << gen << " not found in the seed";
  for (; i < src.size() && src[i].find("return m;") == std::string::npos; ++i) {
    if (src[i].find("@CONV_CONST") != std::string::npos) out.insert(out.end(), conv_consts.begin(), conv_consts.end());
    else parse(src[i], out);
  }
  return out;
}

std::vector<std::string> program_statements(const Program& p) {
  std::vector<std::string> out;
  for (auto& op : p.functions.at(0).ops) {
    std::map<std::string, std::string> args;
    if (op.type != "const")
      for (auto& in : op.inputs) {
        std::string& a = args[in.key];
        if (in.arg.kind == Arg::Kind::Var) {
          a = in.arg.var;
        } else if (in.arg.kind == Arg::Kind::Tuple) {
          for (auto& e : in.arg.elems) a += (a.empty() ? "(" : ",") + e.var;
          a += ")";
        } else {
          a = "<literal>";
        }
      }
    out.push_back(describe_op(op.outputs.at(0).name, op.type, args));
  }
  return out;
}

// The builders' programs are the seed's generators, statement for statement:
// the same value names, op types and argument wiring.
TEST(SeedKernels, ProgramsMirrorTheSeedGenerators) {
  MILRT_REQUIRE_SHARED();
  std::ifstream in(shared_dir() + "/seeds/train_large.m.txt");
  ASSERT_TRUE(in) << "seed source missing";
  std::vector<std::string> src;
  for (std::string l; std::getline(in, l);) src.push_back(l);
  const LayerData& s = layer_data();
  std::vector<std::pair<std::string, Program>> kernels = {
      {"gen_sdpa_fwd_taps", llm::seed_sdpa_fwd_taps(kCfg, s.seed)},
      {"gen_ffn_fwd_taps", llm::seed_ffn_fwd_taps(kCfg, s.seed)},
      {"gen_ffn_bwd", llm::seed_ffn_bwd(kCfg, s.seed)},
      {"gen_qkvb", llm::seed_qkv_bwd(kCfg, s.seed)},
      {"gen_sdpa_bwd1", llm::seed_sdpa_bwd1(kCfg, s.seed)},
      {"gen_sdpa_bwd2", llm::seed_sdpa_bwd2(kCfg)},
  };
  for (auto& [gen, p] : kernels) {
    std::vector<std::string> want = seed_statements(src, gen);
    EXPECT_GE(want.size(), 20u) << gen;
    EXPECT_EQ(program_statements(p), want) << gen;
    EXPECT_EQ(p.functions.at(0).params.at(0).name, "x") << gen;
    EXPECT_EQ(p.functions.at(0).outputs, std::vector<std::string>{"out"}) << gen;
  }
}

TEST(SeedKernels, SdpaForwardTaps) {
  const LayerData& s = layer_data();
  Tensor out = run_bundle(llm::seed_sdpa_fwd_taps(kCfg, s.seed), "sdpa_fwd", pack({&s.x}));
  check_parts("sdpa_fwd_taps", out,
              {{"o", &s.f.o, tol::o}, {"Q", &s.f.q, tol::q}, {"K", &s.f.k, tol::k}, {"V", &s.f.v, tol::v},
               {"attn", &s.f.attn, tol::attn}, {"xnorm", &s.f.xn, tol::xnorm}});
}

TEST(SeedKernels, FfnForwardTaps) {
  const LayerData& s = layer_data();
  Tensor out = run_bundle(llm::seed_ffn_fwd_taps(kCfg, s.seed), "ffn_fwd", pack({&s.f.x2}));
  check_parts("ffn_fwd_taps", out,
              {{"ffn", &s.f.ffn, tol::ffn}, {"h1", &s.f.h1, tol::h1}, {"h3", &s.f.h3, tol::h3},
               {"gate", &s.f.gate, tol::gate}, {"x2norm", &s.f.x2n, tol::x2norm}});
}

TEST(SeedKernels, FfnBackward) {
  const LayerData& s = layer_data();
  Tensor out = run_bundle(llm::seed_ffn_bwd(kCfg, s.seed), "ffn_bwd", pack({&s.dy, &s.f.h1, &s.f.h3}));
  check_parts("ffn_bwd", out,
              {{"dx", &s.b.dx_ffn, tol::dx_ffn}, {"dh1", &s.b.dh1, tol::dh1}, {"dh3", &s.b.dh3, tol::dh3}});
}

TEST(SeedKernels, QkvBackward) {
  const LayerData& s = layer_data();
  Tensor out = run_bundle(llm::seed_qkv_bwd(kCfg, s.seed), "qkv_bwd", pack({&s.b.dq, &s.b.dk, &s.b.dv}));
  check_parts("qkv_bwd", out, {{"dx", &s.b.dx_attn, tol::dx_attn}});
}

TEST(SeedKernels, SdpaBackward1) {
  const LayerData& s = layer_data();
  Tensor out =
      run_bundle(llm::seed_sdpa_bwd1(kCfg, s.seed), "sdpa_bwd1", pack({&s.f.q, &s.f.k, &s.f.v, &s.b.dx2}));
  check_parts("sdpa_bwd1", out,
              {{"dV", &s.b.dv, tol::dv}, {"probs", &s.f.probs, tol::probs}, {"dp", &s.b.dp, tol::dp}});
}

TEST(SeedKernels, SdpaBackward2) {
  const LayerData& s = layer_data();
  Tensor out = run_bundle(llm::seed_sdpa_bwd2(kCfg), "sdpa_bwd2", pack({&s.f.probs, &s.b.dp, &s.f.q, &s.f.k}),
                          /*has_weights=*/false);
  check_parts("sdpa_bwd2", out, {{"dQ", &s.b.dq, tol::dq}, {"dK", &s.b.dk, tol::dk}});
}

// One training step as the seed runs it: each kernel reads the previous
// kernels' fp16 outputs, the CPU parts (residuals, RMSNorm backward, weight
// gradients) run in fp64 on those outputs. This checks that the taps are the
// quantities the seed's CPU code uses them as (e.g. dW2 from the `gate` tap)
// and that the channel layouts chain. Errors compound across kernels, so the
// bounds are looser (chosen as the kernels' bounds above are).
TEST(SeedKernels, TrainingStepAsTheSeedRunsIt) {
  const LayerData& s = layer_data();
  auto run = [](const Program& p, const Tensor& x) { return run_reference(p, "main", {{"x", x}}).at("out"); };
  Tensor fa = run(llm::seed_sdpa_fwd_taps(kCfg, s.seed), pack({&s.x}));
  Mat o = unpack(fa, 0, D), q = unpack(fa, D, D), k = unpack(fa, 2 * D, D), v = unpack(fa, 3 * D, D);
  Mat attn = unpack(fa, 4 * D, D), xnorm = unpack(fa, 5 * D, D);
  Mat x2 = plus(s.x, o);
  Tensor ff = run(llm::seed_ffn_fwd_taps(kCfg, s.seed), pack({&x2}));
  Mat ffn = unpack(ff, 0, D), h1 = unpack(ff, D, HID), h3 = unpack(ff, D + HID, HID);
  Mat gate = unpack(ff, D + 2 * HID, HID), x2norm = unpack(ff, D + 3 * HID, D);
  Mat y = plus(x2, ffn);

  Tensor fb = run(llm::seed_ffn_bwd(kCfg, s.seed), pack({&s.dy, &h1, &h3}));
  Mat dx_ffn = unpack(fb, 0, D), dh1 = unpack(fb, D, HID), dh3 = unpack(fb, D + HID, HID);
  Mat grms2(D, 1), grms1(D, 1);
  Mat dx2 = plus(rmsnorm_bwd(dx_ffn, x2, s.w.rms2, grms2), s.dy);
  Tensor b1 = run(llm::seed_sdpa_bwd1(kCfg, s.seed), pack({&q, &k, &v, &dx2}));
  Mat dv = unpack(b1, 0, D), probs = unpack(b1, D, SC), dp = unpack(b1, D + SC, SC);
  Tensor b2 = run(llm::seed_sdpa_bwd2(kCfg), pack({&probs, &dp, &q, &k}));
  Mat dq = unpack(b2, 0, D), dk = unpack(b2, D, D);
  Tensor qb = run(llm::seed_qkv_bwd(kCfg, s.seed), pack({&dq, &dk, &dv}));
  Mat dx_attn = unpack(qb, 0, D);
  Mat dx = plus(rmsnorm_bwd(dx_attn, s.x, s.w.rms1, grms1), dx2);

  struct Cmp {
    std::string name;
    Mat got;
    const Mat* want;
    double tol_u;
  };
  std::vector<Cmp> cmps = {
      {"y", y, &s.f.y, 3},
      {"dx2", dx2, &s.b.dx2, 4.5},
      {"dx", dx, &s.b.dx, 3.5},
      {"dWq", matmul(dq, transposed(xnorm)), &s.b.gwq, 5.5},
      {"dWk", matmul(dk, transposed(xnorm)), &s.b.gwk, 5},
      {"dWv", matmul(dv, transposed(xnorm)), &s.b.gwv, 4.5},
      {"dWo", matmul(dx2, transposed(attn)), &s.b.gwo, 3.5},
      {"dW1", matmul(dh1, transposed(x2norm)), &s.b.gw1, 6},
      {"dW3", matmul(dh3, transposed(x2norm)), &s.b.gw3, 7},
      {"dW2", matmul(s.dy, transposed(gate)), &s.b.gw2, 5},
      {"drms1", grms1, &s.b.grms1, 4},
      {"drms2", grms2, &s.b.grms2, 6},
  };
  for (auto& c : cmps) {
    double e = rel_err(c.got, *c.want);
    std::printf("[ seed     ] training step  %-6s rel %.2f u  (tol %.1f u)\n", c.name.c_str(), e / kU, c.tol_u);
    EXPECT_LE(e, c.tol_u * kU) << c.name;
  }
}

// Each kernel with one deliberate mistake (a transpose flag, a permutation, a
// weight left untransposed, a wrong operand) must fail its comparison by far:
// the tolerances above cannot hide a layout error.
TEST(SeedKernels, BrokenKernelsAreCaught) {
  const LayerData& s = layer_data();
  auto conv_w = [](const Tensor& w) { return lit(w.reshaped({w.shape()[0], w.shape()[1], 1, 1})); };
  Tensor zero_mask(DType::FP16, {1, 1, S, S});
  Tensor ones(DType::FP16, {1, D, 1, 1});
  for (int64_t i = 0; i < D; ++i) ones.set(i, 1.0);
  struct Case {
    std::string what;
    Program p;
    Tensor in;
    std::string value, key;  // the op (by its output) and the input that is changed
    Arg arg;
    int ch0;                 // where the checked output starts in `out`
    const Mat* want;
    double tol_u;            // the correct kernel's bound for that output
  };
  Program fa = llm::seed_sdpa_fwd_taps(kCfg, s.seed), ff = llm::seed_ffn_fwd_taps(kCfg, s.seed);
  Program fb = llm::seed_ffn_bwd(kCfg, s.seed), qb = llm::seed_qkv_bwd(kCfg, s.seed);
  Program b1 = llm::seed_sdpa_bwd1(kCfg, s.seed), b2 = llm::seed_sdpa_bwd2(kCfg);
  Tensor fa_in = pack({&s.x}), ff_in = pack({&s.f.x2}), fb_in = pack({&s.dy, &s.f.h1, &s.f.h3});
  Tensor qb_in = pack({&s.b.dq, &s.b.dk, &s.b.dv}), b1_in = pack({&s.f.q, &s.f.k, &s.f.v, &s.b.dx2});
  Tensor b2_in = pack({&s.f.probs, &s.b.dp, &s.f.q, &s.f.k});
  std::vector<Case> cases = {
      {"scores Q K, not Q K^T", fa, fa_in, "sc1", "transpose_y", lit_bool(false), 4 * D, &s.f.attn, tol::attn},
      {"no causal mask", fa, fa_in, "ms", "y", lit(zero_mask), 4 * D, &s.f.attn, tol::attn},
      {"Q not transposed to [S, hd]", fa, fa_in, "q", "perm", lit_i32s({0, 1, 2, 3}), 4 * D, &s.f.attn, tol::attn},
      {"RMSNorm scale ignored", fa, fa_in, "xn", "y", lit(ones), 5 * D, &s.f.xn, tol::xnorm},
      {"taps Q and K swapped", fa, fa_in, "out", "values",
       tuple({Value{"oo", {}}, Value{"kf", {}}, Value{"qf", {}}, Value{"vf", {}}, Value{"af", {}}, Value{"xn", {}}}),
       D, &s.f.q, tol::q},
      {"gate silu(h1) * h1", ff, ff_in, "gate", "y", Arg::of_var("h1"), 0, &s.f.ffn, tol::ffn},
      {"silu' with sig - 1", fb, fb_in, "oms", "x", Arg::of_var("sig"), D, &s.b.dh1, tol::dh1},
      {"W1t used for dh3", fb, fb_in, "dx3", "weight", Arg::of_var("W1t"), 0, &s.b.dx_ffn, tol::dx_ffn},
      {"Wq not transposed", qb, qb_in, "dxq", "weight", conv_w(s.seed.wq), 0, &s.b.dx_attn, tol::dx_attn},
      {"Wo not transposed", b1, b1_in, "df", "weight", conv_w(s.seed.wo), 0, &s.b.dv, tol::dv},
      {"dV = P dA, not P^T dA", b1, b1_in, "dv4", "transpose_x", lit_bool(false), 0, &s.b.dv, tol::dv},
      {"dp = dA V, not dA V^T", b1, b1_in, "dp4", "transpose_y", lit_bool(false), D + SC, &s.b.dp, tol::dp},
      {"softmax grad without the row sum", b2, b2_in, "ds0", "y", Arg::of_var("dp"), 0, &s.b.dq, tol::dq},
      {"dQ = dS K^T", b2, b2_in, "dq4", "transpose_y", lit_bool(true), 0, &s.b.dq, tol::dq},
      {"dK = dS Q, not dS^T Q", b2, b2_in, "dk4", "transpose_x", lit_bool(false), D, &s.b.dk, tol::dk},
      {"score scale missing", b2, b2_in, "ds", "y", lit_f16(1.0), 0, &s.b.dq, tol::dq},
  };
  for (auto& c : cases) {
    // The unbroken kernel passes...
    Tensor good = run_reference(c.p, "main", {{"x", c.in}}).at("out");
    EXPECT_LE(rel_err(unpack(good, c.ch0, c.want->rows), *c.want), c.tol_u * kU) << c.what;
    // ...and the broken one misses by at least 50x its tolerance.
    bool found = false;
    for (auto& op : c.p.functions.at(0).ops)
      if (op.outputs.at(0).name == c.value) {
        ASSERT_TRUE(op.has(c.key)) << c.what;
        op.set(c.key, c.arg);
        found = true;
      }
    ASSERT_TRUE(found) << c.what;
    Tensor bad = run_reference(c.p, "main", {{"x", c.in}}).at("out");
    double e = rel_err(unpack(bad, c.ch0, c.want->rows), *c.want);
    std::printf("[ seed     ] broken: %-34s rel %.0f u\n", c.what.c_str(), e / kU);
    EXPECT_GT(e, 50 * c.tol_u * kU) << c.what;
  }
}

TEST(SeedKernels, BadConfigsAndWeightsAreRejected) {
  const LayerData& s = layer_data();
  auto expect_error = [](const std::function<void()>& f, const std::string& fragment) {
    try {
      f();
      ADD_FAILURE() << "no error mentioning " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error([&] { llm::seed_sdpa_fwd_taps({64, 128, 5, 16}, s.seed); }, "heads=5");
  expect_error([&] { llm::seed_sdpa_bwd2({64, 128, 4, 0}); }, "seq=0");
  SeedLayerWeights w = s.seed;
  w.wq = w.wq.cast(DType::FP32);
  expect_error([&] { llm::seed_qkv_bwd(kCfg, w); }, "wq must be fp16 [64, 64], got fp32 [64, 64]");
  w = s.seed;
  w.w1 = fp16_matrix(transposed(s.w.w1));
  expect_error([&] { llm::seed_ffn_bwd(kCfg, w); }, "w1 must be fp16 [128, 64], got fp16 [64, 128]");
  w = s.seed;
  w.rms2 = Tensor();
  expect_error([&] { llm::seed_ffn_fwd_taps(kCfg, w); }, "rms2 must be fp16 [64], got nothing");
}

}  // namespace
}  // namespace milrt::test
