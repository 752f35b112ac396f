// Gradient rules of the data-movement ops. Each gradient moves the output's
// gradient back to where the forward op read it from: shape changes undo
// themselves with a reshape, transpose with the inverse permutation, slices
// put their gradient back into zeros (pad when the slice is one contiguous
// block, slice_update otherwise), concat/split/stack slice or concatenate,
// tile sums its copies, and the gathers scatter-add (indices may repeat).
// Every op emitted here has a compiled lowering.
#include <algorithm>
#include <numeric>

#include "autodiff/rule_util.h"
#include "milrt/error.h"

namespace milrt::autodiff {
namespace {

using Grads = std::map<std::string, Value>;

Value g0(const RuleContext& c) { return *c.dout.at(0); }

// reshape, squeeze, expand_dims, flatten2d: the same elements in the same order.
Grads reshape_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  return {{"x", reshape_to(c, g0(c), input_type(c, "x").shape, "x")}};
}

Grads identity_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  return {{"x", g0(c)}};
}

Grads transpose_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  int64_t rank = int64_t(input_type(c, "x").shape.size());
  std::vector<int64_t> perm = ints_or(c, "perm", {});
  if (int64_t(perm.size()) != rank) throw_op_error(c.op, "gradient rule: 'perm' does not fit x");
  std::vector<int64_t> inv(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) inv[size_t(norm_axis(c, perm[d], rank))] = int64_t(d);
  return {{"x", c.emit("transpose", "x", {{"x", g0(c)}, {"perm", lit_i32s(inv)}})}};
}

// ---- slices -----------------------------------------------------------------

// Where a slice_by_index reads along one dim, following Python slicing
// (as the reference does): `count` positions from `start` by `step`.
struct DimSlice {
  int64_t start = 0, count = 0, step = 1;
  bool squeezed = false;
};

DimSlice python_slice(int64_t n, std::optional<int64_t> b, std::optional<int64_t> e, int64_t st) {
  DimSlice d;
  d.step = st;
  if (st > 0) {
    auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(0), n); };
    d.start = b ? clamp(*b) : 0;
    int64_t stop = e ? clamp(*e) : n;
    d.count = stop > d.start ? (stop - d.start + st - 1) / st : 0;
  } else {
    auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(-1), n - 1); };
    d.start = b ? clamp(*b) : n - 1;
    int64_t stop = e ? clamp(*e) : -1;
    d.count = d.start > stop ? (d.start - stop - st - 1) / -st : 0;
  }
  return d;
}

// Puts g (shape `full`: x's rank) into zeros of x's shape at offset `before`
// along each dim: constant padding.
Value pad_into(const RuleContext& c, const Value& g, const Shape& xs, const std::vector<int64_t>& before) {
  std::vector<int64_t> pad;
  bool any = false;
  for (size_t d = 0; d < xs.size(); ++d) {
    int64_t after = xs[d] - before[d] - g.type.shape[d];
    pad.push_back(before[d]);
    pad.push_back(after);
    any = any || before[d] != 0 || after != 0;
  }
  if (!any) return g;
  return c.emit("pad", "x", {{"x", g}, {"pad", lit_i32s(pad)}, {"mode", lit_str("constant")},
                             {"constant_val", scalar_of(g.type.dtype, 0.0)}});
}

// A tensor<bool, [n]> literal (slice masks are bool vectors in MIL).
Arg bools(const std::vector<int64_t>& v) {
  Tensor t(DType::Bool, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set(i, v[i] != 0 ? 1.0 : 0.0);
  return lit(t);
}

Grads slice_by_index_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  const Type xt = input_type(c, "x");
  const Shape& xs = xt.shape;
  const size_t rank = xs.size();
  std::vector<int64_t> begin = ints_or(c, "begin", {}), end = ints_or(c, "end", {});
  std::vector<int64_t> stride = ints_or(c, "stride", std::vector<int64_t>(rank, 1));
  std::vector<int64_t> bm = ints_or(c, "begin_mask", std::vector<int64_t>(rank, 0));
  std::vector<int64_t> em = ints_or(c, "end_mask", std::vector<int64_t>(rank, 0));
  std::vector<int64_t> sm = ints_or(c, "squeeze_mask", std::vector<int64_t>(rank, 0));
  for (const auto* v : {&begin, &end, &stride, &bm, &em, &sm})
    if (v->size() != rank) throw_op_error(c.op, "gradient rule: slice parameters do not fit x");
  std::vector<DimSlice> dims;
  Shape full;   // the slice with squeezed dims kept as 1
  bool block = true, empty = false;
  for (size_t d = 0; d < rank; ++d) {
    DimSlice s;
    if (sm[d]) {
      int64_t i = bm[d] ? 0 : begin[d];
      s = {i < 0 ? i + xs[d] : i, 1, 1, true};
    } else {
      std::optional<int64_t> b, e;
      if (!bm[d]) b = begin[d];
      if (!em[d]) e = end[d];
      s = python_slice(xs[d], b, e, stride[d]);
    }
    block = block && (s.step == 1 || s.count <= 1);
    empty = empty || s.count == 0;
    dims.push_back(s);
    full.push_back(s.count);
  }
  if (empty) return {{"x", zeros(c, xt, "x")}};
  if (block) {
    std::vector<int64_t> before;
    for (const DimSlice& s : dims) before.push_back(s.start);
    return {{"x", pad_into(c, reshape_to(c, g0(c), full, "g"), xs, before)}};
  }
  // Strided or reversed: write the gradient into zeros through the same slice.
  std::vector<std::pair<std::string, Operand>> in = {{"x", zeros(c, xt, "zeros")}, {"update", g0(c)}};
  std::vector<int64_t> b2, e2;
  for (const DimSlice& s : dims) {
    b2.push_back(s.start);
    e2.push_back(s.start + s.count * s.step);   // one step past the last position read
  }
  // Resolved positions, so the masks need not be repeated; a negative end
  // would wrap, so a reversed slice that reaches index 0 ends via end_mask.
  std::vector<int64_t> em2(rank, 0), st2(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    if (dims[d].squeezed) continue;
    st2[d] = dims[d].step;
    if (e2[d] < 0) em2[d] = 1, e2[d] = 0;
  }
  in.push_back({"begin", lit_i32s(b2)});
  in.push_back({"end", lit_i32s(e2)});
  in.push_back({"stride", lit_i32s(st2)});
  in.push_back({"begin_mask", bools(std::vector<int64_t>(rank, 0))});
  in.push_back({"end_mask", bools(em2)});
  in.push_back({"squeeze_mask", bools(sm)});
  return {{"x", c.emit("slice_update", "x", in)}};
}

Grads slice_by_size_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  const Shape xs = input_type(c, "x").shape;
  std::vector<int64_t> begin = ints_or(c, "begin", {});
  if (begin.size() != xs.size()) throw_op_error(c.op, "gradient rule: 'begin' does not fit x");
  for (size_t d = 0; d < xs.size(); ++d)
    if (begin[d] < 0) begin[d] += xs[d];
  return {{"x", pad_into(c, g0(c), xs, begin)}};
}

// ---- concat, split, stack ------------------------------------------------------

// g[begin : begin + size] along `axis`.
Value slice_axis(const RuleContext& c, const Value& g, int64_t axis, int64_t begin, int64_t size,
                 const std::string& what) {
  const Shape& gs = g.type.shape;
  if (begin == 0 && size == gs[size_t(axis)]) return g;
  std::vector<int64_t> b(gs.size(), 0), s(gs.begin(), gs.end());
  b[size_t(axis)] = begin;
  s[size_t(axis)] = size;
  return c.emit("slice_by_size", what, {{"x", g}, {"begin", lit_i32s(b)}, {"size", lit_i32s(s)}});
}

const Arg& tuple_arg(const RuleContext& c, const std::string& key) {
  const Arg* a = c.op.arg(key);
  if (!a) throw_op_error(c.op, "gradient rule: no input '" + key + "'");
  return *a;
}

std::vector<Type> tuple_types(const RuleContext& c, const Arg& a) {
  std::vector<Type> r;
  auto one = [&](const Arg& e) {
    if (e.kind == Arg::Kind::Var) r.push_back(c.b.value(e.var).type);
    else if (e.kind == Arg::Kind::Const) r.push_back(e.lit->type);
    else throw_op_error(c.op, "gradient rule: nested tuple");
  };
  if (a.kind == Arg::Kind::Tuple) for (const Arg& e : a.elems) one(e);
  else one(a);
  return r;
}

std::string elem_key(const std::string& key, size_t i) { return key + "[" + std::to_string(i) + "]"; }

Grads concat_rule(const RuleContext& c) {
  const Arg& vals = tuple_arg(c, "values");
  std::vector<Type> ts = tuple_types(c, vals);
  Value g = g0(c);
  const size_t n = ts.size();
  auto is_var_elem = [&](size_t i) {
    return vals.kind == Arg::Kind::Tuple ? vals.elems[i].kind == Arg::Kind::Var : vals.kind == Arg::Kind::Var;
  };
  Grads r;
  if (ts[0].shape.empty()) {   // scalars concatenated into a vector
    for (size_t i = 0; i < n; ++i)
      if (is_var_elem(i))
        r[elem_key("values", i)] = reshape_to(c, slice_axis(c, g, 0, int64_t(i), 1, "v"), {}, "v");
    return r;
  }
  const int64_t rank = int64_t(ts[0].shape.size());
  int64_t axis = norm_axis(c, int_or(c, "axis", 0), rank);
  bool interleave = bool_or(c, "interleave", false);
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t len = ts[i].shape[size_t(axis)];
    if (is_var_elem(i)) {
      if (!interleave) {
        r[elem_key("values", i)] = slice_axis(c, g, axis, offset, len, "v");
      } else {   // value i sits at i, i + n, i + 2n, ... along the axis
        std::vector<int64_t> b(size_t(rank), 0), e(g.type.shape.begin(), g.type.shape.end()),
            st(size_t(rank), 1);
        b[size_t(axis)] = int64_t(i);
        st[size_t(axis)] = int64_t(n);
        r[elem_key("values", i)] =
            c.emit("slice_by_index", "v", {{"x", g}, {"begin", lit_i32s(b)}, {"end", lit_i32s(e)},
                                           {"stride", lit_i32s(st)}});
      }
    }
    offset += len;
  }
  return r;
}

// The gradients of the parts concatenated back; parts that get none are zeros.
Grads split_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  const Type xt = input_type(c, "x");
  int64_t axis = norm_axis(c, int_or(c, "axis", 0), int64_t(xt.shape.size()));
  std::vector<Operand> parts;
  for (size_t k = 0; k < c.op.outputs.size(); ++k) {
    if (c.dout[k]) parts.push_back(*c.dout[k]);
    else parts.push_back(zeros(c, c.op.outputs[k].type, "zeros"));
  }
  if (parts.size() == 1) return {{"x", c.b.value(parts[0].arg.var)}};
  return {{"x", c.emit("concat", "x", {{"values", tuple(parts)}, {"axis", lit_i32(axis)},
                                       {"interleave", lit_bool(false)}})}};
}

Grads stack_rule(const RuleContext& c) {
  const Arg& vals = tuple_arg(c, "values");
  std::vector<Type> ts = tuple_types(c, vals);
  Value g = g0(c);
  int64_t axis = norm_axis(c, int_or(c, "axis", 0), int64_t(ts[0].shape.size()) + 1);
  Grads r;
  for (size_t i = 0; i < ts.size(); ++i) {
    bool var = vals.kind == Arg::Kind::Tuple ? vals.elems[i].kind == Arg::Kind::Var : vals.kind == Arg::Kind::Var;
    if (!var) continue;
    Value s = slice_axis(c, g, axis, int64_t(i), 1, "v");
    r[elem_key("values", i)] = reshape_to(c, s, ts[i].shape, "v");
  }
  return r;
}

// tile: g viewed as [r0, s0, r1, s1, ...], summed over the r dims.
Grads tile_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  const Shape xs = input_type(c, "x").shape;
  std::vector<int64_t> reps = ints_or(c, "reps", {});
  if (reps.size() != xs.size()) throw_op_error(c.op, "gradient rule: 'reps' does not fit x");
  Shape split;
  std::vector<int64_t> axes;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (reps[d] != 1) axes.push_back(int64_t(split.size()));
    split.push_back(reps[d]);
    split.push_back(xs[d]);
  }
  Value g = reshape_to(c, g0(c), split, "g");
  g = reduce_keep(c, "reduce_sum", g, axes, "x");
  return {{"x", reshape_to(c, g, xs, "x")}};
}

// ---- gathers ----------------------------------------------------------------

Operand operand_of(const RuleContext& c, const std::string& key) { return Operand(*c.op.arg(key)); }

Grads gather_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  const Type xt = input_type(c, "x");
  if (int_or(c, "batch_dims", 0) != 0) throw_op_error(c.op, "gradient rule: gather with batch_dims is not supported");
  int64_t axis = norm_axis(c, int_or(c, "axis", 0), int64_t(xt.shape.size()));
  std::vector<std::pair<std::string, Operand>> in = {
      {"data", zeros(c, xt, "zeros")}, {"indices", operand_of(c, "indices")}, {"updates", g0(c)},
      {"axis", lit_i32(axis)}, {"mode", lit_str("add")}};
  if (c.op.has("validate_indices")) in.push_back({"validate_indices", operand_of(c, "validate_indices")});
  return {{"x", c.emit("scatter", "x", in)}};
}

Grads gather_along_axis_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  const Type xt = input_type(c, "x");
  int64_t axis = norm_axis(c, int_or(c, "axis", 0), int64_t(xt.shape.size()));
  std::vector<std::pair<std::string, Operand>> in = {
      {"data", zeros(c, xt, "zeros")}, {"indices", operand_of(c, "indices")}, {"updates", g0(c)},
      {"axis", lit_i32(axis)}, {"mode", lit_str("add")}};
  if (c.op.has("validate_indices")) in.push_back({"validate_indices", operand_of(c, "validate_indices")});
  return {{"x", c.emit("scatter_along_axis", "x", in)}};
}

// ---- band_part, pad -----------------------------------------------------------

// A mask: the gradient is masked the same way.
Grads band_part_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  return {{"x", c.emit("band_part", "x", {{"x", g0(c)}, {"lower", lit_i32(int_or(c, "lower", -1))},
                                          {"upper", lit_i32(int_or(c, "upper", -1))}})}};
}

Grads pad_rule(const RuleContext& c) {
  if (!is_var_input(c, "x")) return {};
  std::string mode = str_or(c, "mode", "constant");
  if (mode != "constant")
    throw_op_error(c.op, "gradient rule: pad in mode '" + mode + "' is not differentiable here (constant only)");
  const Shape xs = input_type(c, "x").shape;
  std::vector<int64_t> pad = ints_or(c, "pad", {});
  if (pad.size() % 2 != 0 || pad.size() / 2 > xs.size()) throw_op_error(c.op, "gradient rule: 'pad' does not fit x");
  std::vector<int64_t> begin(xs.size(), 0);
  for (size_t k = 0; k < pad.size() / 2; ++k) begin[xs.size() - pad.size() / 2 + k] = pad[2 * k];
  Value g = g0(c);
  if (g.type.shape == xs) return {{"x", g}};
  return {{"x", c.emit("slice_by_size", "x", {{"x", g}, {"begin", lit_i32s(begin)}, {"size", lit_i32s(xs)}})}};
}

}  // namespace

void register_tensor_grad_rules() {
  for (const char* t : {"reshape", "squeeze", "expand_dims", "flatten2d"}) register_grad_rule(t, reshape_rule);
  register_grad_rule("identity", identity_rule);
  register_grad_rule("transpose", transpose_rule);
  register_grad_rule("slice_by_index", slice_by_index_rule);
  register_grad_rule("slice_by_size", slice_by_size_rule);
  register_grad_rule("concat", concat_rule);
  register_grad_rule("split", split_rule);
  register_grad_rule("stack", stack_rule);
  register_grad_rule("tile", tile_rule);
  register_grad_rule("gather", gather_rule);
  register_grad_rule("gather_along_axis", gather_along_axis_rule);
  register_grad_rule("band_part", band_part_rule);
  register_grad_rule("pad", pad_rule);
}

}  // namespace milrt::autodiff
