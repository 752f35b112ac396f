#include "kernels/convert_rows.h"

#include <cstring>

#include "kernels/bf16_bits.h"
#include "kernels/cpu_features.h"
#include "milrt/dtype.h"

namespace milrt::kernels {

#if defined(__x86_64__)
void f32_to_bf16_row_avx512(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_row_avx512(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16_row_avx2(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_row_avx2(const uint16_t* src, float* dst, int64_t n);
void f32_row_pair_to_bf16_words_avx512(const float* r0, const float* r1, uint32_t* dst, int64_t n);
void f32_row_pair_to_bf16_words_avx2(const float* r0, const float* r1, uint32_t* dst, int64_t n);
void bf16_rows_to_pair_panel_avx512(const uint16_t* src, int64_t ld, int64_t width, int64_t K, int64_t nr, uint32_t* words);
void f16_to_f32_row_f16c(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_row_f16c(const float* src, uint16_t* dst, int64_t n);
#endif

void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  if (current_isa() >= Isa::avx2) return f16_to_f32_row_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
#if defined(__x86_64__)
  if (current_isa() >= Isa::avx2) return f32_to_f16_row_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
#if defined(__x86_64__)
  const Isa isa = current_isa();
  if (isa >= Isa::avx512) return f32_to_bf16_row_avx512(src, dst, n);
  if (isa == Isa::avx2) return f32_to_bf16_row_avx2(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16_bits(src[i]);
}

void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  const Isa isa = current_isa();
  if (isa >= Isa::avx512) return bf16_to_f32_row_avx512(src, dst, n);
  if (isa == Isa::avx2) return bf16_to_f32_row_avx2(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]);
}

void f32_row_pair_to_bf16_words(const float* r0, const float* r1, uint32_t* dst, int64_t n) {
#if defined(__x86_64__)
  const Isa isa = current_isa();
  if (isa >= Isa::avx512) return f32_row_pair_to_bf16_words_avx512(r0, r1, dst, n);
  if (isa == Isa::avx2) return f32_row_pair_to_bf16_words_avx2(r0, r1, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    dst[i] = uint32_t(f32_to_bf16_bits(r0[i])) | (r1 ? uint32_t(f32_to_bf16_bits(r1[i])) << 16 : 0u);
}

void bf16_rows_to_pair_panel(const uint16_t* src, int64_t ld, int64_t width, int64_t K, int64_t nr, uint32_t* words) {
#if defined(__x86_64__)
  if (current_isa() >= Isa::avx512 && nr % 16 == 0) return bf16_rows_to_pair_panel_avx512(src, ld, width, K, nr, words);
#endif
  const int64_t whole = K / 2, pairs = (K + 1) / 2;
  for (int64_t j = 0; j < nr; ++j) {
    const uint16_t* r = src + j * ld;
    for (int64_t q = 0; q < pairs; ++q) {
      uint32_t w = 0;
      if (j < width && q < whole) std::memcpy(&w, r + 2 * q, sizeof w);
      else if (j < width) w = r[2 * q];  // odd K: the high half is padding
      words[q * nr + j] = w;
    }
  }
}

}  // namespace milrt::kernels
