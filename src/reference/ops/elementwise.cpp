// Reference implementations of the elementwise op family.
//
// Everything is computed in fp64 from the inputs' exact values and rounded
// once to the output dtype by set_nd. NaN handling follows NumPy (which
// coremltools' value inference uses): maximum/minimum/clip propagate NaN.
// Integer results go through store_from_double, so they truncate toward zero
// and saturate; the integer-specific rules (floor_div, mod, division by zero)
// are NumPy's.
#include <algorithm>
#include <cmath>
#include <functional>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Applies f to the operands broadcast together (NumPy rules); f receives one
// value per operand, in order.
NdArray zip(const RefCtx& c, const std::vector<NdArray>& xs,
            const std::function<double(const std::vector<double>&)>& f) {
  Shape s;
  try {
    for (const NdArray& x : xs) s = broadcast(s, x.shape);
  } catch (const Error& e) {
    c.fail(e.what());
  }
  NdArray out(s);
  std::vector<int64_t> idx(s.size(), 0);
  std::vector<double> vals(xs.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    for (size_t k = 0; k < xs.size(); ++k) vals[k] = xs[k].v[size_t(broadcast_index(idx, s, xs[k].shape))];
    out.v[size_t(i)] = f(vals);
    for (int d = int(s.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < s[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

NdArray map(const NdArray& x, const std::function<double(double)>& f) {
  NdArray out = x;
  for (double& v : out.v) v = f(v);
  return out;
}

bool is_int(const RefCtx& c, const std::string& key) { return dtype_is_int(c.in(key).dtype()); }

// A value rounded to dtype t, as coremltools materializes a default parameter
// in x's dtype (1e-45 becomes 0 in fp16).
double in_dtype(DType t, double v) { return Tensor::scalar(t, v).at(0); }

// An optional epsilon input, defaulting to `def` in x's dtype.
double epsilon(const RefCtx& c, double def) {
  return c.has("epsilon") ? c.f64("epsilon") : in_dtype(c.in("x").dtype(), def);
}

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// log(1 + e^x) without overflow.
double softplus(double x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0); }

// NumPy's floor_divide: integers divided by zero give 0.
double floor_div(double a, double b, bool ints) {
  if (ints && b == 0) return 0;
  return std::floor(a / b);
}

// NumPy's remainder: the result takes the divisor's sign; integers modulo
// zero give 0, floats NaN.
double mod(double a, double b, bool ints) {
  if (ints && b == 0) return 0;
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  if (r == 0) r = std::copysign(0.0, b);
  return r;
}

double sign(double x) {
  if (std::isnan(x)) return x;
  return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
}

void binary(RefCtx& c, const std::function<double(double, double)>& f) {
  c.set_nd(0, zip(c, {c.nd("x"), c.nd("y")}, [&](const std::vector<double>& v) { return f(v[0], v[1]); }));
}

void unary(RefCtx& c, const std::function<double(double)>& f) { c.set_nd(0, map(c.nd("x"), f)); }

// An input of one value per channel (dim 1 of x), reshaped to broadcast
// against x: [C] -> [C, 1, ..., 1].
NdArray per_channel(const RefCtx& c, const std::string& key) {
  const NdArray x = c.nd("x");
  NdArray p = c.nd(key);
  if (x.rank() < 2 || p.rank() != 1 || p.shape[0] != x.shape[1])
    c.fail("input '" + key + "' must have one value per channel of x " + shape_str(x.shape));
  p.shape.resize(size_t(x.rank() - 1), 1);
  return p;
}

void softmax(RefCtx& c) {
  NdArray x = c.nd("x");
  int64_t axis = c.i64("axis", -1);
  try {
    axis = norm_axis(axis, x.rank());
  } catch (const Error& e) {
    c.fail(e.what());
  }
  int64_t n = x.shape[size_t(axis)];
  int64_t inner = strides_of(x.shape)[size_t(axis)];
  int64_t outer = x.numel() / std::max<int64_t>(n * inner, 1);
  NdArray y(x.shape);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t k) { return size_t((o * n + k) * inner + in); };
      double m = -INFINITY;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, x.v[at(k)]);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        y.v[at(k)] = std::exp(x.v[at(k)] - m);  // m subtracted: exp cannot overflow
        sum += y.v[at(k)];
      }
      for (int64_t k = 0; k < n; ++k) y.v[at(k)] /= sum;
    }
  }
  c.set_nd(0, y);
}

void gelu(RefCtx& c) {
  std::string mode = c.str("mode", "EXACT");
  if (mode == "EXACT") {
    unary(c, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
  } else if (mode == "TANH_APPROXIMATION") {
    unary(c, [](double x) {
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
    });
  } else if (mode == "SIGMOID_APPROXIMATION") {
    unary(c, [](double x) { return x * sigmoid(1.702 * x); });
  } else {
    c.fail("unknown mode \"" + mode + "\"");
  }
}

void cast(RefCtx& c) {
  std::string name = c.str("dtype");
  std::optional<DType> to = dtype_from_name(name);
  if (!to || *to == DType::String) c.fail("cannot cast to dtype \"" + name + "\"");
  // from_nd truncates toward zero and saturates for integers, rounds to
  // nearest-even for floats, and maps non-zero (NaN included) to true for bool.
  c.set_out(0, from_nd(c.nd("x"), *to));
}

void register_binary_ops() {
  register_ref("add", [](RefCtx& c) { binary(c, [](double a, double b) { return a + b; }); });
  register_ref("sub", [](RefCtx& c) { binary(c, [](double a, double b) { return a - b; }); });
  register_ref("mul", [](RefCtx& c) { binary(c, [](double a, double b) { return a * b; }); });
  // For integers the quotient truncates toward zero (as a C division would).
  register_ref("real_div", [](RefCtx& c) { binary(c, [](double a, double b) { return a / b; }); });
  register_ref("pow", [](RefCtx& c) { binary(c, [](double a, double b) { return std::pow(a, b); }); });
  register_ref("maximum", [](RefCtx& c) { binary(c, nan_max); });
  register_ref("minimum", [](RefCtx& c) { binary(c, nan_min); });
  register_ref("floor_div", [](RefCtx& c) {
    bool ints = is_int(c, "x");
    binary(c, [ints](double a, double b) { return floor_div(a, b, ints); });
  });
  register_ref("mod", [](RefCtx& c) {
    bool ints = is_int(c, "x");
    binary(c, [ints](double a, double b) { return mod(a, b, ints); });
  });

  register_ref("equal", [](RefCtx& c) { binary(c, [](double a, double b) { return double(a == b); }); });
  register_ref("not_equal", [](RefCtx& c) { binary(c, [](double a, double b) { return double(a != b); }); });
  register_ref("less", [](RefCtx& c) { binary(c, [](double a, double b) { return double(a < b); }); });
  register_ref("less_equal", [](RefCtx& c) { binary(c, [](double a, double b) { return double(a <= b); }); });
  register_ref("greater", [](RefCtx& c) { binary(c, [](double a, double b) { return double(a > b); }); });
  register_ref("greater_equal", [](RefCtx& c) { binary(c, [](double a, double b) { return double(a >= b); }); });

  register_ref("logical_and", [](RefCtx& c) { binary(c, [](double a, double b) { return double(a != 0 && b != 0); }); });
  register_ref("logical_or", [](RefCtx& c) { binary(c, [](double a, double b) { return double(a != 0 || b != 0); }); });
  register_ref("logical_xor", [](RefCtx& c) { binary(c, [](double a, double b) { return double((a != 0) != (b != 0)); }); });
  register_ref("logical_not", [](RefCtx& c) { unary(c, [](double x) { return double(x == 0); }); });

  register_ref("select", [](RefCtx& c) {
    c.set_nd(0, zip(c, {c.nd("cond"), c.nd("a"), c.nd("b")},
                    [](const std::vector<double>& v) { return v[0] != 0 ? v[1] : v[2]; }));
  });
}

void register_unary_ops() {
  register_ref("abs", [](RefCtx& c) { unary(c, [](double x) { return std::fabs(x); }); });
  register_ref("exp", [](RefCtx& c) { unary(c, [](double x) { return std::exp(x); }); });
  register_ref("exp2", [](RefCtx& c) { unary(c, [](double x) { return std::exp2(x); }); });
  register_ref("sqrt", [](RefCtx& c) { unary(c, [](double x) { return std::sqrt(x); }); });
  register_ref("sin", [](RefCtx& c) { unary(c, [](double x) { return std::sin(x); }); });
  register_ref("cos", [](RefCtx& c) { unary(c, [](double x) { return std::cos(x); }); });
  register_ref("tan", [](RefCtx& c) { unary(c, [](double x) { return std::tan(x); }); });
  register_ref("asin", [](RefCtx& c) { unary(c, [](double x) { return std::asin(x); }); });
  register_ref("acos", [](RefCtx& c) { unary(c, [](double x) { return std::acos(x); }); });
  register_ref("atan", [](RefCtx& c) { unary(c, [](double x) { return std::atan(x); }); });
  register_ref("atanh", [](RefCtx& c) { unary(c, [](double x) { return std::atanh(x); }); });
  register_ref("sinh", [](RefCtx& c) { unary(c, [](double x) { return std::sinh(x); }); });
  register_ref("cosh", [](RefCtx& c) { unary(c, [](double x) { return std::cosh(x); }); });
  register_ref("tanh", [](RefCtx& c) { unary(c, [](double x) { return std::tanh(x); }); });
  register_ref("erf", [](RefCtx& c) { unary(c, [](double x) { return std::erf(x); }); });
  register_ref("floor", [](RefCtx& c) { unary(c, [](double x) { return std::floor(x); }); });
  register_ref("ceil", [](RefCtx& c) { unary(c, [](double x) { return std::ceil(x); }); });
  // Ties go to even, as NumPy's round (coremltools: "0.5 is rounded to 0");
  // nearbyint does that in the default rounding mode.
  register_ref("round", [](RefCtx& c) { unary(c, [](double x) { return std::nearbyint(x); }); });
  register_ref("sign", [](RefCtx& c) { unary(c, sign); });
  register_ref("square", [](RefCtx& c) { unary(c, [](double x) { return x * x; }); });

  register_ref("log", [](RefCtx& c) {
    double eps = epsilon(c, 1e-45);
    unary(c, [eps](double x) { return std::log(x + eps); });
  });
  register_ref("rsqrt", [](RefCtx& c) {
    double eps = epsilon(c, 1e-12);
    unary(c, [eps](double x) { return 1.0 / std::sqrt(x + eps); });
  });
  register_ref("inverse", [](RefCtx& c) {
    double eps = epsilon(c, 1e-4);
    unary(c, [eps](double x) { return 1.0 / (x + eps); });
  });
  register_ref("clip", [](RefCtx& c) {
    double lo = c.f64("alpha"), hi = c.f64("beta");
    unary(c, [lo, hi](double x) { return nan_min(nan_max(x, lo), hi); });
  });
  register_ref("threshold", [](RefCtx& c) {
    double lo = c.f64("alpha");
    unary(c, [lo](double x) { return nan_max(x, lo); });
  });
  register_ref("cast", cast);
}

void register_activation_ops() {
  register_ref("relu", [](RefCtx& c) { unary(c, [](double x) { return nan_max(x, 0); }); });
  register_ref("relu6", [](RefCtx& c) { unary(c, [](double x) { return nan_min(nan_max(x, 0), 6); }); });
  register_ref("leaky_relu", [](RefCtx& c) {
    double a = c.f64("alpha");
    unary(c, [a](double x) { return x < 0 ? a * x : x; });
  });
  register_ref("elu", [](RefCtx& c) {
    double a = c.f64("alpha");
    unary(c, [a](double x) { return x > 0 ? x : a * std::expm1(x); });
  });
  register_ref("sigmoid", [](RefCtx& c) { unary(c, sigmoid); });
  register_ref("sigmoid_hard", [](RefCtx& c) {
    double a = c.f64("alpha"), b = c.f64("beta");
    unary(c, [a, b](double x) { return nan_min(nan_max(a * x + b, 0), 1); });
  });
  register_ref("silu", [](RefCtx& c) { unary(c, [](double x) { return x * sigmoid(x); }); });
  register_ref("gelu", gelu);
  register_ref("softplus", [](RefCtx& c) { unary(c, softplus); });
  register_ref("softplus_parametric", [](RefCtx& c) {
    c.set_nd(0, zip(c, {c.nd("x"), per_channel(c, "alpha"), per_channel(c, "beta")},
                    [](const std::vector<double>& v) { return v[1] * softplus(v[2] * v[0]); }));
  });
  register_ref("softsign", [](RefCtx& c) { unary(c, [](double x) { return x / (1 + std::fabs(x)); }); });
  register_ref("scaled_tanh", [](RefCtx& c) {
    double a = c.f64("alpha"), b = c.f64("beta");
    unary(c, [a, b](double x) { return a * std::tanh(b * x); });
  });
  register_ref("linear_activation", [](RefCtx& c) {
    double a = c.f64("alpha"), b = c.f64("beta");
    unary(c, [a, b](double x) { return a * x + b; });
  });
  register_ref("prelu", [](RefCtx& c) {
    c.set_nd(0, zip(c, {c.nd("x"), per_channel(c, "alpha")},
                    [](const std::vector<double>& v) { return v[0] > 0 ? v[0] : v[1] * v[0]; }));
  });
  register_ref("clamped_relu", [](RefCtx& c) {
    double a = c.f64("alpha"), b = c.f64("beta");
    unary(c, [a, b](double x) { return std::min(b, x >= 0 ? x : a * x); });
  });
  register_ref("thresholded_relu", [](RefCtx& c) {
    double a = c.f64("alpha");
    unary(c, [a](double x) { return x < a ? 0.0 : x; });
  });
  register_ref("softmax", softmax);
}

}  // namespace

void register_ref_elementwise_ops() {
  register_binary_ops();
  register_unary_ops();
  register_activation_ops();
}

}  // namespace milrt::ref
