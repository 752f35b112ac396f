// Reference of milrt_rope (ir/ops/fused_rope.cpp) in fp64, element by
// element from the definition: partner p = i ^ 1 (the other element of the
// pair), y[i] = x[i]·cos[i] + x[p]·sin[i], or sin[p] when transposed.
#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

void ref_milrt_rope(RefCtx& c) {
  NdArray x = c.nd("x"), cs = c.nd("cos"), sn = c.nd("sin");
  if (x.rank() < 2) c.fail("x must have rank >= 2");
  const int64_t t = x.shape[size_t(x.rank() - 2)], w = x.shape.back();
  if (w % 2 != 0) c.fail("x's last dim must be even");
  if (cs.shape != Shape{t, w} || sn.shape != Shape{t, w}) c.fail("cos and sin must be [T, W]");
  const bool transpose = c.flag("transpose", false);
  NdArray y(x.shape);
  for (int64_t f = 0; f < x.numel(); ++f) {
    const int64_t i = f % w, pos = f / w % t, partner = i ^ 1;
    const double s = sn.v[size_t(pos * w + (transpose ? partner : i))];
    y.v[size_t(f)] = x.v[size_t(f)] * cs.v[size_t(pos * w + i)] + x.v[size_t(f - i + partner)] * s;
  }
  c.set_nd(0, y);
}

}  // namespace

void register_ref_rope_ops() { register_ref("milrt_rope", ref_milrt_rope); }

}  // namespace milrt::ref
