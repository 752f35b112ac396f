// Reference milrt_gemm: residual + act(alpha · matmul(x, y) + bias), all in
// fp64 and rounded once to the output dtype. The matmul is written out here
// (not the reference matmul, which would round its result first).
#include <cmath>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

NdArray transposed_last_two(const NdArray& a) {
  NdArray r(a.shape);
  const size_t k = a.shape.size();
  std::swap(r.shape[k - 1], r.shape[k - 2]);
  const int64_t m = a.shape[k - 2], n = a.shape[k - 1];
  if (m * n == 0) return r;
  for (int64_t b = 0; b < a.numel() / (m * n); ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) r.v[size_t(b * m * n + j * m + i)] = a.v[size_t(b * m * n + i * n + j)];
  return r;
}

double activate(const std::string& act, double v) {
  if (act == "relu") return v > 0 ? v : 0;
  if (act == "sigmoid") return 1 / (1 + std::exp(-v));
  if (act == "silu") return v / (1 + std::exp(-v));
  if (act == "gelu_tanh") {
    const double pi = 3.14159265358979323846;
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / pi) * (v + 0.044715 * v * v * v)));
  }
  return v;
}

// y_scale: y holds int8 or int4 [N, K] and the weight is y_scale[j, i / b] · y[j, i].
NdArray dequantized_y(RefCtx& c) {
  NdArray y = c.nd("y");
  if (!c.has("y_scale")) return y;
  const NdArray s = c.nd("y_scale");
  if (y.rank() != 2 || s.rank() != 2 || s.shape[0] != y.shape[0] || s.shape[1] <= 0 || y.shape[1] % s.shape[1] != 0)
    c.fail("y_scale " + shape_str(s.shape) + " must be [N, K / block] for y " + shape_str(y.shape));
  const int64_t k = y.shape[1], nb = s.shape[1], b = k / nb;
  for (int64_t j = 0; j < y.shape[0]; ++j)
    for (int64_t i = 0; i < k; ++i) y.v[size_t(j * k + i)] *= s.v[size_t(j * nb + i / b)];
  return y;
}

void ref_gemm(RefCtx& c) {
  NdArray x = c.nd("x"), y = dequantized_y(c);
  if (x.rank() == 0 || y.rank() == 0) c.fail("x and y must have rank >= 1");
  const bool xvec = x.rank() == 1, yvec = y.rank() == 1;
  if (c.flag("transpose_x", false)) {
    if (xvec) c.fail("x is rank 1, so transpose_x must be false");
    x = transposed_last_two(x);
  }
  if (c.flag("transpose_y", false)) {
    if (yvec) c.fail("y is rank 1, so transpose_y must be false");
    y = transposed_last_two(y);
  }
  if (xvec) x.shape.insert(x.shape.begin(), 1);
  if (yvec) y.shape.push_back(1);
  const size_t xr = x.shape.size(), yr = y.shape.size();
  const int64_t m = x.shape[xr - 2], k = x.shape[xr - 1], n = y.shape[yr - 1];
  if (y.shape[yr - 2] != k) c.fail("inner dimensions do not match: " + shape_str(x.shape) + " x " + shape_str(y.shape));
  const Shape xb(x.shape.begin(), x.shape.end() - 2), yb(y.shape.begin(), y.shape.end() - 2);
  const Shape ob = broadcast(xb, yb);

  std::vector<double> bias(size_t(n), 0.0);
  if (c.has("bias")) {
    NdArray b = c.nd("bias");
    if (b.rank() != 1 || b.shape[0] != n) c.fail("bias " + shape_str(b.shape) + " must be [" + std::to_string(n) + "]");
    bias = b.v;
  }
  const double alpha = c.has("alpha") ? c.f64("alpha") : 1.0;
  const std::string act = c.str("activation", std::string("none"));

  Shape os = ob;
  os.push_back(m);
  os.push_back(n);
  NdArray out(os);
  const int64_t batches = shape_numel(ob);
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<int64_t> idx(ob.size());
    for (int64_t rem = b, d = int64_t(ob.size()) - 1; d >= 0; --d) {
      idx[size_t(d)] = rem % ob[size_t(d)];
      rem /= ob[size_t(d)];
    }
    const int64_t xo = broadcast_index(idx, ob, xb) * m * k, yo = broadcast_index(idx, ob, yb) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += x.v[size_t(xo + i * k + p)] * y.v[size_t(yo + p * n + j)];
        out.v[size_t((b * m + i) * n + j)] = activate(act, alpha * s + bias[size_t(j)]);
      }
  }
  if (yvec) out.shape.pop_back();
  if (xvec) out.shape.erase(out.shape.end() - (yvec ? 1 : 2));
  if (c.has("residual")) {
    NdArray r = c.nd("residual");
    if (r.shape != out.shape)
      c.fail("residual " + shape_str(r.shape) + " must have the result's shape " + shape_str(out.shape));
    for (size_t i = 0; i < out.v.size(); ++i) out.v[i] += r.v[i];
  }
  c.set_nd(0, out);
}

}  // namespace

void register_ref_fused_gemm_ops() { register_ref("milrt_gemm", ref_gemm); }

}  // namespace milrt::ref
