// Reference of milrt_rms_norm: x / sqrt(mean(x², axes) + eps) · gamma in
// fp64, rounded once to x's dtype. gamma is indexed row-major over the
// normalized dims, as layer_norm's. And of milrt_rms_norm_grad, from the
// definition of the derivative of y = x · r · w, r = (mean(x²) + eps)^-1/2:
// ∂y_j/∂x_i = w_j · r · (δ_ij - x_i · x_j · r² / n).
#include <cmath>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

void ref_milrt_rms_norm(RefCtx& c) {
  NdArray x = c.nd("x");
  std::vector<bool> normed(size_t(x.rank()), false);
  for (int64_t a : c.ints("axes")) {
    try {
      normed[size_t(norm_axis(a, x.rank()))] = true;
    } catch (const Error& e) {
      c.fail(e.what());
    }
  }
  // For every element: its group (the non-normalized dims) and its place
  // within the group (the normalized dims), both row-major.
  int64_t groups = 1, size = 1;
  for (int d = 0; d < x.rank(); ++d) (normed[size_t(d)] ? size : groups) *= x.shape[size_t(d)];
  std::vector<int64_t> group(size_t(x.numel())), member(size_t(x.numel()));
  std::vector<int64_t> strides = strides_of(x.shape);
  for (int64_t f = 0; f < x.numel(); ++f) {
    int64_t gi = 0, mi = 0;
    for (int d = 0; d < x.rank(); ++d) {
      int64_t i = f / strides[size_t(d)] % x.shape[size_t(d)];
      if (normed[size_t(d)]) mi = mi * x.shape[size_t(d)] + i;
      else gi = gi * x.shape[size_t(d)] + i;
    }
    group[size_t(f)] = gi;
    member[size_t(f)] = mi;
  }
  std::vector<double> gamma(size_t(size), 1.0);
  if (c.has("gamma")) {
    NdArray g = c.nd("gamma");
    if (g.numel() != size) c.fail("gamma must have " + std::to_string(size) + " elements (x's normalized dims)");
    gamma = g.v;
  }
  std::vector<double> ss(size_t(groups), 0.0);
  for (int64_t f = 0; f < x.numel(); ++f) ss[size_t(group[size_t(f)])] += x.v[size_t(f)] * x.v[size_t(f)];
  double eps = c.f64("eps");
  NdArray y(x.shape);
  for (int64_t f = 0; f < x.numel(); ++f)
    y.v[size_t(f)] = x.v[size_t(f)] / std::sqrt(ss[size_t(group[size_t(f)])] / double(size) + eps) *
                     gamma[size_t(member[size_t(f)])];
  c.set_nd(0, y);
}

// Every row of the last dim: dx_i = Σ_j dy_j · ∂y_j/∂x_i, dw_j += dy_j · x_j · r.
void ref_milrt_rms_norm_grad(RefCtx& c) {
  NdArray x = c.nd("x"), w = c.nd("w"), dy = c.nd("dy");
  if (x.rank() < 1 || dy.shape != x.shape) c.fail("dy must have x's shape");
  const int64_t n = x.shape.back(), rows = n > 0 ? x.numel() / n : 0;
  if (w.numel() != n) c.fail("w must have " + std::to_string(n) + " elements");
  const double eps = c.f64("eps");
  NdArray dx(x.shape), dw(w.shape);
  for (int64_t row = 0; row < rows; ++row) {
    const double* xr = x.v.data() + row * n;
    const double* gr = dy.v.data() + row * n;
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += xr[j] * xr[j];
    const double r = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += gr[j] * w.v[size_t(j)] * r * ((i == j ? 1.0 : 0.0) - xr[i] * xr[j] * r * r / double(n));
      dx.v[size_t(row * n + i)] = s;
      dw.v[size_t(i)] += gr[i] * xr[i] * r;
    }
  }
  c.set_nd(0, dx);
  c.set_nd(1, dw);
}

}  // namespace

void register_ref_fused_norm_ops() {
  register_ref("milrt_rms_norm", ref_milrt_rms_norm);
  register_ref("milrt_rms_norm_grad", ref_milrt_rms_norm_grad);
}

}  // namespace milrt::ref
