// Lowering of data-movement ops: reshapes, transpose, concat, split, slices.
#include <cstring>

#include "kernels/generic/copy.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

std::vector<int64_t> row_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = int(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i) + 1] * s[size_t(i) + 1];
  return st;
}

// Same bytes, new shape: a copy for now (aliasing is the memory planner's job).
std::unique_ptr<Step> lower_copy(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  size_t bytes = size_t(o.numel()) * dtype_size(o.dtype);
  int ix = x.id, io = o.id;
  auto step = make_step("copy:" + op.type, op, [=](const Frame& f) {
    if (f.ptr[size_t(ix)] != f.ptr[size_t(io)]) std::memcpy(f.ptr[size_t(io)], f.ptr[size_t(ix)], bytes);
  });
  step->info.bytes = 2.0 * double(bytes);
  return step;
}

std::unique_ptr<Step> lower_transpose(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  std::vector<int64_t> perm = ctx.const_ints(op, "perm");
  int rank = int(x.shape.size());
  if (rank > 16) throw_op_error(op, "rank above 16 is not compiled");
  std::vector<int64_t> xs = row_strides(x.shape), dst = row_strides(o.shape);
  std::vector<int64_t> dims(static_cast<size_t>(rank)), src(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    int64_t p = perm[size_t(i)] < 0 ? perm[size_t(i)] + rank : perm[size_t(i)];
    dims[size_t(i)] = x.shape[size_t(p)];
    src[size_t(i)] = xs[size_t(p)];
  }
  int ix = x.id, io = o.id, bytes = int(dtype_size(o.dtype));
  if (o.dtype == DType::BF16 && x.dtype == DType::FP32)  // read only by bf16 products (CompileOptions::bf16_operands)
    return make_step("transpose[to bf16]", op, [=](const Frame& f) {
      kernels::strided_copy_f32_to_bf16(f.at<float>(ix), f.at<uint16_t>(io), rank, dims.data(), src.data(), dst.data());
    });
  if (o.dtype != x.dtype) throw_op_error(op, "internal: transpose between storage types");
  return make_step("transpose", op, [=](const Frame& f) {
    kernels::strided_copy(f.ptr[size_t(ix)], f.ptr[size_t(io)], rank, dims.data(), src.data(), dst.data(), bytes);
  });
}

// Copies of blocks of x into an output (or of an input into blocks of the
// output), each described by an offset and strides: concat, split, slices.
struct Block {
  int from, to;           // value ids
  int64_t src_off, dst_off;
  std::vector<int64_t> dims, src_stride, dst_stride;
};

std::unique_ptr<Step> block_step(const std::string& kernel, const Op& op, std::vector<Block> blocks, int bytes) {
  return make_step(kernel, op, [=](const Frame& f) {
    for (auto& b : blocks)
      kernels::strided_copy(static_cast<const uint8_t*>(f.ptr[size_t(b.from)]) + b.src_off * bytes,
                            static_cast<uint8_t*>(f.ptr[size_t(b.to)]) + b.dst_off * bytes, int(b.dims.size()),
                            b.dims.data(), b.src_stride.data(), b.dst_stride.data(), bytes);
  });
}

std::unique_ptr<Step> lower_concat(const Op& op, LowerCtx& ctx) {
  std::vector<ValueRef> parts = ctx.tuple(op, "values");
  ValueRef o = ctx.output(op);
  if (ctx.const_bool(op, "interleave", false)) throw_op_error(op, "interleaved concat is not compiled yet");
  int64_t rank = int64_t(o.shape.size());
  int64_t axis = ctx.const_int(op, "axis");
  if (axis < 0) axis += rank;
  std::vector<int64_t> ost = row_strides(o.shape);
  std::vector<Block> blocks;
  int64_t at = 0;
  for (auto& p : parts) {
    blocks.push_back({p.id, o.id, 0, at * ost[size_t(axis)], p.shape, row_strides(p.shape), ost});
    at += p.shape[size_t(axis)];
  }
  return block_step("concat", op, std::move(blocks), int(dtype_size(o.dtype)));
}

std::unique_ptr<Step> lower_split(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x");
  int64_t rank = int64_t(x.shape.size());
  int64_t axis = ctx.const_int(op, "axis");
  if (axis < 0) axis += rank;
  std::vector<int64_t> xst = row_strides(x.shape);
  std::vector<Block> blocks;
  int64_t at = 0;
  for (size_t k = 0; k < op.outputs.size(); ++k) {
    ValueRef o = ctx.output(op, k);
    blocks.push_back({x.id, o.id, at * xst[size_t(axis)], 0, o.shape, xst, row_strides(o.shape)});
    at += o.shape[size_t(axis)];
  }
  return block_step("split", op, std::move(blocks), int(dtype_size(x.dtype)));
}

std::unique_ptr<Step> lower_slice_by_size(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  std::vector<int64_t> begin = ctx.const_ints(op, "begin");
  std::vector<int64_t> xst = row_strides(x.shape);
  int64_t off = 0;
  for (size_t i = 0; i < begin.size(); ++i) {
    int64_t b = begin[i] < 0 ? begin[i] + x.shape[i] : begin[i];
    off += b * xst[i];
  }
  return block_step("slice_by_size", op, {{x.id, o.id, off, 0, o.shape, xst, row_strides(o.shape)}},
                    int(dtype_size(o.dtype)));
}
}  // namespace

void register_tensor_lowerings() {
  for (const char* t : {"reshape", "squeeze", "expand_dims", "identity", "flatten2d"}) register_lowering(t, lower_copy);
  register_lowering("transpose", lower_transpose);
  register_lowering("concat", lower_concat);
  register_lowering("split", lower_split);
  register_lowering("slice_by_size", lower_slice_by_size);
}

}  // namespace milrt::rt
