// Lowering of matmul and linear.
#include <algorithm>
#include <map>

#include "kernels/generic/linalg.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {
std::unique_ptr<Step> lower_matmul(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), y = ctx.input(op, "y"), o = ctx.output(op);
  if (x.dtype != DType::FP32 || y.dtype != DType::FP32) throw_op_error(op, "only float matmul compiles");
  bool tx = ctx.const_bool(op, "transpose_x", false), ty = ctx.const_bool(op, "transpose_y", false);
  Shape xs = x.shape, ys = y.shape;
  // Rank-1 operands: a row vector on the left, a column on the right (flags do not apply).
  if (xs.size() == 1) { xs.insert(xs.begin(), 1); tx = false; }
  if (ys.size() == 1) { ys.push_back(1); ty = false; }
  int64_t m = tx ? xs[xs.size() - 1] : xs[xs.size() - 2];
  int64_t k = tx ? xs[xs.size() - 2] : xs[xs.size() - 1];
  int64_t n = ty ? ys[ys.size() - 2] : ys[ys.size() - 1];
  // Batch offsets of each operand for every output batch, computed once here.
  Shape xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2);
  size_t r = std::max(xb.size(), yb.size());
  xb.insert(xb.begin(), r - xb.size(), 1);
  yb.insert(yb.begin(), r - yb.size(), 1);
  std::vector<int64_t> xoff, yoff;
  int64_t batches = 1;
  for (size_t i = 0; i < r; ++i) batches *= std::max(xb[i], yb[i]);
  for (int64_t b = 0; b < batches; ++b) {
    int64_t rem = b, xo = 0, yo = 0, xs_ = 1, ys_ = 1;
    for (int i = int(r) - 1; i >= 0; --i) {
      int64_t d = std::max(xb[size_t(i)], yb[size_t(i)]), idx = rem % d;
      rem /= d;
      xo += (xb[size_t(i)] == 1 ? 0 : idx) * xs_;
      yo += (yb[size_t(i)] == 1 ? 0 : idx) * ys_;
      xs_ *= xb[size_t(i)];
      ys_ *= yb[size_t(i)];
    }
    xoff.push_back(xo * m * k);
    yoff.push_back(yo * k * n);
  }
  int ix = x.id, iy = y.id, io = o.id;
  auto step = make_step("matmul", op, [=](const Frame& f) {
    const float* a = f.at<float>(ix);
    const float* b = f.at<float>(iy);
    float* c = f.at<float>(io);
    for (size_t bi = 0; bi < xoff.size(); ++bi)
      kernels::matmul_f32(a + xoff[bi], b + yoff[bi], c + int64_t(bi) * m * n, 1, m, n, k, tx, ty, 0, 0);
  });
  step->info.flops = 2.0 * double(batches) * double(m) * double(n) * double(k);
  step->info.bytes = 4.0 * double(x.numel() + y.numel() + o.numel());
  return step;
}

std::unique_ptr<Step> lower_linear(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), w = ctx.input(op, "weight"), o = ctx.output(op);
  int64_t k = w.shape[1], n = w.shape[0], m = x.numel() / k;
  int ib = op.has("bias") ? ctx.input(op, "bias").id : -1;
  int ix = x.id, iw = w.id, io = o.id;
  auto step = make_step("linear", op, [=](const Frame& f) {
    float* c = f.at<float>(io);
    kernels::matmul_f32(f.at<float>(ix), f.at<float>(iw), c, 1, m, n, k, false, true, 0, 0);
    if (ib >= 0) {
      const float* bias = f.at<float>(ib);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * n + j] += bias[j];
    }
  });
  step->info.flops = 2.0 * double(m) * double(n) * double(k);
  step->info.bytes = 4.0 * double(x.numel() + w.numel() + o.numel());
  return step;
}

}  // namespace

void register_linalg_lowerings() {
  register_lowering("matmul", lower_matmul);
  register_lowering("linear", lower_linear);
}

}  // namespace milrt::rt
