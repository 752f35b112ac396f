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
//  - Both expand what has no kernel in any form into ops that have one:
//    stack (reshapes + concat), interleaved concat (the same + a reshape),
//    shape (a constant), reverse (slice_by_index with stride -1), prelu,
//    softplus_parametric, batch_norm, instance_norm, l2_norm,
//    local_response_norm (its channel-window sum a conv of ones),
//    reductions over axes that are not one run of dims (a transpose that
//    puts them last, then the reduction), and integer abs, square and sign
//    (integer maximum, mul and select). An expansion may emit a composite
//    op that has a kernel (instance_norm a layer_norm, softplus_parametric
//    a softplus); the pass repeats until nothing changes, so decompose-all
//    expands those too.
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

// rsqrt(reduce(x^2 over axes, keep_dims) + eps), reduce being reduce_mean
// (rms_norm) or reduce_sum (l2_norm).
Arg inverse_root_of_squares(Replacement& r, const Arg& x, const std::string& reduce, const std::vector<int64_t>& axes,
                            const Arg& eps, DType dt) {
  const std::string tag = reduce == "reduce_mean" ? "mean_sq" : "sum_sq";
  Arg sq = r.emit("mul", "sq", {{"x", x}, {"y", x}});
  Arg red = r.emit(reduce, tag, {{"x", sq}, {"axes", r.ints(axes)}, {"keep_dims", r.boolean(true)}});
  Arg shifted = r.emit("add", tag + "_eps", {{"x", red}, {"y", eps}});
  return r.emit("rsqrt", "rsqrt", {{"x", shifted}, {"epsilon", r.scalar(dt, 0)}});
}

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
  Arg inv = inverse_root_of_squares(r, x, "reduce_mean", {axis}, *eps, dt);
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

// ---- ops without a kernel of their own -------------------------------------

// A per-channel parameter [C] of x [N, C, ...] as an operand of x's dtype
// that broadcasts along dim 1: [C, 1, ..., 1]. nullopt when C is unknown.
std::optional<Arg> per_channel(Replacement& r, const Op& op, const std::string& key, const Type& xt) {
  if (xt.shape.size() < 2 || xt.shape[1] < 0) return std::nullopt;
  Shape s(xt.shape.size() - 1, 1);
  s[0] = xt.shape[1];
  return r.as_operand(*op.arg(key), xt.dtype, s, key);
}

Arg bool_vector(const std::vector<bool>& v) {
  Literal l;
  l.type = Type::tensor(DType::Bool, {int64_t(v.size())});
  l.value = Tensor(DType::Bool, l.type.shape);
  for (size_t i = 0; i < v.size(); ++i) l.value.set(i, v[i] ? 1 : 0);
  return Arg::of_const(std::move(l));
}

// The elements of a tuple input (a lone value as one).
std::vector<Arg> elements_of(const Arg& values) {
  return values.kind == Arg::Kind::Tuple ? values.elems : std::vector<Arg>{values};
}

// Each value with a size-1 dim inserted at `ax`: reshapes (views in a plan)
// where the shape is known, else expand_dims.
std::vector<Arg> with_unit_dim(Replacement& r, const std::vector<Arg>& elems, int64_t ax) {
  std::vector<Arg> expanded;
  for (size_t i = 0; i < elems.size(); ++i) {
    Type t = r.info(elems[i]).type;
    std::string tag = "expanded_" + std::to_string(i);
    if (t.has_unknown_dims()) {
      expanded.push_back(r.emit("expand_dims", tag, {{"x", elems[i]}, {"axes", r.ints({ax})}}));
    } else {
      Shape e = t.shape;
      e.insert(e.begin() + ax, 1);
      expanded.push_back(r.emit("reshape", tag, {{"x", elems[i]}, {"shape", r.ints(e)}}));
    }
  }
  return expanded;
}

// stack(values, axis) = concat of the values with a size-1 dim inserted at axis.
bool stack(const Op& op, Replacement& r) {
  const Arg* values = op.arg("values");
  auto axis = passes::const_ints(r, op, "axis");
  if (!values || !axis || axis->size() != 1) return false;
  std::vector<Arg> elems = elements_of(*values);
  if (elems.empty()) return false;
  int64_t rank = int64_t(r.info(elems[0]).type.shape.size()), ax = (*axis)[0] < 0 ? (*axis)[0] + rank + 1 : (*axis)[0];
  if (ax < 0 || ax > rank) return false;  // the verifier reports it
  r.finish("concat", {{"values", Arg::of_tuple(with_unit_dim(r, elems, ax))},
                      {"axis", r.scalar(DType::Int32, double(ax))}, {"interleave", r.boolean(false)}});
  return true;
}

// concat(values, axis, interleave = true) of k values of one shape: element
// j of value i lands at j * k + i along axis, which is stacking them after
// axis ([..., d, k, ...]) and merging those two dims.
bool interleaved_concat(const Op& op, Replacement& r) {
  const Arg* values = op.arg("values");
  const Arg* il = op.arg("interleave");
  auto axis = passes::const_ints(r, op, "axis");
  if (!values || !il || !axis || axis->size() != 1 || il->kind == Arg::Kind::Tuple) return false;
  const Tensor* flag = r.info(*il).value;
  if (!flag || flag->numel() != 1 || flag->at(0) == 0) return false;
  const Type& out = op.outputs[0].type;
  std::vector<Arg> elems = elements_of(*values);
  int64_t rank = int64_t(out.shape.size()), ax = (*axis)[0] < 0 ? (*axis)[0] + rank : (*axis)[0];
  if (elems.empty() || ax < 0 || ax >= rank || out.has_unknown_dims()) return false;
  Arg stacked = r.emit("concat", "stacked", {{"values", Arg::of_tuple(with_unit_dim(r, elems, ax + 1))},
                                             {"axis", r.scalar(DType::Int32, double(ax + 1))},
                                             {"interleave", r.boolean(false)}});
  r.finish("reshape", {{"x", stacked}, {"shape", r.ints(out.shape)}});
  return true;
}

// shape(x) of a statically shaped x is a constant.
bool shape_op(const Op& op, Replacement& r) {
  Type t = r.info(x_of(op)).type;
  if (t.has_unknown_dims()) return false;
  r.finish("const", {{"val", r.ints(t.shape)}});
  r.ops().back().inputs[0].in_attr_block = true;  // const(...)[val = ...], as the parser expects
  return true;
}

// reverse(x, axes) = x[::-1] along each axis (all of them by default).
bool reverse(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  int64_t rank = int64_t(r.info(x).type.shape.size());
  std::vector<bool> flip(size_t(rank), !op.has("axes"));
  if (op.has("axes")) {
    auto axes = passes::const_ints(r, op, "axes");
    if (!axes) return false;
    for (int64_t a : *axes) {
      if (a < -rank || a >= rank) return false;
      flip[size_t(a < 0 ? a + rank : a)] = true;
    }
  }
  if (rank == 0 || std::none_of(flip.begin(), flip.end(), [](bool f) { return f; })) {
    r.finish("identity", {{"x", x}});
    return true;
  }
  std::vector<int64_t> zeros(size_t(rank), 0), stride;
  for (bool f : flip) stride.push_back(f ? -1 : 1);
  std::vector<bool> all(size_t(rank), true);
  r.finish("slice_by_index", {{"x", x}, {"begin", r.ints(zeros)}, {"end", r.ints(zeros)}, {"stride", r.ints(stride)},
                              {"begin_mask", bool_vector(all)}, {"end_mask", bool_vector(all)}});
  return true;
}

// prelu(x, alpha) = x > 0 ? x : alpha x, alpha per channel (dim 1).
bool prelu(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  auto alpha = per_channel(r, op, "alpha", xt);
  if (!alpha) return false;
  Arg ax = r.emit("mul", "scaled", {{"x", x}, {"y", *alpha}});
  Arg pos = r.emit("greater", "positive", {{"x", x}, {"y", r.scalar(xt.dtype, 0)}});
  r.finish("select", {{"cond", pos}, {"a", x}, {"b", ax}});
  return true;
}

// softplus_parametric(x, alpha, beta) = alpha softplus(beta x), per channel.
bool softplus_parametric(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  auto alpha = per_channel(r, op, "alpha", xt), beta = per_channel(r, op, "beta", xt);
  if (!alpha || !beta) return false;
  Arg bx = r.emit("mul", "scaled", {{"x", x}, {"y", *beta}});
  Arg sp = r.emit("softplus", "softplus", {{"x", bx}});
  r.finish("mul", {{"x", sp}, {"y", *alpha}});
  return true;
}

// y * gamma + beta per channel, each optional; finishes the replacement.
void channel_affine(Replacement& r, Arg y, const std::optional<Arg>& gamma, const std::optional<Arg>& beta) {
  if (gamma && beta) y = r.emit("mul", "scaled", {{"x", y}, {"y", *gamma}});
  if (beta) r.finish("add", {{"x", y}, {"y", *beta}});
  else if (gamma) r.finish("mul", {{"x", y}, {"y", *gamma}});
  else r.finish("identity", {{"x", y}});
}

// batch_norm: (x - mean) rsqrt(variance + epsilon) gamma + beta, per channel.
bool batch_norm(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  DType dt = xt.dtype;
  auto mean = per_channel(r, op, "mean", xt), var = per_channel(r, op, "variance", xt);
  auto eps = scalar_param(r, op, "epsilon", dt, 1e-5);
  if (!mean || !var || !eps) return false;
  std::optional<Arg> gamma, beta;
  if (op.has("gamma") && !(gamma = per_channel(r, op, "gamma", xt))) return false;
  if (op.has("beta") && !(beta = per_channel(r, op, "beta", xt))) return false;
  Arg shifted = r.emit("add", "var_eps", {{"x", *var}, {"y", *eps}});
  Arg inv = r.emit("rsqrt", "rsqrt", {{"x", shifted}, {"epsilon", r.scalar(dt, 0)}});
  Arg centered = r.emit("sub", "centered", {{"x", x}, {"y", *mean}});
  if (!gamma && !beta) {
    r.finish("mul", {{"x", centered}, {"y", inv}});
    return true;
  }
  channel_affine(r, r.emit("mul", "normed", {{"x", centered}, {"y", inv}}), gamma, beta);
  return true;
}

// instance_norm: layer_norm over the spatial dims (2, 3, ...) of each
// [n, c], then gamma and beta per channel.
bool instance_norm(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  int64_t rank = int64_t(xt.shape.size());
  auto eps = scalar_param(r, op, "epsilon", xt.dtype, 1e-5);
  if (rank < 3 || !eps) return false;
  std::optional<Arg> gamma, beta;
  if (op.has("gamma") && !(gamma = per_channel(r, op, "gamma", xt))) return false;
  if (op.has("beta") && !(beta = per_channel(r, op, "beta", xt))) return false;
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < rank; ++d) axes.push_back(d);
  Inputs ln = {{"x", x}, {"axes", r.ints(axes)}, {"epsilon", *eps}};
  if (!gamma && !beta) {
    r.finish("layer_norm", ln);
    return true;
  }
  channel_affine(r, r.emit("layer_norm", "normed", ln), gamma, beta);
  return true;
}

// l2_norm: x rsqrt(sum(x^2) + epsilon) over the last three dims.
bool l2_norm(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  int64_t rank = int64_t(xt.shape.size());
  auto eps = scalar_param(r, op, "epsilon", xt.dtype, 1e-6);
  if (rank < 3 || !eps) return false;
  Arg inv = inverse_root_of_squares(r, x, "reduce_sum", {rank - 3, rank - 2, rank - 1}, *eps, xt.dtype);
  r.finish("mul", {{"x", x}, {"y", inv}});
  return true;
}

// local_response_norm: x / (k + alpha / size * s)^beta, s the sum of x^2
// over `size` channels starting (size - 1) / 2 before each one. That window
// sum is a conv of ones over x^2 viewed as [N, 1, C, spatial], padded by
// (size - 1) / 2 channels before and size / 2 after.
bool local_response_norm(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  DType dt = xt.dtype;
  auto size = passes::const_ints(r, op, "size");
  auto alpha = scalar_param(r, op, "alpha", dt, 1e-4), beta = scalar_param(r, op, "beta", dt, 0.75);
  auto k = scalar_param(r, op, "k", dt, 1.0);
  if (!size || size->size() != 1 || (*size)[0] < 1 || !alpha || !beta || !k || xt.has_unknown_dims()) return false;
  auto a = literal_value(*alpha);
  if (!a) return false;
  const int64_t n = (*size)[0], before = (n - 1) / 2, after = n - 1 - before;
  const Shape& xs = xt.shape;
  int64_t spatial = shape_numel(Shape(xs.begin() + 2, xs.end()));
  Literal ones;
  ones.type = Type::tensor(dt, {1, 1, n, 1});
  ones.value = Tensor(dt, ones.type.shape);
  for (int64_t i = 0; i < n; ++i) ones.value.set(size_t(i), 1.0);
  Arg sq = r.emit("mul", "sq", {{"x", x}, {"y", x}});
  Arg sq4 = r.emit("reshape", "sq_rows", {{"x", sq}, {"shape", r.ints({xs[0], 1, xs[1], spatial})}});
  Arg window = r.emit("conv", "window_sum",
                      {{"x", sq4}, {"weight", Arg::of_const(std::move(ones))}, {"pad_type", r.str("custom")},
                       {"pad", r.ints({before, after, 0, 0})}});
  Arg sum = r.emit("reshape", "sum_sq", {{"x", window}, {"shape", r.ints(xs)}});
  Arg scaled = r.emit("mul", "scaled", {{"x", sum}, {"y", r.scalar(dt, *a / double(n))}});
  Arg base = r.emit("add", "base", {{"x", scaled}, {"y", *k}});
  Arg denom = r.emit("pow", "denominator", {{"x", base}, {"y", *beta}});
  r.finish("real_div", {{"x", x}, {"y", denom}});
  return true;
}

// reduce_* over axes that are not one run of x's dims (size-1 dims aside),
// which the reduction kernel's [outer, n, inner] view cannot take: x
// transposed so that the reduced dims come last, in order, then reduced
// over those, then reshaped to keep_dims' shape if asked.
bool scattered_reduction(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  Type xt = r.info(x).type;
  int64_t rank = int64_t(xt.shape.size());
  auto axes = passes::const_ints(r, op, "axes");
  std::optional<double> keep = 0.0;
  if (const Arg* k = op.arg("keep_dims")) {
    if (k->kind == Arg::Kind::Tuple) return false;
    const Tensor* v = r.info(*k).value;
    keep = v && v->numel() == 1 ? std::optional<double>(v->at(0)) : std::nullopt;
  }
  if (!axes || axes->empty() || !keep || xt.has_unknown_dims()) return false;
  std::vector<bool> reduced(size_t(rank), false);
  for (int64_t a : *axes) {
    if (a < -rank || a >= rank) return false;
    reduced[size_t(a < 0 ? a + rank : a)] = true;
  }
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[size_t(d)] && xt.shape[size_t(d)] != 1) first = first < 0 ? d : first, last = d;
  bool one_run = true;
  for (int64_t d = first; first >= 0 && d <= last; ++d) one_run = one_run && (reduced[size_t(d)] || xt.shape[size_t(d)] == 1);
  if (one_run) return false;
  std::vector<int64_t> perm, tail;
  for (int64_t d = 0; d < rank; ++d) (reduced[size_t(d)] ? tail : perm).push_back(d);
  const int64_t kept = int64_t(perm.size());
  perm.insert(perm.end(), tail.begin(), tail.end());
  std::vector<int64_t> last_axes;
  for (int64_t d = kept; d < rank; ++d) last_axes.push_back(d);
  Arg t = r.emit("transpose", "reduced_last", {{"x", x}, {"perm", r.ints(perm)}});
  Inputs red = {{"x", t}, {"axes", r.ints(last_axes)}, {"keep_dims", r.boolean(false)}};
  if (*keep == 0) {
    r.finish(op.type, red);
    return true;
  }
  Arg y = r.emit(op.type, "reduced", red);
  r.finish("reshape", {{"x", y}, {"shape", r.ints(op.outputs[0].type.shape)}});
  return true;
}

// Integer abs, square and sign (the unary kernels are float-only), exactly,
// from integer ops that have kernels: max(x, -x), x * x, and
// select(x > 0, 1, select(x < 0, -1, 0)).
bool integer_unary(const Op& op, Replacement& r) {
  const Arg& x = x_of(op);
  DType dt = r.info(x).type.dtype;
  if (dt != DType::Int32) return false;
  if (op.type == "square") {
    r.finish("mul", {{"x", x}, {"y", x}});
  } else if (op.type == "abs") {
    Arg neg = r.emit("mul", "negated", {{"x", x}, {"y", r.scalar(dt, -1)}});
    r.finish("maximum", {{"x", x}, {"y", neg}});
  } else {
    Arg pos = r.emit("greater", "positive", {{"x", x}, {"y", r.scalar(dt, 0)}});
    Arg neg = r.emit("less", "negative", {{"x", x}, {"y", r.scalar(dt, 0)}});
    Arg zero = r.emit("mul", "zero", {{"x", x}, {"y", r.scalar(dt, 0)}});
    Arg low = r.emit("select", "nonpositive", {{"cond", neg}, {"a", r.scalar(dt, -1)}, {"b", zero}});
    r.finish("select", {{"cond", pos}, {"a", r.scalar(dt, 1)}, {"b", low}});
  }
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
  if (op.type == "shape") return shape_op(op, r);
  if (op.type == "reverse") return reverse(op, r);
  if (op.type == "prelu") return prelu(op, r);
  if (op.type == "softplus_parametric") return softplus_parametric(op, r);
  if (op.type == "batch_norm") return batch_norm(op, r);
  if (op.type == "instance_norm") return instance_norm(op, r);
  if (op.type == "l2_norm") return l2_norm(op, r);
  if (op.type == "local_response_norm") return local_response_norm(op, r);
  if (op.type.rfind("reduce_", 0) == 0 && op.type != "reduce_argmax" && op.type != "reduce_argmin")
    return scattered_reduction(op, r);
  if (op.type == "abs" || op.type == "square" || op.type == "sign") return integer_unary(op, r);
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
    // Until nothing changes: an expansion may emit a composite op that this
    // mode expands too. Each round replaces ops by strictly simpler ones, so
    // a few rounds suffice; the bound only guards against a rule cycle.
    bool changed = true;
    for (int round = 0; changed && round < 8; ++round) {
      changed = false;
      passes::rewrite_ops(f, p.version == "1.3", [all, &changed](const Op& op, Replacement& r) {
        if (op.outputs.size() != 1) return false;
        bool done = false;
        if (op.type == "stack") done = stack(op, r);
        else if (op.type == "concat") done = interleaved_concat(op, r);
        else if (!op.has("x") || x_of(op).kind == Arg::Kind::Tuple) return false;
        else if (all || !has_kernel(op, r)) done = decompose_op(op, r);
        changed = changed || done;
        return done;
      });
    }
    passes::drop_orphaned_consts(f, read_before);  // e.g. an rms_norm weight once reshaped
  }
}

}  // namespace

namespace passes {
void decompose(Program& p) { run(p, false); }
void decompose_all(Program& p) { run(p, true); }
}  // namespace passes

}  // namespace milrt
