// AVX-512 GEMM micro-kernels: fp32 FMA and bf16 pairs (vdpbf16ps), 14×32
// register tiles (28 zmm accumulators), with the epilogue fused into the
// store. Built with -mavx512f/bw/vl/dq/bf16 (CMakeLists.txt) and only run
// when cpu_features() allows (see the rule in gemm_micro.h). The fp32 tiles
// contain no bf16 instructions (only the *_bf16 tiles use those intrinsics),
// so kAvx512F32 also runs on AVX-512 CPUs without avx512_bf16.
#if defined(__x86_64__)
// GCC 12 flags its own `__Y = __Y` idiom in the _mm*_undefined_* intrinsics
// as maybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/gemm_micro.h"
#include "kernels/x86/simd_activation.h"

namespace milrt::kernels::detail {
namespace {

constexpr int kMr = 14, kNr = 32;

inline __m512 load16(const void* p, ElemType t) {
  switch (t) {
    case ElemType::f32: return _mm512_loadu_ps(p);
    case ElemType::f16: return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    case ElemType::bf16:
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
  }
  return _mm512_setzero_ps();
}

// Rounds to nearest-even like milrt::f32_to_bf16 (vcvtneps2bf16 would flush
// subnormals), NaN stays a quiet NaN.
inline __m256i to_bf16(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i hi = _mm512_srli_epi32(x, 16);
  __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1))));
  r = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

inline void store16(void* p, ElemType t, __m512 v) {
  switch (t) {
    case ElemType::f32: _mm512_storeu_ps(p, v); return;
    case ElemType::f16:
      _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return;
    case ElemType::bf16: _mm256_storeu_si256(static_cast<__m256i*>(p), to_bf16(v)); return;
  }
}

inline int elem_size(ElemType t) { return t == ElemType::f32 ? 4 : 2; }

// Adds earlier partial sums, then either saves the sums (more K blocks to
// come) or applies the epilogue and stores the tile. Always inlined, on the
// accumulators themselves (tile_*): the sums stay in registers.
template <int M>
[[gnu::always_inline]] inline void finish(__m512 (&c)[M][2], const MicroArgs& p) {
  if (p.load_acc)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < 2; ++j) c[i][j] = _mm512_add_ps(c[i][j], _mm512_loadu_ps(p.acc + i * p.ld_acc + 16 * j));
  if (!p.out) {
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < 2; ++j) _mm512_storeu_ps(p.acc + i * p.ld_acc + 16 * j, c[i][j]);
    return;
  }
  // A copy: the vector stores may alias anything (the storeu intrinsics'
  // types), which would reload every field from *p.out after each store.
  const TileStore o = *p.out;
  const __m512 alpha = _mm512_set1_ps(o.alpha);
  const int cs = elem_size(o.c_type), rs = elem_size(o.res_type);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < 2; ++j) {
      __m512 v = _mm512_mul_ps(c[i][j], alpha);
      if (o.bias) v = _mm512_add_ps(v, _mm512_loadu_ps(o.bias + 16 * j));
      v = activate(v, o.act);
      if (o.res) v = _mm512_add_ps(v, load16(static_cast<const char*>(o.res) + (i * o.ldr + 16 * j) * rs, o.res_type));
      store16(static_cast<char*>(o.c) + (i * o.ldc + 16 * j) * cs, o.c_type, v);
    }
}

// prefetcht1: into L2, not L1, where a tile's rows of C 4 KiB apart (N =
// 1024, 2048 fp32) would share one L1 set and evict each other. In asm: GCC
// deletes a loop of __builtin_prefetch calls as having no side effects.
inline void prefetch_l2(const void* p) { asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p))); }

// Starts loading the C tile (and the residual tile) that finish() will read
// and write: with K short (a weight gradient's 256 tokens, C += ... in place)
// the epilogue otherwise waited on each row's cache misses, a tenth to a
// fifth of the tile time. Issued before the k loop, whose thousands of
// cycles hide the latency. Three lines per row cover an unaligned 128 bytes.
template <int M>
inline void prefetch_out(const MicroArgs& p) {
  if (!p.out) return;
  const TileStore& o = *p.out;
  const int cs = elem_size(o.c_type) * kNr, rs = elem_size(o.res_type) * kNr;  // bytes per tile row
#pragma GCC unroll 1  // a loop, not M copies of it in each of the 42 tile functions
  for (int i = 0; i < M; ++i) {
    const char* c = static_cast<const char*>(o.c) + i * o.ldc * elem_size(o.c_type);
    prefetch_l2(c);
    prefetch_l2(c + cs - 1);
    if (cs > 64) prefetch_l2(c + 64);
    if (o.res && o.res != o.c) {
      const char* r = static_cast<const char*>(o.res) + i * o.ldr * elem_size(o.res_type);
      prefetch_l2(r);
      prefetch_l2(r + rs - 1);
      if (rs > 64) prefetch_l2(r + 64);
    }
  }
}

// Sums the U accumulator sets and finishes the tile. With one set, straight
// from the accumulators: a separate sum array cost a copy through the stack
// (GCC keeps it in memory) on every tile.
template <int M, int U>
[[gnu::always_inline]] inline void finish_sets(__m512 (&c)[U][M][2], const MicroArgs& p) {
  if constexpr (U == 1) {
    finish<M>(c[0], p);
  } else {
    __m512 sum[M][2];
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < 2; ++j) {
        sum[i][j] = c[0][i][j];
        for (int u = 1; u < U; ++u) sum[i][j] = _mm512_add_ps(sum[i][j], c[u][i][j]);
      }
    finish<M>(sum, p);
  }
}

// Tiles of 1..3 rows have too few accumulators to hide the FMA latency, so
// they split k over U independent accumulator sets.
template <int M>
constexpr int k_split() { return M == 1 ? 4 : M <= 3 ? 2 : 1; }

// One k step (or k pair) of the tile into accumulator set c.
template <int M, class Step>
inline void rank_update(__m512 (&c)[M][2], const __m512 b0, const __m512 b1, Step a_times) {
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
    c[i][0] = a_times(i, b0, c[i][0]);
    c[i][1] = a_times(i, b1, c[i][1]);
  }
}

template <int M>
void tile_f32(const MicroArgs& p) {
  constexpr int U = k_split<M>();
  prefetch_out<M>(p);
  __m512 c[U][M][2];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < M; ++i) c[u][i][0] = c[u][i][1] = _mm512_setzero_ps();
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  const int64_t lda = p.lda, ks = p.ksteps;
  auto step = [&](int u, int64_t k) {
    const float* bk = b + k * kNr;
    rank_update<M>(c[u], _mm512_loadu_ps(bk), _mm512_loadu_ps(bk + 16), [&](int i, __m512 bv, __m512 acc) {
      return _mm512_fmadd_ps(_mm512_set1_ps(a[i * lda + k]), bv, acc);
    });
  };
  int64_t k = 0;
  for (; k + U <= ks; k += U)
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) step(u, k + u);
  for (; k < ks; ++k) step(0, k);
  finish_sets<M, U>(c, p);
}

// PanelA: A in MR-row panels (KernelSet::micro_panel_a), else rows along k.
template <int M, bool PanelA>
void tile_bf16(const MicroArgs& p) {
  constexpr int U = k_split<M>();
  prefetch_out<M>(p);
  __m512 c[U][M][2];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < M; ++i) c[u][i][0] = c[u][i][1] = _mm512_setzero_ps();
  const uint16_t* a = static_cast<const uint16_t*>(p.a);
  const uint16_t* b = static_cast<const uint16_t*>(p.b);
  const int64_t lda = p.lda, ks = p.ksteps;
  auto step = [&](int u, int64_t kp) {
    const uint16_t* bk = b + kp * 2 * kNr;
    const __m512 b0 = _mm512_castsi512_ps(_mm512_loadu_si512(bk));
    const __m512 b1 = _mm512_castsi512_ps(_mm512_loadu_si512(bk + kNr));
    rank_update<M>(c[u], b0, b1, [&](int i, __m512 bv, __m512 acc) {
      int pair;
      __builtin_memcpy(&pair, PanelA ? a + 2 * (kp * kMr + i) : a + i * lda + 2 * kp, sizeof(pair));
      return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(pair), (__m512bh)_mm512_castps_si512(bv));
    });
  };
  int64_t k = 0;
  for (; k + U <= ks; k += U)
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) step(u, k + u);
  for (; k < ks; ++k) step(0, k);
  finish_sets<M, U>(c, p);
}

void micro_f32(const MicroArgs& p) {
  static constexpr MicroKernel kTiles[kMr] = {
      tile_f32<1>, tile_f32<2>, tile_f32<3>,  tile_f32<4>,  tile_f32<5>,  tile_f32<6>,  tile_f32<7>,
      tile_f32<8>, tile_f32<9>, tile_f32<10>, tile_f32<11>, tile_f32<12>, tile_f32<13>, tile_f32<14>};
  kTiles[p.m - 1](p);
}

template <bool PanelA>
void micro_bf16(const MicroArgs& p) {
  static constexpr MicroKernel kTiles[kMr] = {
      tile_bf16<1, PanelA>,  tile_bf16<2, PanelA>,  tile_bf16<3, PanelA>,  tile_bf16<4, PanelA>,
      tile_bf16<5, PanelA>,  tile_bf16<6, PanelA>,  tile_bf16<7, PanelA>,  tile_bf16<8, PanelA>,
      tile_bf16<9, PanelA>,  tile_bf16<10, PanelA>, tile_bf16<11, PanelA>, tile_bf16<12, PanelA>,
      tile_bf16<13, PanelA>, tile_bf16<14, PanelA>};
  kTiles[p.m - 1](p);
}

}  // namespace

// KC: the B panel (32 KiB fp32 at KC 256, 24 KiB bf16 at KC 384) and the A
// tile's KC slice share L1 (48 KiB on Zen 5, SPR); MC·KC of A stays in L2.
constinit const KernelSet kAvx512F32 = {"avx512-f32", PackFormat::f32, kMr, kNr, 256, 168, 512, micro_f32};
constinit const KernelSet kAvx512Bf16 = {"avx512-bf16", PackFormat::bf16_pairs, kMr, kNr, 384, 168, 512,
                                          micro_bf16<false>, 0, nullptr, nullptr, micro_bf16<true>};

}  // namespace milrt::kernels::detail
#endif
