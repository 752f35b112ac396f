// Gradient rules of matmul, linear and the reductions, checked against
// central differences (tests/support/grad_check.h) on the reference
// executor and, for the derived program, against the compiled plan.
#include <gtest/gtest.h>

#include <random>

#include "milrt/autodiff.h"
#include "support/grad_check.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

struct MatmulCase {
  Shape xs, ys;
  bool tx = false, ty = false;
};

// The output shape of matmul, as MIL defines it (written out here so the
// test does not lean on the inference under test).
Shape matmul_shape(Shape xs, Shape ys, bool tx, bool ty) {
  size_t xr = xs.size(), yr = ys.size();
  if (tx) std::swap(xs[xr - 1], xs[xr - 2]);
  if (ty) std::swap(ys[yr - 1], ys[yr - 2]);
  if (xr == 1) xs.insert(xs.begin(), 1);
  if (yr == 1) ys.push_back(1);
  Shape bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2), out;
  size_t r = std::max(bx.size(), by.size());
  for (size_t i = 0; i < r; ++i) {
    int64_t a = i + bx.size() >= r ? bx[i + bx.size() - r] : 1;
    int64_t b = i + by.size() >= r ? by[i + by.size() - r] : 1;
    out.push_back(std::max(a, b));
  }
  if (xr > 1) out.push_back(xs[xs.size() - 2]);
  if (yr > 1) out.push_back(ys.back());
  return out;
}

class MatmulGrad : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulGrad, MatchesFiniteDifferences) {
  const MatmulCase& m = GetParam();
  Shape zs = matmul_shape(m.xs, m.ys, m.tx, m.ty);
  SCOPED_TRACE(shape_str(m.xs) + (m.tx ? "^T" : "") + " x " + shape_str(m.ys) + (m.ty ? "^T" : ""));
  std::string expr = "matmul(x = x, y = y, transpose_x = " + std::string(m.tx ? "bool(true)" : "bool(false)") +
                     ", transpose_y = " + (m.ty ? "bool(true)" : "bool(false)") + ")";
  if (zs.empty()) {
    // A rank-0 result: the loss is z * w itself.
    std::string body = stmt("fp32", "z", expr) + stmt("fp32", "loss", "mul(x = z, y = w)");
    expect_gradients_match(program_text(mil_type(m.xs) + " x, " + mil_type(m.ys) + " y, fp32 w", body, "loss"), "loss",
                           {"x", "y"});
    return;
  }
  expect_gradients_match(weighted_sum_loss_program(mil_type(m.xs) + " x, " + mil_type(m.ys) + " y", expr, zs), "loss", {"x", "y"});
}

INSTANTIATE_TEST_SUITE_P(
    Linalg, MatmulGrad,
    ::testing::Values(MatmulCase{{2, 3}, {3, 4}}, MatmulCase{{3, 2}, {3, 4}, true, false},
                      MatmulCase{{2, 3}, {4, 3}, false, true}, MatmulCase{{3, 2}, {4, 3}, true, true},
                      MatmulCase{{2, 3, 4}, {2, 4, 5}}, MatmulCase{{2, 4, 3}, {2, 5, 4}, true, true},
                      MatmulCase{{2, 1, 3, 4}, {3, 4, 2}},            // batch dims broadcast both ways
                      MatmulCase{{3, 4}, {2, 4, 5}},                  // x shared by the batch
                      MatmulCase{{2, 2, 3, 4}, {1, 5, 4}, false, true},
                      // a rank-2 weight under batched activations (dY folds the batch into rows)
                      MatmulCase{{2, 3, 4}, {4, 5}}, MatmulCase{{2, 2, 3, 4}, {5, 4}, false, true},
                      MatmulCase{{2, 4, 3}, {4, 5}, true, false},
                      MatmulCase{{4}, {4, 5}}, MatmulCase{{4}, {2, 4, 3}}, MatmulCase{{2, 3, 4}, {4}},
                      MatmulCase{{4, 3}, {4}, true, false}, MatmulCase{{4}, {4}}));

struct LinearCase {
  Shape xs;
  bool bias = true;
};

class LinearGrad : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearGrad, MatchesFiniteDifferences) {
  const LinearCase& l = GetParam();
  Shape zs = l.xs;
  zs.back() = 4;
  std::string params = mil_type(l.xs) + " x, " + mil_type({4, 5}) + " W" + (l.bias ? ", " + mil_type({4}) + " b" : "");
  std::string expr = std::string("linear(x = x, weight = W") + (l.bias ? ", bias = b)" : ")");
  std::vector<std::string> wrt{"x", "W"};
  if (l.bias) wrt.push_back("b");
  expect_gradients_match(weighted_sum_loss_program(params, expr, zs), "loss", wrt);
}

INSTANTIATE_TEST_SUITE_P(Linalg, LinearGrad,
                         ::testing::Values(LinearCase{{5}}, LinearCase{{3, 5}}, LinearCase{{2, 3, 5}},
                                           LinearCase{{3, 5}, false}));

// A constant weight: the gradient reaches x only.
TEST(LinalgGrad, LinearConstWeight) {
  std::string w = "tensor<fp32, [2, 3]>([[0.5, -1, 0.25], [2, 0.1, -0.3]])";
  expect_gradients_match(weighted_sum_loss_program(mil_type({4, 3}) + " x", "linear(x = x, weight = " + w + ")", {4, 2}),
                         "loss", {"x"});
}

struct ReduceCase {
  const char* op;
  Shape xs;
  std::vector<int64_t> axes;   // empty: no axes input (all)
  bool keep = false;
  double lo = -1, hi = 1;
};

class ReduceGrad : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceGrad, MatchesFiniteDifferences) {
  const ReduceCase& r = GetParam();
  Shape zs;
  for (size_t i = 0; i < r.xs.size(); ++i) {
    bool red = r.axes.empty();
    for (int64_t a : r.axes) red = red || size_t(a < 0 ? a + int64_t(r.xs.size()) : a) == i;
    if (!red) zs.push_back(r.xs[i]);
    else if (r.keep) zs.push_back(1);
  }
  std::string expr = std::string(r.op) + "(x = x" + (r.axes.empty() ? "" : ", axes = " + mil_ints(r.axes)) +
                     ", keep_dims = " + (r.keep ? "bool(true)" : "bool(false)") + ")";
  SCOPED_TRACE(expr + " on " + shape_str(r.xs));
  GradCheckOptions o;
  o.lo = r.lo;
  o.hi = r.hi;
  o.ranges["w"] = {-1, 1};
  std::string text;
  if (zs.empty()) {
    std::string body = stmt("fp32", "z", expr) + stmt("fp32", "loss", "mul(x = z, y = w)");
    text = program_text(mil_type(r.xs) + " x, fp32 w", body, "loss");
  } else {
    text = weighted_sum_loss_program(mil_type(r.xs) + " x", expr, zs);
  }
  TensorMap in;
  if (std::string(r.op) == "reduce_l1_norm") {
    // |x| has a kink at 0: values in +-[0.2, 1].
    Tensor t = random_tensor(DType::FP32, r.xs, 4, 0.2, 1);
    for (int64_t i = 0; i < t.numel(); i += 2) t.set(size_t(i), -t.at(size_t(i)));
    in["x"] = t;
  }
  expect_gradients_match(text, "loss", {"x"}, in, o);
}

INSTANTIATE_TEST_SUITE_P(
    Linalg, ReduceGrad,
    ::testing::Values(
        ReduceCase{"reduce_sum", {2, 3, 4}, {1}, false}, ReduceCase{"reduce_sum", {2, 3, 4}, {1}, true},
        ReduceCase{"reduce_sum", {2, 3, 4}, {}, false}, ReduceCase{"reduce_sum", {2, 3, 4}, {0, 2}, true},
        ReduceCase{"reduce_sum", {2, 3, 4}, {-1}, false}, ReduceCase{"reduce_mean", {2, 3, 4}, {1, 2}, false},
        ReduceCase{"reduce_mean", {2, 3, 4}, {0}, true}, ReduceCase{"reduce_mean", {3, 5}, {}, true},
        ReduceCase{"reduce_sum_square", {2, 3, 4}, {2}, false}, ReduceCase{"reduce_sum_square", {4, 3}, {0}, true},
        ReduceCase{"reduce_max", {2, 3, 4}, {1}, false}, ReduceCase{"reduce_max", {3, 5}, {-1}, true},
        ReduceCase{"reduce_min", {2, 3, 4}, {2}, true}, ReduceCase{"reduce_min", {6}, {}, false},
        ReduceCase{"reduce_log_sum_exp", {2, 3, 4}, {2}, false, -2, 2},
        ReduceCase{"reduce_log_sum_exp", {2, 3, 4}, {0, 1}, true, -2, 2},
        ReduceCase{"reduce_l2_norm", {2, 3, 4}, {1}, false}, ReduceCase{"reduce_l2_norm", {3, 4}, {}, true},
        ReduceCase{"reduce_l1_norm", {3, 4}, {1}, false}, ReduceCase{"reduce_log_sum", {3, 4}, {0}, true, 0.5, 2}));

// reduce_max with a tie: the two maxima share the gradient equally (a
// subgradient; finite differences are undefined there).
TEST(LinalgGrad, ReduceMaxTieSharesGradient) {
  std::string body = stmt(mil_type({2}), "z", "reduce_max(x = x, axes = " + mil_ints({1}) + ")") +
                     stmt("fp32", "loss", "reduce_sum(x = z)");
  Program p = parse_mil(program_text(mil_type({2, 3}) + " x", body, "loss"), "<t>", ".");
  GradOptions go;
  go.loss = "loss";
  go.wrt = {"x"};
  TensorMap g = run_reference(differentiate(p, go), "main_grad", {{"x", make(DType::FP32, {2, 3}, {1, 3, 3, 2, 0, -1})}});
  EXPECT_EQ(values(g.at("x_grad")), (std::vector<double>{0, 0.5, 0.5, 1, 0, 0}));
}

// A two-layer perceptron with a shared weight (used twice: gradients add).
TEST(LinalgGrad, TwoLayerWithSharedWeight) {
  std::string body = stmt(mil_type({4, 6}), "h", "matmul(x = x, y = W)") + stmt(mil_type({4, 6}), "a", "tanh(x = h)") +
                     stmt(mil_type({4, 6}), "y", "matmul(x = a, y = V)") + stmt(mil_type({4, 6}), "y2", "matmul(x = y, y = V, transpose_y = bool(true))") +
                     stmt(mil_type({4, 6}), "d", "sub(x = y2, y = t)") + stmt(mil_type({4, 6}), "sq", "mul(x = d, y = d)") +
                     stmt("fp32", "loss", "reduce_mean(x = sq)");
  std::string text = program_text(mil_type({4, 6}) + " x, " + mil_type({6, 6}) + " W, " + mil_type({6, 6}) + " V, " + mil_type({4, 6}) + " t",
                                  body, "loss");
  GradCheckOptions o;
  o.max_elements = 40;
  expect_gradients_match(text, "loss", {"W", "V", "x"}, {}, o);
}

}  // namespace
}  // namespace milrt::test
