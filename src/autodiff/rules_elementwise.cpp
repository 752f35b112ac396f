// Gradient rules of the elementwise ops: binary arithmetic (with NumPy
// broadcasting, summed back by sum_to_shape), unary math and activations,
// cast and select. The formulas follow the reference executor's definitions
// (src/reference/ops/elementwise.cpp), e.g. log(x + epsilon), gelu's three
// modes with coremltools' constants. At kinks (relu at 0, maximum's ties,
// clip's bounds, abs at 0) the rules pick one subgradient, stated per rule.
#include <cmath>

#include "autodiff/grad_rule.h"

namespace milrt::autodiff {
namespace {

using Grads = std::map<std::string, Value>;
constexpr double kPi = 3.14159265358979323846;

// An input as an operand: the value, or the literal as written.
Operand opnd(const RuleContext& c, const std::string& key) { return Operand(*c.op.arg(key)); }

Type type_of(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  return a->kind == Arg::Kind::Const ? a->lit->type : c.b.value(a->var).type;
}

// A scalar parameter's constant value (alpha, epsilon): since iOS17 its dtype
// may differ from x's, so rules use it as a literal of x's dtype.
double const_param(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  if (!a || a->kind != Arg::Kind::Const || a->lit->value.numel() != 1)
    throw_op_error(c.op, "gradient rule: input '" + key + "' must be a constant scalar");
  return a->lit->value.at(0);
}

bool is_var(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  return a && a->kind == Arg::Kind::Var;
}

DType dt(const RuleContext& c) { return c.out().type.dtype; }
Arg S(const RuleContext& c, double v) { return scalar_of(dt(c), v); }
Value g0(const RuleContext& c) { return *c.dout[0]; }

// gradient `v` (of the output's shape) for broadcast input `key`, if it is a variable.
void give(const RuleContext& c, Grads& r, const std::string& key, const Value& v) {
  if (is_var(c, key)) r[key] = sum_to_shape(c, v, type_of(c, key).shape);
}

// Unary ops: d/dx = g * f'(x), with f'(x) built by `deriv`.
void unary(const std::string& type, std::function<Value(const RuleContext&)> deriv) {
  register_grad_rule(type, [deriv](const RuleContext& c) -> Grads {
    if (!is_var(c, "x")) return {};
    return {{"x", c.emit("mul", "x", {{"x", g0(c)}, {"y", deriv(c)}})}};
  });
}

// g where `keep` holds, else 0.
Value masked(const RuleContext& c, const Value& keep, const Value& g, bool where_true = true) {
  if (where_true) return c.emit("select", "x", {{"cond", keep}, {"a", g}, {"b", S(c, 0)}});
  return c.emit("select", "x", {{"cond", keep}, {"a", S(c, 0)}, {"b", g}});
}

Value sigmoid_of(const RuleContext& c, const Operand& x, const std::string& what) {
  return c.emit("sigmoid", what, {{"x", x}});
}

void register_binary_rules() {
  register_grad_rule("add", [](const RuleContext& c) -> Grads {
    Grads r;
    give(c, r, "x", g0(c));
    give(c, r, "y", g0(c));
    return r;
  });
  register_grad_rule("sub", [](const RuleContext& c) -> Grads {
    Grads r;
    give(c, r, "x", g0(c));
    if (is_var(c, "y")) give(c, r, "y", c.emit("mul", "y", {{"x", g0(c)}, {"y", S(c, -1)}}));
    return r;
  });
  register_grad_rule("mul", [](const RuleContext& c) -> Grads {
    Grads r;
    if (is_var(c, "x")) give(c, r, "x", c.emit("mul", "x", {{"x", g0(c)}, {"y", opnd(c, "y")}}));
    if (is_var(c, "y")) give(c, r, "y", c.emit("mul", "y", {{"x", g0(c)}, {"y", opnd(c, "x")}}));
    return r;
  });
  // z = x / y: dx = g / y, dy = -g z / y.
  register_grad_rule("real_div", [](const RuleContext& c) -> Grads {
    Grads r;
    if (is_var(c, "x")) give(c, r, "x", c.emit("real_div", "x", {{"x", g0(c)}, {"y", opnd(c, "y")}}));
    if (is_var(c, "y")) {
      Value gz = c.emit("mul", "y", {{"x", g0(c)}, {"y", c.out()}});
      Value q = c.emit("real_div", "y", {{"x", gz}, {"y", opnd(c, "y")}});
      give(c, r, "y", c.emit("mul", "y", {{"x", q}, {"y", S(c, -1)}}));
    }
    return r;
  });
  // maximum/minimum: the gradient goes to x where x wins or ties, else to y.
  for (auto [type, cmp] : {std::pair{"maximum", "greater_equal"}, std::pair{"minimum", "less_equal"}}) {
    std::string cmp_s = cmp;
    register_grad_rule(type, [cmp_s](const RuleContext& c) -> Grads {
      Value x_wins = c.emit(cmp_s, "mask", {{"x", opnd(c, "x")}, {"y", opnd(c, "y")}});
      Grads r;
      if (is_var(c, "x")) give(c, r, "x", masked(c, x_wins, g0(c), true));
      if (is_var(c, "y")) give(c, r, "y", masked(c, x_wins, g0(c), false));
      return r;
    });
  }
  // z = x^y: dx = g y x^(y-1), dy = g z log(x) (only where x > 0 makes sense).
  register_grad_rule("pow", [](const RuleContext& c) -> Grads {
    Grads r;
    if (is_var(c, "x")) {
      Operand ym1 = opnd(c, "y");
      if (const Arg* y = c.op.arg("y"); y->kind == Arg::Kind::Const) {
        Tensor t = y->lit->value.clone();   // a constant exponent: y - 1 as a literal
        for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), t.at(size_t(i)) - 1);
        Literal l = *y->lit;
        l.value = t;
        l.blob_path.clear();
        ym1 = Arg::of_const(std::move(l));
      } else {
        ym1 = c.emit("sub", "ym1", {{"x", opnd(c, "y")}, {"y", S(c, 1)}});
      }
      Value p = c.emit("pow", "pow", {{"x", opnd(c, "x")}, {"y", ym1}});
      Value d = c.emit("mul", "x", {{"x", p}, {"y", opnd(c, "y")}});
      give(c, r, "x", c.emit("mul", "x", {{"x", g0(c)}, {"y", d}}));
    }
    if (is_var(c, "y")) {
      Value lx = c.emit("log", "log", {{"x", opnd(c, "x")}});
      Value d = c.emit("mul", "y", {{"x", c.out()}, {"y", lx}});
      give(c, r, "y", c.emit("mul", "y", {{"x", g0(c)}, {"y", d}}));
    }
    return r;
  });
  // select: the gradient follows the branch that was taken.
  register_grad_rule("select", [](const RuleContext& c) -> Grads {
    Grads r;
    Operand cond = opnd(c, "cond");
    if (is_var(c, "a")) give(c, r, "a", c.emit("select", "a", {{"cond", cond}, {"a", g0(c)}, {"b", S(c, 0)}}));
    if (is_var(c, "b")) give(c, r, "b", c.emit("select", "b", {{"cond", cond}, {"a", S(c, 0)}, {"b", g0(c)}}));
    return r;
  });
}

void register_unary_rules() {
  register_grad_rule("identity", [](const RuleContext& c) -> Grads { return {{"x", g0(c)}}; });
  register_grad_rule("cast", [](const RuleContext& c) -> Grads {
    DType to = type_of(c, "x").dtype;
    if (!is_var(c, "x") || (to != DType::FP16 && to != DType::FP32)) return {};
    if (to == g0(c).type.dtype) return {{"x", g0(c)}};
    return {{"x", c.emit("cast", "x", {{"x", g0(c)}, {"dtype", lit_str(std::string(dtype_name(to)))}})}};
  });
  unary("exp", [](const RuleContext& c) { return c.out(); });
  // log(x + eps): 1 / (x + eps).
  register_grad_rule("log", [](const RuleContext& c) -> Grads {
    Operand den = opnd(c, "x");
    if (c.op.has("epsilon")) den = c.emit("add", "den", {{"x", opnd(c, "x")}, {"y", S(c, const_param(c, "epsilon"))}});
    return {{"x", c.emit("real_div", "x", {{"x", g0(c)}, {"y", den}})}};
  });
  // sqrt: 1 / (2 z).
  register_grad_rule("sqrt", [](const RuleContext& c) -> Grads {
    Value h = c.emit("mul", "half", {{"x", g0(c)}, {"y", S(c, 0.5)}});
    return {{"x", c.emit("real_div", "x", {{"x", h}, {"y", c.out()}})}};
  });
  // rsqrt: z = (x + eps)^-1/2, z' = -z^3 / 2 (eps drops out).
  unary("rsqrt", [](const RuleContext& c) {
    Value z2 = c.emit("mul", "z2", {{"x", c.out()}, {"y", c.out()}});
    Value z3 = c.emit("mul", "z3", {{"x", z2}, {"y", c.out()}});
    return c.emit("mul", "d", {{"x", z3}, {"y", S(c, -0.5)}});
  });
  // inverse: z = 1 / (x + eps), z' = -z^2.
  unary("inverse", [](const RuleContext& c) {
    Value z2 = c.emit("mul", "z2", {{"x", c.out()}, {"y", c.out()}});
    return c.emit("mul", "d", {{"x", z2}, {"y", S(c, -1)}});
  });
  unary("square", [](const RuleContext& c) { return c.emit("mul", "d", {{"x", opnd(c, "x")}, {"y", S(c, 2)}}); });
  // abs: sign(x) (0 at 0).
  unary("abs", [](const RuleContext& c) { return c.emit("sign", "d", {{"x", opnd(c, "x")}}); });
  unary("tanh", [](const RuleContext& c) {
    Value z2 = c.emit("mul", "z2", {{"x", c.out()}, {"y", c.out()}});
    return c.emit("sub", "d", {{"x", S(c, 1)}, {"y", z2}});
  });
  unary("sigmoid", [](const RuleContext& c) {
    Value omz = c.emit("sub", "omz", {{"x", S(c, 1)}, {"y", c.out()}});
    return c.emit("mul", "d", {{"x", c.out()}, {"y", omz}});
  });
  // silu: x s(x); s (1 + x (1 - s)).
  unary("silu", [](const RuleContext& c) {
    Value s = sigmoid_of(c, opnd(c, "x"), "s");
    Value oms = c.emit("sub", "oms", {{"x", S(c, 1)}, {"y", s}});
    Value t = c.emit("mul", "t", {{"x", opnd(c, "x")}, {"y", oms}});
    Value t1 = c.emit("add", "t", {{"x", t}, {"y", S(c, 1)}});
    return c.emit("mul", "d", {{"x", s}, {"y", t1}});
  });
  unary("softplus", [](const RuleContext& c) { return sigmoid_of(c, opnd(c, "x"), "d"); });
  // erf: 2/sqrt(pi) exp(-x^2).
  unary("erf", [](const RuleContext& c) {
    Value x2 = c.emit("mul", "x2", {{"x", opnd(c, "x")}, {"y", opnd(c, "x")}});
    Value e = c.emit("exp", "e", {{"x", c.emit("mul", "nx2", {{"x", x2}, {"y", S(c, -1)}})}});
    return c.emit("mul", "d", {{"x", e}, {"y", S(c, 2 / std::sqrt(kPi))}});
  });
  unary("sin", [](const RuleContext& c) { return c.emit("cos", "d", {{"x", opnd(c, "x")}}); });
  unary("cos", [](const RuleContext& c) {
    Value s = c.emit("sin", "sin", {{"x", opnd(c, "x")}});
    return c.emit("mul", "d", {{"x", s}, {"y", S(c, -1)}});
  });
  unary("gelu", [](const RuleContext& c) {
    std::string mode = "EXACT";
    if (const Arg* m = c.op.arg("mode"); m && m->kind == Arg::Kind::Const) mode = m->lit->value.strings().at(0);
    Operand x = opnd(c, "x");
    if (mode == "SIGMOID_APPROXIMATION") {
      // x s(kx): s + k x s (1 - s), k = 1.702.
      Value kx = c.emit("mul", "kx", {{"x", x}, {"y", S(c, 1.702)}});
      Value s = sigmoid_of(c, kx, "s");
      Value oms = c.emit("sub", "oms", {{"x", S(c, 1)}, {"y", s}});
      Value t = c.emit("mul", "t", {{"x", kx}, {"y", oms}});
      Value t1 = c.emit("add", "t", {{"x", t}, {"y", S(c, 1)}});
      return c.emit("mul", "d", {{"x", s}, {"y", t1}});
    }
    if (mode == "TANH_APPROXIMATION") {
      // 0.5 x (1 + tanh u), u = a (x + b x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) a (1 + 3 b x^2).
      const double a = std::sqrt(2 / kPi), bb = 0.044715;
      Value x2 = c.emit("mul", "x2", {{"x", x}, {"y", x}});
      Value x3 = c.emit("mul", "x3", {{"x", x2}, {"y", x}});
      Value inner = c.emit("add", "u", {{"x", x}, {"y", c.emit("mul", "u", {{"x", x3}, {"y", S(c, bb)}})}});
      Value t = c.emit("tanh", "t", {{"x", c.emit("mul", "u", {{"x", inner}, {"y", S(c, a)}})}});
      Value left = c.emit("mul", "l", {{"x", c.emit("add", "l", {{"x", t}, {"y", S(c, 1)}})}, {"y", S(c, 0.5)}});
      Value sech2 = c.emit("sub", "sech2", {{"x", S(c, 1)}, {"y", c.emit("mul", "t2", {{"x", t}, {"y", t}})}});
      Value du = c.emit("add", "du", {{"x", c.emit("mul", "du", {{"x", x2}, {"y", S(c, 3 * bb * a)}})}, {"y", S(c, a)}});
      Value right = c.emit("mul", "r", {{"x", c.emit("mul", "r", {{"x", x}, {"y", S(c, 0.5)}})}, {"y", sech2}});
      return c.emit("add", "d", {{"x", left}, {"y", c.emit("mul", "r", {{"x", right}, {"y", du}})}});
    }
    // EXACT: 0.5 (1 + erf(x / sqrt 2)) + x phi(x), phi = exp(-x^2 / 2) / sqrt(2 pi).
    Value e = c.emit("erf", "erf", {{"x", c.emit("mul", "xs", {{"x", x}, {"y", S(c, 1 / std::sqrt(2.0))}})}});
    Value cdf = c.emit("mul", "cdf", {{"x", c.emit("add", "cdf", {{"x", e}, {"y", S(c, 1)}})}, {"y", S(c, 0.5)}});
    Value x2 = c.emit("mul", "x2", {{"x", x}, {"y", x}});
    Value ph = c.emit("exp", "phi", {{"x", c.emit("mul", "phi", {{"x", x2}, {"y", S(c, -0.5)}})}});
    Value xph = c.emit("mul", "xphi", {{"x", ph}, {"y", c.emit("mul", "xphi", {{"x", x}, {"y", S(c, 1 / std::sqrt(2 * kPi))}})}});
    return c.emit("add", "d", {{"x", cdf}, {"y", xph}});
  });

  // relu: g where x > 0 (0 at 0).
  register_grad_rule("relu", [](const RuleContext& c) -> Grads {
    Value pos = c.emit("greater", "mask", {{"x", opnd(c, "x")}, {"y", S(c, 0)}});
    return {{"x", masked(c, pos, g0(c))}};
  });
  // leaky_relu: x for x >= 0, alpha x below (the reference's branch).
  register_grad_rule("leaky_relu", [](const RuleContext& c) -> Grads {
    Value neg = c.emit("less", "mask", {{"x", opnd(c, "x")}, {"y", S(c, 0)}});
    Value ga = c.emit("mul", "x", {{"x", g0(c)}, {"y", S(c, const_param(c, "alpha"))}});
    return {{"x", c.emit("select", "x", {{"cond", neg}, {"a", ga}, {"b", g0(c)}})}};
  });
  // elu: x for x > 0, alpha (e^x - 1) below, whose derivative is z + alpha.
  register_grad_rule("elu", [](const RuleContext& c) -> Grads {
    Value pos = c.emit("greater", "mask", {{"x", opnd(c, "x")}, {"y", S(c, 0)}});
    Value d = c.emit("add", "d", {{"x", c.out()}, {"y", S(c, const_param(c, "alpha"))}});
    Value gn = c.emit("mul", "x", {{"x", g0(c)}, {"y", d}});
    return {{"x", c.emit("select", "x", {{"cond", pos}, {"a", g0(c)}, {"b", gn}})}};
  });
  // clip: g where alpha <= x <= beta (the bounds themselves pass the gradient).
  register_grad_rule("clip", [](const RuleContext& c) -> Grads {
    Value lo = c.emit("less", "mask", {{"x", opnd(c, "x")}, {"y", opnd(c, "alpha")}});
    Value hi = c.emit("greater", "mask", {{"x", opnd(c, "x")}, {"y", opnd(c, "beta")}});
    Value g = masked(c, lo, g0(c), false);
    return {{"x", masked(c, hi, g, false)}};
  });
}

}  // namespace

void register_elementwise_grad_rules() {
  register_binary_rules();
  register_unary_rules();
}

}  // namespace milrt::autodiff
