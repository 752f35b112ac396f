// Element types of MIL tensors and the scalar conversions every layer needs.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace milrt {

// Every dtype MIL text can name. Sub-byte types (Int4, UInt1..UInt6) are held
// unpacked in memory, one byte per element; packing exists only in blob files.
enum class DType : uint8_t {
  Bool, Int4, Int8, Int16, Int32, Int64,
  UInt1, UInt2, UInt3, UInt4, UInt6, UInt8, UInt16, UInt32, UInt64,
  FP8E4M3, FP8E5M2, FP16, BF16, FP32, FP64, String,
};

std::string_view dtype_name(DType t);                    // "fp16", "uint4", ...
std::optional<DType> dtype_from_name(std::string_view s);
size_t dtype_size(DType t);   // bytes per element in memory (1 for sub-byte types, 0 for String)
int dtype_bits(DType t);      // bits per element in packed storage (4 for int4, 3 for uint3, ...)
bool dtype_is_float(DType t);
bool dtype_is_int(DType t);   // signed or unsigned integer, not bool
bool dtype_is_signed(DType t);
// Inclusive value range of an integer dtype (as double; int64/uint64 are approximate).
double dtype_min(DType t);
double dtype_max(DType t);

// IEEE half and bfloat16 conversions, round-to-nearest-even; a NaN converts
// to a quiet NaN keeping its payload's top bits (as F16C and AArch64's FCVT).
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);
float fp8e4m3_to_f32(uint8_t v);
float fp8e5m2_to_f32(uint8_t v);
uint8_t f32_to_fp8e4m3(float f);
uint8_t f32_to_fp8e5m2(float f);

// Reads element i of a buffer of dtype t as double / writes a double into it,
// rounding to the dtype (floats: nearest-even; integers: truncation toward zero
// then saturation, as a cast does; bool: non-zero).
double load_as_double(const void* data, DType t, size_t i);
void store_from_double(void* data, DType t, size_t i, double v);

}  // namespace milrt
