// Gradient rules of matmul, linear and the reductions.
//
// matmul: with X, Y the operands after their transposes and G the output's
// gradient, dX = G Y^T and dY = X^T G, written back through the transposes
// as one matmul each (no transpose op), then summed over broadcast batch
// dims (a rank-2 weight under batched activations: the batch folded into the
// GEMM's rows instead). Rank-1 operands get the size-1 dim MIL inserts made explicit.
// Reductions: the output's gradient is reshaped to keep_dims form and
// broadcast over the reduced axes by a multiply with a small ones constant
// (only the reduced dims have their size), which also keeps the result
// compilable (no tile kernel).
#include <algorithm>

#include "autodiff/grad_rule.h"

namespace milrt::autodiff {
namespace {

using Grads = std::map<std::string, Value>;

bool is_var(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  return a && a->kind == Arg::Kind::Var;
}

Type type_of(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  return a->kind == Arg::Kind::Const ? a->lit->type : c.b.value(a->var).type;
}

Operand opnd(const RuleContext& c, const std::string& key) { return Operand(*c.op.arg(key)); }

bool const_bool(const RuleContext& c, const std::string& key, bool def) {
  const Arg* a = c.op.arg(key);
  if (!a) return def;
  if (a->kind == Arg::Kind::Const) return a->lit->value.at(0) != 0;
  throw_op_error(c.op, "gradient rule: input '" + key + "' must be a constant");
}

Value reshape(const RuleContext& c, const Operand& v, const Shape& from, const Shape& to, const std::string& what) {
  if (from == to && v.arg.kind == Arg::Kind::Var) return c.b.value(v.arg.var);
  return c.emit("reshape", what, {{"x", v}, {"shape", lit_i32s(to)}});
}

Arg S(const RuleContext& c, double v) { return scalar_of(c.out().type.dtype, v); }

// ---- matmul, linear ---------------------------------------------------------

Grads matmul_rule(const RuleContext& c) {
  bool tx = const_bool(c, "transpose_x", false), ty = const_bool(c, "transpose_y", false);
  Shape xs = type_of(c, "x").shape, ys = type_of(c, "y").shape;
  const size_t xr = xs.size(), yr = ys.size();
  // Rank-1 operands as MIL treats them: x [K] -> [1, K], y [K] -> [K, 1].
  Operand x = opnd(c, "x"), y = opnd(c, "y");
  Shape x2 = xs, y2 = ys;
  if (xr == 1) x2 = {1, xs[0]};
  if (yr == 1) y2 = {ys[0], 1};
  if (is_var(c, "y") && xr == 1) x = reshape(c, x, xs, x2, "x2");
  if (is_var(c, "x") && yr == 1) y = reshape(c, y, ys, y2, "y2");
  // G with the dims rank-1 operands lost put back: [..., M, N].
  Shape gs = c.dout[0]->type.shape;
  if (xr == 1) gs.insert(gs.end() - (yr == 1 ? 0 : 1), 1);
  if (yr == 1) gs.push_back(1);
  Value g = reshape(c, *c.dout[0], c.dout[0]->type.shape, gs, "g");

  Grads r;
  if (is_var(c, "x")) {
    Value dx = tx ? c.emit("matmul", "x", {{"x", y}, {"y", g}, {"transpose_x", lit_bool(ty)}, {"transpose_y", lit_bool(true)}})
                  : c.emit("matmul", "x", {{"x", g}, {"y", y}, {"transpose_x", lit_bool(false)}, {"transpose_y", lit_bool(!ty)}});
    dx = sum_to_shape(c, dx, x2);
    r["x"] = reshape(c, dx, x2, xs, "x");
  }
  if (is_var(c, "y") && yr == 2 && xr > 2 && !tx) {
    // A weight shared by every batch (x [..., M, K] by y [K, N]): fold x's
    // batch dims into its rows so dY is one GEMM over all rows, instead of a
    // batched product of y's size per batch element summed afterwards.
    const int64_t rows = shape_numel(xs) / xs.back();
    Value xf = reshape(c, x, xs, {rows, xs.back()}, "x_rows");
    Value gf = reshape(c, g, gs, {rows, gs.back()}, "g_rows");
    r["y"] = ty ? c.emit("matmul", "y", {{"x", gf}, {"y", xf}, {"transpose_x", lit_bool(true)}, {"transpose_y", lit_bool(false)}})
                : c.emit("matmul", "y", {{"x", xf}, {"y", gf}, {"transpose_x", lit_bool(true)}, {"transpose_y", lit_bool(false)}});
  } else if (is_var(c, "y")) {
    Value dy = ty ? c.emit("matmul", "y", {{"x", g}, {"y", x}, {"transpose_x", lit_bool(true)}, {"transpose_y", lit_bool(tx)}})
                  : c.emit("matmul", "y", {{"x", x}, {"y", g}, {"transpose_x", lit_bool(!tx)}, {"transpose_y", lit_bool(false)}});
    dy = sum_to_shape(c, dy, y2);
    r["y"] = reshape(c, dy, y2, ys, "y");
  }
  return r;
}

// z = x W^T + b, W [out, in]: dx = G W, dW = G^T x over all rows, db = sum G.
Grads linear_rule(const RuleContext& c) {
  Value g = *c.dout[0];
  Shape xs = type_of(c, "x").shape, ws = type_of(c, "weight").shape;
  Grads r;
  if (is_var(c, "x")) r["x"] = c.emit("matmul", "x", {{"x", g}, {"y", opnd(c, "weight")}});
  if (is_var(c, "weight")) {
    int64_t rows = shape_numel(xs) / ws[1];
    Value g2 = reshape(c, g, g.type.shape, {rows, ws[0]}, "g");
    Value x2 = reshape(c, opnd(c, "x"), xs, {rows, ws[1]}, "x2");
    r["weight"] = c.emit("matmul", "weight", {{"x", g2}, {"y", x2}, {"transpose_x", lit_bool(true)}});
  }
  if (c.op.has("bias") && is_var(c, "bias")) r["bias"] = sum_to_shape(c, g, type_of(c, "bias").shape);
  return r;
}

// ---- reductions -------------------------------------------------------------

struct Reduction {
  Shape xs, keep;              // x's shape; the output's shape with keep_dims
  std::vector<int64_t> axes;   // normalized
  int64_t n = 1;               // elements reduced into each output
};

Reduction reduction_of(const RuleContext& c) {
  Reduction r;
  r.xs = type_of(c, "x").shape;
  int64_t rank = int64_t(r.xs.size());
  std::vector<bool> red(r.xs.size(), true);
  if (const Arg* a = c.op.arg("axes")) {
    if (a->kind != Arg::Kind::Const) throw_op_error(c.op, "gradient rule: 'axes' must be constant");
    std::fill(red.begin(), red.end(), false);
    for (int64_t i = 0; i < a->lit->value.numel(); ++i) {
      int64_t ax = int64_t(a->lit->value.at(size_t(i)));
      red[size_t(ax < 0 ? ax + rank : ax)] = true;
    }
  }
  for (size_t i = 0; i < red.size(); ++i) {
    r.keep.push_back(red[i] ? 1 : r.xs[i]);
    if (red[i]) {
      r.axes.push_back(int64_t(i));
      r.n *= r.xs[i];
    }
  }
  return r;
}

// `v` (keep_dims shape) stretched to x's shape by multiplying with ones that
// have only the reduced dims' sizes: one constant when it is small, else one
// per stretched dim (sizes summed rather than multiplied: a loss reduced over
// [B, T, V] logits must not carry a B*T*V constant).
Value broadcast_to_x(const RuleContext& c, const Reduction& rd, const Value& v) {
  constexpr int64_t kOneConstant = 4096;
  Shape ones_shape(rd.xs.size(), 1);
  std::vector<size_t> stretched;
  for (size_t i = 0; i < rd.xs.size(); ++i)
    if (v.type.shape[i] == 1 && rd.xs[i] != 1) {
      ones_shape[i] = rd.xs[i];
      stretched.push_back(i);
    }
  auto times_ones = [&](const Value& a, const Shape& s) {
    Tensor ones(v.type.dtype, s);
    for (int64_t i = 0; i < ones.numel(); ++i) ones.set(size_t(i), 1.0);
    return c.emit("mul", "bcast", {{"x", a}, {"y", lit(ones)}});
  };
  if (stretched.empty()) return v;
  if (shape_numel(ones_shape) <= kOneConstant) return times_ones(v, ones_shape);
  Value cur = v;
  for (size_t i : stretched) {
    Shape s(rd.xs.size(), 1);
    s[i] = rd.xs[i];
    cur = times_ones(cur, s);
  }
  return cur;
}

// A reduction rule from d(out)/dx as a function of (g_keep, z_keep, rd): the
// result must have x's shape or broadcast to it.
using ReduceDeriv = std::function<Value(const RuleContext&, const Reduction&, const Value& g, const Value& z)>;

void reduction(const std::string& type, ReduceDeriv deriv) {
  register_grad_rule(type, [deriv](const RuleContext& c) -> Grads {
    if (!is_var(c, "x")) return {};
    Reduction rd = reduction_of(c);
    Value g = reshape(c, *c.dout[0], c.dout[0]->type.shape, rd.keep, "g");
    Value z = reshape(c, c.out(), c.out().type.shape, rd.keep, "z");
    Value d = deriv(c, rd, g, z);
    return {{"x", d.type.shape == rd.xs ? d : broadcast_to_x(c, rd, d)}};
  });
}

void register_reduction_rules() {
  reduction("reduce_sum", [](const RuleContext&, const Reduction&, const Value& g, const Value&) { return g; });
  reduction("reduce_mean", [](const RuleContext& c, const Reduction& rd, const Value& g, const Value&) {
    return c.emit("mul", "x", {{"x", g}, {"y", S(c, 1.0 / double(rd.n))}});
  });
  reduction("reduce_sum_square", [](const RuleContext& c, const Reduction&, const Value& g, const Value&) {
    Value x2 = c.emit("mul", "x", {{"x", c.in("x")}, {"y", S(c, 2)}});
    return c.emit("mul", "x", {{"x", x2}, {"y", g}});
  });
  reduction("reduce_l1_norm", [](const RuleContext& c, const Reduction&, const Value& g, const Value&) {
    return c.emit("mul", "x", {{"x", c.emit("sign", "sign", {{"x", c.in("x")}})}, {"y", g}});
  });
  // sqrt(sum x^2): x / z (undefined where z = 0).
  reduction("reduce_l2_norm", [](const RuleContext& c, const Reduction&, const Value& g, const Value& z) {
    Value q = c.emit("real_div", "x", {{"x", c.in("x")}, {"y", z}});
    return c.emit("mul", "x", {{"x", q}, {"y", g}});
  });
  // log(sum e^x): softmax, e^(x - z).
  reduction("reduce_log_sum_exp", [](const RuleContext& c, const Reduction&, const Value& g, const Value& z) {
    Value p = c.emit("exp", "p", {{"x", c.emit("sub", "p", {{"x", c.in("x")}, {"y", z}})}});
    return c.emit("mul", "x", {{"x", p}, {"y", g}});
  });
  // log(sum x): 1 / sum x = e^-z.
  reduction("reduce_log_sum", [](const RuleContext& c, const Reduction&, const Value& g, const Value& z) {
    return c.emit("real_div", "x", {{"x", g}, {"y", c.emit("exp", "sum", {{"x", z}})}});
  });
  // max/min: the gradient is shared equally by the positions that attain the
  // extremum (one, unless there are ties).
  for (const char* type : {"reduce_max", "reduce_min"}) {
    reduction(type, [](const RuleContext& c, const Reduction& rd, const Value& g, const Value& z) {
      Value hit = c.emit("equal", "mask", {{"x", c.in("x")}, {"y", z}});
      Value hf = c.emit("cast", "mask", {{"x", hit}, {"dtype", lit_str(std::string(dtype_name(g.type.dtype)))}});
      Value n = c.emit("reduce_sum", "count", {{"x", hf}, {"axes", lit_i32s(rd.axes)}, {"keep_dims", lit_bool(true)}});
      Value share = c.emit("real_div", "share", {{"x", hf}, {"y", n}});
      return c.emit("mul", "x", {{"x", share}, {"y", g}});
    });
  }
}

}  // namespace

void register_linalg_grad_rules() {
  register_grad_rule("matmul", matmul_rule);
  register_grad_rule("linear", linear_rule);
  register_reduction_rules();
}

}  // namespace milrt::autodiff
