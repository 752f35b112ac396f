// See kernels/x86/peak_loops.h.
#if defined(__x86_64__)
#include "kernels/x86/peak_loops.h"

#include <immintrin.h>

#include <cstring>

namespace milrt::kernels::x86 {

__attribute__((target("avx512f"))) double loop_avx512_fma(long calls) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_storeu_ps(out, acc[0]);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 16 * kChains * kRepeats * double(calls);
}

__attribute__((target("avx512f,avx512bf16"))) double loop_avx512_bf16(long calls) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512i x = _mm512_set1_epi16(0x3f80), y = _mm512_set1_epi16(0x3380);  // 1.0, ~6e-8
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)x, (__m512bh)y);
    }
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_storeu_ps(out, acc[0]);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 32 * kChains * kRepeats * double(calls);
}

// AMX: four independent 16x16 fp32 accumulator tiles, each fed by two of
// four bf16 operand tiles (the GEMM kernel's 32x32 register tile), so
// consecutive tdpbf16ps never wait on each other. Tiles hold zeros: the
// instruction's speed does not depend on the data. 16·16·32 multiply-adds
// per instruction. cpu_features() has asked Linux for tile permission.
__attribute__((target("amx-tile,amx-bf16"))) double loop_amx_bf16(long calls) {
  // LDTILECFG's operand, static: GCC does not see the instruction read a
  // local array and drops the stores that fill one.
  alignas(64) static const unsigned char cfg[64] = {
      1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,       // palette 1
      64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,  // tiles 0-7: 64 bytes per row
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0};  // 16 rows each
  _tile_loadconfig(cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  constexpr int kTileRepeats = kRepeats / 4;
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kTileRepeats; ++r) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  _tile_release();
  return 2.0 * 16 * 16 * 32 * 4 * kTileRepeats * double(calls);
}

// 12 chains, not kChains: AVX2 has 16 ymm registers, and 16 accumulators
// plus the two operands would spill, halving the measured peak. 12 still
// covers two FMA pipes of latency 4-5.
constexpr int kChainsAvx2 = 12;

__attribute__((target("avx2,fma"))) double loop_avx2_fma(long calls) {
  __m256 acc[kChainsAvx2];
  for (int i = 0; i < kChainsAvx2; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
  for (long c = 0; c < calls; ++c)
    for (int r = 0; r < kRepeats; ++r) {
#pragma GCC unroll 12
      for (int i = 0; i < kChainsAvx2; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
  float out[8];
  for (int i = 1; i < kChainsAvx2; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  _mm256_storeu_ps(out, acc[0]);
  volatile float sink = out[0];
  (void)sink;
  return 2.0 * 8 * kChainsAvx2 * kRepeats * double(calls);
}

namespace {

// The bandwidth loops, written once for both widths in GCC's vector
// extension: inlined into each ISA's entry point below, they compile to that
// ISA's registers (16 fp32 lanes in zmm, 8 in ymm). Four accumulators keep
// the adds off the critical path.
// (Spelt per width: GCC drops a vector_size that depends on a template parameter.)
template <int Lanes> struct VecOf;
template <> struct VecOf<16> { typedef float type __attribute__((vector_size(64))); };
template <> struct VecOf<8> { typedef float type __attribute__((vector_size(32))); };
template <int Lanes>
using Vec = typename VecOf<Lanes>::type;

// v = the Lanes floats at p, unaligned: memcpy compiles to one vector load.
// (By reference: a vector returned by value warns of ABI changes here.)
template <int Lanes>
[[gnu::always_inline]] inline void load(Vec<Lanes>& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

template <int Lanes>
[[gnu::always_inline]] inline float sum_lanes(const float* x, size_t n) {
  Vec<Lanes> s[4] = {}, v;
  for (size_t i = 0; i < n; i += 4 * Lanes)
    for (int j = 0; j < 4; ++j) {
      load<Lanes>(v, x + i + j * Lanes);
      s[j] += v;
    }
  const Vec<Lanes> t = (s[0] + s[1]) + (s[2] + s[3]);
  return t[0];
}

template <int Lanes>
[[gnu::always_inline]] inline void update_lanes(float* x, const float* y, size_t n) {
  Vec<Lanes> a, b;
  for (size_t i = 0; i < n; i += Lanes) {
    load<Lanes>(a, x + i);
    load<Lanes>(b, y + i);
    a = a * 0.5f + b;
    std::memcpy(x + i, &a, sizeof a);
  }
}

}  // namespace

__attribute__((target("avx512f"))) float sum_avx512(const float* x, size_t n) { return sum_lanes<16>(x, n); }
__attribute__((target("avx2"))) float sum_avx2(const float* x, size_t n) { return sum_lanes<8>(x, n); }
__attribute__((target("avx512f"))) void update_avx512(float* x, const float* y, size_t n) {
  update_lanes<16>(x, y, n);
}
__attribute__((target("avx2,fma"))) void update_avx2(float* x, const float* y, size_t n) { update_lanes<8>(x, y, n); }

}  // namespace milrt::kernels::x86
#endif
