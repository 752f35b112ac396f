// Blob storage (weight.bin) reading and writing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "milrt/tensor.h"

namespace milrt {

// A read-only memory-mapped file. Empty files map to a zero-length buffer.
std::shared_ptr<Buffer> map_file(const std::string& path);

// Opens `rel` below the directory `root` for reading without ever leaving it:
// `rel` must be relative with no "." or ".." component, no component may be
// a symbolic link (each is opened with O_NOFOLLOW from its parent's
// descriptor, or the whole path with openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS where available), and the last must be a regular file
// (opened non-blocking, so a FIFO cannot stall the caller). Returns the
// descriptor (close-on-exec; the caller owns it); throws Error, one line
// naming `root`/`rel`, otherwise. `root` itself is opened as given.
// A path containing a NUL byte is refused too (the system would open the
// shorter path before it, not the one checked).
int open_beneath(const std::string& root, const std::string& rel);

// `path` with each NUL byte written as \0, for one-line error messages.
std::string path_for_message(const std::string& path);

// Memory-maps the regular file open on `fd` (read-only; the descriptor is
// closed, also on error). Map what open_beneath() returned, never the path
// again: the path may have changed since. `what` names the file in errors.
std::shared_ptr<Buffer> map_fd(int fd, const std::string& what);

// Blob storage v2 dtype codes (weight.bin metadata `dtype`).
int blob_dtype_code(DType t);                 // -1 if the dtype has no code
bool blob_dtype_from_code(uint32_t code, DType* out);

// Reads a tensor of `dtype` and `shape` from a mapped file at `offset`.
// If a valid v2 metadata record (sentinel 0xDEADBEEF) sits at `offset`, its
// dtype code must match `dtype` and its size must hold `shape`'s elements;
// otherwise the bytes at `offset` are taken as a raw packed array. Sub-byte
// types are unpacked LSB-first into one byte per element. Every offset and
// size is bounds-checked; `what` names the value in errors.
Tensor read_blob(const std::shared_ptr<Buffer>& file, uint64_t offset, DType dtype,
                 const Shape& shape, const std::string& what);

// Builds a blob storage v2 file in memory. add() returns the offset of the
// blob's metadata record (what BLOBFILE offset= must say).
class BlobWriter {
 public:
  BlobWriter();
  uint64_t add(const Tensor& t);
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  // Writes atomically (temp file, fsync, rename).
  void write(const std::string& path) const;
 private:
  std::vector<uint8_t> bytes_;
  uint32_t count_ = 0;
};

// Packs sub-byte values LSB-first (used by BlobWriter and tests).
std::vector<uint8_t> pack_bits(const Tensor& t);
// The inverse: `n` = shape's element count values of sub-byte type `t`,
// packed LSB-first at `src` (which must hold them all), one byte per element
// (int4 sign-extended), as blobs and .mlpackage constants store them.
Tensor unpack_bits(const uint8_t* src, DType t, const Shape& shape, int64_t n);

}  // namespace milrt
