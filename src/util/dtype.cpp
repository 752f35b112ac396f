#include "milrt/dtype.h"

#include <cmath>
#include <limits>

namespace milrt {
namespace {
struct Info { DType t; const char* name; size_t size; int bits; };
constexpr Info kInfo[] = {
    {DType::Bool, "bool", 1, 8},        {DType::Int4, "int4", 1, 4},
    {DType::Int8, "int8", 1, 8},        {DType::Int16, "int16", 2, 16},
    {DType::Int32, "int32", 4, 32},     {DType::Int64, "int64", 8, 64},
    {DType::UInt1, "uint1", 1, 1},      {DType::UInt2, "uint2", 1, 2},
    {DType::UInt3, "uint3", 1, 3},      {DType::UInt4, "uint4", 1, 4},
    {DType::UInt6, "uint6", 1, 6},      {DType::UInt8, "uint8", 1, 8},
    {DType::UInt16, "uint16", 2, 16},   {DType::UInt32, "uint32", 4, 32},
    {DType::UInt64, "uint64", 8, 64},   {DType::FP8E4M3, "fp8e4m3fn", 1, 8},
    {DType::FP8E5M2, "fp8e5m2", 1, 8},  {DType::FP16, "fp16", 2, 16},
    {DType::BF16, "bf16", 2, 16},       {DType::FP32, "fp32", 4, 32},
    {DType::FP64, "fp64", 8, 64},       {DType::String, "string", 0, 0},
};
const Info& info(DType t) { return kInfo[size_t(t)]; }

template <class T> T saturate(double v) {
  if (std::isnan(v)) return T(0);
  v = std::trunc(v);
  if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return T(v);
}
int64_t saturate_range(double v, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return 0;
  v = std::trunc(v);
  if (v < double(lo)) return lo;
  if (v > double(hi)) return hi;
  return int64_t(v);
}
uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Generic minifloat decode: 1 sign bit, `eb` exponent bits, `mb` mantissa bits.
float minifloat_to_f32(uint32_t v, int eb, int mb, bool e4m3fn) {
  uint32_t sign = (v >> (eb + mb)) & 1, exp = (v >> mb) & ((1u << eb) - 1), man = v & ((1u << mb) - 1);
  int bias = (1 << (eb - 1)) - 1;
  float r;
  if (e4m3fn && exp == 15 && man == 7) r = std::numeric_limits<float>::quiet_NaN();
  else if (!e4m3fn && exp == uint32_t((1 << eb) - 1)) r = man ? std::numeric_limits<float>::quiet_NaN() : INFINITY;
  else if (exp == 0) r = std::ldexp(float(man), 1 - bias - mb);
  else r = std::ldexp(float(man | (1u << mb)), int(exp) - bias - mb);
  return sign ? -r : r;
}
// Encodes by searching the nearest representable value (ties to even code):
// slow but obviously right, and fp8 encoding is never on a hot path.
uint8_t f32_to_minifloat(float f, int eb, int mb, bool e4m3fn) {
  if (std::isnan(f)) return e4m3fn ? 0x7f : 0x7e;
  uint8_t best = 0; float bestd = INFINITY;
  for (int code = 0; code < 256; ++code) {
    float v = minifloat_to_f32(code, eb, mb, e4m3fn);
    if (std::isnan(v)) continue;
    if (std::isinf(v) && !std::isinf(f)) continue;
    float d = std::fabs(v - f);
    if (std::isinf(f) && std::isinf(v) && (v > 0) == (f > 0)) d = 0;
    if (d < bestd || (d == bestd && (code & 1) == 0 && (best & 1) == 1)) { best = uint8_t(code); bestd = d; }
  }
  if (std::isinf(bestd)) best = f > 0 ? (e4m3fn ? 0x7e : 0x7b) : (e4m3fn ? 0xfe : 0xfb);  // saturate
  return best;
}
}  // namespace

// Rounds a double to a 16-bit float format correctly. Going through float
// alone double-rounds values near a tie, so the float-based guess is checked
// against its two neighbours in the double domain (ties to the even code).
static uint16_t nearest16(double v, uint16_t (*enc)(float), float (*dec)(uint16_t)) {
  uint16_t h = enc(float(v));
  if (std::isnan(v) || std::isinf(v) || (h & 0x7fff) == 0x7c00 || (h & 0x7fff) >= 0x7f80) return h;
  uint16_t best = h;
  double bestd = std::fabs(double(dec(h)) - v);
  for (int delta : {-1, 1}) {
    uint16_t mag = uint16_t((h & 0x7fff) + delta);
    if ((h & 0x7fff) == 0 && delta < 0) continue;
    uint16_t c = uint16_t((h & 0x8000) | mag);
    float cv = dec(c);
    if (std::isinf(cv) || std::isnan(cv)) continue;
    double d = std::fabs(double(cv) - v);
    if (d < bestd || (d == bestd && (c & 1) == 0)) { best = c; bestd = d; }
  }
  return best;
}

std::string_view dtype_name(DType t) { return info(t).name; }
std::optional<DType> dtype_from_name(std::string_view s) {
  for (const auto& i : kInfo) if (s == i.name) return i.t;
  if (s == "fp8e4m3") return DType::FP8E4M3;
  return std::nullopt;
}
size_t dtype_size(DType t) { return info(t).size; }
int dtype_bits(DType t) { return info(t).bits; }
bool dtype_is_float(DType t) {
  return t == DType::FP16 || t == DType::BF16 || t == DType::FP32 || t == DType::FP64 ||
         t == DType::FP8E4M3 || t == DType::FP8E5M2;
}
bool dtype_is_int(DType t) { return !dtype_is_float(t) && t != DType::Bool && t != DType::String; }
bool dtype_is_signed(DType t) {
  return t == DType::Int4 || t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64;
}
double dtype_min(DType t) {
  switch (t) {
    case DType::Int4: return -8; case DType::Int8: return -128; case DType::Int16: return -32768;
    case DType::Int32: return -2147483648.0; case DType::Int64: return -9223372036854775808.0;
    case DType::Bool: return 0;
    default: return dtype_is_int(t) ? 0 : -INFINITY;
  }
}
double dtype_max(DType t) {
  switch (t) {
    case DType::Bool: return 1; case DType::Int4: return 7; case DType::Int8: return 127;
    case DType::Int16: return 32767; case DType::Int32: return 2147483647.0;
    case DType::Int64: return 9223372036854775807.0;
    case DType::UInt1: return 1; case DType::UInt2: return 3; case DType::UInt3: return 7;
    case DType::UInt4: return 15; case DType::UInt6: return 63; case DType::UInt8: return 255;
    case DType::UInt16: return 65535; case DType::UInt32: return 4294967295.0;
    case DType::UInt64: return 18446744073709551615.0;
    default: return INFINITY;
  }
}

uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffff;
  // NaN: quiet, the payload's top 10 bits kept (IEEE 754's conversion, as
  // F16C's VCVTPS2PH and AArch64's FCVT do).
  if (absx > 0x7f800000) return uint16_t(sign | 0x7e00 | ((absx & 0x7fffff) >> 13));
  if (absx >= 0x477ff000) return uint16_t(sign | 0x7c00);             // overflow -> inf (rounds past 65504)
  if (absx < 0x38800000) {                                             // subnormal or zero in half
    // value = absx as float; half subnormal unit = 2^-24
    float a = bits_f32(absx);
    float scaled = a * 16777216.0f;                                    // exact in float
    uint32_t m = uint32_t(std::nearbyint(scaled));                     // ties-to-even (default FE mode)
    return uint16_t(sign | m);
  }
  uint32_t exp = ((absx >> 23) - 127 + 15);
  uint32_t man = absx & 0x7fffff;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}
float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {
    float r = std::ldexp(float(man), -24);
    return sign ? -r : r;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000 | (man ? 0x400000u : 0u) | (man << 13));  // a NaN comes back quiet
  return bits_f32(sign | ((exp - 15 + 127) << 23) | (man << 13));
}
uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);
  uint32_t lsb = (x >> 16) & 1;
  x += 0x7fff + lsb;
  return uint16_t(x >> 16);
}
float bf16_to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }
float fp8e4m3_to_f32(uint8_t v) { return minifloat_to_f32(v, 4, 3, true); }
float fp8e5m2_to_f32(uint8_t v) { return minifloat_to_f32(v, 5, 2, false); }
uint8_t f32_to_fp8e4m3(float f) { return f32_to_minifloat(f, 4, 3, true); }
uint8_t f32_to_fp8e5m2(float f) { return f32_to_minifloat(f, 5, 2, false); }

double load_as_double(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::Bool: return static_cast<const uint8_t*>(data)[i] ? 1.0 : 0.0;
    case DType::Int4: case DType::Int8: return static_cast<const int8_t*>(data)[i];
    case DType::Int16: return static_cast<const int16_t*>(data)[i];
    case DType::Int32: return static_cast<const int32_t*>(data)[i];
    case DType::Int64: return double(static_cast<const int64_t*>(data)[i]);
    case DType::UInt1: case DType::UInt2: case DType::UInt3: case DType::UInt4:
    case DType::UInt6: case DType::UInt8: return static_cast<const uint8_t*>(data)[i];
    case DType::UInt16: return static_cast<const uint16_t*>(data)[i];
    case DType::UInt32: return static_cast<const uint32_t*>(data)[i];
    case DType::UInt64: return double(static_cast<const uint64_t*>(data)[i]);
    case DType::FP8E4M3: return fp8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::FP8E5M2: return fp8e5m2_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::FP16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::FP32: return static_cast<const float*>(data)[i];
    case DType::FP64: return static_cast<const double*>(data)[i];
    case DType::String: return 0;
  }
  return 0;
}

void store_from_double(void* data, DType t, size_t i, double v) {
  switch (t) {
    case DType::Bool: static_cast<uint8_t*>(data)[i] = v != 0; return;
    case DType::Int4: static_cast<int8_t*>(data)[i] = int8_t(saturate_range(v, -8, 7)); return;
    case DType::Int8: static_cast<int8_t*>(data)[i] = saturate<int8_t>(v); return;
    case DType::Int16: static_cast<int16_t*>(data)[i] = saturate<int16_t>(v); return;
    case DType::Int32: static_cast<int32_t*>(data)[i] = saturate<int32_t>(v); return;
    case DType::Int64: static_cast<int64_t*>(data)[i] = saturate<int64_t>(v); return;
    case DType::UInt1: case DType::UInt2: case DType::UInt3: case DType::UInt4: case DType::UInt6:
      static_cast<uint8_t*>(data)[i] = uint8_t(saturate_range(v, 0, int64_t(dtype_max(t)))); return;
    case DType::UInt8: static_cast<uint8_t*>(data)[i] = saturate<uint8_t>(v); return;
    case DType::UInt16: static_cast<uint16_t*>(data)[i] = saturate<uint16_t>(v); return;
    case DType::UInt32: static_cast<uint32_t*>(data)[i] = saturate<uint32_t>(v); return;
    case DType::UInt64: static_cast<uint64_t*>(data)[i] = saturate<uint64_t>(v); return;
    case DType::FP8E4M3: static_cast<uint8_t*>(data)[i] = f32_to_fp8e4m3(float(v)); return;
    case DType::FP8E5M2: static_cast<uint8_t*>(data)[i] = f32_to_fp8e5m2(float(v)); return;
    case DType::FP16: static_cast<uint16_t*>(data)[i] = nearest16(v, f32_to_f16, f16_to_f32); return;
    case DType::BF16: static_cast<uint16_t*>(data)[i] = nearest16(v, f32_to_bf16, bf16_to_f32); return;
    case DType::FP32: static_cast<float*>(data)[i] = float(v); return;
    case DType::FP64: static_cast<double*>(data)[i] = v; return;
    case DType::String: return;
  }
}

}  // namespace milrt
