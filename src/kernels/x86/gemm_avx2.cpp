// AVX2/FMA GEMM micro-kernel: fp32, 6×16 register tiles (12 ymm
// accumulators), epilogue fused into the store. Built with -mavx2 -mfma
// -mf16c (CMakeLists.txt) and only run when cpu_features() allows (see the
// rule in gemm_micro.h). bf16 math on this path is emulated by the driver
// (operands rounded to bf16 values while packed).
#if defined(__x86_64__)
// GCC 12 flags its own `__Y = __Y` idiom in the _mm*_undefined_* intrinsics
// as maybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/gemm_micro.h"
#include "kernels/x86/simd_activation.h"

namespace milrt::kernels::detail {
namespace {

constexpr int kMr = 6, kNr = 16;

inline __m256 load8(const void* p, ElemType t) {
  switch (t) {
    case ElemType::f32: return _mm256_loadu_ps(static_cast<const float*>(p));
    case ElemType::f16: return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    case ElemType::bf16:
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))), 16));
  }
  return _mm256_setzero_ps();
}

// Nearest-even like milrt::f32_to_bf16; NaN stays a quiet NaN.
inline __m128i to_bf16(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  __m256i r = _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1))));
  r = _mm256_srli_epi32(r, 16);
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r),
                                           _mm256_castsi256_ps(_mm256_or_si256(hi, _mm256_set1_epi32(0x40))), nan));
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

inline void store8(void* p, ElemType t, __m256 v) {
  switch (t) {
    case ElemType::f32: _mm256_storeu_ps(static_cast<float*>(p), v); return;
    case ElemType::f16:
      _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return;
    case ElemType::bf16: _mm_storeu_si128(static_cast<__m128i*>(p), to_bf16(v)); return;
  }
}

inline int elem_size(ElemType t) { return t == ElemType::f32 ? 4 : 2; }

template <int M>
inline void finish(__m256 (&c)[M][2], const MicroArgs& p) {
  if (p.load_acc)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < 2; ++j) c[i][j] = _mm256_add_ps(c[i][j], _mm256_loadu_ps(p.acc + i * p.ld_acc + 8 * j));
  if (!p.out) {
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < 2; ++j) _mm256_storeu_ps(p.acc + i * p.ld_acc + 8 * j, c[i][j]);
    return;
  }
  const TileStore& o = *p.out;
  const __m256 alpha = _mm256_set1_ps(o.alpha);
  const int cs = elem_size(o.c_type), rs = elem_size(o.res_type);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < 2; ++j) {
      __m256 v = _mm256_mul_ps(c[i][j], alpha);
      if (o.bias) v = _mm256_add_ps(v, _mm256_loadu_ps(o.bias + 8 * j));
      v = activate(v, o.act);
      if (o.res) v = _mm256_add_ps(v, load8(static_cast<const char*>(o.res) + (i * o.ldr + 8 * j) * rs, o.res_type));
      store8(static_cast<char*>(o.c) + (i * o.ldc + 8 * j) * cs, o.c_type, v);
    }
}

// Short tiles split k over U accumulator sets to hide the FMA latency.
template <int M>
constexpr int k_split() { return M == 1 ? 4 : M <= 3 ? 2 : 1; }

// One k step: c[i] += a[i·lda] · (b0, b1).
template <int M>
inline void rank_update(__m256 (&c)[M][2], const __m256 b0, const __m256 b1, const float* a, int64_t lda) {
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    const __m256 ai = _mm256_set1_ps(a[i * lda]);
    c[i][0] = _mm256_fmadd_ps(ai, b0, c[i][0]);
    c[i][1] = _mm256_fmadd_ps(ai, b1, c[i][1]);
  }
}

template <int M>
void tile_f32(const MicroArgs& p) {
  constexpr int U = k_split<M>();
  __m256 c[U][M][2];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < M; ++i) c[u][i][0] = c[u][i][1] = _mm256_setzero_ps();
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  const int64_t lda = p.lda, ks = p.ksteps;
  auto step = [&](int u, int64_t k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kNr), b1 = _mm256_loadu_ps(b + k * kNr + 8);
    rank_update<M>(c[u], b0, b1, a + k, lda);
  };
  int64_t k = 0;
  for (; k + U <= ks; k += U)
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) step(u, k + u);
  for (; k < ks; ++k) step(0, k);
  // A separate array: if c itself escaped into finish(), GCC would keep it in
  // memory and store every accumulator on each k step.
  __m256 sum[M][2];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < 2; ++j) {
      sum[i][j] = c[0][i][j];
      for (int u = 1; u < U; ++u) sum[i][j] = _mm256_add_ps(sum[i][j], c[u][i][j]);
    }
  finish<M>(sum, p);
}

void micro_f32(const MicroArgs& p) {
  static constexpr MicroKernel kTiles[kMr] = {tile_f32<1>, tile_f32<2>, tile_f32<3>,
                                              tile_f32<4>, tile_f32<5>, tile_f32<6>};
  kTiles[p.m - 1](p);
}

}  // namespace

constinit const KernelSet kAvx2F32 = {"avx2-f32", PackFormat::f32, kMr, kNr, 256, 144, 512, micro_f32};

}  // namespace milrt::kernels::detail
#endif
