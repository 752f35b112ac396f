// Gradient rules of the nn ops: softmax, rms_norm, layer_norm,
// scaled_dot_product_attention, milrt_attention and conv.
//
// The norms recompute the few forward intermediates their backward needs
// (the normalized x) from the op's inputs instead of asking the forward op
// for them: those are ordinary ops, so the pass pipeline may fuse them or
// share them with the forward. Attention's backward is one fused op,
// milrt_attention_grad, which recomputes the probabilities tile by tile.
// Conv's gradients are convs themselves: the input's a stride-1 conv of the
// (zero-dilated, padded) output gradient with the flipped, channel-swapped
// kernel; the weight's a conv of x against the output gradient with batch
// and channels swapped (strides and dilations trade places). Everything
// emitted has a compiled lowering (no conv_transpose, no reverse).
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "autodiff/rule_util.h"
#include "milrt/error.h"

namespace milrt::autodiff {
namespace {

using Grads = std::map<std::string, Value>;

Value g0(const RuleContext& c) { return *c.dout.at(0); }

Value mul(const RuleContext& c, const Operand& a, const Operand& b, const std::string& what) {
  return c.emit("mul", what, {{"x", a}, {"y", b}});
}
Value sub(const RuleContext& c, const Operand& a, const Operand& b, const std::string& what) {
  return c.emit("sub", what, {{"x", a}, {"y", b}});
}
Value add(const RuleContext& c, const Operand& a, const Operand& b, const std::string& what) {
  return c.emit("add", what, {{"x", a}, {"y", b}});
}

// (g - sum(g * y)) * y along `axis`: the softmax Jacobian applied to g.
Value softmax_backward(const RuleContext& c, const Value& g, const Value& y, int64_t axis, const std::string& what) {
  Value gy = mul(c, g, y, what + "_gy");
  Value s = c.emit("reduce_sum", what + "_sum", {{"x", gy}, {"axes", lit_i32s({axis})}, {"keep_dims", lit_bool(true)}});
  return mul(c, sub(c, g, s, what + "_centered"), y, what);
}

Grads softmax_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  int64_t rank = int64_t(input_type(c, "x").shape.size());
  int64_t axis = norm_axis(c, int_or(c, "axis", -1), rank);
  return {{"x", softmax_backward(c, g0(c), c.out(), axis, "x")}};
}

// Shared by the norms: with xn the normalized x, r = 1 / sqrt(var + eps) and
// d the gradient reaching xn (g times the scale), over the normalized axes
//   rms_norm:   dx = r (d - xn mean(d xn))
//   layer_norm: dx = r (d - mean(d) - xn mean(d xn))
Value norm_dx(const RuleContext& c, const Value& d, const Value& xn, const Value& r, const std::vector<int64_t>& axes,
              bool center) {
  Value dxn = mul(c, d, xn, "dxn");
  Value m = reduce_keep(c, "reduce_mean", dxn, axes, "dxn_mean");
  Value t = sub(c, d, mul(c, xn, m, "proj"), "x_inner");
  if (center) t = sub(c, t, reduce_keep(c, "reduce_mean", d, axes, "d_mean"), "x_inner");
  return mul(c, t, r, "x");
}

// The sum of g * xn over every axis but the normalized ones, shaped `shape`.
Value scale_grad(const RuleContext& c, const Value& g, const Value& xn, const std::vector<bool>& normed,
                 const Shape& shape, const std::string& what) {
  std::vector<int64_t> others;
  for (size_t i = 0; i < normed.size(); ++i)
    if (!normed[i]) others.push_back(int64_t(i));
  Value s = reduce_keep(c, "reduce_sum", mul(c, g, xn, what + "_gxn"), others, what);
  return reshape_to(c, s, shape, what);
}

// rms_norm(x, w, eps) as milrt defines it: over dim 1 of a rank-4 x (the
// channel dim of [B, C, 1, S] layouts), the last dim otherwise.
Grads rms_norm_rule(const RuleContext& c) {
  const Type xt = input_type(c, "x");
  const Shape& xs = xt.shape;
  const int64_t rank = int64_t(xs.size());
  const int64_t d = rank == 4 ? 1 : rank - 1;
  std::vector<bool> normed(size_t(rank), false);
  normed[size_t(d)] = true;
  Shape wb(size_t(rank), 1);   // w as it broadcasts against x
  wb[size_t(d)] = xs[size_t(d)];
  const DType dt = xt.dtype;
  const double eps = float_or(c, "eps", 1e-5);
  const bool has_w = c.op.has("w");
  // Over the last dim of fp32 values (the transformers' layout) one fused
  // op computes dx and dw in a pass per row; otherwise the primitives below.
  if (rank != 4 && dt == DType::FP32 && has_w && input_type(c, "w").dtype == DType::FP32) {
    std::vector<Value> g = c.b.op_n("milrt_rms_norm_grad", {c.name("x"), c.name("w")},
                                    {{"x", c.in("x")}, {"w", Operand(*c.op.arg("w"))}, {"dy", g0(c)}, {"eps", scalar_of(dt, eps)}});
    Grads out;
    if (is_var_input(c, "x")) out["x"] = g[0];
    if (is_var_input(c, "w")) out["w"] = g[1];
    return out;
  }
  Value x = c.in("x");
  Value ms = c.emit("reduce_mean", "ms", {{"x", mul(c, x, x, "sq")}, {"axes", lit_i32s({d})}, {"keep_dims", lit_bool(true)}});
  Value r = c.emit("rsqrt", "rrms", {{"x", add(c, ms, scalar_of(dt, eps), "var")}});
  Value xn = mul(c, x, r, "xn");
  Value g = g0(c);
  Grads out;
  if (is_var_input(c, "x")) {
    Value dxn = g;
    if (has_w) {
      Operand w(*c.op.arg("w"));
      if (input_type(c, "w").shape != wb) w = c.emit("reshape", "wb", {{"x", w}, {"shape", lit_i32s(wb)}});
      dxn = mul(c, g, w, "dxn_in");
    }
    out["x"] = norm_dx(c, dxn, xn, r, {d}, false);
  }
  if (has_w && is_var_input(c, "w")) out["w"] = scale_grad(c, g, xn, normed, input_type(c, "w").shape, "w");
  return out;
}

Grads layer_norm_rule(const RuleContext& c) {
  const Type xt = input_type(c, "x");
  const Shape& xs = xt.shape;
  const int64_t rank = int64_t(xs.size());
  std::vector<int64_t> all(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) all[size_t(i)] = i;
  std::vector<bool> normed(size_t(rank), false);
  for (int64_t a : ints_or(c, "axes", all)) normed[size_t(norm_axis(c, a, rank))] = true;
  std::vector<int64_t> axes;
  Shape pb;   // gamma / beta as they broadcast against x
  for (int64_t i = 0; i < rank; ++i) {
    if (normed[size_t(i)]) axes.push_back(i);
    pb.push_back(normed[size_t(i)] ? xs[size_t(i)] : 1);
  }
  const DType dt = xt.dtype;
  const double eps = float_or(c, "epsilon", 1e-5);
  Value x = c.in("x");
  Value mean = reduce_keep(c, "reduce_mean", x, axes, "mean");
  Value xc = sub(c, x, mean, "xc");
  Value var = reduce_keep(c, "reduce_mean", mul(c, xc, xc, "sq"), axes, "var");
  Value r = c.emit("rsqrt", "rstd", {{"x", add(c, var, scalar_of(dt, eps), "var_eps")}});
  Value xn = mul(c, xc, r, "xn");
  Value g = g0(c);
  Grads out;
  if (is_var_input(c, "x")) {
    Value d = g;
    if (c.op.has("gamma")) {
      Operand gamma = Operand(*c.op.arg("gamma"));
      if (input_type(c, "gamma").shape != pb)
        gamma = c.emit("reshape", "gamma", {{"x", gamma}, {"shape", lit_i32s(pb)}});
      d = mul(c, g, gamma, "d");
    }
    out["x"] = norm_dx(c, d, xn, r, axes, true);
  }
  if (c.op.has("gamma") && is_var_input(c, "gamma"))
    out["gamma"] = scale_grad(c, g, xn, normed, input_type(c, "gamma").shape, "gamma");
  if (c.op.has("beta") && is_var_input(c, "beta")) {
    std::vector<int64_t> others;
    for (int64_t i = 0; i < rank; ++i)
      if (!normed[size_t(i)]) others.push_back(i);
    out["beta"] = reshape_to(c, reduce_keep(c, "reduce_sum", g, others, "beta"), input_type(c, "beta").shape, "beta");
  }
  return out;
}

// ---- attention -----------------------------------------------------------------

// One milrt_attention_grad (the fused FlashAttention-2 style backward: no
// Tq×Tk matrix is kept from the forward or built here) for `keys`, its
// gradients summed down to the inputs' shapes (batch dims that broadcast,
// as grouped-query K and V do).
Grads fused_attention_grads(const RuleContext& c, const std::array<const char*, 3>& keys, const Operand& scale,
                            bool causal, const std::optional<Operand>& mask) {
  std::vector<std::pair<std::string, Operand>> in = {
      {"q", c.in(keys[0])}, {"k", c.in(keys[1])}, {"v", c.in(keys[2])}, {"o", c.out()}, {"dout", g0(c)}};
  // A forward that also gave its rows' log-sum-exp spares the backward a pass over Q·Kᵀ.
  if (c.op.outputs.size() == 2) in.push_back({"lse", c.out(1)});
  if (mask) in.push_back({"mask", *mask});
  in.push_back({"scale", scale});
  in.push_back({"causal", lit_bool(causal)});
  std::vector<Value> g =
      c.b.op_n("milrt_attention_grad", {c.name(keys[0]), c.name(keys[1]), c.name(keys[2])}, in);
  Grads out;
  for (size_t i = 0; i < 3; ++i)
    if (is_var_input(c, keys[i])) out[keys[i]] = sum_to_shape(c, g[i], input_type(c, keys[i]).shape);
  return out;
}

// ---- rotary embedding -------------------------------------------------------------

// milrt_rope is linear in x: its gradient is the transposed map, the same op
// with `transpose` flipped. The tables are position constants.
Grads milrt_rope_rule(const RuleContext& c) {
  for (const char* key : {"cos", "sin"})
    if (is_var_input(c, key) && !const_input(c, key))
      throw_op_error(c.op, std::string("gradient rule: milrt_rope's ") + key + " table must be a constant");
  if (!is_var_input(c, "x")) return {};
  return {{"x", c.emit("milrt_rope", "x",
                       {{"x", g0(c)}, {"cos", Operand(*c.op.arg("cos"))}, {"sin", Operand(*c.op.arg("sin"))},
                        {"transpose", lit_bool(!bool_or(c, "transpose", false))}})}};
}

// ---- SwiGLU's gate -------------------------------------------------------------------

// milrt_silu_mul(a, b): both gradients from one milrt_silu_mul_grad pass.
Grads milrt_silu_mul_rule(const RuleContext& c) {
  std::vector<Value> g =
      c.b.op_n("milrt_silu_mul_grad", {c.name("a"), c.name("b")}, {{"a", c.in("a")}, {"b", c.in("b")}, {"dy", g0(c)}});
  Grads out;
  if (is_var_input(c, "a")) out["a"] = g[0];
  if (is_var_input(c, "b")) out["b"] = g[1];
  return out;
}

// A float mask computed at run time may depend on what is differentiated;
// the fused backward gives no gradient for it.
bool mask_needs_grad(const RuleContext& c, const std::string& key) {
  return c.op.has(key) && input_type(c, key).dtype != DType::Bool && is_var_input(c, key) && !const_input(c, key);
}

Grads milrt_attention_rule(const RuleContext& c) {
  if (mask_needs_grad(c, "mask"))
    throw_op_error(c.op, "gradient rule: milrt_attention's mask must be a constant or bool");
  Operand scale = c.op.has("scale") ? Operand(*c.op.arg("scale")) : Operand(lit_f32(1.0));
  std::optional<Operand> mask;
  if (c.op.has("mask")) mask = Operand(*c.op.arg("mask"));
  return fused_attention_grads(c, {"q", "k", "v"}, scale, bool_or(c, "causal", false), mask);
}

// With a constant or bool mask the fused backward; with a float mask that
// needs its own gradient, op by op: P = softmax(Q K^T / sqrt(E) + mask)
// recomputed, dV = P^T G, dP = G V^T, dS = softmax'(dP) / sqrt(E),
// dQ = dS K, dK = dS^T Q, d(mask) = dS summed to its shape.
Grads sdpa_rule(const RuleContext& c) {
  const Type qt = input_type(c, "query");
  const DType dt = qt.dtype;
  const int64_t E = qt.shape.back();
  const double scale = 1.0 / std::sqrt(double(E));
  if (!mask_needs_grad(c, "attn_mask")) {
    std::optional<Operand> mask;
    if (c.op.has("attn_mask")) mask = Operand(*c.op.arg("attn_mask"));
    return fused_attention_grads(c, {"query", "key", "value"}, lit_f32(scale), false, mask);
  }
  Value q = c.in("query"), k = c.in("key"), v = c.in("value");
  Value g = g0(c);
  Value s = c.emit("matmul", "scores", {{"x", q}, {"y", k}, {"transpose_x", lit_bool(false)}, {"transpose_y", lit_bool(true)}});
  s = mul(c, s, scalar_of(dt, scale), "scores");
  s = add(c, s, Operand(*c.op.arg("attn_mask")), "masked");
  const int64_t last = int64_t(qt.shape.size()) - 1;
  Value p = c.emit("softmax", "probs", {{"x", s}, {"axis", lit_i32(last)}});
  Grads out;
  if (is_var_input(c, "value"))
    out["value"] = c.emit("matmul", "value", {{"x", p}, {"y", g}, {"transpose_x", lit_bool(true)}, {"transpose_y", lit_bool(false)}});
  Value dp = c.emit("matmul", "dprobs", {{"x", g}, {"y", v}, {"transpose_x", lit_bool(false)}, {"transpose_y", lit_bool(true)}});
  Value ds = softmax_backward(c, dp, p, last, "dscores");
  out["attn_mask"] = sum_to_shape(c, ds, input_type(c, "attn_mask").shape);
  Value dss = mul(c, ds, scalar_of(dt, scale), "dscores_scaled");
  if (is_var_input(c, "query"))
    out["query"] = c.emit("matmul", "query", {{"x", dss}, {"y", k}, {"transpose_x", lit_bool(false)}, {"transpose_y", lit_bool(false)}});
  if (is_var_input(c, "key"))
    out["key"] = c.emit("matmul", "key", {{"x", dss}, {"y", q}, {"transpose_x", lit_bool(true)}, {"transpose_y", lit_bool(false)}});
  return out;
}

// ---- conv -------------------------------------------------------------------------

struct ConvGeom {
  size_t nsp = 0;
  int64_t groups = 1;
  std::vector<int64_t> strides, dilations, before, in, out, kernel, ek;
};

ConvGeom conv_geom(const RuleContext& c) {
  const Shape xs = input_type(c, "x").shape, ws = input_type(c, "weight").shape;
  const Shape gs = c.op.outputs.at(0).type.shape;
  ConvGeom a;
  a.nsp = xs.size() - 2;
  a.strides = ints_or(c, "strides", std::vector<int64_t>(a.nsp, 1));
  a.dilations = ints_or(c, "dilations", std::vector<int64_t>(a.nsp, 1));
  a.groups = int_or(c, "groups", 1);
  std::string pad_type = str_or(c, "pad_type", "valid");
  std::vector<int64_t> pad = pad_type == "custom" ? ints_or(c, "pad", std::vector<int64_t>(2 * a.nsp, 0))
                                                  : std::vector<int64_t>(2 * a.nsp, 0);
  if (a.strides.size() != a.nsp || a.dilations.size() != a.nsp || pad.size() != 2 * a.nsp)
    throw_op_error(c.op, "gradient rule: strides, dilations or pad do not fit x");
  for (size_t i = 0; i < a.nsp; ++i) {
    int64_t n = xs[i + 2], s = a.strides[i], k = ws[i + 2];
    int64_t ek = (k - 1) * a.dilations[i] + 1, b = 0;
    if (pad_type == "same" || pad_type == "same_lower") {
      int64_t total = std::max<int64_t>(0, s * ((n + s - 1) / s) - n + ek - s);
      b = pad_type == "same" ? total / 2 : total - total / 2;
    } else if (pad_type == "custom") {
      b = pad[2 * i];
    } else if (pad_type != "valid") {
      throw_op_error(c.op, "gradient rule: unknown pad_type '" + pad_type + "'");
    }
    a.before.push_back(b);
    a.in.push_back(n);
    a.out.push_back(gs[i + 2]);
    a.kernel.push_back(k);
    a.ek.push_back(ek);
  }
  return a;
}

std::vector<int64_t> perm_swap01(size_t rank) {
  std::vector<int64_t> p(rank);
  for (size_t i = 0; i < rank; ++i) p[i] = int64_t(i);
  std::swap(p[0], p[1]);
  return p;
}

Value transpose(const RuleContext& c, const Value& v, const std::vector<int64_t>& perm, const std::string& what) {
  return c.emit("transpose", what, {{"x", v}, {"perm", lit_i32s(perm)}});
}

// dx: g zero-dilated by the strides, padded (or cropped) so that a stride-1
// conv with the flipped kernel at the forward's dilations gives x's size.
Value conv_dx(const RuleContext& c, const ConvGeom& a, const Value& g, const Operand& w) {
  const Shape ws = input_type(c, "weight").shape;
  const size_t rank = ws.size();
  const int64_t cout = ws[0], cig = ws[1], G = a.groups, cog = cout / G;
  Value gd = g;
  bool strided = std::any_of(a.strides.begin(), a.strides.end(), [](int64_t s) { return s > 1; });
  std::vector<int64_t> len(a.out);   // gd's spatial sizes
  if (strided) {
    // [N, C, o1, 1, o2, 1, ...] padded to [N, C, o1, s1, o2, s2, ...]: each
    // element followed by s - 1 zeros.
    Shape inter = {g.type.shape[0], g.type.shape[1]}, flat = inter;
    std::vector<int64_t> pad(4, 0);
    for (size_t i = 0; i < a.nsp; ++i) {
      inter.push_back(a.out[i]);
      inter.push_back(1);
      pad.insert(pad.end(), {0, 0, 0, a.strides[i] - 1});
      flat.push_back(a.out[i] * a.strides[i]);
      len[i] = a.out[i] * a.strides[i];
    }
    Value r = reshape_to(c, g, inter, "g_split");
    r = c.emit("pad", "g_dilated", {{"x", r}, {"pad", lit_i32s(pad)}, {"mode", lit_str("constant")},
                                    {"constant_val", scalar_of(g.type.dtype, 0.0)}});
    gd = reshape_to(c, r, flat, "g_dilated");
  }
  // Leading/trailing padding of gd; negative means crop.
  std::vector<int64_t> p0, p1, crop_b(rank, 0), crop_n(gd.type.shape.begin(), gd.type.shape.end());
  bool crop = false;
  for (size_t i = 0; i < a.nsp; ++i) {
    int64_t lead = a.ek[i] - 1 - a.before[i];
    int64_t trail = a.in[i] - 1 + a.ek[i] - lead - len[i];
    if (lead < 0) { crop_b[i + 2] = -lead; crop_n[i + 2] -= -lead; lead = 0; crop = true; }
    if (trail < 0) { crop_n[i + 2] -= -trail; trail = 0; crop = true; }
    p0.push_back(lead);
    p1.push_back(trail);
  }
  if (crop)
    gd = c.emit("slice_by_size", "g_cropped", {{"x", gd}, {"begin", lit_i32s(crop_b)}, {"size", lit_i32s(crop_n)}});
  // Kernel: [Cout, cig, K] -> [G, cog, cig, K] -> [G, cig, cog, K] -> [Cin, cog, K], flipped.
  Value wt;
  {
    Shape grouped = {G, cog, cig};
    grouped.insert(grouped.end(), ws.begin() + 2, ws.end());
    Value w5 = c.emit("reshape", "w_grouped", {{"x", w}, {"shape", lit_i32s(grouped)}});
    std::vector<int64_t> perm = {0, 2, 1};
    for (size_t i = 0; i < a.nsp; ++i) perm.push_back(int64_t(i) + 3);
    Shape swapped = {cig * G, cog};
    swapped.insert(swapped.end(), ws.begin() + 2, ws.end());
    wt = reshape_to(c, transpose(c, w5, perm, "w_swapped"), swapped, "w_swapped");
    std::vector<int64_t> zero(rank, 0), step(rank, 1);
    Tensor bm(DType::Bool, {int64_t(rank)}), em(DType::Bool, {int64_t(rank)});
    for (size_t i = 0; i < rank; ++i) {   // [:, :, ::-1, ::-1]
      if (i >= 2) step[i] = -1;
      bm.set(i, 1.0);
      em.set(i, 1.0);
    }
    wt = c.emit("slice_by_index", "w_flipped", {{"x", wt}, {"begin", lit_i32s(zero)}, {"end", lit_i32s(zero)},
                                                {"stride", lit_i32s(step)}, {"begin_mask", lit(bm)},
                                                {"end_mask", lit(em)}});
  }
  std::vector<int64_t> pad, ones(a.nsp, 1);
  for (size_t i = 0; i < a.nsp; ++i) pad.insert(pad.end(), {p0[i], p1[i]});
  return c.emit("conv", "x", {{"x", gd}, {"weight", wt}, {"strides", lit_i32s(ones)}, {"pad_type", lit_str("custom")},
                              {"pad", lit_i32s(pad)}, {"dilations", lit_i32s(a.dilations)}, {"groups", lit_i32(G)}});
}

// dW[oc, icl, k] = sum over n, o of g[n, oc, o] x[n, group(oc) cig + icl, o s + k d - b]:
// a conv of x (cig as batch, G N as channels) with g (Cout, N) as the kernel.
Value conv_dw(const RuleContext& c, const ConvGeom& a, const Value& g, const Operand& x) {
  const Shape xs = input_type(c, "x").shape, ws = input_type(c, "weight").shape;
  const size_t rank = xs.size();
  const int64_t N = xs[0], G = a.groups, cig = ws[1];
  Shape grouped = {N, G, cig};
  grouped.insert(grouped.end(), xs.begin() + 2, xs.end());
  Value x5 = c.emit("reshape", "x_grouped", {{"x", x}, {"shape", lit_i32s(grouped)}});
  std::vector<int64_t> perm = {2, 1, 0};
  for (size_t i = 0; i < a.nsp; ++i) perm.push_back(int64_t(i) + 3);
  Shape xb = {cig, G * N};
  xb.insert(xb.end(), xs.begin() + 2, xs.end());
  Value xr = reshape_to(c, transpose(c, x5, perm, "x_swapped"), xb, "x_swapped");
  Value gr = transpose(c, g, perm_swap01(rank), "g_swapped");
  std::vector<int64_t> pad;
  for (size_t i = 0; i < a.nsp; ++i) {
    int64_t span = (a.out[i] - 1) * a.strides[i] + 1;   // the kernel's dilated extent
    pad.push_back(a.before[i]);
    pad.push_back(std::max<int64_t>(0, (a.kernel[i] - 1) * a.dilations[i] + span - a.in[i] - a.before[i]));
  }
  Value dw = c.emit("conv", "w_full", {{"x", xr}, {"weight", gr}, {"strides", lit_i32s(a.dilations)},
                                       {"pad_type", lit_str("custom")}, {"pad", lit_i32s(pad)},
                                       {"dilations", lit_i32s(a.strides)}, {"groups", lit_i32(G)}});
  // [cig, Cout, >= K] -> [cig, Cout, K] -> [Cout, cig, K]
  Shape want = {cig, ws[0]};
  want.insert(want.end(), ws.begin() + 2, ws.end());
  if (dw.type.shape != want)
    dw = c.emit("slice_by_size", "w_crop", {{"x", dw}, {"begin", lit_i32s(std::vector<int64_t>(rank, 0))},
                                            {"size", lit_i32s(want)}});
  return transpose(c, dw, perm_swap01(rank), "weight");
}

Grads conv_rule(const RuleContext& c) {
  ConvGeom a = conv_geom(c);
  Value g = g0(c);
  Grads out;
  if (is_var_input(c, "x")) out["x"] = conv_dx(c, a, g, Operand(*c.op.arg("weight")));
  if (is_var_input(c, "weight")) out["weight"] = conv_dw(c, a, g, Operand(*c.op.arg("x")));
  if (c.op.has("bias") && is_var_input(c, "bias")) {
    std::vector<int64_t> axes = {0};
    for (size_t i = 0; i < a.nsp; ++i) axes.push_back(int64_t(i) + 2);
    out["bias"] = reshape_to(c, reduce_keep(c, "reduce_sum", g, axes, "bias"), input_type(c, "bias").shape, "bias");
  }
  return out;
}

}  // namespace

void register_nn_grad_rules() {
  register_grad_rule("softmax", softmax_rule);
  register_grad_rule("rms_norm", rms_norm_rule);
  register_grad_rule("layer_norm", layer_norm_rule);
  register_grad_rule("scaled_dot_product_attention", sdpa_rule);
  register_grad_rule("milrt_attention", milrt_attention_rule);
  register_grad_rule("milrt_rope", milrt_rope_rule);
  register_grad_rule("milrt_silu_mul", milrt_silu_mul_rule);
  register_grad_rule("conv", conv_rule);
}

}  // namespace milrt::autodiff
