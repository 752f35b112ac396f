// Lowering of slice_by_index and pad: every index is resolved here, at
// compile time, into a start and step per dim (slices) or per-dim padding.
#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/generic/copy.h"
#include "kernels/generic/pad.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

std::vector<int64_t> row_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = int(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i) + 1] * s[size_t(i) + 1];
  return st;
}

// Python slice semantics of one dim of size n: the first index and the count.
void python_slice(int64_t n, bool has_begin, int64_t begin, bool has_end, int64_t end, int64_t step,
                  int64_t& start, int64_t& count) {
  if (step > 0) {
    auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(0), n); };
    start = has_begin ? clamp(begin) : 0;
    int64_t stop = has_end ? clamp(end) : n;
    count = stop > start ? (stop - start + step - 1) / step : 0;
  } else {
    auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t(-1), n - 1); };
    start = has_begin ? clamp(begin) : n - 1;
    int64_t stop = has_end ? clamp(end) : -1;
    count = start > stop ? (start - stop - step - 1) / -step : 0;
  }
}

std::unique_ptr<Step> lower_slice_by_index(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  const size_t rank = x.shape.size();
  std::vector<int64_t> begin = ctx.const_ints(op, "begin"), end = ctx.const_ints(op, "end");
  std::vector<int64_t> stride = ctx.const_ints(op, "stride", std::vector<int64_t>(rank, 1));
  std::vector<int64_t> bm = ctx.const_ints(op, "begin_mask", std::vector<int64_t>(rank, 0));
  std::vector<int64_t> em = ctx.const_ints(op, "end_mask", std::vector<int64_t>(rank, 0));
  std::vector<int64_t> sm = ctx.const_ints(op, "squeeze_mask", std::vector<int64_t>(rank, 0));
  for (const auto* v : {&begin, &end, &stride, &bm, &em, &sm})
    if (v->size() != rank) throw_op_error(op, "slice parameters must have one entry per dim of x");
  std::vector<int64_t> xst = row_strides(x.shape);
  int64_t off = 0;
  Shape dims;
  std::vector<int64_t> src_stride;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t n = x.shape[d];
    if (sm[d]) {
      int64_t i = bm[d] ? 0 : begin[d];
      if (i < -n || i >= n) throw_op_error(op, "squeezed index " + std::to_string(i) + " is out of range");
      off += (i < 0 ? i + n : i) * xst[d];
      continue;
    }
    if (stride[d] == 0) throw_op_error(op, "stride must not be 0");
    int64_t start, count;
    python_slice(n, !bm[d], begin[d], !em[d], end[d], stride[d], start, count);
    if (count > 0) off += start * xst[d];
    dims.push_back(count);
    src_stride.push_back(stride[d] * xst[d]);
  }
  if (dims != o.shape)
    throw_op_error(op, "slice gives shape " + shape_str(dims) + " but the output is declared " + shape_str(o.shape));
  std::vector<int64_t> dst_stride = row_strides(dims);
  int ix = x.id, io = o.id, bytes = int(dtype_size(o.dtype)), r = int(dims.size());
  auto step = make_step("slice_by_index", op, [=](const Frame& f) {
    kernels::strided_copy(static_cast<const uint8_t*>(f.ptr[size_t(ix)]) + off * bytes, f.ptr[size_t(io)], r,
                          dims.data(), src_stride.data(), dst_stride.data(), bytes);
  });
  step->info.bytes = 2.0 * double(o.numel() * bytes);
  return step;
}

// slice_update: x with a slice replaced by `update`. begin and end may be
// run-time values (a KV cache written at the current position): the slice is
// resolved on every run from their values (no allocation), with the same
// Python semantics as slice_by_index, and must match update's shape.
std::unique_ptr<Step> lower_slice_update(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), u = ctx.input(op, "update"), o = ctx.output(op);
  ValueRef b = ctx.input(op, "begin"), e = ctx.input(op, "end");
  const size_t rank = x.shape.size();
  constexpr size_t kMaxRank = 8;
  if (rank > kMaxRank) throw_op_error(op, "slice_update of rank above 8 is not compiled");
  if (b.dtype != DType::Int32 || e.dtype != DType::Int32 || size_t(b.numel()) != rank || size_t(e.numel()) != rank)
    throw_op_error(op, "begin and end must be integer vectors with one entry per dim of x");
  std::vector<int64_t> stride = ctx.const_ints(op, "stride", std::vector<int64_t>(rank, 1));
  std::vector<int64_t> bm = ctx.const_ints(op, "begin_mask", std::vector<int64_t>(rank, 0));
  std::vector<int64_t> em = ctx.const_ints(op, "end_mask", std::vector<int64_t>(rank, 0));
  std::vector<int64_t> sm = ctx.const_ints(op, "squeeze_mask", std::vector<int64_t>(rank, 0));
  for (const auto* v : {&stride, &bm, &em, &sm})
    if (v->size() != rank) throw_op_error(op, "slice parameters must have one entry per dim of x");
  for (size_t d = 0; d < rank; ++d)
    if (!sm[d] && stride[d] == 0) throw_op_error(op, "stride must not be 0");
  // update's dims, with squeezed dims as 1
  std::array<int64_t, kMaxRank> want{};
  for (size_t d = 0, k = 0; d < rank; ++d) {
    if (sm[d]) { want[d] = 1; continue; }
    if (k >= u.shape.size()) throw_op_error(op, "update has too few dims for the slice");
    want[d] = u.shape[k++];
  }
  std::array<int64_t, kMaxRank> xst{}, ust{};
  std::vector<int64_t> xs = row_strides(x.shape);
  std::copy(xs.begin(), xs.end(), xst.begin());
  for (int d = int(rank) - 1, acc = 1; d >= 0; --d) { ust[size_t(d)] = acc; acc *= int(want[size_t(d)]); }
  std::array<int64_t, kMaxRank> st{};
  for (size_t d = 0; d < rank; ++d) st[d] = sm[d] ? 1 : stride[d];
  std::array<int64_t, kMaxRank> bmask{}, emask{}, smask{};
  for (size_t d = 0; d < rank; ++d) { bmask[d] = bm[d]; emask[d] = em[d]; smask[d] = sm[d]; }
  Shape xshape = x.shape;
  int ix = x.id, iu = u.id, io = o.id, ib = b.id, ie = e.id, bytes = int(dtype_size(o.dtype)), r = int(rank);
  size_t total = size_t(x.numel()) * size_t(bytes);
  auto step = make_step("slice_update", op, [=](const Frame& f) {
    const int32_t* begin = f.at<int32_t>(ib);
    const int32_t* end = f.at<int32_t>(ie);
    std::array<int64_t, kMaxRank> dst_stride{};
    int64_t off = 0;
    for (int d = 0; d < r; ++d) {
      const int64_t n = xshape[size_t(d)];
      int64_t start, count = 1;
      if (smask[size_t(d)]) {
        int64_t i = bmask[size_t(d)] ? 0 : begin[d];
        if (i < -n || i >= n)
          throw Error("error: slice_update: squeezed index " + std::to_string(i) + " is out of range");
        start = i < 0 ? i + n : i;
      } else {
        python_slice(n, !bmask[size_t(d)], begin[d], !emask[size_t(d)], end[d], st[size_t(d)], start, count);
      }
      if (count != want[size_t(d)])
        throw Error("error: slice_update: the slice has " + std::to_string(count) + " elements along dim " +
                    std::to_string(d) + " but update has " + std::to_string(want[size_t(d)]));
      if (count > 0) off += start * xst[size_t(d)];
      dst_stride[size_t(d)] = st[size_t(d)] * xst[size_t(d)];
    }
    if (f.ptr[size_t(io)] != f.ptr[size_t(ix)]) std::memcpy(f.ptr[size_t(io)], f.ptr[size_t(ix)], total);
    kernels::strided_copy(f.ptr[size_t(iu)], static_cast<uint8_t*>(f.ptr[size_t(io)]) + off * bytes, r, want.data(),
                          ust.data(), dst_stride.data(), bytes);
  });
  step->info.bytes = double(total) * 2 + double(u.numel() * bytes) * 2;
  return step;
}

std::unique_ptr<Step> lower_pad(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  std::vector<int64_t> pad = ctx.const_ints(op, "pad");
  std::string mode_name = ctx.const_str(op, "mode", "constant");
  kernels::PadMode mode;
  if (mode_name == "constant") mode = kernels::PadMode::Constant;
  else if (mode_name == "reflect") mode = kernels::PadMode::Reflect;
  else if (mode_name == "replicate") mode = kernels::PadMode::Replicate;
  else throw_op_error(op, "unknown mode '" + mode_name + "'");
  const size_t rank = x.shape.size();
  if (rank > 16) throw_op_error(op, "rank above 16 is not compiled");
  if (pad.size() % 2 != 0 || pad.size() / 2 > rank) throw_op_error(op, "'pad' does not fit x");
  std::vector<int64_t> before(rank, 0), after(rank, 0);
  Shape out = x.shape;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    size_t d = rank - pad.size() / 2 + k;
    int64_t n = x.shape[d], b = pad[2 * k], a = pad[2 * k + 1];
    int64_t limit = mode == kernels::PadMode::Reflect ? n - 1 : mode == kernels::PadMode::Replicate ? n : INT64_MAX;
    if (b < 0 || a < 0 || b > limit || a > limit)
      throw_op_error(op, mode_name + " padding does not fit x " + shape_str(x.shape));
    before[d] = b;
    after[d] = a;
    out[d] += b + a;
  }
  if (out != o.shape)
    throw_op_error(op, "padding gives shape " + shape_str(out) + " but the output is declared " + shape_str(o.shape));
  // The fill in the storage dtype, rounded as the reference rounds it.
  Tensor fill_t(o.dtype, {1});
  fill_t.set(0, ctx.const_float(op, "constant_val", 0.0));
  std::array<uint8_t, 8> fill{};
  std::memcpy(fill.data(), fill_t.data(), dtype_size(o.dtype));
  Shape in_dims = x.shape;
  int ix = x.id, io = o.id, bytes = int(dtype_size(o.dtype)), r = int(rank);
  auto step = make_step("pad:" + mode_name, op, [=](const Frame& f) {
    kernels::pad(f.ptr[size_t(ix)], f.ptr[size_t(io)], r, in_dims.data(), before.data(), after.data(), mode,
                 fill.data(), bytes);
  });
  step->info.bytes = double((x.numel() + o.numel()) * bytes);
  return step;
}

}  // namespace

void register_slicing_lowerings() {
  register_lowering("slice_by_index", lower_slice_by_index);
  register_lowering("slice_update", lower_slice_update);
  register_lowering("pad", lower_pad);
}

}  // namespace milrt::rt
