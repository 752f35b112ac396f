// Lowering of the index-driven ops training needs (autodiff's backward
// passes scatter-add where the forward pass gathers): gather_along_axis,
// gather_nd, scatter, scatter_along_axis, scatter_nd, one_hot, and the
// generators and shape-driven copies fill, fill_like, range_1d, tile,
// band_part, cumsum, topk, argsort and reverse_sequence.
//
// Index arrays arrive at run time: kernels check every index before they
// write, and a bad one becomes an Error naming the op. Negative indices count
// from the end, unless validate_indices (iOS17) asks that they be rejected.
// Constants (fill values, one_hot's on/off, range_1d) are rounded to the
// declared dtype first, as the reference rounds them, then stored as the
// plan stores that dtype.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/generic/index_ops.h"
#include "kernels/generic/scatter.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

using kernels::ScatterMode;

// The start of a run-time error message at `op`, as throw_op_error words it.
std::string who(const Op& op) {
  std::string where = op.loc.str();
  return (where.empty() ? "" : where + ": ") + "error: " + op.type +
         (op.outputs.empty() ? "" : " '" + op.outputs[0].name + "'");
}

[[noreturn]] void index_error(const std::string& who, int32_t v, int64_t n) {
  throw Error(who + ": index " + std::to_string(v) + " is out of range for a dim of size " + std::to_string(n));
}

int64_t numel_of(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) n *= s[i];
  return n;
}

void require_int_indices(const Op& op, const ValueRef& idx) {
  if (idx.dtype != DType::Int32) throw_op_error(op, "indices must be integers to compile");
}

bool allow_negative(const Op& op, LowerCtx& ctx) { return !ctx.const_bool(op, "validate_indices", false); }

void require_shape(const Op& op, const Shape& got, const Shape& want, const std::string& what) {
  if (got != want)
    throw_op_error(op, what + " has shape " + shape_str(got) + " but " + shape_str(want) + " is expected");
}

// `v` rounded to the op's declared output dtype, as the plan stores it (fp32,
// int32 or one byte), in 8 bytes.
std::array<uint8_t, 8> stored_scalar(const Op& op, size_t out, double v) {
  Tensor t(op.outputs.at(out).type.dtype, {1});
  t.set(0, v);
  Tensor s = t.cast(storage_dtype(t.dtype()));
  std::array<uint8_t, 8> r{};
  std::memcpy(r.data(), s.data(), dtype_size(s.dtype()));
  return r;
}

ScatterMode scatter_mode(const Op& op, LowerCtx& ctx, DType data) {
  std::string m = ctx.const_str(op, "mode", "add");
  ScatterMode mode;
  if (m == "update") mode = ScatterMode::Update;
  else if (m == "add") mode = ScatterMode::Add;
  else if (m == "sub") mode = ScatterMode::Sub;
  else if (m == "mul") mode = ScatterMode::Mul;
  else if (m == "div") mode = ScatterMode::Div;
  else if (m == "max") mode = ScatterMode::Max;
  else if (m == "min") mode = ScatterMode::Min;
  else throw_op_error(op, "unknown mode '" + m + "'");
  if (data != DType::FP32 && data != DType::Int32) throw_op_error(op, "only float and integer data scatter");
  if (data == DType::Int32 && mode == ScatterMode::Div) throw_op_error(op, "integer division is not compiled");
  return mode;
}

// Copies data into the output (unless they share memory) and runs `apply(out)`.
template <class F>
std::unique_ptr<Step> scatter_step(const Op& op, const ValueRef& data, const ValueRef& o, double update_elems, F apply) {
  int id = data.id, io = o.id;
  size_t bytes = size_t(o.numel()) * dtype_size(o.dtype);
  auto step = make_step(op.type, op, [=](const Frame& f) {
    if (f.ptr[size_t(io)] != f.ptr[size_t(id)]) std::memcpy(f.ptr[size_t(io)], f.ptr[size_t(id)], bytes);
    apply(f);
  });
  step->info.bytes = double(bytes) * 2 + update_elems * 8;
  return step;
}

// ---------------------------------------------------------------- gathers

std::unique_ptr<Step> lower_gather_along_axis(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), idx = ctx.input(op, "indices"), o = ctx.output(op);
  require_int_indices(op, idx);
  const int64_t rank = int64_t(x.shape.size());
  const int64_t axis = norm_axis(op, ctx.const_int(op, "axis", 0), rank);
  Shape want = x.shape;
  if (int64_t(idx.shape.size()) != rank) throw_op_error(op, "indices must have the rank of x");
  want[size_t(axis)] = idx.shape[size_t(axis)];
  require_shape(op, idx.shape, want, "indices");
  require_shape(op, o.shape, want, "the output");
  int64_t outer, n, inner;
  split_dims(x.shape, axis, axis, outer, n, inner);
  const int64_t m = want[size_t(axis)];
  const size_t elem = dtype_size(x.dtype);
  const bool neg = allow_negative(op, ctx);
  int ix = x.id, ii = idx.id, io = o.id;
  std::string name = who(op);
  auto step = make_step("gather_along_axis", op, [=](const Frame& f) {
    const int32_t* ids = f.at<int32_t>(ii);
    int64_t bad = kernels::gather_along_axis(f.ptr[size_t(ix)], outer, n, inner, elem, ids, m, neg, f.ptr[size_t(io)]);
    if (bad >= 0) index_error(name, ids[bad], n);
  });
  step->info.bytes = double(o.numel()) * double(2 * elem + 4);
  return step;
}

std::unique_ptr<Step> lower_gather_nd(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), idx = ctx.input(op, "indices"), o = ctx.output(op);
  require_int_indices(op, idx);
  const Shape& xs = x.shape;
  const Shape& is = idx.shape;
  const int64_t bd = ctx.const_int(op, "batch_dims", 0);
  if (is.empty() || bd < 0 || bd > int64_t(is.size()) - 1 || is.back() + bd > int64_t(xs.size()))
    throw_op_error(op, "indices " + shape_str(is) + " do not fit x " + shape_str(xs));
  for (int64_t d = 0; d < bd; ++d)
    if (xs[size_t(d)] != is[size_t(d)]) throw_op_error(op, "batch dims of x and indices differ");
  const int64_t k = is.back();
  Shape want(is.begin(), is.end() - 1);
  want.insert(want.end(), xs.begin() + bd + k, xs.end());
  require_shape(op, o.shape, want, "the output");
  const int64_t batch = numel_of(is, 0, size_t(bd));
  const int64_t m = numel_of(is, size_t(bd), is.size() - 1);
  const int64_t inner = numel_of(xs, size_t(bd + k), xs.size());
  std::vector<int64_t> dims(xs.begin() + bd, xs.begin() + bd + k);
  const size_t elem = dtype_size(x.dtype);
  const bool neg = allow_negative(op, ctx);
  int ix = x.id, ii = idx.id, io = o.id;
  std::string name = who(op);
  auto step = make_step("gather_nd", op, [=](const Frame& f) {
    const int32_t* ids = f.at<int32_t>(ii);
    int64_t bad = kernels::gather_nd(f.ptr[size_t(ix)], batch, dims.data(), k, inner, elem, ids, m, neg,
                                     f.ptr[size_t(io)]);
    if (bad >= 0) index_error(name, ids[bad], dims[size_t(bad % k)]);
  });
  step->info.bytes = double(o.numel()) * double(2 * elem) + double(idx.numel()) * 4;
  return step;
}

// ---------------------------------------------------------------- scatters

std::unique_ptr<Step> lower_scatter(const Op& op, LowerCtx& ctx) {
  ValueRef d = ctx.input(op, "data"), idx = ctx.input(op, "indices"), u = ctx.input(op, "updates"), o = ctx.output(op);
  require_int_indices(op, idx);
  const ScatterMode mode = scatter_mode(op, ctx, d.dtype);
  const int64_t axis = norm_axis(op, ctx.const_int(op, "axis", 0), int64_t(d.shape.size()));
  Shape want(d.shape.begin(), d.shape.begin() + axis);
  want.insert(want.end(), idx.shape.begin(), idx.shape.end());
  want.insert(want.end(), d.shape.begin() + axis + 1, d.shape.end());
  require_shape(op, u.shape, want, "updates");
  require_shape(op, o.shape, d.shape, "the output");
  int64_t outer, n, inner;
  split_dims(d.shape, axis, axis, outer, n, inner);
  const int64_t m = idx.numel();
  const bool neg = allow_negative(op, ctx), is_float = d.dtype == DType::FP32;
  int ii = idx.id, iu = u.id, io = o.id;
  std::string name = who(op);
  return scatter_step(op, d, o, double(u.numel()), [=](const Frame& f) {
    const int32_t* ids = f.at<int32_t>(ii);
    int64_t bad = is_float ? kernels::scatter_rows(f.at<float>(io), outer, n, inner, ids, f.at<float>(iu), m, mode, neg)
                           : kernels::scatter_rows(f.at<int32_t>(io), outer, n, inner, ids, f.at<int32_t>(iu), m,
                                                   mode, neg);
    if (bad >= 0) index_error(name, ids[bad], n);
  });
}

std::unique_ptr<Step> lower_scatter_along_axis(const Op& op, LowerCtx& ctx) {
  ValueRef d = ctx.input(op, "data"), idx = ctx.input(op, "indices"), u = ctx.input(op, "updates"), o = ctx.output(op);
  require_int_indices(op, idx);
  const ScatterMode mode = scatter_mode(op, ctx, d.dtype);
  const int64_t rank = int64_t(d.shape.size());
  const int64_t axis = norm_axis(op, ctx.const_int(op, "axis", 0), rank);
  if (int64_t(idx.shape.size()) != rank) throw_op_error(op, "indices must have the rank of data");
  Shape want = d.shape;
  want[size_t(axis)] = idx.shape[size_t(axis)];
  require_shape(op, idx.shape, want, "indices");
  require_shape(op, u.shape, want, "updates");
  require_shape(op, o.shape, d.shape, "the output");
  int64_t outer, n, inner;
  split_dims(d.shape, axis, axis, outer, n, inner);
  const int64_t m = want[size_t(axis)];
  const bool neg = allow_negative(op, ctx), is_float = d.dtype == DType::FP32;
  int ii = idx.id, iu = u.id, io = o.id;
  std::string name = who(op);
  return scatter_step(op, d, o, double(u.numel()), [=](const Frame& f) {
    const int32_t* ids = f.at<int32_t>(ii);
    int64_t bad = is_float ? kernels::scatter_along_axis(f.at<float>(io), outer, n, inner, ids, f.at<float>(iu), m,
                                                         mode, neg)
                           : kernels::scatter_along_axis(f.at<int32_t>(io), outer, n, inner, ids,
                                                         f.at<int32_t>(iu), m, mode, neg);
    if (bad >= 0) index_error(name, ids[bad], n);
  });
}

std::unique_ptr<Step> lower_scatter_nd(const Op& op, LowerCtx& ctx) {
  ValueRef d = ctx.input(op, "data"), idx = ctx.input(op, "indices"), u = ctx.input(op, "updates"), o = ctx.output(op);
  require_int_indices(op, idx);
  const ScatterMode mode = scatter_mode(op, ctx, d.dtype);
  const Shape& ds = d.shape;
  const Shape& is = idx.shape;
  if (is.empty() || is.back() > int64_t(ds.size())) throw_op_error(op, "indices " + shape_str(is) + " do not fit data");
  const int64_t k = is.back();
  Shape want(is.begin(), is.end() - 1);
  want.insert(want.end(), ds.begin() + k, ds.end());
  require_shape(op, u.shape, want, "updates");
  require_shape(op, o.shape, ds, "the output");
  std::vector<int64_t> dims(ds.begin(), ds.begin() + k);
  const int64_t m = numel_of(is, 0, is.size() - 1), inner = numel_of(ds, size_t(k), ds.size());
  const bool neg = allow_negative(op, ctx), is_float = d.dtype == DType::FP32;
  int ii = idx.id, iu = u.id, io = o.id;
  std::string name = who(op);
  return scatter_step(op, d, o, double(u.numel()), [=](const Frame& f) {
    const int32_t* ids = f.at<int32_t>(ii);
    int64_t bad = is_float ? kernels::scatter_nd(f.at<float>(io), dims.data(), k, inner, ids, f.at<float>(iu), m,
                                                 mode, neg)
                           : kernels::scatter_nd(f.at<int32_t>(io), dims.data(), k, inner, ids, f.at<int32_t>(iu), m,
                                                 mode, neg);
    if (bad >= 0) index_error(name, ids[bad], dims[size_t(bad % k)]);
  });
}

// ---------------------------------------------------------------- generators

std::unique_ptr<Step> lower_one_hot(const Op& op, LowerCtx& ctx) {
  ValueRef idx = ctx.input(op, "indices"), o = ctx.output(op);
  require_int_indices(op, idx);
  const int64_t depth = ctx.const_int(op, "one_hot_vector_size");
  const int64_t rank = int64_t(idx.shape.size());
  const int64_t axis = ctx.const_int(op, "axis", -1);
  if (axis < -rank - 1 || axis > rank) throw_op_error(op, "axis " + std::to_string(axis) + " is out of range");
  const size_t cut = size_t(axis < 0 ? axis + rank + 1 : axis);
  Shape want = idx.shape;
  want.insert(want.begin() + int64_t(cut), depth);
  require_shape(op, o.shape, want, "the output");
  const int64_t outer = numel_of(idx.shape, 0, cut), inner = numel_of(idx.shape, cut, idx.shape.size());
  const auto on = stored_scalar(op, 0, ctx.const_float(op, "on_value", 1.0));
  const auto off = stored_scalar(op, 0, ctx.const_float(op, "off_value", 0.0));
  const size_t elem = dtype_size(o.dtype);
  int ii = idx.id, io = o.id;
  auto step = make_step("one_hot", op, [=](const Frame& f) {
    kernels::one_hot(f.at<int32_t>(ii), outer, inner, depth, on.data(), off.data(), elem, f.ptr[size_t(io)]);
  });
  step->info.bytes = double(o.numel() * int64_t(elem) + idx.numel() * 4);
  return step;
}

// fill and fill_like: the output's (static) shape holds `value`.
std::unique_ptr<Step> lower_fill(const Op& op, LowerCtx& ctx) {
  // fill's shape need not be a constant: the declared output shape is static and verified.
  ValueRef o = ctx.output(op);
  const auto value = stored_scalar(op, 0, ctx.const_float(op, "value", 0.0));
  const size_t elem = dtype_size(o.dtype);
  const int64_t n = o.numel();
  int io = o.id;
  auto step = make_step(op.type, op, [=](const Frame& f) { kernels::fill(f.ptr[size_t(io)], n, value.data(), elem); });
  step->info.bytes = double(n) * double(elem);
  return step;
}

std::unique_ptr<Step> lower_range_1d(const Op& op, LowerCtx& ctx) {
  ValueRef o = ctx.output(op);
  const double start = ctx.const_float(op, "start"), end = ctx.const_float(op, "end"), step_v = ctx.const_float(op, "step");
  if (step_v == 0) throw_op_error(op, "'step' must not be 0");
  const int64_t n = std::max<int64_t>(0, int64_t(std::ceil((end - start) / step_v)));
  require_shape(op, o.shape, {n}, "the output");
  // Computed once here; each run copies it out.
  Tensor t(op.outputs[0].type.dtype, {n});
  for (int64_t i = 0; i < n; ++i) t.set(size_t(i), start + double(i) * step_v);
  auto values = std::make_shared<Tensor>(t.cast(o.dtype));
  const size_t bytes = size_t(n) * dtype_size(o.dtype);
  int io = o.id;
  auto step = make_step("range_1d", op, [=](const Frame& f) { std::memcpy(f.ptr[size_t(io)], values->data(), bytes); });
  step->info.bytes = 2.0 * double(bytes);
  return step;
}

// ---------------------------------------------------------------- shape-driven copies

std::unique_ptr<Step> lower_tile(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  std::vector<int64_t> reps = ctx.const_ints(op, "reps");
  if (reps.size() != x.shape.size()) throw_op_error(op, "'reps' must have one entry per dim of x");
  Shape want = x.shape;
  for (size_t d = 0; d < want.size(); ++d) {
    if (reps[d] <= 0) throw_op_error(op, "'reps' must be positive");
    want[d] *= reps[d];
  }
  require_shape(op, o.shape, want, "the output");
  Shape dims = x.shape;
  const size_t elem = dtype_size(x.dtype);
  const int rank = int(dims.size());
  int ix = x.id, io = o.id;
  auto step = make_step("tile", op, [=](const Frame& f) {
    kernels::tile(f.ptr[size_t(ix)], rank, dims.data(), reps.data(), elem, f.ptr[size_t(io)]);
  });
  step->info.bytes = double(x.numel() + o.numel()) * double(elem);
  return step;
}

std::unique_ptr<Step> lower_band_part(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.shape.size() < 2) throw_op_error(op, "x must have rank 2 or more");
  require_shape(op, o.shape, x.shape, "the output");
  const int64_t lower = ctx.const_int(op, "lower", -1), upper = ctx.const_int(op, "upper", -1);
  const size_t r = x.shape.size();
  const int64_t rows = x.shape[r - 2], cols = x.shape[r - 1], batch = numel_of(x.shape, 0, r - 2);
  const size_t elem = dtype_size(x.dtype);
  int ix = x.id, io = o.id;
  auto step = make_step("band_part", op, [=](const Frame& f) {
    kernels::band_part(f.ptr[size_t(ix)], batch, rows, cols, lower, upper, elem, f.ptr[size_t(io)]);
  });
  step->info.bytes = 2.0 * double(x.numel()) * double(elem);
  return step;
}

std::unique_ptr<Step> lower_cumsum(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32 && x.dtype != DType::Int32) throw_op_error(op, "only float and integer cumsum compiles");
  require_shape(op, o.shape, x.shape, "the output");
  const int64_t axis = norm_axis(op, ctx.const_int(op, "axis", 0), int64_t(x.shape.size()));
  const bool exclusive = ctx.const_bool(op, "exclusive", false), reverse = ctx.const_bool(op, "reverse", false);
  int64_t outer, n, inner;
  split_dims(x.shape, axis, axis, outer, n, inner);
  const bool is_float = x.dtype == DType::FP32;
  int ix = x.id, io = o.id;
  auto step = make_step("cumsum", op, [=](const Frame& f) {
    if (is_float) kernels::cumsum(f.at<float>(ix), outer, n, inner, exclusive, reverse, f.at<float>(io));
    else kernels::cumsum(f.at<int32_t>(ix), outer, n, inner, exclusive, reverse, f.at<int32_t>(io));
  });
  step->info.bytes = 8.0 * double(x.numel());
  return step;
}

std::unique_ptr<Step> lower_topk(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), v = ctx.output(op, 0);
  if (x.dtype != DType::FP32 && x.dtype != DType::Int32) throw_op_error(op, "only float and integer topk compiles");
  const int64_t axis = norm_axis(op, ctx.const_int(op, "axis", -1), int64_t(x.shape.size()));
  int64_t outer, n, inner;
  split_dims(x.shape, axis, axis, outer, n, inner);
  int64_t k = ctx.const_int(op, "k", 1);
  if (k == -1) k = n;
  if (k < 1 || k > n) throw_op_error(op, "k = " + std::to_string(k) + " does not fit an axis of size " + std::to_string(n));
  const bool ascending = ctx.const_bool(op, "ascending", false);
  Shape want = x.shape;
  want[size_t(axis)] = k;
  require_shape(op, v.shape, want, "the values output");
  int ii = -1;
  if (op.outputs.size() > 1) {
    ValueRef i = ctx.output(op, 1);
    if (i.dtype != DType::Int32) throw_op_error(op, "indices must be integers to compile");
    require_shape(op, i.shape, want, "the indices output");
    ii = i.id;
  }
  // Sort scratch, allocated once here: a plan runs one call at a time.
  auto scratch = std::make_shared<std::vector<int32_t>>(size_t(n));
  const bool is_float = x.dtype == DType::FP32;
  int ix = x.id, iv = v.id;
  auto step = make_step("topk", op, [=](const Frame& f) {
    int32_t* idx = ii >= 0 ? f.at<int32_t>(ii) : nullptr;
    if (is_float) kernels::topk(f.at<float>(ix), outer, n, inner, k, ascending, f.at<float>(iv), idx, scratch->data());
    else kernels::topk(f.at<int32_t>(ix), outer, n, inner, k, ascending, f.at<int32_t>(iv), idx, scratch->data());
  });
  step->info.bytes = 4.0 * double(x.numel() + 2 * v.numel());
  return step;
}

// argsort: the positions topk(k = n) would give, the sorted values going to
// a scratch buffer; ties and NaNs as there.
std::unique_ptr<Step> lower_argsort(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32 && x.dtype != DType::Int32) throw_op_error(op, "only float and integer argsort compiles");
  if (o.dtype != DType::Int32) throw_op_error(op, "the output must be integers to compile");
  require_shape(op, o.shape, x.shape, "the output");
  const int64_t axis = norm_axis(op, ctx.const_int(op, "axis", -1), int64_t(x.shape.size()));
  const bool ascending = ctx.const_bool(op, "ascending", false);
  int64_t outer, n, inner;
  split_dims(x.shape, axis, axis, outer, n, inner);
  // Scratch allocated once here: a plan runs one call at a time.
  auto scratch = std::make_shared<std::vector<int32_t>>(size_t(n) + size_t(x.numel()));
  const bool is_float = x.dtype == DType::FP32;
  int ix = x.id, io = o.id;
  auto step = make_step("argsort", op, [=](const Frame& f) {
    int32_t* order = scratch->data();
    int32_t* sorted = order + n;  // 4-byte values of either dtype
    if (is_float)
      kernels::topk(f.at<float>(ix), outer, n, inner, n, ascending, reinterpret_cast<float*>(sorted),
                    f.at<int32_t>(io), order);
    else kernels::topk(f.at<int32_t>(ix), outer, n, inner, n, ascending, sorted, f.at<int32_t>(io), order);
  });
  step->info.bytes = 12.0 * double(x.numel());
  return step;
}

// reverse_sequence: along seq_axis, the first lengths[b] elements of batch
// entry b reversed, the rest kept. lengths arrive at run time and are checked
// there.
std::unique_ptr<Step> lower_reverse_sequence(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), len = ctx.input(op, "lengths"), o = ctx.output(op);
  require_int_indices(op, len);
  require_shape(op, o.shape, x.shape, "the output");
  const int64_t rank = int64_t(x.shape.size());
  const size_t seq = size_t(norm_axis(op, ctx.const_int(op, "seq_axis", 0), rank));
  const size_t batch = size_t(norm_axis(op, ctx.const_int(op, "batch_axis", 0), rank));
  if (seq == batch) throw_op_error(op, "seq_axis and batch_axis must differ");
  if (len.numel() != x.shape[batch]) throw_op_error(op, "'lengths' must have one entry per batch");
  int64_t seq_stride = 1, batch_stride = 1;
  for (size_t d = seq + 1; d < size_t(rank); ++d) seq_stride *= x.shape[d];
  for (size_t d = batch + 1; d < size_t(rank); ++d) batch_stride *= x.shape[d];
  const int64_t seq_len = x.shape[seq], nb = x.shape[batch], total = x.numel();
  const size_t elem = dtype_size(x.dtype);
  int ix = x.id, il = len.id, io = o.id;
  std::string name = who(op);
  auto step = make_step("reverse_sequence", op, [=](const Frame& f) {
    const int32_t* lengths = f.at<int32_t>(il);
    for (int64_t b = 0; b < nb; ++b)
      if (lengths[b] < 0 || lengths[b] > seq_len)
        throw Error(name + ": length " + std::to_string(lengths[b]) + " exceeds the sequence of " +
                    std::to_string(seq_len));
    const auto* src = static_cast<const uint8_t*>(f.ptr[size_t(ix)]);
    auto* dst = static_cast<uint8_t*>(f.ptr[size_t(io)]);
    for (int64_t i = 0; i < total; ++i) {
      const int64_t t = (i / seq_stride) % seq_len, l = lengths[(i / batch_stride) % nb];
      const int64_t from = t < l ? i + (l - 1 - 2 * t) * seq_stride : i;
      std::memcpy(dst + size_t(i) * elem, src + size_t(from) * elem, elem);
    }
  });
  step->info.bytes = 2.0 * double(total) * double(elem);
  return step;
}

}  // namespace

void register_scatter_gather_lowerings() {
  register_lowering("gather_along_axis", lower_gather_along_axis);
  register_lowering("gather_nd", lower_gather_nd);
  register_lowering("scatter", lower_scatter);
  register_lowering("scatter_along_axis", lower_scatter_along_axis);
  register_lowering("scatter_nd", lower_scatter_nd);
  register_lowering("one_hot", lower_one_hot);
  register_lowering("fill", lower_fill);
  register_lowering("fill_like", lower_fill);
  register_lowering("range_1d", lower_range_1d);
  register_lowering("tile", lower_tile);
  register_lowering("band_part", lower_band_part);
  register_lowering("cumsum", lower_cumsum);
  register_lowering("topk", lower_topk);
  register_lowering("argsort", lower_argsort);
  register_lowering("reverse_sequence", lower_reverse_sequence);
  allow_in_place("band_part");   // element i of the output depends on element i of x alone
}

}  // namespace milrt::rt
