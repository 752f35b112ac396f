// The first seed's 2-layer training program (tests/data/seed1/
// backprop_train.mil), trained by derived gradients: only its forward half
// is written here, the MSE loss added, and differentiate() derives the
// backward half the seed wrote by hand. SGD runs on a compiled plan of the
// derived function; every step's gradients are compared with a plain fp64
// backprop written below, and the loss must fall by more than 20x.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "milrt/autodiff.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

constexpr int64_t kD = 64;
double worst_ = 0;   // the largest gradient error seen by train(), for the record

std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}
using Vec = std::vector<double>;

// The seed's forward half in its layout, legalized as test_seed_graph.cpp's
// BackpropTraining test explains: z1 (x [1, 1, 1, 64] against W1's 64
// batched rows) is well-typed as written; y's operand h [1, 64, 1, 1] is
// reshaped to the [1, 1, 1, 64] row the matmul needs. loss = mean((y - t)^2).
std::string forward_program(const std::string& dt) {
  auto t = [&](const std::string& dims) { return "tensor<" + dt + ", [" + dims + "]>"; };
  return "program(1.3)\n{\n  func main<ios18>(" + t("1, 1, 1, 64") + " x, " + t("1, 64, 1, 1") + " target, " +
         t("1, 64, 1, 64") + " W1, " + t("1, 64, 1, 64") + " W2) {\n" +
         stmt(t("1, 64, 1, 1"), "z1", "matmul(x = x, y = W1, transpose_y = bool(true))") +
         stmt(t("1, 64, 1, 1"), "h", "sigmoid(x = z1)") +
         stmt(t("1, 1, 1, 64"), "h_row", "reshape(x = h, shape = tensor<int32, [4]>([1, 1, 1, 64]))") +
         stmt(t("1, 64, 1, 1"), "y", "matmul(x = h_row, y = W2, transpose_y = bool(true))") +
         stmt(t("1, 64, 1, 1"), "dy", "sub(x = y, y = target)") + stmt(t("1, 64, 1, 1"), "sq", "mul(x = dy, y = dy)") +
         stmt(dt, "loss", "reduce_mean(x = sq)") + "  } -> (loss, y);\n}\n";
}

struct Backprop {
  double loss = 0;
  Vec dw1, dw2;
  // The same products over magnitudes, with |y| + |t| for |y - t|: how large
  // rounding errors can be. Near convergence y - t cancels, so its fp32
  // rounding error is relative to |y| + |t|, not to the gradient itself.
  double loss_mag = 0, dw1_mag = 0, dw2_mag = 0;
};

// Plain fp64 backprop of the same network: h = s(W1 x), y = W2 h,
// L = mean((y - t)^2).
Backprop backprop(const Vec& x, const Vec& target, const Vec& w1, const Vec& w2) {
  Vec h(kD), y(kD), dy(kD), dz(kD, 0.0), dy_mag(kD), dz_mag(kD, 0.0);
  for (int64_t r = 0; r < kD; ++r) {
    double z = 0;
    for (int64_t c = 0; c < kD; ++c) z += w1[size_t(r * kD + c)] * x[size_t(c)];
    h[size_t(r)] = 1 / (1 + std::exp(-z));
  }
  Backprop b;
  b.dw1.assign(size_t(kD * kD), 0);
  b.dw2.assign(size_t(kD * kD), 0);
  for (int64_t r = 0; r < kD; ++r) {
    double s = 0;
    for (int64_t c = 0; c < kD; ++c) s += w2[size_t(r * kD + c)] * h[size_t(c)];
    y[size_t(r)] = s;
    b.loss += (s - target[size_t(r)]) * (s - target[size_t(r)]) / double(kD);
    dy[size_t(r)] = 2 * (s - target[size_t(r)]) / double(kD);
    double m = std::fabs(s) + std::fabs(target[size_t(r)]);
    b.loss_mag += m * m / double(kD);
    dy_mag[size_t(r)] = 2 * m / double(kD);
  }
  double h_max = 0, x_max = 0;
  for (int64_t c = 0; c < kD; ++c) h_max = std::max(h_max, std::fabs(h[size_t(c)]));
  for (int64_t c = 0; c < kD; ++c) x_max = std::max(x_max, std::fabs(x[size_t(c)]));
  for (int64_t r = 0; r < kD; ++r)
    for (int64_t c = 0; c < kD; ++c) {
      b.dw2[size_t(r * kD + c)] = dy[size_t(r)] * h[size_t(c)];
      dz[size_t(c)] += w2[size_t(r * kD + c)] * dy[size_t(r)];
      dz_mag[size_t(c)] += std::fabs(w2[size_t(r * kD + c)]) * dy_mag[size_t(r)];
      b.dw2_mag = std::max(b.dw2_mag, dy_mag[size_t(r)] * h_max);
    }
  for (int64_t r = 0; r < kD; ++r) {
    double d = dz[size_t(r)] * h[size_t(r)] * (1 - h[size_t(r)]);
    for (int64_t c = 0; c < kD; ++c) b.dw1[size_t(r * kD + c)] = d * x[size_t(c)];
    b.dw1_mag = std::max(b.dw1_mag, dz_mag[size_t(r)] * 0.25 * x_max);   // s' <= 1/4
  }
  return b;
}

Tensor tensor_of(DType dt, const Shape& s, const Vec& v) { return make(dt, s, v); }

// Max |a - b| over `scale` (default: max |b|).
double rel_err(const Vec& a, const Vec& b, double scale = 0) {
  double d = 0, m = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(a[i] - b[i]));
    m = std::max(m, std::fabs(b[i]));
  }
  return d / (scale > 0 ? scale : m);
}

// Trains for 24 steps; returns {first loss, last loss}. `grad_tol`: the
// largest allowed error of each step's gradients against fp64 backprop at
// the same (dtype-rounded) weights, relative to the magnitude products
// (Backprop::*_mag): a transposed or missing term is off by O(1) of those.
std::pair<double, double> train(DType dt, double grad_tol) {
  const std::string dts = dt == DType::FP16 ? "fp16" : "fp32";
  Program p = parse_mil(forward_program(dts), "<seed-forward>", ".");
  verify(p);
  GradOptions go;
  go.loss = "loss";
  go.wrt = {"W1", "W2"};
  Program g = differentiate(p, go);
  // Nothing of the seed's hand-written backward half is used: the derived
  // function is the forward ops plus what the rules emitted.
  CompileOptions grad_fn;
  grad_fn.function = "main_grad";
  Plan plan = compile(g, grad_fn);

  // The seed test's data and initial weights.
  Vec x, target, w1, w2;
  for (int64_t i = 0; i < kD; ++i) x.push_back(double(float((i * 7 + 3) % 19) / 19.0f - 0.45f));
  for (int64_t i = 0; i < kD; ++i) target.push_back(double(float((i * 11 + 5) % 23) / 23.0f - 0.5f));
  for (int64_t i = 0; i < kD * kD; ++i) w1.push_back((double((i * 13 + 7) % 31) - 15.0) * 0.015);
  for (int64_t i = 0; i < kD * kD; ++i) w2.push_back((double((i * 17 + 11) % 29) - 14.0) * 0.015);
  // The seed's step was 0.15 on 0.5 * sum((y - t)^2); on the mean that is 0.15 * 64 / 2.
  const double lr = 0.15 * double(kD) / 2;

  Tensor xt = tensor_of(dt, {1, 1, 1, kD}, x), tt = tensor_of(dt, {1, kD, 1, 1}, target);
  x = values(xt);
  target = values(tt);
  double first = 0, last = 0;
  for (int step = 0; step < 24; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Tensor w1t = tensor_of(dt, {1, kD, 1, kD}, w1), w2t = tensor_of(dt, {1, kD, 1, kD}, w2);
    w1 = values(w1t);   // the weights as the program sees them
    w2 = values(w2t);
    TensorMap out = plan.run({{"x", xt}, {"target", tt}, {"W1", w1t}, {"W2", w2t}});
    Backprop want = backprop(x, target, w1, w2);
    Vec dw1 = values(out.at("W1_grad")), dw2 = values(out.at("W2_grad"));
    EXPECT_EQ(out.at("W1_grad").shape(), (Shape{1, kD, 1, kD}));
    EXPECT_EQ(out.at("W1_grad").dtype(), dt);
    EXPECT_LE(rel_err(dw1, want.dw1, want.dw1_mag), grad_tol);
    EXPECT_LE(rel_err(dw2, want.dw2, want.dw2_mag), grad_tol);
    double loss = out.at("loss").at(0);
    EXPECT_NEAR(loss, want.loss, grad_tol * want.loss_mag);
    worst_ = std::max({worst_, rel_err(dw1, want.dw1, want.dw1_mag), rel_err(dw2, want.dw2, want.dw2_mag)});
    if (step == 0) first = loss;
    last = loss;
    for (size_t i = 0; i < w1.size(); ++i) {
      w1[i] -= lr * dw1[i];
      w2[i] -= lr * dw2[i];
    }
  }
  return {first, last};
}

// fp32: the plan's gradients agree with fp64 backprop to fp32 accumulation
// error (sums of 64 products, about 64 * 6e-8 relative).
TEST(AutodiffSeed, TwoLayerTrainsFp32) {
  worst_ = 0;
  auto [first, last] = train(DType::FP32, 2e-5);
  RecordProperty("grad_err", sci(worst_));
  RecordProperty("loss_first", sci(first));
  RecordProperty("loss_last", sci(last));
  EXPECT_LT(last, first / 20) << "MSE " << first << " -> " << last;
}

// fp16, as the seed ran: the plan computes in fp32 and rounds the outputs
// (gradients, loss) to fp16, so they agree to fp16's 2^-11 relative.
TEST(AutodiffSeed, TwoLayerTrainsFp16) {
  worst_ = 0;
  auto [first, last] = train(DType::FP16, 2e-3);
  RecordProperty("grad_err", sci(worst_));
  RecordProperty("loss_first", sci(first));
  RecordProperty("loss_last", sci(last));
  EXPECT_LT(last, first / 20) << "MSE " << first << " -> " << last;
}

// The reference executor runs the same derived function: its gradients agree
// with the plan's (the oracle for the compiled backward half).
TEST(AutodiffSeed, PlanMatchesReferenceExecutor) {
  Program p = parse_mil(forward_program("fp32"), "<seed-forward>", ".");
  verify(p);
  GradOptions go;
  go.loss = "loss";
  go.wrt = {"W1", "W2"};
  go.keep_outputs = true;
  Program g = differentiate(p, go);
  CompileOptions grad_fn;
  grad_fn.function = "main_grad";
  Plan plan = compile(g, grad_fn);
  TensorMap in;
  Vec v;
  for (int64_t i = 0; i < kD * kD; ++i) v.push_back(std::sin(double(i)) * 0.1);
  in["W1"] = make(DType::FP32, {1, kD, 1, kD}, v);
  for (auto& e : v) e = -e * 0.5;
  in["W2"] = make(DType::FP32, {1, kD, 1, kD}, v);
  in["x"] = make(DType::FP32, {1, 1, 1, kD}, Vec(v.begin(), v.begin() + kD));
  in["target"] = make(DType::FP32, {1, kD, 1, 1}, Vec(v.begin() + kD, v.begin() + 2 * kD));
  TensorMap ref = run_reference(g, "main_grad", in), got = plan.run(in);
  for (const char* k : {"loss", "W1_grad", "W2_grad", "y"}) EXPECT_LE(rel_err(values(got.at(k)), values(ref.at(k))), 1e-5) << k;
}

}  // namespace
}  // namespace milrt::test
