// A dense, row-major tensor: dtype, shape and a shared byte buffer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "milrt/dtype.h"

namespace milrt {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);           // product of dims (1 for rank 0)
std::string shape_str(const Shape& s);         // "[1, 64, 1, 1]"

// Owns (or keeps alive, for memory-mapped blobs) the bytes of a tensor.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual const uint8_t* data() const = 0;
  virtual uint8_t* mutable_data() = 0;  // nullptr for read-only (mapped) buffers
  virtual size_t size() const = 0;
};

// Immutable-by-default tensor. Copies share the buffer; use clone() for a deep
// copy and mutable_data() only on tensors you created. String tensors keep
// their values in `strings` and have no bytes.
class Tensor {
 public:
  Tensor() = default;
  // Zero-filled tensor. Refuses element counts above `kMaxElements`.
  Tensor(DType dtype, Shape shape);
  // View onto an existing buffer (e.g. a memory-mapped blob) at byte `offset`.
  Tensor(DType dtype, Shape shape, std::shared_ptr<Buffer> buf, size_t offset);
  static Tensor from_strings(Shape shape, std::vector<std::string> values);
  static Tensor scalar(DType dtype, double v);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return int(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool empty() const { return !buf_ && strings_.empty(); }

  const void* data() const;
  void* mutable_data();
  template <class T> const T* ptr() const { return static_cast<const T*>(data()); }
  template <class T> T* mutable_ptr() { return static_cast<T*>(mutable_data()); }

  double at(size_t i) const { return load_as_double(data(), dtype_, i); }
  void set(size_t i, double v) { store_from_double(mutable_data(), dtype_, i, v); }
  const std::vector<std::string>& strings() const { return strings_; }

  Tensor clone() const;
  Tensor reshaped(Shape s) const;            // same bytes, new shape (numel must match)
  Tensor cast(DType to) const;               // element-wise conversion with rounding
  bool same_bytes(const Tensor& o) const;    // dtype, shape and contents identical

  static constexpr int64_t kMaxElements = int64_t(1) << 34;  // 16 Gi elements

 private:
  DType dtype_ = DType::FP32;
  Shape shape_;
  std::shared_ptr<Buffer> buf_;
  size_t offset_ = 0;
  std::vector<std::string> strings_;
};

}  // namespace milrt
