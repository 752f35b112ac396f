// Reference of milrt_elementwise: the expression evaluated in fp64 on the
// inputs broadcast together, rounded once to the output dtype. The formulas
// are MIL's (the same as reference/ops/elementwise.cpp, written out again
// here so the two can be compared against each other).
#include <algorithm>
#include <cmath>

#include "ir/elementwise_expr.h"
#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

constexpr double kPi = 3.14159265358979323846;

using Values = std::vector<double>;

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// NumPy's remainder for floats: the result takes the divisor's sign.
double fmod_floor(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  if (r == 0) r = std::copysign(0.0, b);
  return r;
}

double binary(const std::string& f, double a, double b) {
  if (f == "add") return a + b;
  if (f == "sub") return a - b;
  if (f == "mul") return a * b;
  if (f == "real_div") return a / b;
  if (f == "maximum") return nan_max(a, b);
  if (f == "minimum") return nan_min(a, b);
  if (f == "pow") return std::pow(a, b);
  if (f == "floor_div") return std::floor(a / b);
  if (f == "mod") return fmod_floor(a, b);
  throw Error("internal: '" + f + "' is not binary");
}

// f(x; p0, p1): p are the call's literal parameters (epsilon's default filled in).
double unary(const std::string& f, double x, double p0, double p1) {
  if (f == "abs") return std::fabs(x);
  if (f == "exp") return std::exp(x);
  if (f == "exp2") return std::exp2(x);
  if (f == "sqrt") return std::sqrt(x);
  if (f == "sin") return std::sin(x);
  if (f == "cos") return std::cos(x);
  if (f == "tan") return std::tan(x);
  if (f == "asin") return std::asin(x);
  if (f == "acos") return std::acos(x);
  if (f == "atan") return std::atan(x);
  if (f == "atanh") return std::atanh(x);
  if (f == "sinh") return std::sinh(x);
  if (f == "cosh") return std::cosh(x);
  if (f == "tanh") return std::tanh(x);
  if (f == "erf") return std::erf(x);
  if (f == "floor") return std::floor(x);
  if (f == "ceil") return std::ceil(x);
  if (f == "round") return std::nearbyint(x);  // ties to even, as NumPy
  if (f == "sign") return std::isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
  if (f == "square") return x * x;
  if (f == "relu") return nan_max(x, 0);
  if (f == "relu6") return nan_min(nan_max(x, 0), 6);
  if (f == "sigmoid") return sigmoid(x);
  if (f == "silu") return x * sigmoid(x);
  if (f == "softplus") return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0);
  if (f == "softsign") return x / (1 + std::fabs(x));
  if (f == "gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (f == "gelu_tanh") return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
  if (f == "gelu_sigmoid") return x * sigmoid(1.702 * x);
  if (f == "log") return std::log(x + p0);
  if (f == "rsqrt") return 1.0 / std::sqrt(x + p0);
  if (f == "inverse") return 1.0 / (x + p0);
  if (f == "leaky_relu") return x < 0 ? p0 * x : x;
  if (f == "elu") return x > 0 ? x : p0 * std::expm1(x);
  if (f == "thresholded_relu") return x < p0 ? 0.0 : x;
  if (f == "threshold") return nan_max(x, p0);
  if (f == "clip") return nan_min(nan_max(x, p0), p1);
  if (f == "sigmoid_hard") return nan_min(nan_max(p0 * x + p1, 0), 1);
  if (f == "scaled_tanh") return p0 * std::tanh(p1 * x);
  if (f == "linear_activation") return p0 * x + p1;
  if (f == "clamped_relu") return std::min(p1, x >= 0 ? x : p0 * x);
  throw Error("internal: '" + f + "' is not unary");
}

// The value of `e` at every element of the output (inputs already broadcast).
Values eval(const ew::Expr& e, const std::vector<Values>& in, size_t n) {
  switch (e.kind) {
    case ew::Expr::Kind::Input: return in.at(size_t(e.input));
    case ew::Expr::Kind::Literal: return Values(n, e.value);
    case ew::Expr::Kind::Call: break;
  }
  const ew::FnInfo* f = ew::find_fn(e.fn);
  Values a = eval(e.args[0], in, n);
  if (f->operands == 2) {
    Values b = eval(e.args[1], in, n);
    for (size_t i = 0; i < n; ++i) a[i] = binary(e.fn, a[i], b[i]);
    return a;
  }
  double p0 = e.args.size() > 1 ? e.args[1].value : f->param_default;
  double p1 = e.args.size() > 2 ? e.args[2].value : 0.0;
  for (size_t i = 0; i < n; ++i) a[i] = unary(e.fn, a[i], p0, p1);
  return a;
}

void fused_elementwise(RefCtx& c) {
  const std::vector<Tensor>& ts = c.tuple("inputs");
  ew::Expr expr;
  Shape s;
  try {
    expr = ew::parse_expr(c.str("expr"), int(ts.size()));
    for (const Tensor& t : ts) s = broadcast(s, t.shape());
  } catch (const Error& e) {
    c.fail(e.what());
  }
  NdArray out(s);
  size_t n = size_t(out.numel());
  std::vector<Values> in;
  for (const Tensor& t : ts) {
    NdArray x = to_nd(t);
    Values v(n);
    std::vector<int64_t> idx(s.size(), 0);
    for (size_t i = 0; i < n; ++i) {
      v[i] = x.v[size_t(broadcast_index(idx, s, x.shape))];
      for (int d = int(s.size()) - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < s[size_t(d)]) break;
        idx[size_t(d)] = 0;
      }
    }
    in.push_back(std::move(v));
  }
  out.v = eval(expr, in, n);
  c.set_nd(0, out);
}

}  // namespace

void register_ref_fused_elementwise_ops() { register_ref("milrt_elementwise", fused_elementwise); }

}  // namespace milrt::ref
