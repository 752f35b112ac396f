// Schemas of milrt_softmax and milrt_attention, made by the fuse-attention
// pass (src/passes/fuse_attention.cpp).
//
//   milrt_softmax(x, mask?, scale, axis)       softmax(scale·x + mask) along axis
//   milrt_attention(q, k, v, mask?, scale, causal)
//       softmax(scale·q·kᵀ + mask [+ causal]) · v over the last two dims;
//       q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] -> [..., Tq, Dv],
//       batch dims broadcast. mask: additive float, or bool (true = keep),
//       broadcastable to [..., Tq, Tk]. causal: query i sees keys
//       j <= i + (Tk - Tq). An optional second output, fp32 [..., Tq],
//       is each row's log-sum-exp of the masked, scaled scores (-inf for a
//       row that sees no key), for milrt_attention_grad.
//   milrt_attention_grad(q, k, v, o, dout, lse?, mask?, scale, causal) -> dq, dk, dv
//       the gradients of milrt_attention's o (the same q, k, v, mask,
//       scale, causal) given dout = ∂loss/∂o; o must be that forward's
//       output, and lse, when given, that forward's second output. Each
//       has the broadcast batch dims ([..., Tq, D],
//       [..., Tk, D], [..., Tk, Dv]): a gradient rule sums them down to
//       the inputs' shapes. Made by the autodiff rules of milrt_attention and
//       scaled_dot_product_attention.
// All carry `fused_from` (a string: the output names of the ops replaced).
#include "ir/op_registry.h"

namespace milrt {
namespace {

bool is_float(DType d) { return d == DType::FP16 || d == DType::FP32; }

void require_float_tensor(const InferCtx& c, const std::string& key) {
  if (!c.type(key).is_tensor() || !is_float(c.dtype(key)))
    c.fail("input '" + key + "' must be an fp16 or fp32 tensor, got " + c.type(key).str());
}

void require_const_scalar(const InferCtx& c, const std::string& key, bool floating) {
  const Type& t = c.type(key);
  if (!t.is_scalar()) c.fail("input '" + key + "' must be a scalar, got " + t.str());
  bool ok = floating ? is_float(t.dtype) : t.dtype == (key == "causal" ? DType::Bool : DType::Int32);
  if (!ok) c.fail("input '" + key + "' has the wrong dtype " + t.str());
  if (!c.const_value(key)) c.fail("input '" + key + "' must be a constant");
}

void check_fused_from(const InferCtx& c) {
  if (c.has("fused_from") && (!c.const_str("fused_from")))
    c.fail("attribute 'fused_from' must be a constant string");
}

// The mask must broadcast to `target` without growing it.
void check_mask(const InferCtx& c, const Shape& target, bool allow_bool) {
  if (!c.has("mask")) return;
  const Type& t = c.type("mask");
  if (!t.is_tensor() || !(is_float(t.dtype) || (allow_bool && t.dtype == DType::Bool)))
    c.fail(std::string("input 'mask' must be ") + (allow_bool ? "a bool or float" : "a float") + " tensor, got " +
           t.str());
  if (t.shape.size() > target.size())
    c.fail("mask " + t.str() + " has a higher rank than " + shape_str(target));
  Shape b = broadcast_shapes(c, target, t.shape);
  for (size_t i = 0; i < b.size(); ++i)
    if (target[i] >= 0 && b[i] >= 0 && b[i] != target[i])
      c.fail("mask " + t.str() + " does not broadcast to " + shape_str(target));
}

void infer_softmax(InferCtx& c) {
  require_float_tensor(c, "x");
  const Shape& x = c.shape("x");
  if (c.has("scale")) require_const_scalar(c, "scale", true);
  int64_t axis = -1;
  if (c.has("axis")) {
    require_const_scalar(c, "axis", false);
    axis = *c.const_int("axis");
  }
  normalize_axis(c, axis, int64_t(x.size()));
  check_mask(c, x, false);
  check_fused_from(c);
  c.set_out(c.type("x"));
}

void infer_attention(InferCtx& c) {
  for (const char* key : {"q", "k", "v"}) require_float_tensor(c, key);
  const Shape& q = c.shape("q");
  const Shape& k = c.shape("k");
  const Shape& v = c.shape("v");
  if (q.size() < 2 || k.size() < 2 || v.size() < 2)
    c.fail("q, k and v must have rank >= 2, got " + c.type("q").str() + ", " + c.type("k").str() + ", " +
           c.type("v").str());
  auto dim = [](const Shape& s, size_t back) { return s[s.size() - back]; };
  auto clash = [](int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; };
  if (clash(dim(q, 1), dim(k, 1)))
    c.fail("q and k must have the same last dim, got " + c.type("q").str() + " and " + c.type("k").str());
  if (clash(dim(k, 2), dim(v, 2)))
    c.fail("k and v must have the same key count, got " + c.type("k").str() + " and " + c.type("v").str());
  Shape batch = broadcast_shapes(c, Shape(q.begin(), q.end() - 2), Shape(k.begin(), k.end() - 2));
  batch = broadcast_shapes(c, batch, Shape(v.begin(), v.end() - 2));
  if (c.has("scale")) require_const_scalar(c, "scale", true);
  if (c.has("causal")) require_const_scalar(c, "causal", false);
  Shape scores = batch;
  scores.push_back(dim(q, 2));
  scores.push_back(dim(k, 2));
  check_mask(c, scores, true);
  check_fused_from(c);
  Shape out = batch;
  out.push_back(dim(q, 2));
  Shape lse = out;
  out.push_back(dim(v, 1));
  c.set_out(Type::tensor(c.dtype("q"), out));
  // fp32 whatever q's dtype: rounded to fp16 it would move exp(s - lse) by up to 0.5%.
  if (c.op().type == "milrt_attention" && c.op().outputs.size() == 2) c.out.push_back(Type::tensor(DType::FP32, lse));
}

void infer_attention_grad(InferCtx& c) {
  infer_attention(c);
  const Type o = c.out.at(0);
  for (const char* key : {"o", "dout"})
    if (c.type(key) != o) c.fail("input '" + std::string(key) + "' must be " + o.str() + ", got " + c.type(key).str());
  Shape batch(o.shape.begin(), o.shape.end() - 2);
  if (c.has("lse")) {
    Shape want(o.shape.begin(), o.shape.end() - 1);
    if (c.type("lse") != Type::tensor(DType::FP32, want))
      c.fail("input 'lse' must be " + Type::tensor(DType::FP32, want).str() + ", got " + c.type("lse").str());
  }
  auto grad_of = [&](const char* key) {
    const Shape& s = c.shape(key);
    Shape g = batch;
    g.push_back(s[s.size() - 2]);
    g.push_back(s[s.size() - 1]);
    return Type::tensor(o.dtype, g);
  };
  c.out = {grad_of("q"), grad_of("k"), grad_of("v")};
}

}  // namespace

void register_fused_attention_ops() {
  register_op({"milrt_softmax", {{"x"}, {"mask", false}, {"scale", false}, {"axis", false}, {"fused_from", false}},
               1, 1, infer_softmax});
  register_op({"milrt_attention",
               {{"q"}, {"k"}, {"v"}, {"mask", false}, {"scale", false}, {"causal", false}, {"fused_from", false}},
               1, 2, infer_attention});
  register_op({"milrt_attention_grad",
               {{"q"}, {"k"}, {"v"}, {"o"}, {"dout"}, {"lse", false}, {"mask", false}, {"scale", false}, {"causal", false},
                {"fused_from", false}},
               3, 3, infer_attention_grad});
}

}  // namespace milrt
