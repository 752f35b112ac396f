// Pieces shared by the AMX and AVX-512 kernel files (kernels/x86/ only):
// the tile configuration every AMX kernel loads, a 16×16 transpose of 32-bit
// lanes, and fp32 -> bf16 rounding of 16 lanes (the integer form of
// f32_to_bf16_bits: nearest-even, NaN kept quiet, subnormals rounded like any
// value, which vcvtneps2bf16 would flush).
// The functions carry their own target attribute (avx512f), so a caller
// compiled for a wider target (AMX) may inline them.
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

// Transposes the 16×16 fp32 block r[0..15] (rows) in place: r[c] becomes
// column c. Two unpack rounds gather columns within 128-bit lanes, two lane
// shuffles across the four row groups.
__attribute__((target("avx512f"))) inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + k], lane L: column 4L + k of rows 4i..4i+3
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  __m512 o[16];
  for (int k = 0; k < 4; ++k) {
    const __m512 x0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88), x1 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
    const __m512 y0 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88), y1 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
    o[k] = _mm512_shuffle_f32x4(x0, y0, 0x88);
    o[8 + k] = _mm512_shuffle_f32x4(x0, y0, 0xdd);
    o[4 + k] = _mm512_shuffle_f32x4(x1, y1, 0x88);
    o[12 + k] = _mm512_shuffle_f32x4(x1, y1, 0xdd);
  }
  for (int k = 0; k < 16; ++k) r[k] = o[k];
}

}  // namespace milrt::kernels::x86
#endif
