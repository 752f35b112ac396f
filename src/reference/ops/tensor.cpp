// Reference implementations of the tensor op family (reductions are in
// reduction.cpp). Data-movement ops copy elements byte for byte, so every
// dtype (ints, bools, fp16) comes through exactly; ops that compute go
// through NdArray and round to the declared output dtype.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "reference/ref_ops.h"

namespace milrt::ref {

void register_ref_reduction_ops();  // reduction.cpp

namespace {

using Index = std::vector<int64_t>;

Index unravel(int64_t flat, const Shape& s) {
  Index idx(s.size());
  for (size_t i = s.size(); i-- > 0;) {
    idx[i] = flat % s[i];
    flat /= s[i];
  }
  return idx;
}

int64_t ravel(const Index& idx, const Shape& s) {
  int64_t f = 0;
  for (size_t i = 0; i < s.size(); ++i) f = f * s[i] + idx[i];
  return f;
}

// A tensor of `shape` whose element i is element pick(i) = {k, j}: element j
// of srcs[k]. Every data-movement op is one of these.
template <class F>
Tensor assemble(const RefCtx& c, const std::vector<Tensor>& srcs, const Shape& shape, F pick) {
  DType dt = srcs.at(0).dtype();
  for (auto& s : srcs)
    if (s.dtype() != dt) c.fail("inputs of different dtypes " + std::string(dtype_name(dt)) + " and " +
                                std::string(dtype_name(s.dtype())));
  int64_t n = shape_numel(shape);
  if (dt == DType::String) {
    std::vector<std::string> v;
    for (int64_t i = 0; i < n; ++i) {
      auto [k, j] = pick(i);
      v.push_back(srcs[k].strings()[size_t(j)]);
    }
    return Tensor::from_strings(shape, std::move(v));
  }
  Tensor out(dt, shape);
  size_t es = dtype_size(dt);
  auto* o = static_cast<uint8_t*>(out.mutable_data());
  for (int64_t i = 0; i < n; ++i) {
    auto [k, j] = pick(i);
    std::memcpy(o + size_t(i) * es, static_cast<const uint8_t*>(srcs[k].data()) + size_t(j) * es, es);
  }
  return out;
}

// One source: element i of the result is element src_flat(i) of src.
template <class F>
Tensor remap(const RefCtx& c, const Tensor& src, const Shape& shape, F src_flat) {
  return assemble(c, {src}, shape, [&](int64_t i) { return std::pair<size_t, int64_t>(0, src_flat(i)); });
}

// Calls fn(base, step, len) for each 1-D line of `s` along `axis`: the line's
// elements are at flat indices base + j * step, j < len.
template <class F>
void for_each_line(const Shape& s, int64_t axis, F fn) {
  int64_t len = s[size_t(axis)];
  int64_t inner = shape_numel(Shape(s.begin() + axis + 1, s.end()));
  int64_t outer = shape_numel(Shape(s.begin(), s.begin() + axis));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) fn(o * len * inner + in, inner, len);
}

// A possibly negative axis of a tensor of rank `rank` (>= 1), normalized.
int64_t axis_in(const RefCtx& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

// An index read from an indices tensor into a dim of size n: [-n, n) wraps
// (iOS15), only [0, n) with validate_indices (iOS17).
int64_t wrap_index(const RefCtx& c, double v, int64_t n, bool validate) {
  int64_t i = int64_t(v);
  if (i >= n || i < (validate ? 0 : -n))
    c.fail("index " + std::to_string(i) + " is out of range for a dim of size " + std::to_string(n));
  return i < 0 ? i + n : i;
}

// ---------------------------------------------------------------- reshape family

void ref_reshape(RefCtx& c) {
  const Tensor& x = c.in("x");
  std::vector<int64_t> to = c.ints("shape");
  const Shape& from = x.shape();
  // 0 copies x's dim at the same position from the right, 1 past its rank (iOS17).
  for (size_t i = 0; i < to.size(); ++i) {
    int64_t j = int64_t(from.size()) - int64_t(to.size() - i);
    if (to[i] == 0) to[i] = j >= 0 ? from[size_t(j)] : 1;
  }
  int64_t infer_at = -1, rest = 1;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1 && infer_at < 0) infer_at = int64_t(i);
    else if (to[i] < 0) c.fail("invalid target shape " + shape_str(c.ints("shape")));
    else rest *= to[i];
  }
  if (infer_at >= 0) {
    if (rest == 0 || x.numel() % rest != 0)
      c.fail("cannot reshape " + shape_str(from) + " to " + shape_str(c.ints("shape")));
    to[size_t(infer_at)] = x.numel() / rest;
  }
  if (shape_numel(to) != x.numel()) c.fail("cannot reshape " + shape_str(from) + " to " + shape_str(to));
  c.set_out(0, x.reshaped(to));
}

void ref_squeeze(RefCtx& c) {
  const Tensor& x = c.in("x");
  const Shape& xs = x.shape();
  std::vector<bool> drop(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) drop[i] = xs[i] == 1 && !c.has("axes");
  for (int64_t a : c.ints("axes", Index{})) {
    size_t n = size_t(axis_in(c, a, int64_t(xs.size())));
    drop[n] = xs[n] == 1;
  }
  Shape out;
  for (size_t i = 0; i < xs.size(); ++i) if (!drop[i]) out.push_back(xs[i]);
  c.set_out(0, x.reshaped(out));
}

void ref_expand_dims(RefCtx& c) {
  const Tensor& x = c.in("x");
  Index axes = c.ints("axes");
  int64_t rank = x.rank() + int64_t(axes.size());
  for (int64_t& a : axes) a = axis_in(c, a, rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) c.fail("repeated axis");
  Shape out = x.shape();
  for (int64_t a : axes) out.insert(out.begin() + a, 1);
  c.set_out(0, x.reshaped(out));
}

void ref_flatten2d(RefCtx& c) {
  const Tensor& x = c.in("x");
  int64_t axis = c.i64("axis", 1);
  if (axis < -x.rank() || axis > x.rank()) c.fail("axis " + std::to_string(axis) + " is out of range");
  if (axis < 0) axis += x.rank();
  const Shape& xs = x.shape();
  c.set_out(0, x.reshaped({shape_numel(Shape(xs.begin(), xs.begin() + axis)),
                           shape_numel(Shape(xs.begin() + axis, xs.end()))}));
}

void ref_transpose(RefCtx& c) {
  const Tensor& x = c.in("x");
  Index perm = c.ints("perm");
  if (int64_t(perm.size()) != x.rank()) c.fail("'perm' length differs from the rank of x");
  std::vector<bool> seen(perm.size());
  Shape out;
  for (int64_t& p : perm) {
    p = axis_in(c, p, x.rank());
    if (seen[size_t(p)]) c.fail("'perm' is not a permutation");
    seen[size_t(p)] = true;
    out.push_back(x.shape()[size_t(p)]);
  }
  c.set_out(0, remap(c, x, out, [&](int64_t i) {
    Index o = unravel(i, out), src(o.size());
    for (size_t d = 0; d < o.size(); ++d) src[size_t(perm[d])] = o[d];
    return ravel(src, x.shape());
  }));
}

// ---------------------------------------------------------------- concat, split, stack

void ref_concat(RefCtx& c) {
  const std::vector<Tensor>& vals = c.tuple("values");
  int64_t n = int64_t(vals.size());
  if (vals[0].rank() == 0) {  // scalars concatenate into a vector
    c.set_out(0, assemble(c, vals, {n}, [](int64_t i) { return std::pair<size_t, int64_t>(size_t(i), 0); }));
    return;
  }
  int64_t ax = axis_in(c, c.i64("axis"), vals[0].rank());
  bool interleave = c.flag("interleave", false);
  Shape out = vals[0].shape();
  out[size_t(ax)] = 0;
  std::vector<int64_t> offset;  // where each value starts along the axis
  for (auto& v : vals) {
    Shape s = v.shape();
    if (s.size() != out.size()) c.fail("values differ in rank");
    for (size_t d = 0; d < s.size(); ++d)
      if ((int64_t(d) != ax || interleave) && s[d] != vals[0].shape()[d])
        c.fail("values have mismatched shapes " + shape_str(vals[0].shape()) + " and " + shape_str(s));
    offset.push_back(out[size_t(ax)]);
    out[size_t(ax)] += s[size_t(ax)];
  }
  c.set_out(0, assemble(c, vals, out, [&](int64_t i) {
    Index o = unravel(i, out);
    size_t k;
    if (interleave) {  // output[j::n] along the axis is value j
      k = size_t(o[size_t(ax)] % n);
      o[size_t(ax)] /= n;
    } else {
      // The last value starting at or before the position (empty values share the next one's start).
      k = size_t(std::upper_bound(offset.begin(), offset.end(), o[size_t(ax)]) - offset.begin() - 1);
      o[size_t(ax)] -= offset[k];
    }
    return std::pair<size_t, int64_t>(k, ravel(o, vals[k].shape()));
  }));
}

void ref_split(RefCtx& c) {
  const Tensor& x = c.in("x");
  int64_t ax = axis_in(c, c.i64("axis"), x.rank());
  int64_t dim = x.shape()[size_t(ax)];
  Index sizes;
  if (c.has("split_sizes")) {
    sizes = c.ints("split_sizes");
    for (int64_t s : sizes) if (s < 0) c.fail("'split_sizes' must be non-negative");
    if (std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != dim)
      c.fail("'split_sizes' " + shape_str(sizes) + " do not sum to dim " + std::to_string(dim));
  } else {
    int64_t n = c.i64("num_splits");
    if (n < 1 || dim % n != 0) c.fail("num_splits " + std::to_string(n) + " does not divide " + std::to_string(dim));
    sizes.assign(size_t(n), dim / n);
  }
  if (sizes.size() != c.num_outputs())
    c.fail("split gives " + std::to_string(sizes.size()) + " parts for " + std::to_string(c.num_outputs()) +
           " declared outputs");
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Shape out = x.shape();
    out[size_t(ax)] = sizes[k];
    c.set_out(k, remap(c, x, out, [&](int64_t i) {
      Index o = unravel(i, out);
      o[size_t(ax)] += start;
      return ravel(o, x.shape());
    }));
    start += sizes[k];
  }
}

void ref_stack(RefCtx& c) {
  const std::vector<Tensor>& vals = c.tuple("values");
  const Shape& s = vals[0].shape();
  for (auto& v : vals)
    if (v.shape() != s) c.fail("values have different shapes " + shape_str(s) + " and " + shape_str(v.shape()));
  int64_t ax = axis_in(c, c.i64("axis"), int64_t(s.size()) + 1);
  Shape out = s;
  out.insert(out.begin() + ax, int64_t(vals.size()));
  c.set_out(0, assemble(c, vals, out, [&](int64_t i) {
    Index o = unravel(i, out);
    size_t k = size_t(o[size_t(ax)]);
    o.erase(o.begin() + ax);
    return std::pair<size_t, int64_t>(k, ravel(o, s));
  }));
}

// ---------------------------------------------------------------- slicing

// For each dim of x, the source positions a slice_by_index / slice_update
// reads, following Python slicing; squeezed dims keep one position.
struct Slice {
  std::vector<Index> pos;
  std::vector<bool> squeezed;
  Shape full_shape() const {  // including squeezed dims (as 1)
    Shape s;
    for (auto& p : pos) s.push_back(int64_t(p.size()));
    return s;
  }
  Shape out_shape() const {
    Shape s;
    for (size_t d = 0; d < pos.size(); ++d) if (!squeezed[d]) s.push_back(int64_t(pos[d].size()));
    return s;
  }
  int64_t source(int64_t i, const Shape& xs) const {
    Index o = unravel(i, full_shape());
    for (size_t d = 0; d < o.size(); ++d) o[d] = pos[d][size_t(o[d])];
    return ravel(o, xs);
  }
};

Index python_slice(int64_t n, std::optional<int64_t> b, std::optional<int64_t> e, int64_t st) {
  Index r;
  if (st > 0) {
    auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(0), n); };
    for (int64_t i = b ? clamp(*b) : 0, end = e ? clamp(*e) : n; i < end; i += st) r.push_back(i);
  } else {
    auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(-1), n - 1); };
    for (int64_t i = b ? clamp(*b) : n - 1, end = e ? clamp(*e) : -1; i > end; i += st) r.push_back(i);
  }
  return r;
}

Slice read_slice(const RefCtx& c, const Shape& xs) {
  size_t rank = xs.size();
  Index begin = c.ints("begin"), end = c.ints("end");
  Index stride = c.ints("stride", Index(rank, 1));
  Index bm = c.ints("begin_mask", Index(rank, 0)), em = c.ints("end_mask", Index(rank, 0));
  Index sm = c.ints("squeeze_mask", Index(rank, 0));
  for (const Index* v : {&begin, &end, &stride, &bm, &em, &sm})
    if (v->size() != rank) c.fail("slice parameters must have one entry per dim of x " + shape_str(xs));
  Slice s;
  for (size_t d = 0; d < rank; ++d) {
    s.squeezed.push_back(sm[d] != 0);
    if (sm[d]) {
      int64_t i = bm[d] ? 0 : begin[d];
      if (i < -xs[d] || i >= xs[d]) c.fail("squeezed index " + std::to_string(i) + " is out of range");
      s.pos.push_back({i < 0 ? i + xs[d] : i});
      continue;
    }
    if (stride[d] == 0) c.fail("stride must not be 0");
    std::optional<int64_t> b, e;
    if (!bm[d]) b = begin[d];
    if (!em[d]) e = end[d];
    s.pos.push_back(python_slice(xs[d], b, e, stride[d]));
  }
  return s;
}

void ref_slice_by_index(RefCtx& c) {
  const Tensor& x = c.in("x");
  Slice s = read_slice(c, x.shape());
  c.set_out(0, remap(c, x, s.out_shape(), [&](int64_t i) { return s.source(i, x.shape()); }));
}

void ref_slice_update(RefCtx& c) {
  const Tensor& x = c.in("x");
  const Tensor& update = c.in("update");
  Slice s = read_slice(c, x.shape());
  if (update.shape() != s.out_shape())
    c.fail("update has shape " + shape_str(update.shape()) + ", the slice " + shape_str(s.out_shape()));
  if (x.dtype() != update.dtype()) c.fail("x and update differ in dtype");
  // Which update element (if any) lands on each element of x.
  std::vector<int64_t> from(size_t(x.numel()), -1);
  for (int64_t i = 0; i < update.numel(); ++i) from[size_t(s.source(i, x.shape()))] = i;
  c.set_out(0, assemble(c, {x, update}, x.shape(), [&](int64_t i) {
    int64_t u = from[size_t(i)];
    return u < 0 ? std::pair<size_t, int64_t>(0, i) : std::pair<size_t, int64_t>(1, u);
  }));
}

void ref_slice_by_size(RefCtx& c) {
  const Tensor& x = c.in("x");
  const Shape& xs = x.shape();
  Index begin = c.ints("begin"), size = c.ints("size");
  if (begin.size() != xs.size() || size.size() != xs.size())
    c.fail("'begin' and 'size' must have one entry per dim of x " + shape_str(xs));
  Shape out;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (begin[d] < 0) begin[d] += xs[d];
    int64_t len = size[d] == -1 ? xs[d] - begin[d] : size[d];
    if (begin[d] < 0 || len < 0 || begin[d] + len > xs[d])
      c.fail("slice of size " + std::to_string(size[d]) + " at " + std::to_string(begin[d]) +
             " does not fit dim " + std::to_string(d) + " of size " + std::to_string(xs[d]));
    out.push_back(len);
  }
  c.set_out(0, remap(c, x, out, [&](int64_t i) {
    Index o = unravel(i, out);
    for (size_t d = 0; d < o.size(); ++d) o[d] += begin[d];
    return ravel(o, xs);
  }));
}

// ---------------------------------------------------------------- gather / scatter

void ref_gather(RefCtx& c) {
  const Tensor& x = c.in("x");
  const Tensor& idx = c.in("indices");
  const Shape& xs = x.shape();
  const Shape& is = idx.shape();
  int64_t ax = axis_in(c, c.i64("axis", 0), x.rank());
  int64_t bd = c.i64("batch_dims", 0);
  bool validate = c.flag("validate_indices", false);
  if (bd < 0 || bd > ax || bd > idx.rank()) c.fail("invalid batch_dims " + std::to_string(bd));
  for (int64_t d = 0; d < bd; ++d)
    if (xs[size_t(d)] != is[size_t(d)]) c.fail("batch dims of x and indices differ");
  Shape out(xs.begin(), xs.begin() + ax);
  out.insert(out.end(), is.begin() + bd, is.end());
  out.insert(out.end(), xs.begin() + ax + 1, xs.end());
  int64_t m = idx.rank() - bd;  // index dims beyond the batch dims
  c.set_out(0, remap(c, x, out, [&](int64_t i) {
    Index o = unravel(i, out);
    Index ii(o.begin(), o.begin() + bd);
    ii.insert(ii.end(), o.begin() + ax, o.begin() + ax + m);
    Index src(o.begin(), o.begin() + ax);
    src.push_back(wrap_index(c, idx.at(size_t(ravel(ii, is))), xs[size_t(ax)], validate));
    src.insert(src.end(), o.begin() + ax + m, o.end());
    return ravel(src, xs);
  }));
}

void ref_gather_along_axis(RefCtx& c) {
  const Tensor& x = c.in("x");
  const Tensor& idx = c.in("indices");
  int64_t ax = axis_in(c, c.i64("axis", 0), x.rank());
  bool validate = c.flag("validate_indices", false);
  if (idx.rank() != x.rank()) c.fail("indices and x differ in rank");
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != ax && idx.shape()[size_t(d)] != x.shape()[size_t(d)]) c.fail("indices and x differ off the axis");
  c.set_out(0, remap(c, x, idx.shape(), [&](int64_t i) {
    Index o = unravel(i, idx.shape());
    o[size_t(ax)] = wrap_index(c, idx.at(size_t(i)), x.shape()[size_t(ax)], validate);
    return ravel(o, x.shape());
  }));
}

// The flat position in `data` that row `row` of nd-indices (K entries
// addressing dims bd..bd+K-1) selects, with the batch and trailing positions.
int64_t nd_source(const RefCtx& c, const Tensor& idx, int64_t row, const Index& batch, const Index& trailing,
                  const Shape& ds, bool validate) {
  int64_t k = idx.shape().back();
  Index src = batch;
  for (int64_t j = 0; j < k; ++j)
    src.push_back(wrap_index(c, idx.at(size_t(row * k + j)), ds[batch.size() + size_t(j)], validate));
  src.insert(src.end(), trailing.begin(), trailing.end());
  return ravel(src, ds);
}

void ref_gather_nd(RefCtx& c) {
  const Tensor& x = c.in("x");
  const Tensor& idx = c.in("indices");
  const Shape& xs = x.shape();
  const Shape& is = idx.shape();
  int64_t bd = c.i64("batch_dims", 0);
  bool validate = c.flag("validate_indices", false);
  if (idx.rank() < 1 || bd < 0 || bd > idx.rank() - 1 || is.back() + bd > x.rank())
    c.fail("indices " + shape_str(is) + " do not fit x " + shape_str(xs));
  for (int64_t d = 0; d < bd; ++d)
    if (xs[size_t(d)] != is[size_t(d)]) c.fail("batch dims of x and indices differ");
  size_t lead = is.size() - 1;  // output dims taken from indices
  Shape out(is.begin(), is.end() - 1);
  out.insert(out.end(), xs.begin() + bd + is.back(), xs.end());
  c.set_out(0, remap(c, x, out, [&](int64_t i) {
    Index o = unravel(i, out);
    Index row(o.begin(), o.begin() + lead);
    return nd_source(c, idx, ravel(row, Shape(is.begin(), is.end() - 1)), Index(o.begin(), o.begin() + bd),
                     Index(o.begin() + lead, o.end()), xs, validate);
  }));
}

double combine(const RefCtx& c, const std::string& mode, double old, double upd) {
  if (mode == "update") return upd;
  if (mode == "add") return old + upd;
  if (mode == "sub") return old - upd;
  if (mode == "mul") return old * upd;
  if (mode == "div") return old / upd;
  if (mode == "max") return std::max(old, upd);
  if (mode == "min") return std::min(old, upd);
  c.fail("unknown mode '" + mode + "'");
}

// Applies updates in row-major order (so with "update" the last write wins);
// target(i) is the flat position in data that update element i lands on.
template <class F>
void scatter_into(RefCtx& c, F target) {
  NdArray data = c.nd("data");
  NdArray upd = c.nd("updates");
  std::string mode = c.str("mode", "add");
  for (int64_t i = 0; i < upd.numel(); ++i) {
    double& d = data.v[size_t(target(i))];
    d = combine(c, mode, d, upd.v[size_t(i)]);
  }
  c.set_nd(0, data);
}

void ref_scatter(RefCtx& c) {
  const Shape ds = c.in("data").shape();
  const Tensor& idx = c.in("indices");
  const Shape us = c.in("updates").shape();
  int64_t ax = axis_in(c, c.i64("axis", 0), int64_t(ds.size()));
  bool validate = c.flag("validate_indices", false);
  Shape expect(ds.begin(), ds.begin() + ax);
  expect.insert(expect.end(), idx.shape().begin(), idx.shape().end());
  expect.insert(expect.end(), ds.begin() + ax + 1, ds.end());
  if (us != expect) c.fail("updates " + shape_str(us) + " should have shape " + shape_str(expect));
  int64_t m = idx.rank();
  scatter_into(c, [&](int64_t i) {
    Index u = unravel(i, us);
    Index dst(u.begin(), u.begin() + ax);
    int64_t ii = ravel(Index(u.begin() + ax, u.begin() + ax + m), idx.shape());
    dst.push_back(wrap_index(c, idx.at(size_t(ii)), ds[size_t(ax)], validate));
    dst.insert(dst.end(), u.begin() + ax + m, u.end());
    return ravel(dst, ds);
  });
}

void ref_scatter_along_axis(RefCtx& c) {
  const Shape ds = c.in("data").shape();
  const Tensor& idx = c.in("indices");
  int64_t ax = axis_in(c, c.i64("axis", 0), int64_t(ds.size()));
  bool validate = c.flag("validate_indices", false);
  if (c.in("updates").shape() != idx.shape() || idx.rank() != int64_t(ds.size()))
    c.fail("updates and indices must share a shape of the rank of data");
  scatter_into(c, [&](int64_t i) {
    Index u = unravel(i, idx.shape());
    u[size_t(ax)] = wrap_index(c, idx.at(size_t(i)), ds[size_t(ax)], validate);
    return ravel(u, ds);
  });
}

void ref_scatter_nd(RefCtx& c) {
  const Shape ds = c.in("data").shape();
  const Tensor& idx = c.in("indices");
  const Shape us = c.in("updates").shape();
  bool validate = c.flag("validate_indices", false);
  const Shape& is = idx.shape();
  if (is.empty() || is.back() > int64_t(ds.size())) c.fail("indices " + shape_str(is) + " do not fit data");
  Shape expect(is.begin(), is.end() - 1);
  expect.insert(expect.end(), ds.begin() + is.back(), ds.end());
  if (us != expect) c.fail("updates " + shape_str(us) + " should have shape " + shape_str(expect));
  size_t lead = is.size() - 1;
  scatter_into(c, [&](int64_t i) {
    Index u = unravel(i, us);
    int64_t row = ravel(Index(u.begin(), u.begin() + lead), Shape(is.begin(), is.end() - 1));
    return nd_source(c, idx, row, {}, Index(u.begin() + lead, u.end()), ds, validate);
  });
}

// ---------------------------------------------------------------- pad, tile, band_part, reverse

void ref_pad(RefCtx& c) {
  NdArray x = c.nd("x");
  Index pad = c.ints("pad");
  std::string mode = c.str("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "replicate") c.fail("unknown mode '" + mode + "'");
  double cval = c.f64("constant_val", 0.0);
  size_t rank = x.shape.size();
  if (pad.size() % 2 != 0 || pad.size() / 2 > rank) c.fail("'pad' " + shape_str(pad) + " does not fit x");
  Index before(rank, 0);
  Shape out = x.shape;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    size_t d = rank - pad.size() / 2 + k;
    int64_t n = x.shape[d], b = pad[2 * k], a = pad[2 * k + 1];
    int64_t limit = mode == "reflect" ? n - 1 : mode == "replicate" ? n : INT64_MAX;
    if (b < 0 || a < 0 || b > limit || a > limit)
      c.fail(mode + " padding " + shape_str(pad) + " does not fit x " + shape_str(x.shape));
    before[d] = b;
    out[d] += b + a;
  }
  NdArray r(out);
  for (int64_t i = 0; i < r.numel(); ++i) {
    Index o = unravel(i, out);
    bool inside = true;
    for (size_t d = 0; d < rank; ++d) {
      int64_t j = o[d] - before[d], n = x.shape[d];
      if (j >= 0 && j < n) { o[d] = j; continue; }
      if (mode == "constant") inside = false;
      else if (mode == "replicate") o[d] = j < 0 ? 0 : n - 1;
      else o[d] = j < 0 ? -j : 2 * (n - 1) - j;  // reflect, edge not repeated
    }
    r.v[size_t(i)] = inside ? x.v[size_t(ravel(o, x.shape))] : cval;
  }
  c.set_nd(0, r);
}

void ref_tile(RefCtx& c) {
  const Tensor& x = c.in("x");
  Index reps = c.ints("reps");
  if (int64_t(reps.size()) != x.rank()) c.fail("'reps' must have one entry per dim of x");
  Shape out = x.shape();
  for (size_t d = 0; d < out.size(); ++d) {
    if (reps[d] <= 0) c.fail("'reps' must be positive");
    out[d] *= reps[d];
  }
  c.set_out(0, remap(c, x, out, [&](int64_t i) {
    Index o = unravel(i, out);
    for (size_t d = 0; d < o.size(); ++d) o[d] %= x.shape()[d];
    return ravel(o, x.shape());
  }));
}

void ref_band_part(RefCtx& c) {
  const Tensor& x = c.in("x");
  int64_t lower = c.i64("lower", -1), upper = c.i64("upper", -1);
  if (x.rank() < 2) c.fail("x must have rank 2 or more");
  Tensor out = x.clone();
  for (int64_t i = 0; i < x.numel(); ++i) {
    Index o = unravel(i, x.shape());
    int64_t m = o[o.size() - 2], n = o[o.size() - 1];
    bool keep = (lower < 0 || m - n <= lower) && (upper < 0 || n - m <= upper);
    if (!keep) out.set(size_t(i), 0.0);
  }
  c.set_out(0, out);
}

void ref_reverse(RefCtx& c) {
  const Tensor& x = c.in("x");
  std::vector<bool> flip(size_t(x.rank()), !c.has("axes"));
  for (int64_t a : c.ints("axes", Index{})) flip[size_t(axis_in(c, a, x.rank()))] = true;
  c.set_out(0, remap(c, x, x.shape(), [&](int64_t i) {
    Index o = unravel(i, x.shape());
    for (size_t d = 0; d < o.size(); ++d) if (flip[d]) o[d] = x.shape()[d] - 1 - o[d];
    return ravel(o, x.shape());
  }));
}

void ref_reverse_sequence(RefCtx& c) {
  const Tensor& x = c.in("x");
  Index lengths = c.ints("lengths");
  size_t seq = size_t(axis_in(c, c.i64("seq_axis", 0), x.rank()));
  size_t batch = size_t(axis_in(c, c.i64("batch_axis", 0), x.rank()));
  if (int64_t(lengths.size()) != x.shape()[batch]) c.fail("'lengths' must have one entry per batch");
  for (int64_t l : lengths)
    if (l < 0 || l > x.shape()[seq]) c.fail("length " + std::to_string(l) + " exceeds the sequence");
  c.set_out(0, remap(c, x, x.shape(), [&](int64_t i) {
    Index o = unravel(i, x.shape());
    int64_t len = lengths[size_t(o[batch])];
    if (o[seq] < len) o[seq] = len - 1 - o[seq];
    return ravel(o, x.shape());
  }));
}

// ---------------------------------------------------------------- generators

void ref_range_1d(RefCtx& c) {
  double start = c.f64("start"), end = c.f64("end"), step = c.f64("step");
  if (step == 0) c.fail("'step' must not be 0");
  int64_t n = std::max<int64_t>(0, int64_t(std::ceil((end - start) / step)));
  NdArray r({n});
  for (int64_t i = 0; i < n; ++i) r.v[size_t(i)] = start + double(i) * step;
  c.set_nd(0, r);
}

void ref_fill(RefCtx& c) {
  Index shape = c.ints("shape");
  for (int64_t d : shape) if (d < 0) c.fail("'shape' has a negative dim");
  c.set_nd(0, NdArray(shape, c.f64("value", 0.0)));
}

void ref_fill_like(RefCtx& c) { c.set_nd(0, NdArray(c.in("ref_tensor").shape(), c.f64("value", 0.0))); }

void ref_one_hot(RefCtx& c) {
  const Tensor& idx = c.in("indices");
  int64_t depth = c.i64("one_hot_vector_size");
  int64_t rank = idx.rank();
  int64_t axis = c.i64("axis", -1);
  if (depth < 0) c.fail("'one_hot_vector_size' must be non-negative");
  if (axis < -rank - 1 || axis > rank) c.fail("axis " + std::to_string(axis) + " is out of range");
  size_t cut = size_t(axis < 0 ? axis + rank + 1 : axis);
  double on = c.f64("on_value", 1.0), off = c.f64("off_value", 0.0);
  Shape out = idx.shape();
  out.insert(out.begin() + int64_t(cut), depth);
  NdArray r(out);
  for (int64_t i = 0; i < r.numel(); ++i) {
    Index o = unravel(i, out);
    int64_t hot = o[cut];
    o.erase(o.begin() + int64_t(cut));
    r.v[size_t(i)] = int64_t(idx.at(size_t(ravel(o, idx.shape())))) == hot ? on : off;
  }
  c.set_nd(0, r);
}

void ref_identity(RefCtx& c) { c.set_out(0, c.in("x")); }

void ref_shape(RefCtx& c) {
  const Shape& s = c.in("x").shape();
  NdArray r({int64_t(s.size())});
  for (size_t i = 0; i < s.size(); ++i) r.v[i] = double(s[i]);
  c.set_nd(0, r);
}

void ref_non_zero(RefCtx& c) {
  const Tensor& x = c.in("x");
  std::vector<double> rows;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (x.at(size_t(i)) != 0)
      for (int64_t v : unravel(i, x.shape())) rows.push_back(double(v));
  int64_t count = 0;
  for (int64_t i = 0; i < x.numel(); ++i) count += x.at(size_t(i)) != 0;
  NdArray r({count, x.rank()});
  r.v = rows;
  c.set_nd(0, r);
}

// ---------------------------------------------------------------- sorting, scans

// Positions 0..len-1 of a line ordered by value, ties by position (stable);
// NaNs go last in either direction, as numpy's argsort of x and of -x does.
Index sorted_positions(const Tensor& x, int64_t base, int64_t step, int64_t len, bool ascending) {
  Index p(static_cast<size_t>(len));
  std::iota(p.begin(), p.end(), 0);
  auto val = [&](int64_t j) { return x.at(size_t(base + j * step)); };
  std::stable_sort(p.begin(), p.end(), [&](int64_t a, int64_t b) {
    double va = val(a), vb = val(b);
    if (std::isnan(va) || std::isnan(vb)) return !std::isnan(va) && std::isnan(vb);
    return ascending ? va < vb : va > vb;
  });
  return p;
}

void ref_topk(RefCtx& c) {
  const Tensor& x = c.in("x");
  int64_t ax = axis_in(c, c.i64("axis", -1), x.rank());
  int64_t k = c.i64("k", 1);
  bool ascending = c.flag("ascending", false);
  int64_t dim = x.shape()[size_t(ax)];
  if (k == -1) k = dim;
  if (k < 1 || k > dim) c.fail("k = " + std::to_string(k) + " does not fit an axis of size " + std::to_string(dim));
  Shape out = x.shape();
  out[size_t(ax)] = k;
  // Source flat index of each output element; sort=false allows any order, so results stay sorted.
  std::vector<int64_t> src(size_t(shape_numel(out)));
  NdArray indices(out);
  int64_t line = 0;
  for_each_line(x.shape(), ax, [&](int64_t base, int64_t step, int64_t len) {
    Index p = sorted_positions(x, base, step, len, ascending);
    int64_t out_base = (line / step) * k * step + line % step;
    for (int64_t j = 0; j < k; ++j) {
      src[size_t(out_base + j * step)] = base + p[size_t(j)] * step;
      indices.v[size_t(out_base + j * step)] = double(p[size_t(j)]);
    }
    ++line;
  });
  c.set_out(0, remap(c, x, out, [&](int64_t i) { return src[size_t(i)]; }));
  if (c.num_outputs() > 1) c.set_nd(1, indices);
}

void ref_argsort(RefCtx& c) {
  const Tensor& x = c.in("x");
  int64_t ax = axis_in(c, c.i64("axis", -1), x.rank());
  bool ascending = c.flag("ascending", false);
  NdArray r(x.shape());
  for_each_line(x.shape(), ax, [&](int64_t base, int64_t step, int64_t len) {
    Index p = sorted_positions(x, base, step, len, ascending);
    for (int64_t j = 0; j < len; ++j) r.v[size_t(base + j * step)] = double(p[size_t(j)]);
  });
  c.set_nd(0, r);
}

void ref_cumsum(RefCtx& c) {
  NdArray x = c.nd("x");
  int64_t ax = axis_in(c, c.i64("axis", 0), x.rank());
  bool exclusive = c.flag("exclusive", false), reverse = c.flag("reverse", false);
  NdArray r(x.shape);
  for_each_line(x.shape, ax, [&](int64_t base, int64_t step, int64_t len) {
    double sum = 0;
    for (int64_t t = 0; t < len; ++t) {
      size_t at = size_t(base + (reverse ? len - 1 - t : t) * step);
      if (exclusive) r.v[at] = sum;
      sum += x.v[at];
      if (!exclusive) r.v[at] = sum;
    }
  });
  c.set_nd(0, r);
}

}  // namespace

void register_ref_tensor_ops() {
  register_ref("reshape", ref_reshape);
  register_ref("squeeze", ref_squeeze);
  register_ref("expand_dims", ref_expand_dims);
  register_ref("flatten2d", ref_flatten2d);
  register_ref("transpose", ref_transpose);
  register_ref("concat", ref_concat);
  register_ref("split", ref_split);
  register_ref("stack", ref_stack);
  register_ref("slice_by_index", ref_slice_by_index);
  register_ref("slice_update", ref_slice_update);
  register_ref("slice_by_size", ref_slice_by_size);
  register_ref("gather", ref_gather);
  register_ref("gather_along_axis", ref_gather_along_axis);
  register_ref("gather_nd", ref_gather_nd);
  register_ref("scatter", ref_scatter);
  register_ref("scatter_along_axis", ref_scatter_along_axis);
  register_ref("scatter_nd", ref_scatter_nd);
  register_ref("pad", ref_pad);
  register_ref("tile", ref_tile);
  register_ref("band_part", ref_band_part);
  register_ref("reverse", ref_reverse);
  register_ref("reverse_sequence", ref_reverse_sequence);
  register_ref("range_1d", ref_range_1d);
  register_ref("fill", ref_fill);
  register_ref("fill_like", ref_fill_like);
  register_ref("one_hot", ref_one_hot);
  register_ref("identity", ref_identity);
  register_ref("shape", ref_shape);
  register_ref("non_zero", ref_non_zero);
  register_ref("topk", ref_topk);
  register_ref("argsort", ref_argsort);
  register_ref("cumsum", ref_cumsum);
  register_ref_reduction_ops();
}

}  // namespace milrt::ref
