#include "kernels/generic/copy.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/bf16_bits.h"
#include "kernels/convert_rows.h"
#include "kernels/threads.h"
#include "milrt/error.h"

namespace milrt::kernels {
namespace {

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// Fills the contiguous dst of `shape` from src positions base + sum_d
// idx[d] * stride[d] (in elements).
void gather_strided(const uint8_t* src, int64_t base, const std::vector<int64_t>& stride, const Shape& shape,
                    size_t es, uint8_t* dst) {
  const std::vector<int64_t> dst_stride = strides_of(shape);
  strided_copy(src + size_t(base) * es, dst, int(shape.size()), shape.data(), stride.data(), dst_stride.data(),
               int(es));
}

}  // namespace

namespace {

// One innermost run of n elements, `ss` and `ds` elements apart: a typed
// loop the compiler keeps tight (a memcpy call per element cost ~10 ns, the
// whole time of RoPE's pair slices and their gradients).
template <class T>
void strided_run(const uint8_t* s, uint8_t* d, int64_t n, int64_t ss, int64_t ds) {
  const T* sp = reinterpret_cast<const T*>(s);
  T* dp = reinterpret_cast<T*>(d);
  for (int64_t i = 0; i < n; ++i) std::memcpy(dp + i * ds, sp + i * ss, sizeof(T));
}

void run(const uint8_t* s, uint8_t* d, int64_t n, int64_t ss, int64_t ds, int bytes) {
  if (ss == 1 && ds == 1) return (void)std::memcpy(d, s, size_t(n * bytes));
  switch (bytes) {
    case 1: return strided_run<uint8_t>(s, d, n, ss, ds);
    case 2: return strided_run<uint16_t>(s, d, n, ss, ds);
    case 4: return strided_run<uint32_t>(s, d, n, ss, ds);
    case 8: return strided_run<uint64_t>(s, d, n, ss, ds);
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds * bytes, s + i * ss * bytes, size_t(bytes));
  }
}

// Every innermost run of a merged block (n >= 1 dims, none of size 0):
// run(src offset, dst offset, length, src step, dst step), in elements.
template <class Run>
void for_each_run(int n, const int64_t* dims, const int64_t* ss, const int64_t* ds, Run run) {
  int64_t idx[16] = {};
  int64_t so = 0, dof = 0;
  const int r = n - 1;
  while (true) {
    run(so, dof, dims[r], ss[r], ds[r]);
    int k = r - 1;
    for (; k >= 0; --k) {
      so += ss[k];
      dof += ds[k];
      if (++idx[k] < dims[k]) break;
      so -= ss[k] * dims[k];
      dof -= ds[k] * dims[k];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

// The runs of a copy of `dims` elements: the block with size-1 dims dropped
// and each dim merged into the one before it where both sides step over it
// contiguously (fewer, longer runs: a slice [..., T, D/2, 1] of [..., T, D/2,
// 2] is one run of T·D/2). A big copy (attention's head transposes move
// megabytes per call) is split over the outermost dim: one thread reaches
// about half the cache bandwidth two do. run(src offset, dst offset, n, src
// step, dst step) in elements, each call a contiguous range of the block.
template <class Run>
void copy_block(int rank, const int64_t* dims_in, const int64_t* ss_in, const int64_t* ds_in, Run run) {
  for (int i = 0; i < rank; ++i) if (dims_in[i] == 0) return;
  int64_t dims[16], ss[16], ds[16];
  int n = 0;
  for (int i = 0; i < rank; ++i) {
    if (dims_in[i] == 1) continue;
    if (n > 0 && ss[n - 1] == ss_in[i] * dims_in[i] && ds[n - 1] == ds_in[i] * dims_in[i]) {
      dims[n - 1] *= dims_in[i];
      ss[n - 1] = ss_in[i];
      ds[n - 1] = ds_in[i];
      continue;
    }
    dims[n] = dims_in[i], ss[n] = ss_in[i], ds[n] = ds_in[i];
    ++n;
  }
  if (n == 0) return run(0, 0, 1, 1, 1);
  int64_t elements = 1;
  for (int i = 0; i < n; ++i) elements *= dims[i];
  const int threads = n > 1 ? pass_threads(elements, dims[0]) : 1;
  if (threads <= 1) return for_each_run(n, dims, ss, ds, run);
  const int64_t chunk = (dims[0] + threads - 1) / threads;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t b = int64_t(t) * chunk, e = std::min(dims[0], b + chunk);
    if (b >= e) continue;
    int64_t part[16];
    std::copy(dims, dims + n, part);
    part[0] = e - b;
    for_each_run(n, part, ss, ds, [&](int64_t so, int64_t dof, int64_t len, int64_t s1, int64_t d1) {
      run(b * ss[0] + so, b * ds[0] + dof, len, s1, d1);
    });
  }
}

}  // namespace

void strided_copy(const void* src, void* dst, int rank, const int64_t* dims, const int64_t* src_stride,
                  const int64_t* dst_stride, int bytes) {
  auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  copy_block(rank, dims, src_stride, dst_stride, [&](int64_t so, int64_t dof, int64_t n, int64_t ss, int64_t ds) {
    run(s + so * bytes, d + dof * bytes, n, ss, ds, bytes);
  });
}

void strided_copy_f32_to_bf16(const float* src, uint16_t* dst, int rank, const int64_t* dims,
                              const int64_t* src_stride, const int64_t* dst_stride) {
  copy_block(rank, dims, src_stride, dst_stride, [&](int64_t so, int64_t dof, int64_t n, int64_t ss, int64_t ds) {
    if (ss == 1 && ds == 1) return f32_to_bf16_row(src + so, dst + dof, n);
    for (int64_t i = 0; i < n; ++i) dst[dof + i * ds] = f32_to_bf16_bits(src[so + i * ss]);
  });
}

void permute(const void* src, const Shape& src_shape, const std::vector<int64_t>& perm, size_t elem_size, void* dst) {
  if (perm.size() != src_shape.size()) throw Error("permute: perm length differs from the rank");
  const std::vector<int64_t> st = strides_of(src_shape);
  Shape dst_shape;
  std::vector<int64_t> stride;
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(src_shape.size())) throw Error("permute: perm entry out of range");
    dst_shape.push_back(src_shape[size_t(p)]);
    stride.push_back(st[size_t(p)]);
  }
  gather_strided(static_cast<const uint8_t*>(src), 0, stride, dst_shape, elem_size, static_cast<uint8_t*>(dst));
}

void slice_copy(const void* src, const Shape& src_shape, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& step, const Shape& dst_shape, size_t elem_size, void* dst) {
  const size_t r = src_shape.size();
  if (start.size() != r || step.size() != r || dst_shape.size() != r)
    throw Error("slice_copy: start, step and shapes must have the source's rank");
  const std::vector<int64_t> st = strides_of(src_shape);
  int64_t base = 0;
  std::vector<int64_t> stride(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t last = start[d] + (dst_shape[d] - 1) * step[d];
    if (dst_shape[d] > 0 && (start[d] < 0 || start[d] >= src_shape[d] || last < 0 || last >= src_shape[d]))
      throw Error("slice_copy: dim " + std::to_string(d) + " reads outside the source " + shape_str(src_shape));
    base += start[d] * st[d];
    stride[d] = step[d] * st[d];
  }
  gather_strided(static_cast<const uint8_t*>(src), base, stride, dst_shape, elem_size, static_cast<uint8_t*>(dst));
}

void concat(const std::vector<const void*>& srcs, const std::vector<Shape>& shapes, int64_t axis, bool interleave,
            size_t elem_size, void* dst) {
  if (srcs.empty() || srcs.size() != shapes.size()) throw Error("concat: no sources");
  const Shape& first = shapes[0];
  if (axis < 0 || axis >= int64_t(first.size())) throw Error("concat: axis out of range");
  for (const Shape& s : shapes) {
    if (s.size() != first.size()) throw Error("concat: sources differ in rank");
    for (size_t d = 0; d < s.size(); ++d)
      if ((int64_t(d) != axis || interleave) && s[d] != first[d]) throw Error("concat: sources differ in shape");
  }
  const int64_t outer = shape_numel(Shape(first.begin(), first.begin() + axis));
  const int64_t inner = shape_numel(Shape(first.begin() + axis + 1, first.end()));
  if (interleave) {
    const size_t row = size_t(inner) * elem_size;
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < first[size_t(axis)]; ++j)
        for (const void* s : srcs) {
          std::memcpy(out, static_cast<const uint8_t*>(s) + size_t(o * first[size_t(axis)] + j) * row, row);
          out += row;
        }
    return;
  }
  // Each source is one strided block of the output: [outer, its part of the
  // axis · inner] at an offset, rows the whole axis apart (short parts, such
  // as RoPE's pairs, become one strided run instead of a memcpy per part).
  int64_t total = 0;
  for (const Shape& s : shapes) total += s[size_t(axis)];
  int64_t offset = 0;
  for (size_t k = 0; k < srcs.size(); ++k) {
    const int64_t part = shapes[k][size_t(axis)] * inner;
    const int64_t dims[2] = {outer, part}, ss[2] = {part, 1}, ds[2] = {total * inner, 1};
    strided_copy(srcs[k], static_cast<uint8_t*>(dst) + size_t(offset) * elem_size, 2, dims, ss, ds, int(elem_size));
    offset += part;
  }
}

void convert(const void* src, DType from, int64_t n, void* dst, DType to) {
  if (from == to) {
    std::memcpy(dst, src, size_t(n) * dtype_size(from));
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_double(dst, to, size_t(i), load_as_double(src, from, size_t(i)));
}

}  // namespace milrt::kernels
