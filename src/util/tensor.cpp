#include "milrt/tensor.h"

#include <cstring>

#include "milrt/error.h"

namespace milrt {
namespace {
class OwnedBuffer final : public Buffer {
 public:
  explicit OwnedBuffer(size_t n) : bytes_(n ? n : 1, 0), n_(n) {}
  const uint8_t* data() const override { return bytes_.data(); }
  uint8_t* mutable_data() override { return bytes_.data(); }
  size_t size() const override { return n_; }
 private:
  std::vector<uint8_t> bytes_;
  size_t n_;
};
}  // namespace

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += s[i] < 0 ? "?" : std::to_string(s[i]);
  }
  return r + "]";
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  int64_t n = 1;
  for (int64_t d : shape_) {
    if (d < 0) throw Error("tensor shape " + shape_str(shape_) + " has a negative or unknown dim");
    if (d != 0 && n > kMaxElements / d) throw Error("tensor shape " + shape_str(shape_) + " is too large");
    n *= d;
  }
  if (n > kMaxElements) throw Error("tensor shape " + shape_str(shape_) + " is too large");
  if (dtype == DType::String) { strings_.assign(size_t(n), ""); return; }
  buf_ = std::make_shared<OwnedBuffer>(size_t(n) * dtype_size(dtype));
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<Buffer> buf, size_t offset)
    : dtype_(dtype), shape_(std::move(shape)), buf_(std::move(buf)), offset_(offset) {
  if (offset_ + nbytes() > buf_->size()) throw Error("tensor view exceeds its buffer");
}

Tensor Tensor::from_strings(Shape shape, std::vector<std::string> values) {
  Tensor t;
  t.dtype_ = DType::String;
  t.shape_ = std::move(shape);
  t.strings_ = std::move(values);
  return t;
}

Tensor Tensor::scalar(DType dtype, double v) {
  Tensor t(dtype, {});
  t.set(0, v);
  return t;
}

const void* Tensor::data() const { return buf_ ? buf_->data() + offset_ : nullptr; }

void* Tensor::mutable_data() {
  if (!buf_) return nullptr;
  uint8_t* p = buf_->mutable_data();
  if (!p) throw Error("tensor is read-only (memory-mapped); clone() it first");
  return p + offset_;
}

Tensor Tensor::clone() const {
  if (dtype_ == DType::String) return from_strings(shape_, strings_);
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.mutable_data(), data(), nbytes());
  return t;
}

Tensor Tensor::reshaped(Shape s) const {
  if (shape_numel(s) != numel())
    throw Error("cannot reshape " + shape_str(shape_) + " to " + shape_str(s));
  Tensor t = *this;
  t.shape_ = std::move(s);
  return t;
}

Tensor Tensor::cast(DType to) const {
  if (to == dtype_) return *this;
  Tensor t(to, shape_);
  for (int64_t i = 0; i < numel(); ++i) t.set(size_t(i), at(size_t(i)));
  return t;
}

bool Tensor::same_bytes(const Tensor& o) const {
  if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
  if (dtype_ == DType::String) return strings_ == o.strings_;
  return nbytes() == 0 || std::memcmp(data(), o.data(), nbytes()) == 0;
}

}  // namespace milrt
