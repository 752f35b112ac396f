// Tests of the normalizations (layer_norm, batch_norm, instance_norm, l2_norm,
// local_response_norm, rms_norm), lstm and scaled_dot_product_attention, run
// through MIL text on the reference executor. Expected values come from naive
// fp64 loops written here.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_linalg_util.h"

namespace milrt::test::linalg {
namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// ---- layer_norm -----------------------------------------------------------

TEST(LayerNorm, LastAxisWithGammaBeta) {
  In x = input("x", {2, 3, 4}, 1), g = input("g", {4}, 2), b = input("b", {4}, 3);
  auto r = run_ops({x, g, b},
                   stmt("tensor<fp32, [2, 3, 4]>", "z",
                        "layer_norm(x = x, axes = " + ints_lit({-1}) + ", gamma = g, beta = b, epsilon = fp32(0.001))"),
                   "z");
  std::vector<double> want;
  for (int row = 0; row < 6; ++row) {
    double mean = 0, var = 0;
    for (int k = 0; k < 4; ++k) mean += x.v[size_t(row * 4 + k)] / 4;
    for (int k = 0; k < 4; ++k) var += std::pow(x.v[size_t(row * 4 + k)] - mean, 2) / 4;
    for (int k = 0; k < 4; ++k)
      want.push_back((x.v[size_t(row * 4 + k)] - mean) / std::sqrt(var + 0.001) * g.v[size_t(k)] + b.v[size_t(k)]);
  }
  expect_close(r["z"], {2, 3, 4}, want);
}

TEST(LayerNorm, NonAdjacentAxesAndDefaultAxes) {
  // axes [0, 2] of [2, 3, 4]: one group per middle index, gamma shaped [2, 4].
  In x = input("x", {2, 3, 4}, 4), g = input("g", {2, 4}, 5);
  std::string body = stmt("tensor<fp32, [2, 3, 4]>", "z", "layer_norm(x = x, axes = " + ints_lit({2, 0}) + ", gamma = g)") +
                     stmt("tensor<fp32, [2, 3, 4]>", "all", "layer_norm(x = x)");
  auto r = run_ops({x, g}, body, "z, all");
  auto at = [&](int i, int j, int k) { return x.v[size_t((i * 3 + j) * 4 + k)]; };
  std::vector<double> want(24);
  for (int j = 0; j < 3; ++j) {
    double mean = 0, var = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) mean += at(i, j, k) / 8;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) var += std::pow(at(i, j, k) - mean, 2) / 8;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k)
        want[size_t((i * 3 + j) * 4 + k)] = (at(i, j, k) - mean) / std::sqrt(var + 1e-5) * g.v[size_t(i * 4 + k)];
  }
  expect_close(r["z"], {2, 3, 4}, want);
  double mean = 0, var = 0;
  for (double v : x.v) mean += v / 24;
  for (double v : x.v) var += std::pow(v - mean, 2) / 24;
  std::vector<double> all;
  for (double v : x.v) all.push_back((v - mean) / std::sqrt(var + 1e-5));
  expect_close(r["all"], {2, 3, 4}, all);
}

TEST(LayerNorm, Errors) {
  In x = input("x", {2, 3, 4}, 1), g = input("g", {3}, 2);
  expect_error_naming(
      [&] { run_ops({x, g}, stmt("tensor<fp32, [2, 3, 4]>", "z", "layer_norm(x = x, axes = " + ints_lit({-1}) + ", gamma = g)"), "z"); },
      "layer_norm", "gamma");
  expect_error_naming(
      [&] { run_ops({x}, stmt("tensor<fp32, [2, 3, 4]>", "z", "layer_norm(x = x, axes = " + ints_lit({3}) + ")"), "z"); },
      "layer_norm", "axis");
}

// ---- batch_norm, instance_norm, l2_norm, local_response_norm ----------------

TEST(BatchNorm, PerChannel) {
  In x = input("x", {2, 3, 2, 2}, 10), m = input("m", {3}, 11), g = input("g", {3}, 13), b = input("b", {3}, 14);
  In v{"v", DType::FP32, {3}, {0.5, 2, 0.25}};
  auto r = run_ops({x, m, v, g, b},
                   stmt("tensor<fp32, [2, 3, 2, 2]>", "z",
                        "batch_norm(x = x, mean = m, variance = v, gamma = g, beta = b, epsilon = fp32(0.01))"),
                   "z");
  std::vector<double> want;
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 4; ++i)
        want.push_back((x.v[size_t((n * 3 + c) * 4 + i)] - m.v[size_t(c)]) / std::sqrt(v.v[size_t(c)] + 0.01) *
                           g.v[size_t(c)] +
                       b.v[size_t(c)]);
  expect_close(r["z"], {2, 3, 2, 2}, want);
}

TEST(InstanceNorm, PerSampleAndChannel) {
  In x = input("x", {2, 3, 5}, 20), g = input("g", {3}, 21), b = input("b", {3}, 22);
  auto r = run_ops({x, g, b}, stmt("tensor<fp32, [2, 3, 5]>", "z", "instance_norm(x = x, gamma = g, beta = b)"), "z");
  std::vector<double> want;
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c) {
      const double* p = &x.v[size_t((n * 3 + c) * 5)];
      double mean = 0, var = 0;
      for (int i = 0; i < 5; ++i) mean += p[i] / 5;
      for (int i = 0; i < 5; ++i) var += std::pow(p[i] - mean, 2) / 5;
      for (int i = 0; i < 5; ++i) want.push_back((p[i] - mean) / std::sqrt(var + 1e-5) * g.v[size_t(c)] + b.v[size_t(c)]);
    }
  expect_close(r["z"], {2, 3, 5}, want);
}

TEST(L2Norm, LastThreeDimsPerBatch) {
  In x = input("x", {2, 2, 3, 2}, 30), y = input("y", {2, 1, 3}, 31);
  std::string body = stmt("tensor<fp32, [2, 2, 3, 2]>", "z", "l2_norm(x = x)") +
                     stmt("tensor<fp32, [2, 1, 3]>", "w", "l2_norm(x = y, epsilon = fp32(0.5))");
  auto r = run_ops({x, y}, body, "z, w");
  std::vector<double> want;
  for (int n = 0; n < 2; ++n) {
    double ss = 0;
    for (int i = 0; i < 12; ++i) ss += std::pow(x.v[size_t(n * 12 + i)], 2);
    for (int i = 0; i < 12; ++i) want.push_back(x.v[size_t(n * 12 + i)] / std::sqrt(ss + 1e-6));
  }
  expect_close(r["z"], {2, 2, 3, 2}, want);
  double ss = 0;
  for (double v : y.v) ss += v * v;
  std::vector<double> wy;
  for (double v : y.v) wy.push_back(v / std::sqrt(ss + 0.5));
  expect_close(r["w"], {2, 1, 3}, wy);
}

TEST(LocalResponseNorm, WindowAcrossChannels) {
  In x = input("x", {1, 5, 2, 1}, 40);
  auto r = run_ops({x},
                   stmt("tensor<fp32, [1, 5, 2, 1]>", "z",
                        "local_response_norm(x = x, size = int32(3), alpha = fp32(0.5), beta = fp32(0.75), k = fp32(2))"),
                   "z");
  std::vector<double> want;
  for (int c = 0; c < 5; ++c)
    for (int s = 0; s < 2; ++s) {
      double sum = 0;
      for (int j = std::max(0, c - 1); j <= std::min(4, c + 1); ++j) sum += std::pow(x.v[size_t(j * 2 + s)], 2);
      want.push_back(x.v[size_t(c * 2 + s)] / std::pow(2 + 0.5 / 3 * sum, 0.75));
    }
  expect_close(r["z"], {1, 5, 2, 1}, want);
}

// ---- rms_norm -------------------------------------------------------------

TEST(RmsNorm, ChannelsOfTheSeedLayout) {
  // [1, C, 1, S]: the mean runs over C for each of the S positions; w as [C] and as [1, C, 1, 1].
  In x = input("x", {1, 4, 1, 3}, 50), w = input("w", {4}, 51), w4 = input("w4", {1, 4, 1, 1}, 51);
  std::string body = stmt("tensor<fp32, [1, 4, 1, 3]>", "z", "rms_norm(x = x, w = w, eps = fp32(0.01))") +
                     stmt("tensor<fp32, [1, 4, 1, 3]>", "z4", "rms_norm(x = x, w = w4, eps = fp32(0.01))");
  auto r = run_ops({x, w, w4}, body, "z, z4");
  std::vector<double> want(12);
  for (int s = 0; s < 3; ++s) {
    double ms = 0;
    for (int c = 0; c < 4; ++c) ms += std::pow(x.v[size_t(c * 3 + s)], 2) / 4;
    for (int c = 0; c < 4; ++c) want[size_t(c * 3 + s)] = x.v[size_t(c * 3 + s)] / std::sqrt(ms + 0.01) * w.v[size_t(c)];
  }
  expect_close(r["z"], {1, 4, 1, 3}, want);
  expect_close(r["z4"], {1, 4, 1, 3}, want);
}

TEST(RmsNorm, LastAxisOfTokenRowsWithDefaults) {
  In x = input("x", {3, 5}, 52);
  auto r = run_ops({x}, stmt("tensor<fp32, [3, 5]>", "z", "rms_norm(x = x)"), "z");
  std::vector<double> want;
  for (int t = 0; t < 3; ++t) {
    double ms = 0;
    for (int d = 0; d < 5; ++d) ms += std::pow(x.v[size_t(t * 5 + d)], 2) / 5;
    for (int d = 0; d < 5; ++d) want.push_back(x.v[size_t(t * 5 + d)] / std::sqrt(ms + 1e-5));
  }
  expect_close(r["z"], {3, 5}, want);
}

TEST(RmsNorm, Fp16ResultIsTheRoundedExactValue) {
  In x = input("x", {1, 8, 1, 2}, 53, DType::FP16), w = input("w", {8}, 54, DType::FP16);
  auto r = run_ops({x, w}, stmt("tensor<fp16, [1, 8, 1, 2]>", "z", "rms_norm(x = x, w = w)"), "z");
  ASSERT_EQ(r["z"].dtype(), DType::FP16);
  std::vector<double> got = values(r["z"]);
  for (int s = 0; s < 2; ++s) {
    double ms = 0;
    for (int c = 0; c < 8; ++c) ms += std::pow(x.v[size_t(c * 2 + s)], 2) / 8;
    for (int c = 0; c < 8; ++c) {
      double exact = x.v[size_t(c * 2 + s)] / std::sqrt(ms + 1e-5) * w.v[size_t(c)];
      float want = f16_to_f32(f32_to_f16(float(exact)));
      EXPECT_EQ(got[size_t(c * 2 + s)], want) << "c " << c << " s " << s << " exact " << exact;
    }
  }
}

TEST(RmsNorm, Errors) {
  // Without legalization: run_body would read [1, 4, 1, 3] as [4, 3] rows, where w fits.
  expect_error_naming(
      [&] {
        verify_body("tensor<fp32, [1, 4, 1, 3]> x, tensor<fp32, [3]> w",
                    stmt("tensor<fp32, [1, 4, 1, 3]>", "z", "rms_norm(x = x, w = w)"), "z");
      },
      "rms_norm", "elements");
  In x = input("x", {2, 4, 2, 3}, 1), w = input("w", {3}, 2);
  expect_error_naming([&] { run_ops({x, w}, stmt("tensor<fp32, [2, 4, 2, 3]>", "z", "rms_norm(x = x, w = w)"), "z"); },
                      "rms_norm", "elements");
}

// ---- lstm -----------------------------------------------------------------

using Act = std::function<double(double)>;

// One lstm direction over x [seq, batch, in], written gate by gate. Weight
// rows come in blocks of H: input gate, forget gate, output gate, cell gate.
struct NaiveLstm {
  int64_t seq, batch, in, h;
  std::vector<double> wih, whh, bias, peep;   // bias [4H], peep [3H] may be empty
  Act ract = sigmoid, cact = [](double v) { return std::tanh(v); }, act = [](double v) { return std::tanh(v); };
  double clip = 0;                            // 0: none

  // Runs from (h0, c0) [batch, H]; steps[k] is h [batch, H] after step k of
  // the scan (which runs backwards through x when `backward`).
  void run(const std::vector<double>& x, std::vector<double> hs, std::vector<double> cs, bool backward,
           std::vector<std::vector<double>>& steps, std::vector<double>& hn, std::vector<double>& cn) const {
    auto row = [&](const std::vector<double>& w, int64_t gate, int64_t j, int64_t k, int64_t cols) {
      return w[size_t((gate * h + j) * cols + k)];
    };
    for (int64_t k = 0; k < seq; ++k) {
      int64_t t = backward ? seq - 1 - k : k;
      std::vector<double> hnew(hs.size()), cnew(cs.size());
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t j = 0; j < h; ++j) {
          double pre[4];
          for (int64_t gate = 0; gate < 4; ++gate) {
            double s = bias.empty() ? 0 : bias[size_t(gate * h + j)];
            for (int64_t i = 0; i < in; ++i) s += row(wih, gate, j, i, in) * x[size_t((t * batch + b) * in + i)];
            for (int64_t i = 0; i < h; ++i) s += row(whh, gate, j, i, h) * hs[size_t(b * h + i)];
            pre[gate] = s;
          }
          double c_prev = cs[size_t(b * h + j)];
          auto peep_of = [&](int64_t gate) { return peep.empty() ? 0.0 : peep[size_t(gate * h + j)]; };
          double input_gate = ract(pre[0] + peep_of(0) * c_prev);
          double forget_gate = ract(pre[1] + peep_of(1) * c_prev);
          double cell_gate = cact(pre[3]);
          double c = forget_gate * c_prev + input_gate * cell_gate;
          if (clip > 0) c = std::max(-clip, std::min(clip, c));
          double output_gate = ract(pre[2] + peep_of(2) * c);
          cnew[size_t(b * h + j)] = c;
          hnew[size_t(b * h + j)] = output_gate * act(c);
        }
      hs = hnew;
      cs = cnew;
      steps.push_back(hs);
    }
    hn = hs;
    cn = cs;
  }
};

TEST(Lstm, GateOrderIsInputForgetOutputCell) {
  // One unit, zero input weights: the gates see only their bias, in the order
  // [input, forget, output, cell]. PyTorch's order would give other values.
  In x{"x", DType::FP32, {1, 1, 1}, {0}}, h0{"h0", DType::FP32, {1, 1}, {0}}, c0{"c0", DType::FP32, {1, 1}, {1}};
  In wih{"wih", DType::FP32, {4, 1}, {0, 0, 0, 0}}, whh{"whh", DType::FP32, {4, 1}, {0, 0, 0, 0}};
  In b{"b", DType::FP32, {4}, {0.5, -1, 2, 0.25}};
  std::string body =
      "    tensor<fp32, [1, 1, 1]> y, tensor<fp32, [1, 1]> hn, tensor<fp32, [1, 1]> cn = lstm(x = x, initial_h = h0, "
      "initial_c = c0, weight_ih = wih, weight_hh = whh, bias = b)[name = string(\"l\")];\n";
  auto r = run_ops({x, h0, c0, wih, whh, b}, body, "y, hn, cn");
  double c1 = sigmoid(-1) * 1 + sigmoid(0.5) * std::tanh(0.25);
  double h1 = sigmoid(2) * std::tanh(c1);
  expect_close(r["cn"], {1, 1}, {c1});
  expect_close(r["hn"], {1, 1}, {h1});
  expect_close(r["y"], {1, 1, 1}, {h1});
}

struct LstmCase {
  In x, h0, c0, wih, whh, b;
  NaiveLstm naive;
};

LstmCase lstm_case(int64_t seq, int64_t batch, int64_t in, int64_t h, int64_t dirs, uint32_t seed) {
  LstmCase c{input("x", {seq, batch, in}, seed),     input("h0", {batch, dirs * h}, seed + 1),
             input("c0", {batch, dirs * h}, seed + 2), input("wih", {4 * h, in}, seed + 3),
             input("whh", {4 * h, h}, seed + 4),       input("b", {4 * h}, seed + 5),
             {}};
  // Keep the gates out of saturation so every weight matters.
  for (In* t : {&c.wih, &c.whh, &c.b})
    for (double& v : t->v) v /= 4;
  c.naive = NaiveLstm{seq, batch, in, h, c.wih.v, c.whh.v, c.b.v, {}};
  return c;
}

std::string lstm_stmt(const Shape& ys, const Shape& hs, const std::string& extra) {
  return "    " + ttype(DType::FP32, ys) + " y, " + ttype(DType::FP32, hs) + " hn, " + ttype(DType::FP32, hs) +
         " cn = lstm(x = x, initial_h = h0, initial_c = c0, weight_ih = wih, weight_hh = whh, bias = b" + extra +
         ")[name = string(\"l\")];\n";
}

std::vector<double> concat(const std::vector<std::vector<double>>& parts) {
  std::vector<double> r;
  for (auto& p : parts) r.insert(r.end(), p.begin(), p.end());
  return r;
}

TEST(Lstm, ForwardWithAndWithoutSequence) {
  LstmCase c = lstm_case(4, 2, 3, 2, 1, 60);
  std::vector<std::vector<double>> steps;
  std::vector<double> hn, cn;
  c.naive.run(c.x.v, c.h0.v, c.c0.v, false, steps, hn, cn);
  std::vector<In> ins = {c.x, c.h0, c.c0, c.wih, c.whh, c.b};
  auto all = run_ops(ins, lstm_stmt({4, 2, 2}, {2, 2}, ", output_sequence = bool(true)"), "y, hn, cn");
  expect_close(all["y"], {4, 2, 2}, concat(steps));
  expect_close(all["hn"], {2, 2}, hn);
  expect_close(all["cn"], {2, 2}, cn);
  auto last = run_ops(ins, lstm_stmt({1, 2, 2}, {2, 2}, ""), "y, hn, cn");
  expect_close(last["y"], {1, 2, 2}, hn);
  expect_close(last["hn"], {2, 2}, hn);
  expect_close(last["cn"], {2, 2}, cn);
}

TEST(Lstm, ReverseEmitsStepsInScanOrder) {
  LstmCase c = lstm_case(3, 2, 2, 3, 1, 70);
  std::vector<std::vector<double>> steps;
  std::vector<double> hn, cn;
  c.naive.run(c.x.v, c.h0.v, c.c0.v, true, steps, hn, cn);
  std::vector<In> ins = {c.x, c.h0, c.c0, c.wih, c.whh, c.b};
  auto all = run_ops(ins, lstm_stmt({3, 2, 3}, {2, 3}, ", direction = string(\"reverse\"), output_sequence = bool(true)"),
                     "y, hn, cn");
  expect_close(all["y"], {3, 2, 3}, concat(steps));
  expect_close(all["hn"], {2, 3}, hn);
  expect_close(all["cn"], {2, 3}, cn);
  auto last = run_ops(ins, lstm_stmt({1, 2, 3}, {2, 3}, ", direction = string(\"reverse\")"), "y, hn, cn");
  expect_close(last["y"], {1, 2, 3}, hn);
  expect_close(last["cn"], {2, 3}, cn);
}

// [batch, 2H] from two [batch, H] halves.
std::vector<double> join_halves(const std::vector<double>& f, const std::vector<double>& b, int64_t batch, int64_t h) {
  std::vector<double> r;
  for (int64_t n = 0; n < batch; ++n) {
    r.insert(r.end(), f.begin() + n * h, f.begin() + (n + 1) * h);
    r.insert(r.end(), b.begin() + n * h, b.begin() + (n + 1) * h);
  }
  return r;
}

// The [batch, H] half `d` of a [batch, 2H] state.
std::vector<double> half(const std::vector<double>& s, int64_t batch, int64_t h, int64_t d) {
  std::vector<double> r;
  for (int64_t n = 0; n < batch; ++n) r.insert(r.end(), s.begin() + (2 * n + d) * h, s.begin() + (2 * n + d + 1) * h);
  return r;
}

TEST(Lstm, BidirectionalAlignsTheBackwardHalfWithTheInput) {
  const int64_t seq = 3, batch = 2, h = 2;
  LstmCase c = lstm_case(seq, batch, 3, h, 2, 80);
  In wihb = input("wihb", {4 * h, 3}, 90), whhb = input("whhb", {4 * h, h}, 91), bb = input("bb", {4 * h}, 92);
  for (In* t : {&wihb, &whhb, &bb})
    for (double& v : t->v) v /= 4;
  NaiveLstm back = c.naive;
  back.wih = wihb.v, back.whh = whhb.v, back.bias = bb.v;
  std::vector<std::vector<double>> fs, bs;
  std::vector<double> fh, fc, bh, bc;
  c.naive.run(c.x.v, half(c.h0.v, batch, h, 0), half(c.c0.v, batch, h, 0), false, fs, fh, fc);
  back.run(c.x.v, half(c.h0.v, batch, h, 1), half(c.c0.v, batch, h, 1), true, bs, bh, bc);
  std::string extra =
      ", weight_ih_back = wihb, weight_hh_back = whhb, bias_back = bb, direction = string(\"bidirectional\")";
  std::vector<In> ins = {c.x, c.h0, c.c0, c.wih, c.whh, c.b, wihb, whhb, bb};
  auto all = run_ops(ins, lstm_stmt({seq, batch, 2 * h}, {batch, 2 * h}, extra + ", output_sequence = bool(true)"),
                     "y, hn, cn");
  std::vector<double> want;
  for (int64_t t = 0; t < seq; ++t) {
    auto row = join_halves(fs[size_t(t)], bs[size_t(seq - 1 - t)], batch, h);
    want.insert(want.end(), row.begin(), row.end());
  }
  expect_close(all["y"], {seq, batch, 2 * h}, want);
  expect_close(all["hn"], {batch, 2 * h}, join_halves(fh, bh, batch, h));
  expect_close(all["cn"], {batch, 2 * h}, join_halves(fc, bc, batch, h));
  auto last = run_ops(ins, lstm_stmt({1, batch, 2 * h}, {batch, 2 * h}, extra), "y, hn, cn");
  expect_close(last["y"], {1, batch, 2 * h}, join_halves(fh, bh, batch, h));
}

TEST(Lstm, PeepholeClipAndActivations) {
  LstmCase c = lstm_case(3, 1, 2, 2, 1, 100);
  In p = input("p", {6}, 101);
  c.naive.peep = p.v;
  c.naive.clip = 0.3;
  c.naive.ract = [](double v) { return std::min(1.0, std::max(0.0, 0.2 * v + 0.5)); };
  c.naive.cact = [](double v) { return std::max(0.0, v); };
  c.naive.act = [](double v) { return v; };
  std::vector<std::vector<double>> steps;
  std::vector<double> hn, cn;
  c.naive.run(c.x.v, c.h0.v, c.c0.v, false, steps, hn, cn);
  auto r = run_ops({c.x, c.h0, c.c0, c.wih, c.whh, c.b, p},
                   lstm_stmt({3, 1, 2}, {1, 2},
                             ", peephole = p, clip = fp32(0.3), output_sequence = bool(true), recurrent_activation = "
                             "string(\"hard_sigmoid\"), cell_activation = string(\"relu\"), activation = "
                             "string(\"linear\")"),
                   "y, hn, cn");
  expect_close(r["y"], {3, 1, 2}, concat(steps));
  expect_close(r["cn"], {1, 2}, cn);
}

TEST(Lstm, Errors) {
  LstmCase c = lstm_case(2, 1, 2, 2, 2, 110);
  std::vector<In> ins = {c.x, c.h0, c.c0, c.wih, c.whh, c.b};
  expect_error_naming(
      [&] { run_ops(ins, lstm_stmt({1, 1, 4}, {1, 4}, ", direction = string(\"bidirectional\")"), "y, hn, cn"); }, "lstm",
      "weight_ih_back");
  LstmCase d = lstm_case(2, 1, 2, 2, 1, 120);
  std::vector<In> ins1 = {d.x, d.h0, d.c0, d.wih, d.whh, d.b};
  expect_error_naming(
      [&] { run_ops(ins1, lstm_stmt({1, 1, 2}, {1, 2}, ", activation = string(\"gelu\")"), "y, hn, cn"); }, "lstm",
      "gelu");
  In wih_bad = input("wih", {8, 3}, 5);
  expect_error_naming(
      [&] { run_ops({d.x, d.h0, d.c0, wih_bad, d.whh, d.b}, lstm_stmt({1, 1, 2}, {1, 2}, ""), "y, hn, cn"); }, "lstm",
      "weight_ih");
  expect_error_naming([&] { run_ops(ins1, lstm_stmt({2, 1, 2}, {1, 2}, ""), "y, hn, cn"); }, "lstm", "declared");
}

// ---- scaled_dot_product_attention ------------------------------------------

// softmax(q kᵀ / sqrt(E) + mask) v per batch; mask(b, i, j) gives the additive term.
std::vector<double> naive_sdpa(const In& q, const In& k, const In& v, int64_t nb, int64_t L, int64_t S, int64_t E,
                               int64_t EV, const std::function<double(int64_t, int64_t, int64_t)>& mask) {
  std::vector<double> out;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> w(static_cast<size_t>(S));
      double mx = -std::numeric_limits<double>::infinity(), den = 0;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += q.v[size_t((b * L + i) * E + e)] * k.v[size_t((b * S + j) * E + e)];
        w[size_t(j)] = dot / std::sqrt(double(E)) + mask(b, i, j);
        mx = std::max(mx, w[size_t(j)]);
      }
      for (double& x : w) den += (x = std::exp(x - mx));
      for (int64_t e = 0; e < EV; ++e) {
        double s = 0;
        for (int64_t j = 0; j < S; ++j) s += w[size_t(j)] / den * v.v[size_t((b * S + j) * EV + e)];
        out.push_back(s);
      }
    }
  return out;
}

TEST(Sdpa, NoMaskAndBoolMask) {
  In q = input("q", {2, 3, 4}, 130), k = input("k", {2, 5, 4}, 131), v = input("v", {2, 5, 6}, 132);
  // keep (i, j) when j <= i + 1: a causal-like pattern broadcast over the batch
  In m{"m", DType::Bool, {3, 5}, {}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) m.v.push_back(j <= i + 1 ? 1 : 0);
  std::string body = stmt("tensor<fp32, [2, 3, 6]>", "z", "scaled_dot_product_attention(query = q, key = k, value = v)") +
                     stmt("tensor<fp32, [2, 3, 6]>", "zm",
                          "scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = m)");
  auto r = run_ops({q, k, v, m}, body, "z, zm");
  expect_close(r["z"], {2, 3, 6}, naive_sdpa(q, k, v, 2, 3, 5, 4, 6, [](int64_t, int64_t, int64_t) { return 0.0; }));
  expect_close(r["zm"], {2, 3, 6}, naive_sdpa(q, k, v, 2, 3, 5, 4, 6, [](int64_t, int64_t i, int64_t j) {
                 return j <= i + 1 ? 0.0 : -std::numeric_limits<double>::infinity();
               }));
}

TEST(Sdpa, FloatMaskIsAdded) {
  // q [1, 2, 3, 4] (batch 1, 2 heads); the mask [1, 1, 3, 5] is shared by both heads.
  In q = input("q", {1, 2, 3, 4}, 140), k = input("k", {1, 2, 5, 4}, 141), v = input("v", {1, 2, 5, 3}, 142);
  In m = input("m", {1, 1, 3, 5}, 143);
  auto r = run_ops({q, k, v, m},
                   stmt("tensor<fp32, [1, 2, 3, 3]>", "z",
                        "scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = m)"),
                   "z");
  expect_close(r["z"], {1, 2, 3, 3},
               naive_sdpa(q, k, v, 2, 3, 5, 4, 3, [&](int64_t, int64_t i, int64_t j) { return m.v[size_t(i * 5 + j)]; }));
}

TEST(Sdpa, Errors) {
  In q = input("q", {2, 3, 4}, 1), k = input("k", {2, 5, 3}, 2), v = input("v", {2, 5, 6}, 3);
  expect_error_naming(
      [&] {
        run_ops({q, k, v}, stmt("tensor<fp32, [2, 3, 6]>", "z", "scaled_dot_product_attention(query = q, key = k, value = v)"),
                "z");
      },
      "scaled_dot_product_attention", "embedding");
  In k2 = input("k", {2, 5, 4}, 2), m = input("m", {3, 4}, 4);
  expect_error_naming(
      [&] {
        run_ops({q, k2, v, m},
                stmt("tensor<fp32, [2, 3, 6]>", "z",
                     "scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = m)"),
                "z");
      },
      "scaled_dot_product_attention", "attn_mask");
}

}  // namespace
}  // namespace milrt::test::linalg
