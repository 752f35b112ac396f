// Weight blobs (read_blob, what load_blobs does for each BLOBFILE literal
// after mapping the file): a declared dtype, shape and offset, and the file's
// bytes. Input: byte 0 the dtype, byte 1 the rank (mod 5), one byte per dim,
// two bytes of offset (little-endian), then the file. A value read without
// error is read whole (so ASan sees any view past the end) and, where the
// dtype has a blob code, must write with BlobWriter and read back equal.
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_util.h"
#include "milrt/blob.h"
#include "milrt/error.h"

namespace {
// The file, in its own allocation of exactly its size (ASan's red zone
// right after it), like a mapping of the file.
class Bytes final : public milrt::Buffer {
 public:
  Bytes(const uint8_t* p, size_t n) : b_(new uint8_t[n ? n : 1]), n_(n) { if (n) std::memcpy(b_.get(), p, n); }
  const uint8_t* data() const override { return b_.get(); }
  uint8_t* mutable_data() override { return nullptr; }
  size_t size() const override { return n_; }
 private:
  std::unique_ptr<uint8_t[]> b_;
  size_t n_;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto dtype = milrt::DType(data[0] % (uint8_t(milrt::DType::String) + 1));
  const size_t rank = data[1] % 5;
  if (size < 2 + rank + 2) return 0;
  milrt::Shape shape;
  for (size_t i = 0; i < rank; ++i) shape.push_back(data[2 + i]);
  const uint64_t offset = data[2 + rank] | uint64_t(data[3 + rank]) << 8;
  const size_t head = 4 + rank;
  auto file = std::make_shared<Bytes>(data + head, size - head);
  milrt::Tensor t;
  try {
    t = milrt::read_blob(file, offset, dtype, shape, "fuzz");
  } catch (const milrt::Error&) {
    return 0;
  }
  if (t.dtype() != dtype || t.shape() != shape) milrt_fuzz::finding("read_blob returned another type");
  uint8_t sum = 0;
  for (size_t i = 0; i < t.nbytes(); ++i) sum = uint8_t(sum + static_cast<const uint8_t*>(t.data())[i]);
  asm volatile("" : : "r"(sum));  // the loop stays
  if (milrt::blob_dtype_code(dtype) < 0) return 0;
  milrt::BlobWriter w;
  const uint64_t at = w.add(t);
  auto again = std::make_shared<Bytes>(w.bytes().data(), w.bytes().size());
  if (!milrt::read_blob(again, at, dtype, shape, "again").same_bytes(t))
    milrt_fuzz::finding("a blob written by BlobWriter reads back different");
  return 0;
}
