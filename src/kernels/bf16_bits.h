// bf16 <-> fp32 on raw bits, inline and branch-free so that conversion loops
// over whole rows vectorize (milrt::f32_to_bf16 in milrt/dtype.h is the
// out-of-line reference with the same rounding). Not for the ISA files
// (kernels/x86/): see the rule in gemm_micro.h.
#pragma once
#include <cstdint>
#include <cstring>

namespace milrt::kernels {

inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t x = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Nearest-even; a NaN stays a (quiet) NaN instead of rounding into inf.
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t rounded = uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  const uint16_t quiet_nan = uint16_t((x >> 16) | 0x40);
  return (x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

}  // namespace milrt::kernels
