// Passes: expand composite activations and normalizations into primitive
// MIL ops.
//
//  - `decompose` (default pipeline) expands only what the compiled engine
//    has no kernel for: silu, gelu, softplus, relu6 have unary kernels,
//    sigmoid_hard and leaky_relu too when their parameters are constants,
//    rms_norm and layer_norm norm kernels when their parameters are constant
//    and the normalized axes form one run (size-1 dims may lie between).
//    Keeping them whole is faster and rounds once, as the op does.
//  - `decompose-all` expands every one of them, for backends that only have
//    kernels for the primitives.
//
// Each expansion computes the same function in exact arithmetic (the
// formulas of coremltools' activation.py and normalization.py; rms_norm is
// milrt's extension op, x * rsqrt(mean(x^2) + eps) * w). Executed, it rounds after every primitive op where the
// composite op rounded once, so fp16 programs move by a few fp16 ulps.
// Constants become literals in x's dtype, as every binary op needs.
//
// rsqrt is always given epsilon = 0: its default (1e-12) would add to the
// epsilon the normalization already added.
//
// Range: in fp16, x·x (rms_norm) and (x - mean)^2 (layer_norm) overflow for
// |x| >= 256, where the single ops (computed in higher precision) do not;
// the expansion is only as good as fp16 arithmetic in that range.
#include <algorithm>
#include <cmath>

#include "passes/pass_registry.h"
#include "passes/rewriter.h"

namespace milrt {
namespace {

using passes::Inputs;
using passes::Replacement;

constexpr double kPi = 3.14159265358979323846;

// A scalar parameter as an operand of x's dtype `dt`: a literal of its
// constant value (or of `def` when absent), or the value itself when it is
// not constant but already of dtype `dt`. nullopt: cannot be expressed.
std::optional<Arg> scalar_param(const Replacement& r, const Op& op, const std::string& key, DType dt,
                                std::optional<double> def) {
  const Arg* a = op.arg(key);
  if (!a) return def ? std::optional<Arg>(r.scalar(dt, *def)) : std::nullopt;
  if (a->kind == Arg::Kind::Tuple) return std::nullopt;
  ValueInfo v = r.info(*a);
  if (v.value && v.value->numel() == 1) return r.scalar(dt, v.value->at(0));
  if (!v.value && v.type.dtype == dt && shape_numel(v.type.shape) == 1) return *a;
  return std::nullopt;
}

// The literal value of a scalar operand, if it is one.
std::optional<double> literal_value(const Arg& a) {
  if (a.kind != Arg::Kind::Const || a.lit->value.numel() != 1) return std::nullopt;
  return a.lit->value.at(0);
}

const Arg& x_of(const Op& op) { return *op.arg("x"); }
DType dtype_of_x(const Replacement& r, const Op& op) { return r.info(x_of(op)).type.dtype; }

// ---- activations ----------------------------------------------------------

// silu(x) = x * sigmoid(x)
bool silu(const Op& op, Replacement& r) {
  Arg s = r.emit("sigmoid", "sigmoid", {{"x", x_of(op)}});
  r.finish("mul", {{"x", x_of(op)}, {"y", s}});
  return true;
}

// EXACT:                 0.5 x (1 + erf(x / sqrt(2)))
// TANH_APPROXIMATION:    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
// SIGMOID_APPROXIMATION: x sigmoid(1.702 x)
bool gelu(const Op& op, Replacement& r) {
  std::string mode = "EXACT";
  if (op.has("mode")) {
    auto m = passes::const_str(r, op, "mode");
    if (!m) return false;
    mode = *m;
  }
  const Arg& x = x_of(op);
  DType dt = dtype_of_x(r, op);
  if (mode == "SIGMOID_APPROXIMATION") {
    Arg t = r.emit("mul", "scaled", {{"x", x}, {"y", r.scalar(dt, 1.702)}});
    Arg s = r.emit("sigmoid", "sigmoid", {{"x", t}});
    r.finish("mul", {{"x", x}, {"y", s}});
    return true;
  }
  Arg inner;
  if (mode == "EXACT") {
    Arg t = r.emit("mul", "scaled", {{"x", x}, {"y", r.scalar(dt, 1 / std::sqrt(2.0))}});
    inner = r.emit("erf", "erf", {{"x", t}});
  } else if (mode == "TANH_APPROXIMATION") {
    Arg x2 = r.emit("mul", "x2", {{"x", x}, {"y", x}});
    Arg x3 = r.emit("mul", "x3", {{"x", x2}, {"y", x}});
    Arg c = r.emit("mul", "cubic", {{"x", x3}, {"y", r.scalar(dt, 0.044715)}});
    Arg s = r.emit("add", "sum", {{"x", x}, {"y", c}});
    Arg t = r.emit("mul", "scaled", {{"x", s}, {"y", r.scalar(dt, std::sqrt(2 / kPi))}});
    inner = r.emit("tanh", "tanh", {{"x", t}});
  } else {
    return false;  // the verifier rejects other modes
  }
  Arg one_plus = r.emit("add", "one_plus", {{"x", inner}, {"y", r.scalar(dt, 1)}});
  Arg half_x = r.emit("mul", "half_x", {{"x", x}, {"y", r.scalar(dt, 0.5)}});
  r.finish("mul", {{"x", half_x}, {"y", one_plus}});
  return true;
}

// softplus(x) = log(1 + exp(x)), computed as max(x, 0) + log(1 + exp(-|x|)),
// which cannot overflow. log's default epsilon is irrelevant: its argument is >= 1.
bool softplus(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  DType dt = dtype_of_x(r, op);
  Arg a = r.emit("abs", "abs", {{"x", x}});
  Arg n = r.emit("mul", "neg_abs", {{"x", a}, {"y", r.scalar(dt, -1)}});
  Arg e = r.emit("exp", "exp", {{"x", n}});
  Arg p = r.emit("add", "one_plus", {{"x", e}, {"y", r.scalar(dt, 1)}});
  Arg l = r.emit("log", "log", {{"x", p}});
  Arg m = r.emit("maximum", "pos", {{"x", x}, {"y", r.scalar(dt, 0)}});
  r.finish("add", {{"x", m}, {"y", l}});
  return true;
}

// sigmoid_hard(x) = min(max(alpha x + beta, 0), 1)
bool sigmoid_hard(const Op& op, Replacement& r) {
  DType dt = dtype_of_x(r, op);
  auto alpha = scalar_param(r, op, "alpha", dt, std::nullopt), beta = scalar_param(r, op, "beta", dt, std::nullopt);
  if (!alpha || !beta) return false;
  Arg m = r.emit("mul", "scaled", {{"x", x_of(op)}, {"y", *alpha}});
  Arg a = r.emit("add", "shifted", {{"x", m}, {"y", *beta}});
  r.finish("clip", {{"x", a}, {"alpha", r.scalar(dt, 0)}, {"beta", r.scalar(dt, 1)}});
  return true;
}

// relu6(x) = min(max(x, 0), 6)
bool relu6(const Op& op, Replacement& r) {
  DType dt = dtype_of_x(r, op);
  r.finish("clip", {{"x", x_of(op)}, {"alpha", r.scalar(dt, 0)}, {"beta", r.scalar(dt, 6)}});
  return true;
}

// leaky_relu(x) = x < 0 ? alpha x : x. For 0 <= alpha <= 1 that is
// max(x, alpha x) (rounding is monotonic, so this holds after rounding too);
// otherwise a select.
bool leaky_relu(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  DType dt = dtype_of_x(r, op);
  auto alpha = scalar_param(r, op, "alpha", dt, std::nullopt);
  if (!alpha) return false;
  Arg ax = r.emit("mul", "scaled", {{"x", x}, {"y", *alpha}});
  std::optional<double> a = literal_value(*alpha);
  if (a && *a >= 0 && *a <= 1) {
    r.finish("maximum", {{"x", x}, {"y", ax}});
    return true;
  }
  Arg neg = r.emit("less", "negative", {{"x", x}, {"y", r.scalar(dt, 0)}});
  r.finish("select", {{"cond", neg}, {"a", ax}, {"b", x}});
  return true;
}

// ---- normalizations ---------------------------------------------------------

// x * rsqrt(mean(x^2 over axis) + eps) * w, the axis being 1 for rank 4
// (the seeds' [1, C, 1, S]) and the last one otherwise; w lies along it.
bool rms_norm(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  DType dt = xt.dtype;
  int64_t rank = int64_t(xt.shape.size());
  int64_t axis = rank == 4 ? 1 : rank - 1;
  auto eps = scalar_param(r, op, "eps", dt, 1e-5);
  if (!eps) return false;
  // w as [n, 1, ..., 1], broadcasting along the axis.
  Shape w_shape(size_t(rank - axis), 1);
  if (op.has("w")) {
    Type wt = r.info(*op.arg("w")).type;
    w_shape[0] = wt.has_unknown_dims() ? xt.shape[size_t(axis)] : shape_numel(wt.shape);
    if (w_shape[0] < 0) return false;
  }
  Arg sq = r.emit("mul", "sq", {{"x", x}, {"y", x}});
  Arg ms = r.emit("reduce_mean", "mean_sq", {{"x", sq}, {"axes", r.ints({axis})}, {"keep_dims", r.boolean(true)}});
  Arg shifted = r.emit("add", "mean_sq_eps", {{"x", ms}, {"y", *eps}});
  Arg inv = r.emit("rsqrt", "rsqrt", {{"x", shifted}, {"epsilon", r.scalar(dt, 0)}});
  if (!op.has("w")) {
    r.finish("mul", {{"x", x}, {"y", inv}});
    return true;
  }
  Arg w = r.as_operand(*op.arg("w"), dt, w_shape, "w");
  Arg normed = r.emit("mul", "normed", {{"x", x}, {"y", inv}});
  r.finish("mul", {{"x", normed}, {"y", w}});
  return true;
}

// (x - mean) * rsqrt(var + epsilon) * gamma + beta, mean and (biased)
// variance over `axes` (default: all); gamma and beta have the shape of the
// normalized dims.
bool layer_norm(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  DType dt = xt.dtype;
  int64_t rank = int64_t(xt.shape.size());
  std::vector<bool> normed(size_t(rank), !op.has("axes"));
  if (op.has("axes")) {
    auto axes = passes::const_ints(r, op, "axes");
    if (!axes) return false;
    for (int64_t a : *axes) {
      if (a < -rank || a >= rank) return false;  // the verifier reports it
      normed[size_t(a < 0 ? a + rank : a)] = true;
    }
  }
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < rank; ++i)
    if (normed[size_t(i)]) axes.push_back(i);
  // No axes leaves nothing to normalize over (and reduce_mean would read an
  // empty list as "all"); such a layer_norm is left alone.
  if (axes.empty()) return false;
  auto eps = scalar_param(r, op, "epsilon", dt, 1e-5);
  if (!eps) return false;
  // gamma and beta as x's dims from the first normalized one on, the others 1.
  Shape affine_shape;
  for (int64_t i = axes.front(); i < rank; ++i) affine_shape.push_back(normed[size_t(i)] ? xt.shape[size_t(i)] : 1);
  bool affine = op.has("gamma") || op.has("beta");
  if (affine && std::any_of(affine_shape.begin(), affine_shape.end(), [](int64_t d) { return d < 0; })) return false;

  Inputs reduce = {{"axes", r.ints(axes)}, {"keep_dims", r.boolean(true)}};
  auto mean_of = [&](const Arg& v, const std::string& tag) {
    Inputs in = {{"x", v}};
    in.insert(in.end(), reduce.begin(), reduce.end());
    return r.emit("reduce_mean", tag, in);
  };
  Arg mean = mean_of(x, "mean");
  Arg centered = r.emit("sub", "centered", {{"x", x}, {"y", mean}});
  Arg sq = r.emit("mul", "sq", {{"x", centered}, {"y", centered}});
  Arg var = mean_of(sq, "var");
  Arg shifted = r.emit("add", "var_eps", {{"x", var}, {"y", *eps}});
  Arg inv = r.emit("rsqrt", "rsqrt", {{"x", shifted}, {"epsilon", r.scalar(dt, 0)}});
  if (!affine) {
    r.finish("mul", {{"x", centered}, {"y", inv}});
    return true;
  }
  Arg normalized = r.emit("mul", "normed", {{"x", centered}, {"y", inv}});
  if (op.has("gamma")) {
    Arg gamma = r.as_operand(*op.arg("gamma"), dt, affine_shape, "gamma");
    if (!op.has("beta")) {
      r.finish("mul", {{"x", normalized}, {"y", gamma}});
      return true;
    }
    normalized = r.emit("mul", "scaled", {{"x", normalized}, {"y", gamma}});
  }
  Arg beta = r.as_operand(*op.arg("beta"), dt, affine_shape, "beta");
  r.finish("add", {{"x", normalized}, {"y", beta}});
  return true;
}

// A scalar parameter that is absent or a compile-time constant.
bool const_or_absent(const Replacement& r, const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  if (!a) return true;
  if (a->kind == Arg::Kind::Tuple) return false;
  ValueInfo v = r.info(*a);
  return v.value && v.value->numel() == 1;
}

// layer_norm's axes (default: all) form one run of x's dims, up to size-1
// dims between them, as the norm kernel's [outer, n, inner] view needs.
bool one_run_of_axes(const Replacement& r, const Op& op) {
  Type xt = r.info(x_of(op)).type;
  int64_t rank = int64_t(xt.shape.size());
  std::vector<bool> normed(size_t(rank), !op.has("axes"));
  if (op.has("axes")) {
    auto axes = passes::const_ints(r, op, "axes");
    if (!axes || axes->empty()) return false;
    for (int64_t a : *axes) {
      if (a < -rank || a >= rank) return false;
      normed[size_t(a < 0 ? a + rank : a)] = true;
    }
  }
  int64_t first = -1, last = -1;
  for (int64_t i = 0; i < rank; ++i)
    if (normed[size_t(i)]) {
      if (first < 0) first = i;
      last = i;
    }
  if (first < 0) return false;
  for (int64_t i = first; i <= last; ++i)
    if (!normed[size_t(i)] && xt.shape[size_t(i)] != 1) return false;
  return true;
}

// Whether the compiled engine lowers `op` as it stands (src/runtime/lower/
// elementwise.cpp's unary table, lower/fused_norm.cpp); the tests check
// every op kept here compiles.
bool has_kernel(const Op& op, const Replacement& r) {
  const std::string& t = op.type;
  if (t == "silu" || t == "softplus" || t == "relu6") return true;
  if (t == "gelu") return !op.has("mode") || passes::const_str(r, op, "mode").has_value();
  if (t == "sigmoid_hard")
    return op.has("alpha") && op.has("beta") && const_or_absent(r, op, "alpha") && const_or_absent(r, op, "beta");
  if (t == "leaky_relu") return op.has("alpha") && const_or_absent(r, op, "alpha");
  if (t == "rms_norm") return const_or_absent(r, op, "eps");
  if (t == "layer_norm") return const_or_absent(r, op, "epsilon") && one_run_of_axes(r, op);
  return false;
}

bool decompose_op(const Op& op, Replacement& r) {
  if (op.type == "silu") return silu(op, r);
  if (op.type == "gelu") return gelu(op, r);
  if (op.type == "softplus") return softplus(op, r);
  if (op.type == "sigmoid_hard") return sigmoid_hard(op, r);
  if (op.type == "relu6") return relu6(op, r);
  if (op.type == "leaky_relu") return leaky_relu(op, r);
  if (op.type == "rms_norm") return rms_norm(op, r);
  if (op.type == "layer_norm") return layer_norm(op, r);
  return false;
}

void run(Program& p, bool all) {
  for (auto& f : p.functions) {
    std::set<std::string> read_before = passes::names_read(f);
    passes::rewrite_ops(f, p.version == "1.3", [all](const Op& op, Replacement& r) {
      if (op.outputs.size() != 1 || !op.has("x") || x_of(op).kind == Arg::Kind::Tuple) return false;
      if (!all && has_kernel(op, r)) return false;
      return decompose_op(op, r);
    });
    passes::drop_orphaned_consts(f, read_before);  // e.g. an rms_norm weight once reshaped
  }
}

}  // namespace

namespace passes {
void decompose(Program& p) { run(p, false); }
void decompose_all(Program& p) { run(p, true); }
}  // namespace passes

}  // namespace milrt
