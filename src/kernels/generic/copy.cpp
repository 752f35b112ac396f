#include "kernels/generic/copy.h"

#include <cstring>
#include <string>

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

void strided_copy(const void* src, void* dst, int rank, const int64_t* dims, const int64_t* ss, const int64_t* ds,
                  int bytes) {
  auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (rank == 0) { std::memcpy(d, s, size_t(bytes)); return; }
  for (int i = 0; i < rank; ++i) if (dims[i] == 0) return;
  int64_t idx[16] = {};
  int64_t so = 0, dof = 0;
  const int r = rank - 1;
  const bool unit = ss[r] == 1 && ds[r] == 1;
  while (true) {
    if (unit) {
      std::memcpy(d + dof * bytes, s + so * bytes, size_t(dims[r] * bytes));
    } else {
      for (int64_t i = 0; i < dims[r]; ++i)
        std::memcpy(d + (dof + i * ds[r]) * bytes, s + (so + i * ss[r]) * bytes, size_t(bytes));
    }
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
  const size_t row = size_t(inner) * elem_size;
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t o = 0; o < outer; ++o) {
    if (interleave) {
      for (int64_t j = 0; j < first[size_t(axis)]; ++j)
        for (const void* s : srcs) {
          std::memcpy(out, static_cast<const uint8_t*>(s) + size_t(o * first[size_t(axis)] + j) * row, row);
          out += row;
        }
      continue;
    }
    for (size_t k = 0; k < srcs.size(); ++k) {
      const size_t chunk = size_t(shapes[k][size_t(axis)]) * row;
      std::memcpy(out, static_cast<const uint8_t*>(srcs[k]) + size_t(o) * chunk, chunk);
      out += chunk;
    }
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
