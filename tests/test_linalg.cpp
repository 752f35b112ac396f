// Tests of matmul, linear, conv and conv_transpose, run through MIL text on
// the reference executor. Expected values come from naive fp64 loops written
// here; the output sizes and paddings of each conv case are worked out by hand
// from coremltools' rules (noted beside each case).
#include <cmath>
#include <string>
#include <vector>

#include "test_linalg_util.h"

namespace milrt::test::linalg {
namespace {

// ---- naive references -----------------------------------------------------

// Row-major [m, k] x [k, n].
std::vector<double> mm(const double* a, const double* b, int64_t m, int64_t k, int64_t n) {
  std::vector<double> r(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) r[size_t(i * n + j)] += a[i * k + p] * b[p * n + j];
  return r;
}

// A 2-D convolution (or a 1-D one with h = kh = 1), its padding given as the
// leading pad per dim and its output size.
struct Conv2d {
  int64_t n, c, h, w;          // x
  int64_t o, kh, kw;           // weight [o, c / groups, kh, kw]
  int64_t groups = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0;      // padding before (top, left)
  int64_t oh, ow;              // output size
};

std::vector<double> naive_conv(const Conv2d& p, const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>& bias) {
  int64_t cig = p.c / p.groups, cog = p.o / p.groups;
  std::vector<double> out;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t o = 0; o < p.o; ++o)
      for (int64_t oy = 0; oy < p.oh; ++oy)
        for (int64_t ox = 0; ox < p.ow; ++ox) {
          double s = bias.empty() ? 0.0 : bias[size_t(o)];
          int64_t g = o / cog;
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t ky = 0; ky < p.kh; ++ky)
              for (int64_t kx = 0; kx < p.kw; ++kx) {
                int64_t iy = oy * p.sh + ky * p.dh - p.pt, ix = ox * p.sw + kx * p.dw - p.pl;
                if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
                s += x[size_t(((n * p.c + g * cig + ci) * p.h + iy) * p.w + ix)] *
                     w[size_t(((o * cig + ci) * p.kh + ky) * p.kw + kx)];
              }
          out.push_back(s);
        }
  return out;
}

// A 2-D transposed convolution: weight [c, o / groups, kh, kw]; every input
// element scatters through the kernel, then the output window starts
// (pt, pl) into that full result.
std::vector<double> naive_conv_transpose(const Conv2d& p, const std::vector<double>& x,
                                         const std::vector<double>& w, const std::vector<double>& bias) {
  int64_t cig = p.c / p.groups, cog = p.o / p.groups;
  std::vector<double> out(size_t(p.n * p.o * p.oh * p.ow), 0.0);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t o = 0; o < p.o; ++o)
      for (int64_t i = 0; i < p.oh * p.ow; ++i) out[size_t((n * p.o + o) * p.oh * p.ow + i)] = bias.empty() ? 0 : bias[size_t(o)];
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t ci = 0; ci < p.c; ++ci)
      for (int64_t iy = 0; iy < p.h; ++iy)
        for (int64_t ix = 0; ix < p.w; ++ix) {
          double xv = x[size_t(((n * p.c + ci) * p.h + iy) * p.w + ix)];
          int64_t g = ci / cig;
          for (int64_t ol = 0; ol < cog; ++ol)
            for (int64_t ky = 0; ky < p.kh; ++ky)
              for (int64_t kx = 0; kx < p.kw; ++kx) {
                int64_t oy = iy * p.sh + ky * p.dh - p.pt, ox = ix * p.sw + kx * p.dw - p.pl;
                if (oy < 0 || oy >= p.oh || ox < 0 || ox >= p.ow) continue;
                out[size_t(((n * p.o + g * cog + ol) * p.oh + oy) * p.ow + ox)] +=
                    xv * w[size_t(((ci * cog + ol) * p.kh + ky) * p.kw + kx)];
              }
        }
  return out;
}

// ---- matmul ---------------------------------------------------------------

TEST(Matmul, TwoD) {
  In x = input("x", {3, 4}, 1), y = input("y", {4, 5}, 2);
  auto r = run_ops({x, y}, stmt("tensor<fp32, [3, 5]>", "z", "matmul(x = x, y = y)"), "z");
  expect_close(r["z"], {3, 5}, mm(x.v.data(), y.v.data(), 3, 4, 5));
}

TEST(Matmul, BatchDimsBroadcast) {
  // [2, 1, 3, 4] x [3, 4, 2]: batch [2, 1] with [3] gives [2, 3].
  In x = input("x", {2, 1, 3, 4}, 3), y = input("y", {3, 4, 2}, 4);
  auto r = run_ops({x, y}, stmt("tensor<fp32, [2, 3, 3, 2]>", "z", "matmul(x = x, y = y)"), "z");
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      auto m = mm(&x.v[size_t(i * 12)], &y.v[size_t(j * 8)], 3, 4, 2);
      want.insert(want.end(), m.begin(), m.end());
    }
  expect_close(r["z"], {2, 3, 3, 2}, want);
}

TEST(Matmul, TransposeFlags) {
  In x = input("x", {4, 3}, 5), y = input("y", {5, 4}, 6), y2 = input("y2", {4, 5}, 7), x2 = input("x2", {3, 4}, 8);
  std::string body = "    bool t = const()[name = string(\"t\"), val = bool(true)];\n" +
                     stmt("tensor<fp32, [3, 5]>", "both", "matmul(x = x, y = y, transpose_x = t, transpose_y = t)") +
                     stmt("tensor<fp32, [3, 5]>", "tx", "matmul(x = x, y = y2, transpose_x = t)") +
                     stmt("tensor<fp32, [3, 5]>", "ty", "matmul(x = x2, y = y, transpose_y = bool(true))");
  auto r = run_ops({x, y, y2, x2}, body, "both, tx, ty");
  std::vector<double> both, tx, ty;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      double sb = 0, sx = 0, sy = 0;
      for (int p = 0; p < 4; ++p) {
        sb += x.v[size_t(p * 3 + i)] * y.v[size_t(j * 4 + p)];
        sx += x.v[size_t(p * 3 + i)] * y2.v[size_t(p * 5 + j)];
        sy += x2.v[size_t(i * 4 + p)] * y.v[size_t(j * 4 + p)];
      }
      both.push_back(sb);
      tx.push_back(sx);
      ty.push_back(sy);
    }
  expect_close(r["both"], {3, 5}, both);
  expect_close(r["tx"], {3, 5}, tx);
  expect_close(r["ty"], {3, 5}, ty);
}

TEST(Matmul, RankOneOperands) {
  In v = input("v", {4}, 9), w = input("w", {4}, 10), b = input("b", {2, 4, 3}, 11), a = input("a", {2, 3, 4}, 12);
  std::string body = stmt("tensor<fp32, [2, 3]>", "vb", "matmul(x = v, y = b)") +
                     stmt("tensor<fp32, [2, 3]>", "av", "matmul(x = a, y = v)") +
                     stmt("tensor<fp32, [2, 3]>", "vat", "matmul(x = v, y = a, transpose_y = bool(true))") +
                     stmt("fp32", "dot", "matmul(x = v, y = w)");
  auto r = run_ops({v, w, b, a}, body, "vb, av, vat, dot");
  std::vector<double> vb, av;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double s1 = 0, s2 = 0;
      for (int p = 0; p < 4; ++p) {
        s1 += v.v[size_t(p)] * b.v[size_t(i * 12 + p * 3 + j)];
        s2 += a.v[size_t(i * 12 + j * 4 + p)] * v.v[size_t(p)];
      }
      vb.push_back(s1);
      av.push_back(s2);
    }
  double dot = 0;
  for (int p = 0; p < 4; ++p) dot += v.v[size_t(p)] * w.v[size_t(p)];
  expect_close(r["vb"], {2, 3}, vb);
  expect_close(r["av"], {2, 3}, av);
  expect_close(r["vat"], {2, 3}, av);
  expect_close(r["dot"], {}, {dot});
}

TEST(Matmul, Int32) {
  In x{"x", DType::Int32, {2, 2}, {1, 2, 3, 4}}, y{"y", DType::Int32, {2, 2}, {5, -6, 7, 8}};
  auto r = run_ops({x, y}, stmt("tensor<int32, [2, 2]>", "z", "matmul(x = x, y = y)"), "z");
  EXPECT_EQ(r["z"].dtype(), DType::Int32);
  EXPECT_EQ(values(r["z"]), (std::vector<double>{19, 10, 43, 14}));
}

TEST(Matmul, Fp16RoundsOnceAtTheEnd) {
  // Products of 1/16-grid values are exact; the 8-term sums are exact in
  // fp64 and need more bits than fp16 has, so the result shows one rounding.
  In x = input("x", {3, 8}, 13, DType::FP16), y = input("y", {8, 4}, 14, DType::FP16);
  auto r = run_ops({x, y}, stmt("tensor<fp16, [3, 4]>", "z", "matmul(x = x, y = y)"), "z");
  std::vector<double> exact = mm(x.v.data(), y.v.data(), 3, 8, 4), got = values(r["z"]);
  ASSERT_EQ(r["z"].dtype(), DType::FP16);
  int rounded = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    double want = f16_to_f32(f32_to_f16(float(exact[i])));
    EXPECT_EQ(got[i], want) << "element " << i << " exact " << exact[i];
    rounded += want != exact[i];
  }
  EXPECT_GT(rounded, 0) << "test data should exercise fp16 rounding";
}

TEST(Matmul, Errors) {
  In x = input("x", {3, 4}, 1), y = input("y", {5, 2}, 2);
  expect_error_naming([&] { run_ops({x, y}, stmt("tensor<fp32, [3, 2]>", "z", "matmul(x = x, y = y)"), "z"); },
                      "matmul", "inner dimensions");
  In y2 = input("y", {4, 2}, 2);
  expect_error_naming([&] { run_ops({x, y2}, stmt("tensor<fp32, [3, 3]>", "z", "matmul(x = x, y = y)"), "z"); },
                      "matmul", "declared");
  // run_body would legalize this one into reshapes (a size-1 layout idiom).
  expect_error_naming(
      [&] {
        verify_body("tensor<fp32, [4]> v, tensor<fp32, [4, 2]> y",
                    stmt("tensor<fp32, [2]>", "z", "matmul(x = v, y = y, transpose_x = bool(true))"), "z");
      },
      "matmul", "transpose_x");
  In y3 = input("y", {2, 4, 2}, 4), x3 = input("x", {3, 3, 4}, 5);
  expect_error_naming([&] { run_ops({x3, y3}, stmt("tensor<fp32, [3, 3, 2]>", "z", "matmul(x = x, y = y)"), "z"); },
                      "matmul", "broadcast");
}

// ---- linear ---------------------------------------------------------------

TEST(Linear, WeightTransposedPlusBias) {
  In x = input("x", {2, 3, 4}, 1), w = input("w", {5, 4}, 2), b = input("b", {5}, 3), v = input("v", {4}, 4);
  std::string body = stmt("tensor<fp32, [2, 3, 5]>", "z", "linear(x = x, weight = w, bias = b)") +
                     stmt("tensor<fp32, [5]>", "zv", "linear(x = v, weight = w)");
  auto r = run_ops({x, w, b, v}, body, "z, zv");
  std::vector<double> want, wantv;
  for (int row = 0; row < 6; ++row)
    for (int o = 0; o < 5; ++o) {
      double s = b.v[size_t(o)];
      for (int i = 0; i < 4; ++i) s += x.v[size_t(row * 4 + i)] * w.v[size_t(o * 4 + i)];
      want.push_back(s);
    }
  for (int o = 0; o < 5; ++o) {
    double s = 0;
    for (int i = 0; i < 4; ++i) s += v.v[size_t(i)] * w.v[size_t(o * 4 + i)];
    wantv.push_back(s);
  }
  expect_close(r["z"], {2, 3, 5}, want);
  expect_close(r["zv"], {5}, wantv);
}

TEST(Linear, Errors) {
  In x = input("x", {2, 3}, 1), w = input("w", {5, 4}, 2), b = input("b", {4}, 3);
  expect_error_naming([&] { run_ops({x, w}, stmt("tensor<fp32, [2, 5]>", "z", "linear(x = x, weight = w)"), "z"); },
                      "linear", "weight");
  In x4 = input("x", {2, 4}, 1);
  expect_error_naming(
      [&] { run_ops({x4, w, b}, stmt("tensor<fp32, [2, 5]>", "z", "linear(x = x, weight = w, bias = b)"), "z"); },
      "linear", "bias");
  In x0 = input("x", {}, 1);
  expect_error_naming([&] { run_ops({x0, w}, stmt("tensor<fp32, [5]>", "z", "linear(x = x, weight = w)"), "z"); },
                      "linear", "rank");
}

// coremltools documents x of rank 1 to 3, but its converter emits linear on
// rank-4 activations and Core ML runs them (docs/mil-deviations.md): every
// leading dim is a batch dim.
TEST(Linear, Rank4And5InputsAreBatches) {
  In w = input("w", {5, 4}, 2), b = input("b", {5}, 3);
  for (Shape xs : {Shape{2, 3, 2, 4}, Shape{1, 2, 3, 1, 4}}) {
    In x = input("x", xs, 7);
    Shape os = xs;
    os.back() = 5;
    auto r = run_ops({x, w, b}, stmt(ttype(DType::FP32, os), "z", "linear(x = x, weight = w, bias = b)"), "z");
    std::vector<double> want;
    for (int64_t row = 0; row < shape_numel(xs) / 4; ++row)
      for (int o = 0; o < 5; ++o) {
        double s = b.v[size_t(o)];
        for (int i = 0; i < 4; ++i) s += x.v[size_t(row * 4 + i)] * w.v[size_t(o * 4 + i)];
        want.push_back(s);
      }
    expect_close(r["z"], os, want);
  }
}

// ---- conv -----------------------------------------------------------------

// Runs conv(x, weight[, bias], ARGS) declared as `out` and compares with the naive loop.
void check_conv(const Conv2d& p, const Shape& xs, const Shape& ws, const Shape& out, const std::string& args,
                bool bias, uint32_t seed) {
  In x = input("x", xs, seed), w = input("w", ws, seed + 1), b = input("b", {p.o}, seed + 2);
  std::vector<In> ins = {x, w};
  if (bias) ins.push_back(b);
  std::string call = "conv(x = x, weight = w" + std::string(bias ? ", bias = b" : "") + args + ")";
  auto r = run_ops(ins, stmt(ttype(DType::FP32, out), "z", call), "z");
  expect_close(r["z"], out, naive_conv(p, x.v, w.v, bias ? b.v : std::vector<double>{}));
}

TEST(Conv, OneDStridesDilationsCustomPadBias) {
  // in 9, k 3, dilation 2 (dilated 5), pad 1 + 2, stride 2: floor((9 + 3 - 5) / 2) + 1 = 4.
  Conv2d p{.n = 2, .c = 3, .h = 1, .w = 9, .o = 4, .kh = 1, .kw = 3, .sw = 2, .dw = 2, .pl = 1, .oh = 1, .ow = 4};
  check_conv(p, {2, 3, 9}, {4, 3, 3}, {2, 4, 4},
             ", strides = " + ints_lit({2}) + ", dilations = " + ints_lit({2}) +
                 ", pad_type = string(\"custom\"), pad = " + ints_lit({1, 2}),
             true, 20);
}

TEST(Conv, OneDSameAndSameLowerWithEvenKernel) {
  // in 5, k 4, stride 1: 5 outputs, 3 padding units: same puts 1 before, same_lower 2.
  Conv2d p{.n = 1, .c = 2, .h = 1, .w = 5, .o = 2, .kh = 1, .kw = 4, .pl = 1, .oh = 1, .ow = 5};
  check_conv(p, {1, 2, 5}, {2, 2, 4}, {1, 2, 5}, ", pad_type = string(\"same\")", false, 30);
  p.pl = 2;
  check_conv(p, {1, 2, 5}, {2, 2, 4}, {1, 2, 5}, ", pad_type = string(\"same_lower\")", false, 30);
}

TEST(Conv, TwoDEveryPadType) {
  // x [1, 2, 7, 6], kernel 4 x 3, strides 2 x 2.
  Conv2d p{.n = 1, .c = 2, .h = 7, .w = 6, .o = 3, .kh = 4, .kw = 3, .sh = 2, .sw = 2, .oh = 2, .ow = 2};
  Shape xs = {1, 2, 7, 6}, ws = {3, 2, 4, 3};
  std::string st = ", strides = " + ints_lit({2, 2});
  // valid: floor((7 - 4) / 2) + 1 = 2, floor((6 - 3) / 2) + 1 = 2.
  check_conv(p, xs, ws, {1, 3, 2, 2}, st + ", pad_type = string(\"valid\")", true, 40);
  // same: ceil(7 / 2) = 4 with 2*4 - 7 + 4 - 2 = 3 padding rows (1 before);
  //       ceil(6 / 2) = 3 with 2*3 - 6 + 3 - 2 = 1 padding column (0 before).
  p.oh = 4, p.ow = 3, p.pt = 1, p.pl = 0;
  check_conv(p, xs, ws, {1, 3, 4, 3}, st + ", pad_type = string(\"same\")", true, 41);
  // same_lower: the odd unit goes before: 2 rows, 1 column.
  p.pt = 2, p.pl = 1;
  check_conv(p, xs, ws, {1, 3, 4, 3}, st + ", pad_type = string(\"same_lower\")", true, 42);
  // custom [1, 2, 0, 3]: floor((7 + 3 - 4) / 2) + 1 = 4, floor((6 + 3 - 3) / 2) + 1 = 4.
  p.oh = 4, p.ow = 4, p.pt = 1, p.pl = 0;
  check_conv(p, xs, ws, {1, 3, 4, 4}, st + ", pad_type = string(\"custom\"), pad = " + ints_lit({1, 2, 0, 3}), false,
             43);
  // same with dilations [2, 1]: dilated kernel 7 rows, 2*4 - 7 + 7 - 2 = 6 padding rows (3 before).
  p.dh = 2, p.oh = 4, p.ow = 3, p.pt = 3, p.pl = 0;
  check_conv(p, xs, ws, {1, 3, 4, 3}, st + ", dilations = " + ints_lit({2, 1}) + ", pad_type = string(\"same\")",
             false, 44);
}

TEST(Conv, PadIsIgnoredUnlessCustom) {
  Conv2d p{.n = 1, .c = 2, .h = 5, .w = 5, .o = 2, .kh = 3, .kw = 3, .oh = 3, .ow = 3};
  check_conv(p, {1, 2, 5, 5}, {2, 2, 3, 3}, {1, 2, 3, 3}, ", pad_type = string(\"valid\"), pad = " + ints_lit({1, 1, 1, 1}),
             false, 50);
}

TEST(Conv, Groups) {
  // 4 input channels in 2 groups of 2; 6 outputs, 3 per group.
  Conv2d p{.n = 1, .c = 4, .h = 5, .w = 5, .o = 6, .kh = 3, .kw = 3, .groups = 2, .oh = 3, .ow = 3};
  check_conv(p, {1, 4, 5, 5}, {6, 2, 3, 3}, {1, 6, 3, 3}, ", groups = int32(2)", true, 60);
}

TEST(Conv, DepthwiseSame) {
  // groups = C_in = 3, two filters per channel; same: 5 x 4 outputs, 1 padding unit before each.
  Conv2d p{.n = 1, .c = 3, .h = 5, .w = 4, .o = 6, .kh = 3, .kw = 3, .groups = 3, .pt = 1, .pl = 1, .oh = 5, .ow = 4};
  check_conv(p, {1, 3, 5, 4}, {6, 1, 3, 3}, {1, 6, 5, 4}, ", groups = int32(3), pad_type = string(\"same\")", true, 70);
}

TEST(Conv, DefaultsArePointwiseValid) {
  // The seeds' form: conv(weight, x) alone on [1, C, 1, 1].
  Conv2d p{.n = 1, .c = 8, .h = 1, .w = 1, .o = 4, .kh = 1, .kw = 1, .oh = 1, .ow = 1};
  check_conv(p, {1, 8, 1, 1}, {4, 8, 1, 1}, {1, 4, 1, 1}, "", false, 80);
}

TEST(Conv, ThreeD) {
  // A size-1 depth with a depth-1 kernel reduces 3-D to the 2-D naive loop.
  // H: floor((5 + 2 - 3) / 2) + 1 = 3; W: floor((4 + 1 - 3) / 1) + 1 = 3.
  Conv2d p{.n = 1, .c = 2, .h = 5, .w = 4, .o = 3, .kh = 3, .kw = 3, .sh = 2, .pt = 1, .pl = 0, .oh = 3, .ow = 3};
  check_conv(p, {1, 2, 1, 5, 4}, {3, 2, 1, 3, 3}, {1, 3, 1, 3, 3},
             ", strides = " + ints_lit({1, 2, 1}) + ", pad_type = string(\"custom\"), pad = " +
                 ints_lit({0, 0, 1, 1, 0, 1}),
             true, 90);
}

TEST(Conv, Errors) {
  In x = input("x", {1, 3, 5, 5}, 1), w = input("w", {4, 1, 3, 3}, 2);
  expect_error_naming(
      [&] { run_ops({x, w}, stmt("tensor<fp32, [1, 4, 3, 3]>", "z", "conv(x = x, weight = w, groups = int32(2))"), "z"); },
      "conv", "divisible by groups");
  In w3 = input("w", {3, 3, 3, 3}, 2);
  expect_error_naming(
      [&] { run_ops({x, w3}, stmt("tensor<fp32, [1, 3, 4, 4]>", "z", "conv(x = x, weight = w)"), "z"); }, "conv",
      "declared");
  expect_error_naming(
      [&] {
        run_ops({x, w3}, stmt("tensor<fp32, [1, 3, 3, 3]>", "z", "conv(x = x, weight = w, pad_type = string(\"full\"))"),
                "z");
      },
      "conv", "pad_type");
  In s{"s", DType::Int32, {2}, {1, 1}};
  expect_error_naming(
      [&] { run_ops({x, w3, s}, stmt("tensor<fp32, [1, 3, 3, 3]>", "z", "conv(x = x, weight = w, strides = s)"), "z"); },
      "conv", "compile-time constant");
  In w5 = input("w", {3, 3, 7, 3}, 2);
  expect_error_naming([&] { run_ops({x, w5}, stmt("tensor<fp32, [1, 3, 1, 3]>", "z", "conv(x = x, weight = w)"), "z"); },
                      "conv", "output size");
}

// ---- conv_transpose -------------------------------------------------------

TEST(ConvTranspose, HandComputedOneD) {
  // [1, 2] through a ones kernel of 3 at stride 2: 1 1 (1+2) 2 2.
  In x{"x", DType::FP32, {1, 1, 2}, {1, 2}}, w{"w", DType::FP32, {1, 1, 3}, {1, 1, 1}};
  auto r = run_ops({x, w}, stmt("tensor<fp32, [1, 1, 5]>", "z", "conv_transpose(x = x, weight = w, strides = " + ints_lit({2}) + ")"),
                   "z");
  expect_close(r["z"], {1, 1, 5}, {1, 1, 3, 2, 2});
}

void check_conv_transpose(const Conv2d& p, const Shape& xs, const Shape& ws, const Shape& out, const std::string& args,
                          bool bias, uint32_t seed) {
  In x = input("x", xs, seed), w = input("w", ws, seed + 1), b = input("b", {p.o}, seed + 2);
  std::vector<In> ins = {x, w};
  if (bias) ins.push_back(b);
  std::string call = "conv_transpose(x = x, weight = w" + std::string(bias ? ", bias = b" : "") + args + ")";
  auto r = run_ops(ins, stmt(ttype(DType::FP32, out), "z", call), "z");
  expect_close(r["z"], out, naive_conv_transpose(p, x.v, w.v, bias ? b.v : std::vector<double>{}));
}

TEST(ConvTranspose, OneDCustomPadWithBias) {
  // full length (5 - 1) * 2 + 3 = 11, minus pad 1 + 2 = 8, window from 1.
  Conv2d p{.n = 2, .c = 3, .h = 1, .w = 5, .o = 2, .kh = 1, .kw = 3, .sw = 2, .pl = 1, .oh = 1, .ow = 8};
  check_conv_transpose(p, {2, 3, 5}, {3, 2, 3}, {2, 2, 8},
                       ", strides = " + ints_lit({2}) + ", pad_type = string(\"custom\"), pad = " + ints_lit({1, 2}), true,
                       100);
}

TEST(ConvTranspose, TwoDValidStridesDilations) {
  // H: (3 - 1) * 2 + 3 = 7; W: (4 - 1) * 1 + (2 - 1) * 2 + 1 = 6.
  Conv2d p{.n = 1, .c = 2, .h = 3, .w = 4, .o = 3, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .dh = 1, .dw = 2, .oh = 7, .ow = 6};
  check_conv_transpose(p, {1, 2, 3, 4}, {2, 3, 3, 2}, {1, 3, 7, 6},
                       ", strides = " + ints_lit({2, 1}) + ", dilations = " + ints_lit({1, 2}), true, 110);
}

TEST(ConvTranspose, TwoDCustomAndSame) {
  Conv2d p{.n = 1, .c = 2, .h = 3, .w = 4, .o = 3, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .dh = 1, .dw = 2,
           .pt = 1, .pl = 1, .oh = 6, .ow = 4};
  // custom [1, 0, 1, 1] crops the 7 x 6 result to 6 x 4 starting at (1, 1).
  check_conv_transpose(p, {1, 2, 3, 4}, {2, 3, 3, 2}, {1, 3, 6, 4},
                       ", strides = " + ints_lit({2, 1}) + ", dilations = " + ints_lit({1, 2}) +
                           ", pad_type = string(\"custom\"), pad = " + ints_lit({1, 0, 1, 1}),
                       false, 120);
  // same, kernel 4 x 3, strides 2: outputs 6 x 8; the full 8 x 9 result loses
  // floor(2 / 2) = 1 row and floor(1 / 2) = 0 columns in front.
  Conv2d q{.n = 1, .c = 2, .h = 3, .w = 4, .o = 3, .kh = 4, .kw = 3, .sh = 2, .sw = 2, .pt = 1, .pl = 0, .oh = 6, .ow = 8};
  check_conv_transpose(q, {1, 2, 3, 4}, {2, 3, 4, 3}, {1, 3, 6, 8},
                       ", strides = " + ints_lit({2, 2}) + ", pad_type = string(\"same\")", true, 130);
}

TEST(ConvTranspose, OutputShapeExtendsWithZeros) {
  // valid: full result 7 x 8; output_shape asks for 8 x 9, the extra row and column hold only the bias.
  Conv2d p{.n = 1, .c = 2, .h = 3, .w = 4, .o = 3, .kh = 3, .kw = 2, .sh = 2, .sw = 2, .oh = 8, .ow = 9};
  check_conv_transpose(p, {1, 2, 3, 4}, {2, 3, 3, 2}, {1, 3, 8, 9},
                       ", strides = " + ints_lit({2, 2}) + ", output_shape = " + ints_lit({1, 3, 8, 9}), true, 140);
}

TEST(ConvTranspose, Groups) {
  // 4 input channels in 2 groups; weight [4, 2, 3, 3] gives 2 * 2 = 4 outputs.
  Conv2d p{.n = 1, .c = 4, .h = 3, .w = 3, .o = 4, .kh = 3, .kw = 3, .groups = 2, .oh = 5, .ow = 5};
  check_conv_transpose(p, {1, 4, 3, 3}, {4, 2, 3, 3}, {1, 4, 5, 5}, ", groups = int32(2)", true, 150);
}

TEST(ConvTranspose, ThreeD) {
  // Size-1 depth and depth-1 kernel: the 2-D loop. H: (3 - 1) * 2 + 3 = 7; W: (4 - 1) * 1 + 2 = 5.
  Conv2d p{.n = 1, .c = 2, .h = 3, .w = 4, .o = 3, .kh = 3, .kw = 2, .sh = 2, .oh = 7, .ow = 5};
  check_conv_transpose(p, {1, 2, 1, 3, 4}, {2, 3, 1, 3, 2}, {1, 3, 1, 7, 5}, ", strides = " + ints_lit({1, 2, 1}), true,
                       160);
}

TEST(ConvTranspose, Errors) {
  In x = input("x", {1, 3, 3, 3}, 1), w = input("w", {3, 2, 3, 3}, 2);
  expect_error_naming(
      [&] {
        run_ops({x, w}, stmt("tensor<fp32, [1, 4, 5, 5]>", "z", "conv_transpose(x = x, weight = w, groups = int32(2))"), "z");
      },
      "conv_transpose", "divisible by groups");
  expect_error_naming(
      [&] { run_ops({x, w}, stmt("tensor<fp32, [1, 2, 6, 6]>", "z", "conv_transpose(x = x, weight = w)"), "z"); },
      "conv_transpose", "declared");
  expect_error_naming(
      [&] {
        run_ops({x, w},
                stmt("tensor<fp32, [1, 2, 5, 5]>", "z",
                     "conv_transpose(x = x, weight = w, output_shape = " + ints_lit({1, 3, 5, 5}) + ")"),
                "z");
      },
      "conv_transpose", "output_shape");
}

}  // namespace
}  // namespace milrt::test::linalg
