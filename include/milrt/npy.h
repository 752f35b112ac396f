// NumPy .npy files: milrt's interchange format for tensors.
#pragma once
#include <string>

#include "milrt/tensor.h"

namespace milrt {

// Reads a .npy file (format 1.0/2.0/3.0, little-endian, C order) of dtype
// fp16, fp32, fp64, int8, uint8, int16, uint16, int32, uint32, int64, uint64
// or bool. Throws milrt::Error with the path on anything malformed.
Tensor read_npy(const std::string& path);
Tensor parse_npy(const std::string& bytes, const std::string& path);

// Writes a tensor as .npy atomically (temp file, fsync, rename).
void write_npy(const std::string& path, const Tensor& t);
std::string serialize_npy(const Tensor& t);

// Writes bytes to `path` atomically: a temp file beside it, fsync, rename.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace milrt
