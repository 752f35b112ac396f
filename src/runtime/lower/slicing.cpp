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
  register_lowering("pad", lower_pad);
}

}  // namespace milrt::rt
