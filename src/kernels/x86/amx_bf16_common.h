// Pieces shared by the AMX and AVX-512 kernel files (kernels/x86/ only):
// the tile configuration every AMX kernel loads, and fp32 -> bf16 rounding
// of 16 lanes (the integer form of f32_to_bf16_bits: nearest-even, NaN kept
// quiet, subnormals rounded like any value, which vcvtneps2bf16 would flush).
// The rounding carries its own target attribute, so a caller compiled for a
// wider target (AMX) may inline it.
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

// GCC 12 reports the _mm512_undefined_* inside its own intrinsics as
// maybe-uninitialized once they are inlined into target-attribute functions
// (the files including this one are all such files).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace milrt::kernels::x86 {

// LDTILECFG's 64-byte operand (palette 1): every tile 16 rows × 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
inline constexpr TileConfig kTileConfig{};

// bf16 bits in the low half of each 32-bit lane of x's fp32 bits.
__attribute__((target("avx512f"))) inline __m512i bf16_lanes(__m512i x) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(nan, rounded, quiet_nan);
}

}  // namespace milrt::kernels::x86
#endif
