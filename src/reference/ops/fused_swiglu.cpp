// Reference of milrt_silu_mul and milrt_silu_mul_grad (ir/ops/fused_swiglu.cpp)
// in fp64 with libm's exp; the gradient from the product rule:
// d/da [a σ(a) b] = b (σ(a) + a σ(a)(1 - σ(a))).
#include <cmath>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

void ref_silu_mul(RefCtx& c) {
  NdArray a = c.nd("a"), b = c.nd("b");
  if (a.shape != b.shape) c.fail("a and b must have one shape");
  NdArray y(a.shape);
  for (size_t i = 0; i < a.v.size(); ++i) y.v[i] = a.v[i] * sigmoid(a.v[i]) * b.v[i];
  c.set_nd(0, y);
}

void ref_silu_mul_grad(RefCtx& c) {
  NdArray a = c.nd("a"), b = c.nd("b"), dy = c.nd("dy");
  if (a.shape != b.shape || a.shape != dy.shape) c.fail("a, b and dy must have one shape");
  NdArray da(a.shape), db(a.shape);
  for (size_t i = 0; i < a.v.size(); ++i) {
    const double s = sigmoid(a.v[i]);
    da.v[i] = dy.v[i] * b.v[i] * (s + a.v[i] * s * (1 - s));
    db.v[i] = dy.v[i] * a.v[i] * s;
  }
  c.set_nd(0, da);
  c.set_nd(1, db);
}

}  // namespace

void register_ref_swiglu_ops() {
  register_ref("milrt_silu_mul", ref_silu_mul);
  register_ref("milrt_silu_mul_grad", ref_silu_mul_grad);
}

}  // namespace milrt::ref
