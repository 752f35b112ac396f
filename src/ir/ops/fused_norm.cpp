// Schema of milrt_rms_norm, made by the fuse-norms pass:
//
//   milrt_rms_norm(x, gamma?, axes, eps)[fused_from = "..."]
//     = x / sqrt(mean(x², axes) + eps) · gamma
//
// axes: distinct constant ints (negative counting from the end); gamma has
// the shape of x's normalized dims, as MIL's layer_norm gamma, and any float
// dtype; eps is a constant float scalar. The result has x's type.
//
//   milrt_rms_norm_grad(x, w, dy, eps) -> dx, dw
//
// The gradient of rms_norm(x, w, eps) over x's last dim, written by its
// gradient rule (autodiff/rules_nn.cpp): with r = 1 / sqrt(mean(x²) + eps),
// xn = x · r and d = dy · w, dx = r · (d - xn · mean(d · xn)) and dw the sum
// of dy · xn over every row. x and dy: one fp32 type; w: fp32 of the last
// dim's size in any shape; dx has x's type, dw w's.
#include <algorithm>

#include "ir/op_registry.h"

namespace milrt {
namespace {

bool is_float(DType d) { return d == DType::FP16 || d == DType::FP32; }

void infer_rms_norm(InferCtx& c) {
  const Type& x = c.type("x");
  if (!x.is_tensor() || !is_float(x.dtype)) c.fail("x must be an fp16 or fp32 tensor, got " + x.str());
  const int64_t rank = int64_t(x.shape.size());
  if (!dtype_is_int(c.dtype("axes"))) c.fail("axes must be integers, got " + c.type("axes").str());
  auto axes = c.const_ints("axes");
  if (!axes) c.fail("axes must be a compile-time constant");
  if (axes->empty()) c.fail("axes must name at least one dim");
  std::vector<bool> normed(size_t(rank), false);
  for (int64_t a : *axes) {
    int64_t k = normalize_axis(c, a, rank);
    if (normed[size_t(k)]) c.fail("axis " + std::to_string(a) + " is given twice");
    normed[size_t(k)] = true;
  }
  const Type& eps = c.type("eps");
  if (!eps.is_tensor() || !is_float(eps.dtype) || shape_numel(eps.shape) != 1)
    c.fail("eps must be a float scalar, got " + eps.str());
  if (!c.const_float("eps")) c.fail("eps must be a compile-time constant");
  if (c.has("gamma")) {
    const Type& g = c.type("gamma");
    Shape want;
    for (int64_t i = 0; i < rank; ++i)
      if (normed[size_t(i)]) want.push_back(x.shape[size_t(i)]);
    bool ok = g.is_tensor() && is_float(g.dtype) && g.shape.size() == want.size();
    for (size_t i = 0; ok && i < want.size(); ++i) ok = g.shape[i] < 0 || want[i] < 0 || g.shape[i] == want[i];
    if (!ok) c.fail("gamma must be a float tensor of shape " + shape_str(want) + " (x's normalized dims), got " + g.str());
  }
  if (c.has("fused_from") && !c.const_str("fused_from")) c.fail("fused_from must be a constant string");
  c.set_out(x);
}

void infer_rms_norm_grad(InferCtx& c) {
  const Type& x = c.type("x");
  if (!x.is_tensor() || x.dtype != DType::FP32 || x.shape.empty())
    c.fail("x must be an fp32 tensor of rank >= 1, got " + x.str());
  if (c.type("dy") != x) c.fail("dy must be " + x.str() + ", got " + c.type("dy").str());
  const Type& w = c.type("w");
  const int64_t n = x.shape.back();
  if (!w.is_tensor() || w.dtype != DType::FP32 || (n >= 0 && !w.has_unknown_dims() && shape_numel(w.shape) != n))
    c.fail("w must be an fp32 tensor of " + std::to_string(n) + " elements (x's last dim), got " + w.str());
  const Type& eps = c.type("eps");
  if (!eps.is_tensor() || !is_float(eps.dtype) || shape_numel(eps.shape) != 1 || !c.const_float("eps"))
    c.fail("eps must be a constant float scalar, got " + eps.str());
  c.out = {x, w};
}

}  // namespace

void register_fused_norm_ops() {
  register_op({"milrt_rms_norm_grad", {{"x"}, {"w"}, {"dy"}, {"eps"}}, 2, 2, infer_rms_norm_grad});
  register_op({"milrt_rms_norm", {{"x"}, {"gamma", false}, {"axes"}, {"eps"}, {"fused_from", false}}, 1, 1,
               infer_rms_norm});
}

}  // namespace milrt
