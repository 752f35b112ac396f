// Schemas and type inference of the tensor op family: reshaping, permuting,
// joining and splitting, slicing, gather/scatter, padding, sorting and value
// generators. Reductions are in reduction.cpp.
//
// Semantics follow coremltools (ops/defs/iOS15/tensor_transformation.py,
// tensor_operation.py, scatter_gather.py and their iOS16-iOS18 overrides).
// Inputs, ops and rules that a later opset introduced are refused before it
// (gather's batch_dims, topk's k = -1, reshape's right-aligned 0 dims); the
// dtype domains are the union over the versions (iOS17 added the small ints).
// Output dims that depend on values which are not compile-time constants are
// -1 (unknown), and -1 dims of inputs propagate.
#include <algorithm>
#include <cmath>
#include <set>

#include "ir/op_registry.h"

namespace milrt {

void register_reduction_ops();  // reduction.cpp

namespace {

using Domain = std::vector<DType>;
// Shape-manipulation ops: iOS15's fp16, fp32, int32, bool plus iOS17's small ints.
const Domain kMovable = {DType::FP16,  DType::FP32,   DType::Int8,  DType::UInt8,
                         DType::Int16, DType::UInt16, DType::Int32, DType::Bool};
// Ops that iOS17 did not widen.
const Domain kBasic = {DType::FP16, DType::FP32, DType::Int32, DType::Bool};
const Domain kNumeric = {DType::FP16, DType::FP32, DType::Int32};
const Domain kFloat = {DType::FP16, DType::FP32};
// gather* data and topk values (iOS17 adds the small ints, but not bool).
const Domain kIndexable = {DType::FP16,  DType::FP32,   DType::Int8, DType::UInt8,
                           DType::Int16, DType::UInt16, DType::Int32};

constexpr int kMaxOutputs = 1 << 16;

bool known(int64_t d) { return d >= 0; }

std::string domain_str(const Domain& d) {
  std::string s;
  for (DType t : d) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

void require_domain(const InferCtx& ctx, const std::string& key, const Domain& d) {
  const Type& t = ctx.type(key);
  if (!t.is_tensor() || std::find(d.begin(), d.end(), t.dtype) == d.end())
    ctx.fail("input '" + key + "' must be a tensor of " + domain_str(d) + ", got " + t.str());
}

// An index-like input: integer dtype, rank 1 (a scalar counts as one element).
void require_int_vector(const InferCtx& ctx, const std::string& key) {
  const Type& t = ctx.type(key);
  if (!t.is_tensor() || !dtype_is_int(t.dtype) || t.shape.size() > 1)
    ctx.fail("input '" + key + "' must be a 1-D integer tensor, got " + t.str());
}

void require_int_tensor(const InferCtx& ctx, const std::string& key) {
  const Type& t = ctx.type(key);
  if (!t.is_tensor() || !dtype_is_int(t.dtype))
    ctx.fail("input '" + key + "' must be an integer tensor, got " + t.str());
}

// The element count of a 1-D input (-1: unknown).
int64_t vector_len(const InferCtx& ctx, const std::string& key) {
  const Shape& s = ctx.shape(key);
  return s.empty() ? 1 : s[0];
}

// A vector input that must hold `n` elements when both counts are known.
void require_len(const InferCtx& ctx, const std::string& key, int64_t n) {
  int64_t len = vector_len(ctx, key);
  if (known(len) && known(n) && len != n)
    ctx.fail("input '" + key + "' must have " + std::to_string(n) + " elements, got " + ctx.type(key).str());
}

// Parameters coremltools declares `const`: they must be compile-time constants.
std::vector<int64_t> const_ints_req(const InferCtx& ctx, const std::string& key) {
  auto v = ctx.const_ints(key);
  if (!v) ctx.fail("input '" + key + "' must be a compile-time constant");
  return *v;
}
int64_t const_int_req(const InferCtx& ctx, const std::string& key) {
  auto v = ctx.const_int(key);
  if (!v) ctx.fail("input '" + key + "' must be a compile-time constant scalar");
  return *v;
}
int64_t const_int_or(const InferCtx& ctx, const std::string& key, int64_t def) {
  return ctx.has(key) ? const_int_req(ctx, key) : def;
}
bool const_bool_or(const InferCtx& ctx, const std::string& key, bool def) {
  if (!ctx.has(key)) return def;
  auto v = ctx.const_bool(key);
  if (!v) ctx.fail("input '" + key + "' must be a compile-time constant bool");
  return *v;
}
std::string const_str_or(const InferCtx& ctx, const std::string& key, const std::string& def) {
  if (!ctx.has(key)) return def;
  auto v = ctx.const_str(key);
  if (!v) ctx.fail("input '" + key + "' must be a compile-time constant string");
  return *v;
}
// An optional vector parameter of `n` flags or ints (default `def` each).
std::vector<int64_t> const_vec_or(const InferCtx& ctx, const std::string& key, size_t n, int64_t def) {
  if (!ctx.has(key)) return std::vector<int64_t>(n, def);
  auto v = const_ints_req(ctx, key);
  if (v.size() != n)
    ctx.fail("input '" + key + "' must have " + std::to_string(n) + " elements, got " + std::to_string(v.size()));
  return v;
}

// Normalized, distinct axes.
std::vector<int64_t> normalize_axes(const InferCtx& ctx, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> r;
  for (int64_t a : axes) {
    int64_t n = normalize_axis(ctx, a, rank);
    if (std::find(r.begin(), r.end(), n) != r.end()) ctx.fail("axis " + std::to_string(a) + " is repeated");
    r.push_back(n);
  }
  return r;
}

// Product of dims [b, e) of s; -1 when any is unknown.
int64_t dims_product(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) {
    if (!known(s[i])) return -1;
    p *= s[i];
  }
  return p;
}

// Two shapes that must agree where both are known; returns the more known one.
Shape merge_shapes(const InferCtx& ctx, const Shape& a, const Shape& b, const std::string& what) {
  if (a.size() != b.size()) ctx.fail(what + ": shapes " + shape_str(a) + " and " + shape_str(b) + " differ in rank");
  Shape r = a;
  for (size_t i = 0; i < a.size(); ++i) {
    if (known(a[i]) && known(b[i]) && a[i] != b[i])
      ctx.fail(what + ": shapes " + shape_str(a) + " and " + shape_str(b) + " differ");
    if (!known(r[i])) r[i] = b[i];
  }
  return r;
}

void same_type_as_x(InferCtx& ctx) { ctx.set_out(ctx.type("x")); }

// `what` (an input or a rule) exists from opset `since` on.
void require_opset(const InferCtx& ctx, const std::string& since, const std::string& what) {
  if (!ctx.opset_at_least(since))
    ctx.fail(what + " needs opset " + since + " or later (the function is " + ctx.opset() + ")");
}
void require_opset_for_input(const InferCtx& ctx, const std::string& since, const std::string& key) {
  if (ctx.has(key)) require_opset(ctx, since, "input '" + key + "'");
}

// ---------------------------------------------------------------- reshape

// The target shape of reshape(x, shape = to). Zeros copy the dim of x at the
// same position counted from the right, 1 when x has none (iOS17; for
// len(shape) == rank(x) this equals iOS15's rule). One -1 takes whatever
// size is left. Unknown dims of x that a 0 copies cancel out of the volume.
Shape reshape_target(const InferCtx& ctx, const Shape& from, std::vector<int64_t> to) {
  int64_t infer_at = -1;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (infer_at >= 0) ctx.fail("'shape' may contain at most one -1, got " + shape_str(to));
      infer_at = int64_t(i);
    } else if (to[i] < -1) {
      ctx.fail("'shape' has invalid dim " + std::to_string(to[i]));
    }
  }
  bool has_zero = std::find(to.begin(), to.end(), 0) != to.end();
  if (has_zero && to.size() != from.size())
    require_opset(ctx, "ios17", "a 0 in a 'shape' whose length differs from the rank of x");
  std::vector<bool> from_cancelled(from.size(), false), to_cancelled(to.size(), false);
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] != 0) continue;
    int64_t j = int64_t(from.size()) - int64_t(to.size() - i);
    to[i] = j >= 0 ? from[size_t(j)] : 1;
    if (j >= 0 && !known(from[size_t(j)])) from_cancelled[size_t(j)] = to_cancelled[i] = true;
  }
  bool solvable = true;
  int64_t total = 1, rest = 1;
  for (size_t j = 0; j < from.size(); ++j) {
    if (from_cancelled[j]) continue;
    if (known(from[j])) total *= from[j];
    else solvable = false;
  }
  for (size_t i = 0; i < to.size(); ++i) {
    if (int64_t(i) == infer_at || to_cancelled[i]) continue;
    rest *= to[i];
  }
  if (!solvable) {
    if (infer_at >= 0) to[size_t(infer_at)] = -1;
    return to;
  }
  if (infer_at >= 0) {
    if (rest == 0 || total % rest != 0)
      ctx.fail("cannot reshape " + shape_str(from) + " to " + shape_str(to) + ": sizes do not divide");
    to[size_t(infer_at)] = total / rest;
  } else if (total != rest) {
    ctx.fail("cannot reshape " + shape_str(from) + " (" + std::to_string(total) + " elements) to " +
             shape_str(to) + " (" + std::to_string(rest) + " elements)");
  }
  return to;
}

void infer_reshape(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  require_int_vector(ctx, "shape");
  DType dt = ctx.dtype("x");
  auto to = ctx.const_ints("shape");
  if (!to) {
    int64_t k = vector_len(ctx, "shape");
    if (!known(k)) ctx.fail("the length of 'shape' must be known at compile time");
    ctx.set_out(Type::tensor(dt, Shape(size_t(k), -1)));
    return;
  }
  ctx.set_out(Type::tensor(dt, reshape_target(ctx, ctx.shape("x"), *to)));
}

void infer_transpose(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  const Shape& xs = ctx.shape("x");
  auto perm = const_ints_req(ctx, "perm");
  if (perm.size() != xs.size())
    ctx.fail("'perm' has " + std::to_string(perm.size()) + " entries for x of rank " + std::to_string(xs.size()));
  Shape out;
  for (int64_t a : normalize_axes(ctx, perm, int64_t(xs.size()))) out.push_back(xs[size_t(a)]);
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

// ---------------------------------------------------------------- concat, split, stack

void infer_concat(InferCtx& ctx) {
  auto vals = ctx.tuple("values");
  if (vals.empty()) ctx.fail("'values' is empty");
  const Type& first = vals[0]->type;
  for (auto* v : vals) {
    if (!v->type.is_tensor()) ctx.fail("'values' must hold tensors, got " + v->type.str());
    if (v->type.dtype != first.dtype)
      ctx.fail("'values' must share one dtype, got " + first.str() + " and " + v->type.str());
    if (v->type.shape.size() != first.shape.size())
      ctx.fail("'values' must share one rank, got " + first.str() + " and " + v->type.str());
  }
  int64_t axis = const_int_req(ctx, "axis");
  bool interleave = const_bool_or(ctx, "interleave", false);
  size_t rank = first.shape.size();
  if (rank == 0) {  // coremltools concatenates scalars into a vector
    ctx.set_out(Type::tensor(first.dtype, {int64_t(vals.size())}));
    return;
  }
  size_t ax = size_t(normalize_axis(ctx, axis, int64_t(rank)));
  Shape out = first.shape;
  int64_t axis_len = 0;
  for (auto* v : vals) {
    const Shape& s = v->type.shape;
    for (size_t i = 0; i < rank; ++i) {
      if (i == ax && !interleave) continue;
      if (known(out[i]) && known(s[i]) && out[i] != s[i])
        ctx.fail("shapes " + shape_str(first.shape) + " and " + shape_str(s) + " differ outside axis " +
                 std::to_string(axis) + (interleave ? " (interleave needs equal shapes)" : ""));
      if (i != ax && !known(out[i])) out[i] = s[i];
    }
    axis_len = known(axis_len) && known(s[ax]) ? axis_len + s[ax] : -1;
  }
  out[ax] = axis_len;
  ctx.set_out(Type::tensor(first.dtype, out));
}

void infer_split(InferCtx& ctx) {
  require_domain(ctx, "x", kBasic);
  const Shape& xs = ctx.shape("x");
  size_t ax = size_t(normalize_axis(ctx, const_int_req(ctx, "axis"), int64_t(xs.size())));
  int64_t dim = xs[ax];
  std::vector<int64_t> sizes;
  if (ctx.has("split_sizes")) {
    require_int_vector(ctx, "split_sizes");
    if (auto ss = ctx.const_ints("split_sizes")) {
      sizes = *ss;
      int64_t sum = 0;
      for (int64_t s : sizes) {
        if (s < 0) ctx.fail("'split_sizes' must be non-negative, got " + shape_str(sizes));
        sum += s;
      }
      if (known(dim) && sum != dim)
        ctx.fail("'split_sizes' " + shape_str(sizes) + " sum to " + std::to_string(sum) + ", not to dim " +
                 std::to_string(dim) + " of x");
    } else {
      int64_t n = ctx.has("num_splits") ? const_int_req(ctx, "num_splits") : vector_len(ctx, "split_sizes");
      if (!known(n)) ctx.fail("the number of splits must be known at compile time");
      sizes.assign(size_t(n), -1);
    }
    if (ctx.has("num_splits") && const_int_req(ctx, "num_splits") != int64_t(sizes.size()))
      ctx.fail("'num_splits' does not match the length of 'split_sizes'");
  } else if (ctx.has("num_splits")) {
    int64_t n = const_int_req(ctx, "num_splits");
    if (n < 1) ctx.fail("'num_splits' must be positive, got " + std::to_string(n));
    if (known(dim) && dim % n != 0)
      ctx.fail("'num_splits' " + std::to_string(n) + " does not divide dim " + std::to_string(dim) + " of x");
    sizes.assign(size_t(n), known(dim) ? dim / n : -1);
  } else {
    ctx.fail("one of 'num_splits' and 'split_sizes' is required");
  }
  if (sizes.size() != ctx.op().outputs.size())
    ctx.fail("declares " + std::to_string(ctx.op().outputs.size()) + " outputs but splits into " +
             std::to_string(sizes.size()));
  ctx.out.clear();
  for (int64_t s : sizes) {
    Shape o = xs;
    o[ax] = s;
    ctx.out.push_back(Type::tensor(ctx.dtype("x"), o));
  }
}

void infer_stack(InferCtx& ctx) {
  auto vals = ctx.tuple("values");
  if (vals.empty()) ctx.fail("'values' is empty");
  DType dt = vals[0]->type.dtype;
  Shape s = vals[0]->type.shape;
  for (auto* v : vals) {
    if (!v->type.is_tensor()) ctx.fail("'values' must hold tensors, got " + v->type.str());
    if (v->type.dtype != dt)
      ctx.fail("'values' must share one dtype, got " + vals[0]->type.str() + " and " + v->type.str());
    s = merge_shapes(ctx, s, v->type.shape, "'values' must share one shape");
  }
  int64_t ax = normalize_axis(ctx, const_int_req(ctx, "axis"), int64_t(s.size()) + 1);
  s.insert(s.begin() + ax, int64_t(vals.size()));
  ctx.set_out(Type::tensor(dt, s));
}

// ---------------------------------------------------------------- squeeze, expand_dims, flatten2d

void infer_squeeze(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  const Shape& xs = ctx.shape("x");
  if (xs.empty()) ctx.fail("x must have rank 1 or more");
  std::vector<bool> drop(xs.size(), false);
  if (ctx.has("axes")) {
    // Like PyTorch, named axes whose size is not 1 stay (unknown sizes too).
    for (int64_t a : normalize_axes(ctx, const_ints_req(ctx, "axes"), int64_t(xs.size())))
      drop[size_t(a)] = xs[size_t(a)] == 1;
  } else {
    for (size_t i = 0; i < xs.size(); ++i) drop[i] = xs[i] == 1;
  }
  Shape out;
  for (size_t i = 0; i < xs.size(); ++i) if (!drop[i]) out.push_back(xs[i]);
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

void infer_expand_dims(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  Shape out = ctx.shape("x");
  auto axes = const_ints_req(ctx, "axes");
  auto norm = normalize_axes(ctx, axes, int64_t(out.size() + axes.size()));
  std::sort(norm.begin(), norm.end());
  for (int64_t a : norm) out.insert(out.begin() + a, 1);
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

void infer_flatten2d(InferCtx& ctx) {
  require_domain(ctx, "x", kBasic);
  const Shape& xs = ctx.shape("x");
  int64_t rank = int64_t(xs.size());
  int64_t axis = const_int_or(ctx, "axis", 1);
  if (axis < -rank || axis > rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range [" + std::to_string(-rank) + ", " +
             std::to_string(rank) + "]");
  size_t a = size_t(axis < 0 ? axis + rank : axis);
  ctx.set_out(Type::tensor(ctx.dtype("x"), {dims_product(xs, 0, a), dims_product(xs, a, xs.size())}));
}

// ---------------------------------------------------------------- slicing

// slice_by_index's parameters as far as they are known at compile time.
struct SliceSpec {
  std::optional<std::vector<int64_t>> begin, end;  // nullopt: not constant
  std::vector<int64_t> stride, begin_mask, end_mask, squeeze_mask;
};

SliceSpec read_slice_spec(const InferCtx& ctx, size_t rank) {
  SliceSpec s;
  for (const char* key : {"begin", "end"}) {
    require_int_vector(ctx, key);
    require_len(ctx, key, int64_t(rank));
  }
  s.begin = ctx.const_ints("begin");
  s.end = ctx.const_ints("end");
  s.stride = const_vec_or(ctx, "stride", rank, 1);
  s.begin_mask = const_vec_or(ctx, "begin_mask", rank, 0);
  s.end_mask = const_vec_or(ctx, "end_mask", rank, 0);
  s.squeeze_mask = const_vec_or(ctx, "squeeze_mask", rank, 0);
  for (int64_t st : s.stride) if (st == 0) ctx.fail("'stride' must not contain 0");
  return s;
}

// Python's slice length for x[b:e:st] over a dim of size n (nullopt = omitted).
int64_t python_slice_len(int64_t n, std::optional<int64_t> b, std::optional<int64_t> e, int64_t st) {
  auto clamp_pos = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(0), n); };
  auto clamp_neg = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(-1), n - 1); };
  if (st > 0) {
    int64_t lo = b ? clamp_pos(*b) : 0, hi = e ? clamp_pos(*e) : n;
    return hi > lo ? (hi - lo + st - 1) / st : 0;
  }
  int64_t hi = b ? clamp_neg(*b) : n - 1, lo = e ? clamp_neg(*e) : -1;
  return hi > lo ? (hi - lo - st - 1) / -st : 0;
}

// Length of one sliced dim, -1 when it depends on unknown values.
int64_t slice_len(int64_t n, std::optional<int64_t> b, std::optional<int64_t> e, int64_t st, bool bm, bool em) {
  if (bm) b.reset();
  if (em) e.reset();
  bool b_ok = bm || b, e_ok = em || e;
  if (known(n) && b_ok && e_ok) return python_slice_len(n, b, e, st);
  // Lengths that hold whatever the dim's size (coremltools' rules).
  if (bm && em && (st == 1 || st == -1)) return n;
  if (b && e && ((*b >= 0 && *e >= 0 && st > 0) || (*b < 0 && *e < 0 && st < 0))) {
    int64_t len = st > 0 ? (*e - *b + st - 1) / st : (*b - *e - st - 1) / -st;
    if (len <= 1) return std::max<int64_t>(len, 0);
  }
  if (b && em && ((*b == -1 && st > 0) || (*b == 0 && st < 0))) return 1;
  return -1;
}

Shape slice_shape(const InferCtx& ctx, const Shape& xs, const SliceSpec& s) {
  Shape out;
  for (size_t i = 0; i < xs.size(); ++i) {
    std::optional<int64_t> b, e;
    if (s.begin) b = (*s.begin)[i];
    if (s.end) e = (*s.end)[i];
    if (s.squeeze_mask[i]) {
      int64_t idx = s.begin_mask[i] ? 0 : b.value_or(0);
      if ((b || s.begin_mask[i]) && known(xs[i]) && (idx < -xs[i] || idx >= xs[i]))
        ctx.fail("squeezed index " + std::to_string(idx) + " is out of range for dim " + std::to_string(i) +
                 " of size " + std::to_string(xs[i]));
      continue;
    }
    out.push_back(slice_len(xs[i], b, e, s.stride[i], s.begin_mask[i], s.end_mask[i]));
  }
  return out;
}

void infer_slice_by_index(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  const Shape& xs = ctx.shape("x");
  ctx.set_out(Type::tensor(ctx.dtype("x"), slice_shape(ctx, xs, read_slice_spec(ctx, xs.size()))));
}

void infer_slice_update(InferCtx& ctx) {
  require_opset(ctx, "ios18", "slice_update");
  require_domain(ctx, "x", kMovable);
  ctx.require_same_dtype("x", "update");
  const Shape& xs = ctx.shape("x");
  Shape sliced = slice_shape(ctx, xs, read_slice_spec(ctx, xs.size()));
  const Shape& us = ctx.shape("update");
  if (us.empty()) ctx.fail("a rank-0 'update' is not supported");
  merge_shapes(ctx, sliced, us, "'update' must have the shape of the slice");
  ctx.set_out(ctx.type("x"));
}

void infer_slice_by_size(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  const Shape& xs = ctx.shape("x");
  for (const char* key : {"begin", "size"}) {
    require_int_vector(ctx, key);
    require_len(ctx, key, int64_t(xs.size()));
  }
  auto begin = ctx.const_ints("begin");
  auto size = ctx.const_ints("size");
  Shape out(xs.size(), -1);
  for (size_t i = 0; size && i < xs.size(); ++i) {
    int64_t sz = (*size)[i];
    if (sz < -1) ctx.fail("'size' has invalid entry " + std::to_string(sz));
    out[i] = sz;
    if (!begin || !known(xs[i])) continue;
    int64_t b = (*begin)[i] < 0 ? (*begin)[i] + xs[i] : (*begin)[i];
    if (b < 0 || b > xs[i] || (sz >= 0 && b + sz > xs[i]))
      ctx.fail("slice of size " + std::to_string(sz) + " at " + std::to_string((*begin)[i]) +
               " does not fit dim " + std::to_string(i) + " of size " + std::to_string(xs[i]));
    if (sz == -1) out[i] = xs[i] - b;
  }
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

// ---------------------------------------------------------------- gather / scatter

// Constant indices must address a dim of `dim` entries: [-dim, dim) wraps
// (iOS15), [0, dim) when validate_indices is set (iOS17).
void check_const_indices(const InferCtx& ctx, const std::string& key, const std::vector<int64_t>& dims) {
  const Tensor* t = ctx.const_value(key);
  if (!t) return;
  bool validate = const_bool_or(ctx, "validate_indices", false);
  for (int64_t i = 0; i < t->numel(); ++i) {
    int64_t v = int64_t(t->at(size_t(i)));
    int64_t d = dims[size_t(i) % dims.size()];
    if (known(d) && (v >= d || v < (validate ? 0 : -d)))
      ctx.fail("index " + std::to_string(v) + " in '" + key + "' is out of range for a dim of size " +
               std::to_string(d));
  }
}

void check_batch_dims(const InferCtx& ctx, const Shape& xs, const Shape& is, int64_t bd) {
  for (int64_t i = 0; i < bd; ++i)
    if (known(xs[size_t(i)]) && known(is[size_t(i)]) && xs[size_t(i)] != is[size_t(i)])
      ctx.fail("batch dim " + std::to_string(i) + " differs between x " + shape_str(xs) + " and indices " +
               shape_str(is));
}

void infer_gather(InferCtx& ctx) {
  require_opset_for_input(ctx, "ios16", "batch_dims");
  require_opset_for_input(ctx, "ios17", "validate_indices");
  require_domain(ctx, "x", kIndexable);
  require_int_tensor(ctx, "indices");
  const Shape& xs = ctx.shape("x");
  const Shape& is = ctx.shape("indices");
  int64_t ax = normalize_axis(ctx, const_int_or(ctx, "axis", 0), int64_t(xs.size()));
  int64_t bd = const_int_or(ctx, "batch_dims", 0);
  if (bd < 0 || bd > ax || bd > int64_t(is.size()))
    ctx.fail("batch_dims " + std::to_string(bd) + " must lie in [0, min(axis, rank(indices))]");
  check_batch_dims(ctx, xs, is, bd);
  check_const_indices(ctx, "indices", {xs[size_t(ax)]});
  Shape out(xs.begin(), xs.begin() + ax);
  out.insert(out.end(), is.begin() + bd, is.end());
  out.insert(out.end(), xs.begin() + ax + 1, xs.end());
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

void infer_gather_along_axis(InferCtx& ctx) {
  require_opset_for_input(ctx, "ios17", "validate_indices");
  require_domain(ctx, "x", kIndexable);
  require_int_tensor(ctx, "indices");
  const Shape& xs = ctx.shape("x");
  Shape out = ctx.shape("indices");
  if (out.size() != xs.size())
    ctx.fail("indices " + shape_str(out) + " must have the rank of x " + shape_str(xs));
  size_t ax = size_t(normalize_axis(ctx, const_int_or(ctx, "axis", 0), int64_t(xs.size())));
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i == ax) continue;
    if (known(xs[i]) && known(out[i]) && xs[i] != out[i])
      ctx.fail("indices " + shape_str(out) + " and x " + shape_str(xs) + " differ at dim " + std::to_string(i));
    if (!known(out[i])) out[i] = xs[i];
  }
  check_const_indices(ctx, "indices", {xs[ax]});
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

// The index depth K of gather_nd / scatter_nd: indices' last dim.
int64_t nd_depth(const InferCtx& ctx, const Shape& data, const Shape& is, int64_t bd) {
  if (is.empty()) ctx.fail("indices must have rank 1 or more");
  int64_t k = is.back();
  if (!known(k)) ctx.fail("the last dim of indices must be known at compile time");
  if (bd < 0 || bd > int64_t(is.size()) - 1 || k + bd > int64_t(data.size()))
    ctx.fail("indices " + shape_str(is) + " with batch_dims " + std::to_string(bd) +
             " do not fit data of rank " + std::to_string(data.size()));
  check_batch_dims(ctx, data, is, bd);
  return k;
}

void infer_gather_nd(InferCtx& ctx) {
  require_opset_for_input(ctx, "ios16", "batch_dims");
  require_opset_for_input(ctx, "ios17", "validate_indices");
  require_domain(ctx, "x", kIndexable);
  require_int_tensor(ctx, "indices");
  const Shape& xs = ctx.shape("x");
  const Shape& is = ctx.shape("indices");
  int64_t bd = const_int_or(ctx, "batch_dims", 0);
  int64_t k = nd_depth(ctx, xs, is, bd);
  check_const_indices(ctx, "indices", Shape(xs.begin() + bd, xs.begin() + bd + k));
  Shape out(is.begin(), is.end() - 1);
  out.insert(out.end(), xs.begin() + bd + k, xs.end());
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

void check_scatter_common(const InferCtx& ctx) {
  require_opset_for_input(ctx, "ios17", "validate_indices");
  require_domain(ctx, "data", kNumeric);
  require_int_tensor(ctx, "indices");
  ctx.require_same_dtype("data", "updates");
  static const std::set<std::string> modes = {"update", "add", "sub", "mul", "div", "max", "min"};
  std::string mode = const_str_or(ctx, "mode", "add");
  if (!modes.count(mode)) ctx.fail("unknown mode '" + mode + "'");
}

void infer_scatter(InferCtx& ctx) {
  check_scatter_common(ctx);
  const Shape& ds = ctx.shape("data");
  int64_t ax = normalize_axis(ctx, const_int_or(ctx, "axis", 0), int64_t(ds.size()));
  Shape expect(ds.begin(), ds.begin() + ax);
  const Shape& is = ctx.shape("indices");
  expect.insert(expect.end(), is.begin(), is.end());
  expect.insert(expect.end(), ds.begin() + ax + 1, ds.end());
  merge_shapes(ctx, expect, ctx.shape("updates"), "'updates' must have shape data[:axis] + indices + data[axis+1:]");
  check_const_indices(ctx, "indices", {ds[size_t(ax)]});
  ctx.set_out(ctx.type("data"));
}

void infer_scatter_along_axis(InferCtx& ctx) {
  check_scatter_common(ctx);
  const Shape& ds = ctx.shape("data");
  const Shape& is = ctx.shape("indices");
  size_t ax = size_t(normalize_axis(ctx, const_int_or(ctx, "axis", 0), int64_t(ds.size())));
  merge_shapes(ctx, is, ctx.shape("updates"), "'updates' must have the shape of indices");
  if (is.size() != ds.size()) ctx.fail("indices " + shape_str(is) + " must have the rank of data " + shape_str(ds));
  for (size_t i = 0; i < ds.size(); ++i)
    if (i != ax && known(ds[i]) && known(is[i]) && ds[i] != is[i])
      ctx.fail("indices " + shape_str(is) + " and data " + shape_str(ds) + " differ at dim " + std::to_string(i));
  check_const_indices(ctx, "indices", {ds[ax]});
  ctx.set_out(ctx.type("data"));
}

void infer_scatter_nd(InferCtx& ctx) {
  check_scatter_common(ctx);
  const Shape& ds = ctx.shape("data");
  const Shape& is = ctx.shape("indices");
  int64_t k = nd_depth(ctx, ds, is, 0);
  Shape expect(is.begin(), is.end() - 1);
  expect.insert(expect.end(), ds.begin() + k, ds.end());
  merge_shapes(ctx, expect, ctx.shape("updates"), "'updates' must have shape indices[:-1] + data[K:]");
  check_const_indices(ctx, "indices", Shape(ds.begin(), ds.begin() + k));
  ctx.set_out(ctx.type("data"));
}

// ---------------------------------------------------------------- pad, tile, band_part, reverse

void infer_pad(InferCtx& ctx) {
  require_domain(ctx, "x", kFloat);
  require_int_vector(ctx, "pad");
  if (ctx.has("constant_val")) ctx.require_same_dtype("x", "constant_val");
  std::string mode = const_str_or(ctx, "mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "replicate")
    ctx.fail("mode must be constant, reflect or replicate, got '" + mode + "'");
  Shape out = ctx.shape("x");
  auto pad = ctx.const_ints("pad");
  if (!pad) {
    if (vector_len(ctx, "pad") != 2 * int64_t(out.size()))
      ctx.fail("a non-constant 'pad' must have 2 * rank(x) = " + std::to_string(2 * out.size()) + " elements");
    ctx.set_out(Type::tensor(ctx.dtype("x"), Shape(out.size(), -1)));
    return;
  }
  if (pad->size() % 2 != 0 || pad->size() / 2 > out.size())
    ctx.fail("'pad' must hold [before, after] pairs for at most rank(x) dims, got " + shape_str(*pad));
  size_t first = out.size() - pad->size() / 2;
  for (size_t i = first; i < out.size(); ++i) {
    int64_t before = (*pad)[2 * (i - first)], after = (*pad)[2 * (i - first) + 1];
    if (before < 0 || after < 0) ctx.fail("'pad' must be non-negative, got " + shape_str(*pad));
    int64_t limit = mode == "reflect" ? out[i] - 1 : mode == "replicate" ? out[i] : INT64_MAX;
    if (known(out[i]) && (before > limit || after > limit))
      ctx.fail(mode + " padding of dim " + std::to_string(i) + " (size " + std::to_string(out[i]) +
               ") by " + std::to_string(std::max(before, after)) + " is too large");
    if (known(out[i])) out[i] += before + after;
  }
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

void infer_tile(InferCtx& ctx) {
  require_domain(ctx, "x", kBasic);
  require_int_vector(ctx, "reps");
  Shape out = ctx.shape("x");
  if (out.empty()) ctx.fail("x must have rank 1 or more");
  require_len(ctx, "reps", int64_t(out.size()));
  auto reps = ctx.const_ints("reps");
  for (size_t i = 0; i < out.size(); ++i) {
    if (!reps) { out[i] = -1; continue; }
    if ((*reps)[i] <= 0) ctx.fail("'reps' must be positive, got " + shape_str(*reps));
    if (known(out[i])) out[i] *= (*reps)[i];
  }
  ctx.set_out(Type::tensor(ctx.dtype("x"), out));
}

void infer_band_part(InferCtx& ctx) {
  require_domain(ctx, "x", kBasic);
  if (ctx.shape("x").size() < 2) ctx.fail("x must have rank 2 or more, got " + ctx.type("x").str());
  const_int_or(ctx, "lower", -1);
  const_int_or(ctx, "upper", -1);
  same_type_as_x(ctx);
}

void infer_reverse(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  if (ctx.has("axes")) normalize_axes(ctx, const_ints_req(ctx, "axes"), int64_t(ctx.shape("x").size()));
  same_type_as_x(ctx);
}

void infer_reverse_sequence(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  require_int_vector(ctx, "lengths");
  int64_t rank = int64_t(ctx.shape("x").size());
  int64_t seq = normalize_axis(ctx, const_int_or(ctx, "seq_axis", 0), rank);
  int64_t batch = normalize_axis(ctx, const_int_or(ctx, "batch_axis", 0), rank);
  if (seq == batch) ctx.fail("seq_axis and batch_axis must differ");
  require_len(ctx, "lengths", ctx.shape("x")[size_t(batch)]);
  same_type_as_x(ctx);
}

// ---------------------------------------------------------------- generators

void infer_range_1d(InferCtx& ctx) {
  for (const char* key : {"end", "start", "step"}) {
    require_domain(ctx, key, kNumeric);
    if (ctx.shape(key).size() > 1 || (ctx.shape(key).size() == 1 && ctx.shape(key)[0] != 1))
      ctx.fail(std::string("input '") + key + "' must be a scalar, got " + ctx.type(key).str());
  }
  ctx.require_same_dtype("start", "end");
  ctx.require_same_dtype("start", "step");
  auto start = ctx.const_float("start"), end = ctx.const_float("end"), step = ctx.const_float("step");
  int64_t n = -1;
  if (start && end && step) {
    if (*step == 0) ctx.fail("'step' must not be 0");
    n = std::max<int64_t>(0, int64_t(std::ceil((*end - *start) / *step)));
  }
  ctx.set_out(Type::tensor(ctx.dtype("start"), {n}));
}

// fill's and fill_like's value: fp32 0.0 by default (coremltools' default).
DType fill_dtype(const InferCtx& ctx) {
  if (!ctx.has("value")) return DType::FP32;
  require_domain(ctx, "value", kBasic);
  if (!ctx.const_float("value")) ctx.fail("input 'value' must be a compile-time constant scalar");
  return ctx.dtype("value");
}

void infer_fill(InferCtx& ctx) {
  require_int_vector(ctx, "shape");
  DType dt = fill_dtype(ctx);
  auto shape = ctx.const_ints("shape");
  if (!shape) {
    int64_t k = vector_len(ctx, "shape");
    if (!known(k)) ctx.fail("the length of 'shape' must be known at compile time");
    ctx.set_out(Type::tensor(dt, Shape(size_t(k), -1)));
    return;
  }
  for (int64_t d : *shape) if (d <= 0) ctx.fail("'shape' must be positive, got " + shape_str(*shape));
  ctx.set_out(Type::tensor(dt, *shape));
}

void infer_fill_like(InferCtx& ctx) {
  require_opset(ctx, "ios16", "fill_like");
  require_domain(ctx, "ref_tensor", kBasic);
  ctx.set_out(Type::tensor(fill_dtype(ctx), ctx.shape("ref_tensor")));
}

void infer_one_hot(InferCtx& ctx) {
  require_int_tensor(ctx, "indices");
  if (!dtype_is_int(ctx.dtype("one_hot_vector_size")) || ctx.shape("one_hot_vector_size").size() > 1)
    ctx.fail("input 'one_hot_vector_size' must be an integer scalar");
  // coremltools' defaults are the int32 constants 1 and 0; a lone given value sets the dtype.
  DType dt = DType::Int32;
  for (const char* key : {"on_value", "off_value"}) {
    if (!ctx.has(key)) continue;
    require_domain(ctx, key, kBasic);
    if (!ctx.const_float(key)) ctx.fail(std::string("input '") + key + "' must be a compile-time constant scalar");
    dt = ctx.dtype(key);
  }
  if (ctx.has("on_value") && ctx.has("off_value")) ctx.require_same_dtype("on_value", "off_value");
  Shape out = ctx.shape("indices");
  int64_t rank = int64_t(out.size());
  int64_t axis = const_int_or(ctx, "axis", -1);
  if (axis < -rank - 1 || axis > rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for indices of rank " + std::to_string(rank));
  auto depth = ctx.const_int("one_hot_vector_size");
  if (depth && *depth < 0) ctx.fail("'one_hot_vector_size' must be non-negative");
  out.insert(out.begin() + (axis < 0 ? axis + rank + 1 : axis), depth.value_or(-1));
  ctx.set_out(Type::tensor(dt, out));
}

void infer_identity(InferCtx& ctx) { same_type_as_x(ctx); }

void infer_shape(InferCtx& ctx) {
  require_domain(ctx, "x", kMovable);
  ctx.set_out(Type::tensor(DType::Int32, {int64_t(ctx.shape("x").size())}));
}

void infer_non_zero(InferCtx& ctx) {
  require_domain(ctx, "x", kBasic);
  int64_t n = -1;
  if (const Tensor* t = ctx.const_value("x")) {
    n = 0;
    for (int64_t i = 0; i < t->numel(); ++i) n += t->at(size_t(i)) != 0;
  }
  ctx.set_out(Type::tensor(DType::Int32, {n, int64_t(ctx.shape("x").size())}));
}

// ---------------------------------------------------------------- sorting, scans

void infer_topk(InferCtx& ctx) {
  require_opset_for_input(ctx, "ios16", "sort");
  require_opset_for_input(ctx, "ios16", "return_indices");
  require_opset_for_input(ctx, "ios17", "output_indices_dtype");
  require_domain(ctx, "x", kIndexable);
  Shape out = ctx.shape("x");
  size_t ax = size_t(normalize_axis(ctx, const_int_or(ctx, "axis", -1), int64_t(out.size())));
  int64_t k = const_int_or(ctx, "k", 1);
  const_bool_or(ctx, "ascending", false);
  const_bool_or(ctx, "sort", true);
  bool return_indices = const_bool_or(ctx, "return_indices", true);
  if (!return_indices && ctx.has("output_indices_dtype"))
    ctx.fail("'output_indices_dtype' can only be set when return_indices is true");
  std::string idx_name = const_str_or(ctx, "output_indices_dtype", "int32");
  if (idx_name != "int32" && idx_name != "uint16")
    ctx.fail("'output_indices_dtype' must be int32 or uint16, got '" + idx_name + "'");
  if (k == -1) {
    require_opset(ctx, "ios17", "k = -1 (all elements)");
    k = out[ax];
  } else if (k < 1) ctx.fail("k must be positive or -1, got " + std::to_string(k));
  else if (known(out[ax]) && k > out[ax])
    ctx.fail("k = " + std::to_string(k) + " exceeds the size " + std::to_string(out[ax]) + " of axis " +
             std::to_string(ax));
  out[ax] = k;
  size_t n_out = return_indices ? 2 : 1;
  if (ctx.op().outputs.size() != n_out)
    ctx.fail("declares " + std::to_string(ctx.op().outputs.size()) + " outputs; with return_indices = " +
             (return_indices ? "true" : "false") + " the op has " + std::to_string(n_out));
  ctx.out = {Type::tensor(ctx.dtype("x"), out)};
  if (return_indices) ctx.out.push_back(Type::tensor(*dtype_from_name(idx_name), out));
}

void infer_argsort(InferCtx& ctx) {
  require_domain(ctx, "x", kNumeric);
  normalize_axis(ctx, const_int_or(ctx, "axis", -1), int64_t(ctx.shape("x").size()));
  const_bool_or(ctx, "ascending", false);
  ctx.set_out(Type::tensor(DType::Int32, ctx.shape("x")));
}

void infer_cumsum(InferCtx& ctx) {
  require_domain(ctx, "x", kNumeric);
  normalize_axis(ctx, const_int_or(ctx, "axis", 0), int64_t(ctx.shape("x").size()));
  const_bool_or(ctx, "exclusive", false);
  const_bool_or(ctx, "reverse", false);
  same_type_as_x(ctx);
}

}  // namespace

void register_tensor_ops() {
  const std::vector<InputSpec> slice_inputs = {{"begin"}, {"end"}, {"stride", false},
                                               {"begin_mask", false}, {"end_mask", false},
                                               {"squeeze_mask", false}};
  auto with = [](std::vector<InputSpec> head, const std::vector<InputSpec>& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  register_op({"reshape", {{"x"}, {"shape"}}, 1, 1, infer_reshape});
  register_op({"transpose", {{"x"}, {"perm"}}, 1, 1, infer_transpose});
  register_op({"concat", {{"values"}, {"axis"}, {"interleave", false}}, 1, 1, infer_concat});
  register_op({"split", {{"x"}, {"num_splits", false}, {"split_sizes", false}, {"axis"}}, 1, kMaxOutputs, infer_split});
  register_op({"stack", {{"values"}, {"axis"}}, 1, 1, infer_stack});
  register_op({"squeeze", {{"x"}, {"axes", false}}, 1, 1, infer_squeeze});
  register_op({"expand_dims", {{"x"}, {"axes"}}, 1, 1, infer_expand_dims});
  register_op({"flatten2d", {{"x"}, {"axis", false}}, 1, 1, infer_flatten2d});
  register_op({"slice_by_index", with({{"x"}}, slice_inputs), 1, 1, infer_slice_by_index});
  register_op({"slice_update", with({{"x"}, {"update"}}, slice_inputs), 1, 1, infer_slice_update});
  register_op({"slice_by_size", {{"x"}, {"begin"}, {"size"}}, 1, 1, infer_slice_by_size});
  register_op({"gather", {{"x"}, {"indices"}, {"axis", false}, {"batch_dims", false}, {"validate_indices", false}},
               1, 1, infer_gather});
  register_op({"gather_along_axis", {{"x"}, {"indices"}, {"axis", false}, {"validate_indices", false}}, 1, 1,
               infer_gather_along_axis});
  register_op({"gather_nd", {{"x"}, {"indices"}, {"batch_dims", false}, {"validate_indices", false}}, 1, 1,
               infer_gather_nd});
  register_op({"scatter", {{"data"}, {"indices"}, {"updates"}, {"axis", false}, {"mode", false},
                           {"validate_indices", false}}, 1, 1, infer_scatter});
  register_op({"scatter_along_axis", {{"data"}, {"indices"}, {"updates"}, {"axis", false}, {"mode", false},
                                      {"validate_indices", false}}, 1, 1, infer_scatter_along_axis});
  register_op({"scatter_nd", {{"data"}, {"indices"}, {"updates"}, {"mode", false}, {"validate_indices", false}},
               1, 1, infer_scatter_nd});
  register_op({"pad", {{"x"}, {"pad"}, {"mode", false}, {"constant_val", false}}, 1, 1, infer_pad});
  register_op({"tile", {{"x"}, {"reps"}}, 1, 1, infer_tile});
  register_op({"band_part", {{"x"}, {"lower", false}, {"upper", false}}, 1, 1, infer_band_part});
  register_op({"reverse", {{"x"}, {"axes", false}}, 1, 1, infer_reverse});
  register_op({"reverse_sequence", {{"x"}, {"lengths"}, {"seq_axis", false}, {"batch_axis", false}}, 1, 1,
               infer_reverse_sequence});
  register_op({"range_1d", {{"end"}, {"start"}, {"step"}}, 1, 1, infer_range_1d});
  register_op({"fill", {{"shape"}, {"value", false}}, 1, 1, infer_fill});
  register_op({"fill_like", {{"ref_tensor"}, {"value", false}}, 1, 1, infer_fill_like});
  register_op({"one_hot", {{"indices"}, {"one_hot_vector_size"}, {"axis", false}, {"on_value", false},
                           {"off_value", false}}, 1, 1, infer_one_hot});
  register_op({"identity", {{"x"}}, 1, 1, infer_identity});
  register_op({"shape", {{"x"}}, 1, 1, infer_shape});
  register_op({"non_zero", {{"x"}}, 1, 1, infer_non_zero});
  register_op({"topk", {{"x"}, {"k", false}, {"axis", false}, {"ascending", false}, {"sort", false},
                        {"return_indices", false}, {"output_indices_dtype", false}}, 1, 2, infer_topk});
  register_op({"argsort", {{"x"}, {"axis", false}, {"ascending", false}}, 1, 1, infer_argsort});
  register_op({"cumsum", {{"x"}, {"axis", false}, {"exclusive", false}, {"reverse", false}}, 1, 1, infer_cumsum});
  register_reduction_ops();
}

}  // namespace milrt
