#include "convert.h"

#include <cstring>
#include <memory>

#include "milrt/error.h"

namespace milrt::py {

std::optional<DType> dtype_of(const pb::dtype& d) {
  const char kind = d.kind();
  const auto size = d.itemsize();
  if (kind == 'f' && size == 2) return DType::FP16;
  if (kind == 'f' && size == 4) return DType::FP32;
  if (kind == 'f' && size == 8) return DType::FP64;
  if (kind == 'b' && size == 1) return DType::Bool;
  if (kind == 'i' || kind == 'u') {
    const bool u = kind == 'u';
    switch (size) {
      case 1: return u ? DType::UInt8 : DType::Int8;
      case 2: return u ? DType::UInt16 : DType::Int16;
      case 4: return u ? DType::UInt32 : DType::Int32;
      case 8: return u ? DType::UInt64 : DType::Int64;
    }
  }
  return std::nullopt;
}

DType dtype_of(const pb::dtype& d, const std::string& what) {
  if (auto dt = dtype_of(d)) return *dt;
  throw Error("error: " + what + ": NumPy dtype " + std::string(pb::str(d)) +
              " is not a tensor dtype (floats, integers and bool are)");
}

pb::dtype numpy_dtype(DType d) {
  switch (d) {
    case DType::FP16: return pb::dtype("float16");
    case DType::FP64: return pb::dtype::of<double>();
    case DType::BF16: case DType::FP8E4M3: case DType::FP8E5M2: case DType::FP32: return pb::dtype::of<float>();
    case DType::Bool: return pb::dtype::of<bool>();
    case DType::Int4: case DType::Int8: return pb::dtype::of<int8_t>();
    case DType::Int16: return pb::dtype::of<int16_t>();
    case DType::Int32: return pb::dtype::of<int32_t>();
    case DType::Int64: return pb::dtype::of<int64_t>();
    case DType::UInt16: return pb::dtype::of<uint16_t>();
    case DType::UInt32: return pb::dtype::of<uint32_t>();
    case DType::UInt64: return pb::dtype::of<uint64_t>();
    case DType::String: break;
    default: return pb::dtype::of<uint8_t>();  // uint1..uint8, one byte per element
  }
  throw Error("error: string tensors have no NumPy array form here");
}

void convert(const void* src, DType from, int64_t n, DType declared, void* dst, DType to) {
  if (from == to && (declared == from || (declared == DType::FP64 && from == DType::FP32))) {
    std::memcpy(dst, src, size_t(n) * dtype_size(to));
    return;
  }
  // The common cases of real models get plain loops; the rest go through double.
  if (to == DType::FP32 && declared == DType::FP16 && (from == DType::FP32 || from == DType::FP16)) {
    auto* d = static_cast<float*>(dst);
    if (from == DType::FP16)
      for (int64_t i = 0; i < n; ++i) d[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
    else
      for (int64_t i = 0; i < n; ++i) d[i] = f16_to_f32(f32_to_f16(static_cast<const float*>(src)[i]));
    return;
  }
  if (to == DType::FP16 && from == DType::FP32 && declared == DType::FP16) {
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(static_cast<const float*>(src)[i]);
    return;
  }
  if (to == DType::FP32 && declared == DType::FP32 && from == DType::FP64) {
    auto* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = float(static_cast<const double*>(src)[i]);
    return;
  }
  alignas(8) uint8_t tmp[8];
  for (int64_t i = 0; i < n; ++i) {
    double v = load_as_double(src, from, size_t(i));
    if (declared != from && declared != to) {
      store_from_double(tmp, declared, 0, v);
      v = load_as_double(tmp, declared, 0);
    }
    store_from_double(dst, to, size_t(i), v);
  }
}

std::string shape_of(const pb::array& a) {
  Shape s(a.shape(), a.shape() + a.ndim());
  return shape_str(s);
}

bool same_shape(const pb::array& a, const Shape& shape) {
  if (size_t(a.ndim()) != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i)
    if (a.shape(pb::ssize_t(i)) != shape[i]) return false;
  return true;
}

Tensor to_tensor(const pb::array& given, const std::string& what) {
  DType dt = dtype_of(given.dtype(), what);
  auto a = pb::array::ensure(given, pb::array::c_style);
  Tensor t(dt, Shape(a.shape(), a.shape() + a.ndim()));
  if (t.nbytes()) std::memcpy(t.mutable_data(), a.data(), t.nbytes());
  return t;
}

pb::array to_array(const Tensor& t) {
  pb::dtype nd = numpy_dtype(t.dtype());
  pb::array a(nd, std::vector<pb::ssize_t>(t.shape().begin(), t.shape().end()));
  if (t.numel()) {
    DType to = dtype_of(nd, "output");
    convert(t.data(), t.dtype(), t.numel(), t.dtype(), a.mutable_data(), to);
  }
  return a;
}

}  // namespace milrt::py
