// weight_gemm's AVX-512 loops (see kernels/weight_gemm.h): weight rows
// streamed once against up to four rows of A, and panel widening (the
// width-generic loops of x86/weight_rows.h on 16 lanes). Weights are
// widened in registers right after the load: fp16 with vcvtph2ps, bf16 by a
// 16-bit shift into an fp32 word (exact), int8 with vpmovsxbd + vcvtdq2ps
// (exact). With int8 activations, q8 rows are multiplied by the quantized A
// with vpdpbusd (AVX512-VNNI) instead, never widened; q4 rows stream through
// the same loops, 128 values a 64-byte load, their nibbles split in
// registers. Otherwise q4 rows are unpacked to int8 first
// (unpack_q4_avx512). Compiled through the target attribute (no special
// flags), so any inline code from shared headers this file instantiates
// stays baseline x86-64; only called when the avx512 path is usable
// (generic/weight_gemm.cpp), the VNNI loops only on a CPU with avx512_vnni.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "kernels/weight_gemm.h"

#define MILRT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define MILRT_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

// GCC 12 warns about its own _mm512_reduce_add_ps (an undefined passthrough operand).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define MILRT_WEIGHT_ROWS_TARGET MILRT_AVX512
#include "kernels/x86/weight_rows.h"

namespace milrt::kernels {
namespace {

// Elements k..k+15 of a row as fp32; lanes outside `m` are zero (not read).
template <WeightFormat F>
MILRT_AVX512 inline __m512 load16(const void* row, int64_t k, __mmask16 m) {
  if constexpr (F == WeightFormat::f32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::f16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + k));
  } else if constexpr (F == WeightFormat::bf16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  } else {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, static_cast<const int8_t*>(row) + k)));
  }
}

template <WeightFormat F>
MILRT_AVX512 inline __m512 load16(const void* row, int64_t k) {
  if constexpr (F == WeightFormat::f32) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::f16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k)));
  } else if constexpr (F == WeightFormat::bf16) {
    const __m512i h = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  } else {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row) + k))));
  }
}

// The width's operations for the loops of x86/weight_rows.h.
struct Avx512Lanes {
  using V = __m512;
  static constexpr int kWidth = 16;
  // Two accumulators per (row, A row): with 32 zmm there is room, and the
  // FMA chains are half as long.
  static constexpr int kAccs = 2;
  MILRT_AVX512 static V zero() { return _mm512_setzero_ps(); }
  MILRT_AVX512 static V set1(float x) { return _mm512_set1_ps(x); }
  MILRT_AVX512 static V add(V x, V y) { return _mm512_add_ps(x, y); }
  MILRT_AVX512 static V mul(V x, V y) { return _mm512_mul_ps(x, y); }
  MILRT_AVX512 static V fmadd(V x, V y, V z) { return _mm512_fmadd_ps(x, y, z); }
  MILRT_AVX512 static float reduce(V x) { return _mm512_reduce_add_ps(x); }
  MILRT_AVX512 static __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
  }
  MILRT_AVX512 static V load_a(const float* p) { return _mm512_loadu_ps(p); }
  MILRT_AVX512 static V load_a_tail(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
  template <WeightFormat F>
  MILRT_AVX512 static V load_w(const void* row, int64_t k) {
    return load16<F>(row, k);
  }
  template <WeightFormat F>
  MILRT_AVX512 static V load_w_tail(const void* row, int64_t k, int64_t, __mmask16 m) {
    return load16<F>(row, k, m);
  }
  MILRT_AVX512 static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
  MILRT_AVX512 static void store_tail(float* p, __mmask16 m, V x) { _mm512_mask_storeu_ps(p, m, x); }
};

// ---- int8 activations (vpdpbusd) -----------------------------------------------
//
// A row's blocks go in groups of 16. Each chunk of the row (64 q8 values, or
// 128 q4 values) gives, per A row, 16 int32 lanes of products. vpdpbusd
// multiplies unsigned by signed bytes: the weights are made unsigned, w + 128
// for q8 and w + 8 for q4 (an xor: one instruction a chunk whatever M), so a
// lane sums w·qa + bias·qa, and bias · Σ qa over each block, computed once per
// call with the quantized A, is taken off the block's sum. A block is a run
// of lanes (block < chunk: chunk / block blocks a chunk) or of whole chunks
// (block a multiple of the chunk, accumulated in one vector). Pairs of
// vectors are then added lane pair by lane pair until one vector holds the
// 16 blocks' exact sums: lanes l and l ^ d for d = 1, 2, 4, 8, so that most
// steps are in-lane vpshufd (a reduction by vpermt2d into block order took a
// fifth of the kernel's time on Zen 4), then one vpermd puts the blocks in
// order. Converted to fp32 (exact below 2^24, i.e. for q8 blocks up to 1032
// and q4 blocks up to 16512), each sum is scaled by weight scale ·
// activation scale and added into a 16-lane fp32 accumulator, summed once at
// the end of the row.

// The int8 helpers are recursive templates called many times per row: forced
// inline, else GCC leaves the row's last group as out-of-line calls.
#define MILRT_INLINE __attribute__((always_inline))

// Q4: w holds q4 nibbles, two a byte, and the loops take 128 values a chunk
// (one 64-byte load) instead of q8's 64; qa is laid out to match (see
// chunk_dp).
template <bool Q4>
struct Int8Row {
  static constexpr int64_t kChunk = Q4 ? 128 : 64;  // row elements one vector of sums covers
  const int8_t* w;    // the weight row
  const int8_t* qa;   // A's quantized rows, ldq apart
  int64_t ldq, k, block;
  const void* sc;     // the row's block scales (weight_scale_row)
  bool f16;           // ... as fp16
};

MILRT_AVX512_VNNI MILRT_INLINE inline __mmask64 byte_mask(int64_t left) {
  return left >= 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
}

// Bytes ahead of the chunk being read that are requested early, into L2 (one
// prefetch a 64-byte load): the hardware prefetcher alone leaves the core
// waiting. Measured on the Zen 4 VM: bench_weight_gemm with W from DRAM, one
// thread, 15-18 GB/s of q8 rows without, 24-26 GB/s with 8 KB ahead;
// Stories110M decoding on one thread, 120-126 tok/s without, 138-150 with
// 8 KB and 140-156 with 16 KB; 4 KB, or any distance into L1, did worse.
constexpr int64_t kInt8Ahead = 16384;

// acc[m] += 16 int32 lanes of products over chunk [k, k + kChunk) of the row
// and A row m, lane l summing elements k + l·kChunk/16 .. + kChunk/16 - 1 (in
// some order); weight bytes from element k + left on are not read (Masked:
// the end of the row), where A is zero padding, so whatever the lanes hold
// there adds nothing.
//  q8: the 64 bytes w + 128 (an xor of the sign bit) times A's 64 bytes.
//  q4: the 64 bytes hold 128 nibbles n = w & 15; n ^ 8 = w + 8 (one xor of
//  0x88 for both nibbles of a byte). The low nibbles (the chunk's even
//  elements) and the high ones (its odd elements, after a 16-bit shift) are
//  each multiplied by 64 bytes of A, which stream() stores for this path as
//  each 128-value chunk's even elements, then its odd ones: lane l gets
//  elements 8l .. 8l + 7 from the two products. Five instructions for 128
//  values, where widening the nibbles to bytes in element order took four
//  for 64 (and twice the reduction work per value).
template <int M, bool Masked, bool Q4>
MILRT_AVX512_VNNI MILRT_INLINE inline void chunk_dp(const Int8Row<Q4>& r, int64_t k, int64_t left, __m512i* acc) {
  if constexpr (Q4) {
    const auto* p = reinterpret_cast<const uint8_t*>(r.w) + k / 2;
    _mm_prefetch(reinterpret_cast<const char*>(p) + kInt8Ahead, _MM_HINT_T1);
    const __m512i b = _mm512_xor_si512(Masked ? _mm512_maskz_loadu_epi8(byte_mask(left / 2), p) : _mm512_loadu_si512(p),
                                       _mm512_set1_epi8(char(0x88)));
    const __m512i low = _mm512_set1_epi8(0x0F);
    const __m512i even = _mm512_and_si512(b, low), odd = _mm512_and_si512(_mm512_srli_epi16(b, 4), low);
    // A is zero-padded to a multiple of 128 bytes: whole loads stay in its buffer.
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      acc[m] = _mm512_dpbusd_epi32(acc[m], even, _mm512_loadu_si512(r.qa + m * r.ldq + k));
      acc[m] = _mm512_dpbusd_epi32(acc[m], odd, _mm512_loadu_si512(r.qa + m * r.ldq + k + 64));
    }
  } else {
    _mm_prefetch(reinterpret_cast<const char*>(r.w + k) + kInt8Ahead, _MM_HINT_T1);
    const __m512i sign = _mm512_set1_epi8(char(0x80));
    const __m512i wu = Masked ? _mm512_xor_si512(_mm512_maskz_loadu_epi8(byte_mask(left), r.w + k), sign)
                              : _mm512_xor_si512(_mm512_loadu_si512(r.w + k), sign);
    // A is zero-padded to a multiple of 64 bytes: whole loads stay in its buffer.
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) acc[m] = _mm512_dpbusd_epi32(acc[m], wu, _mm512_loadu_si512(r.qa + m * r.ldq + k));
  }
}

// v[l ^ D] for each lane l.
template <int D>
MILRT_AVX512_VNNI MILRT_INLINE inline __m512i mask_swap(__m512i src, __mmask16 k, __m512i v) {
  if constexpr (D == 1) return _mm512_mask_shuffle_epi32(src, k, v, _MM_PERM_CDAB);
  else if constexpr (D == 2) return _mm512_mask_shuffle_epi32(src, k, v, _MM_PERM_BADC);
  else if constexpr (D == 4) return _mm512_mask_shuffle_i32x4(src, k, v, v, _MM_SHUFFLE(2, 3, 0, 1));
  else return _mm512_mask_shuffle_i32x4(src, k, v, v, _MM_SHUFFLE(1, 0, 3, 2));
}

// Lanes l without bit D: x[l] + x[l ^ D]; lanes with it: y[l ^ D] + y[l].
template <int D>
MILRT_AVX512_VNNI MILRT_INLINE inline __m512i pair_step(__m512i x, __m512i y) {
  constexpr __mmask16 hi = D == 1 ? 0xAAAA : D == 2 ? 0xCCCC : D == 4 ? 0xF0F0 : 0xFF00;
  return _mm512_add_epi32(mask_swap<D>(x, hi, y), mask_swap<D>(y, __mmask16(~hi), x));
}

// Blocks [b0, b0 + Nb) of the row against each A row m, reduced by the pair
// steps d = 1, 2, .. (one per halving of Nb down to Base, the blocks one
// chunk-vector covers: chunk / block, or 1 for a multiple of the chunk).
// Masked: the blocks pass the end of the row (from k on they add zero).
template <int Nb, int Base, int M, bool Masked, bool Q4>
MILRT_AVX512_VNNI MILRT_INLINE inline void block_sums(const Int8Row<Q4>& r, int64_t b0, __m512i* out) {
  if constexpr (Nb == Base) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) out[m] = _mm512_setzero_si512();
    const int64_t k0 = b0 * r.block;
    if (Masked && k0 >= r.k) return;
    if constexpr (Base == 1) {
      for (int64_t k = k0; k < k0 + r.block; k += r.kChunk) chunk_dp<M, false>(r, k, r.kChunk, out);
    } else {
      chunk_dp<M, Masked>(r, k0, r.k - k0, out);
    }
  } else {
    __m512i x[M], y[M];
    block_sums<Nb / 2, Base, M, Masked>(r, b0, x);
    block_sums<Nb / 2, Base, M, Masked>(r, b0 + Nb / 2, y);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) out[m] = pair_step<Nb / (2 * Base)>(x[m], y[m]);
  }
}

// Completes the reduction of Nb < 16 blocks (the pair steps the missing half
// of a group would have taken, against zeros) and puts the 16 blocks' sums
// in block order: after the steps d = 1 .. 8 / Base, block b's sum is in lane
// ((b % Base) << n) | (b / (16 >> n)), n = log2(16 / Base).
template <int Nb, int Base>
MILRT_AVX512_VNNI MILRT_INLINE inline __m512i in_block_order(__m512i v) {
  constexpr int n = __builtin_ctz(16 / Base);
  if constexpr (Nb < 16) {
    v = pair_step<Nb / Base>(v, _mm512_setzero_si512());
    return in_block_order<Nb * 2, Base>(v);
  } else if constexpr (Base == 1 || Base == 16) {
    return v;  // already in order
  } else {
    const __m512i b = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i lane = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(Base - 1)), n),
                                         _mm512_srli_epi32(b, 4 - n));
    return _mm512_permutexvar_epi32(lane, v);
  }
}

// acc[m] += the exact block sums (in block order, lanes from 0; `count` of
// them, the other lanes ignored) less their bias, times weight scale ·
// activation scale. Whole: 16 blocks, whose 16 scales are read in bounds (A's
// are padded to a multiple of 16).
template <bool Whole, int M, bool Q4>
MILRT_AVX512_VNNI MILRT_INLINE inline void add_block_sums(const Int8Row<Q4>& r, int64_t b0, int64_t count,
                                                          const __m512i* sums, const float* sa, const int32_t* sq,
                                                          int64_t lds, __m512* acc) {
  const __mmask16 have = count >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1);
  const auto* s16 = static_cast<const uint16_t*>(r.sc) + b0;
  const auto* s32 = static_cast<const float*>(r.sc) + b0;
  const __m512 ws =
      r.f16 ? _mm512_cvtph_ps(Whole ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s16))
                                    : _mm256_maskz_loadu_epi16(have, s16))
            : Whole ? _mm512_loadu_ps(s32) : _mm512_maskz_loadu_ps(have, s32);
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m) {
    const int64_t o = m * lds + b0;
    const __m512 as = Whole ? _mm512_loadu_ps(sa + o) : _mm512_maskz_loadu_ps(have, sa + o);
    const __m512i off = Whole ? _mm512_loadu_si512(sq + o) : _mm512_maskz_loadu_epi32(have, sq + o);
    const __m512i sum = _mm512_sub_epi32(sums[m], off);
    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws, as), acc[m]);
  }
}

// Nb blocks from b0 (Nb = 16, or a power of two for the row's last blocks;
// `count` of them exist, the rest add zero) into acc[m]. Not a lambda: it
// would not inherit the target attribute.
template <int Nb, int Base, int M, bool Masked, bool Q4>
MILRT_AVX512_VNNI MILRT_INLINE inline void int8_group(const Int8Row<Q4>& r, int64_t b0, int64_t count, const float* sa,
                                                      const int32_t* sq, int64_t lds, __m512* acc) {
  __m512i sums[M];
  block_sums<Nb, Base, M, Masked>(r, b0, sums);
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m) sums[m] = in_block_order<Nb, Base>(sums[m]);
  if constexpr (Q4 && Masked && Base > 1) {
    // q8's chunk is half of q4's, so q8 adds the first half of a partial
    // last chunk as a group of its own, and the rest after it from lane 0.
    // Added in the same order here, a q4 weight gives the bits of the q8
    // weight holding the same values.
    if (count > Base / 2) {
      add_block_sums<false, M>(r, b0, Base / 2, sums, sa, sq, lds, acc);
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) sums[m] = _mm512_alignr_epi32(_mm512_setzero_si512(), sums[m], Base / 2);
      b0 += Base / 2, count -= Base / 2;
    }
  }
  add_block_sums<Nb == 16 && !Masked, M>(r, b0, count, sums, sa, sq, lds, acc);
}

// The row's last nb - b0 < 16 blocks: halves of a group while whole chunks
// remain, then a masked chunk for the blocks that only fill part of one.
template <int Base, int M, bool Q4>
MILRT_AVX512_VNNI MILRT_INLINE inline void int8_tail(const Int8Row<Q4>& r, int64_t nb, int64_t b0, const float* sa,
                                                     const int32_t* sq, int64_t lds, __m512* acc) {
  if constexpr (Base <= 8)
    if (nb - b0 >= 8) int8_group<8, Base, M, false>(r, b0, 8, sa, sq, lds, acc), b0 += 8;
  if constexpr (Base <= 4)
    if (nb - b0 >= 4) int8_group<4, Base, M, false>(r, b0, 4, sa, sq, lds, acc), b0 += 4;
  if constexpr (Base <= 2)
    if (nb - b0 >= 2) int8_group<2, Base, M, false>(r, b0, 2, sa, sq, lds, acc), b0 += 2;
  if constexpr (Base == 1)
    if (nb - b0 >= 1) int8_group<1, Base, M, false>(r, b0, 1, sa, sq, lds, acc), b0 += 1;
  if (b0 < nb) int8_group<Base, Base, M, true>(r, b0, nb - b0, sa, sq, lds, acc);
}

// R weight rows from j, each against the M rows of A. Their dependency
// chains (vpdpbusd, the reduction, the fp32 accumulation, the final sum) are
// independent: interleaved, they keep the core busy where one row's chain
// would leave it waiting.
template <bool Q4, int Base, int M, int R>
MILRT_AVX512_VNNI MILRT_INLINE inline void int8_rows_r(const WeightRef& w, int64_t j, const int8_t* qa, int64_t ldq,
                                                       const float* sa, const int32_t* sq, int64_t lds, float* out,
                                                       int64_t ldo, int64_t col) {
  const int64_t K = w.k, nb = K / w.block;
  Int8Row<Q4> r[R];
  __m512 acc[R][M];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    r[i] = Int8Row<Q4>{static_cast<const int8_t*>(w.data) + (j + i) * (Q4 ? w.ld / 2 : w.ld), qa, ldq, K, w.block,
                       weight_scale_row(w, j + i), w.scale_type == ElemType::f16};
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) acc[i][m] = _mm512_setzero_ps();
  }
  int64_t b0 = 0;
  for (; b0 + 16 <= nb; b0 += 16)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) int8_group<16, Base, M, false>(r[i], b0, 16, sa, sq, lds, acc[i]);
  if (b0 < nb)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) int8_tail<Base, M>(r[i], nb, b0, sa, sq, lds, acc[i]);
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) out[m * ldo + col + i] = _mm512_reduce_add_ps(acc[i][m]);
}

template <bool Q4, int Base, int M>
MILRT_AVX512_VNNI void int8_rows(const WeightRef& w, int64_t j0, int64_t j1, const int8_t* qa, int64_t ldq,
                                 const float* sa, const int32_t* sq, int64_t lds, float* out, int64_t ldo) {
  constexpr int R = M == 1 ? 4 : M == 2 ? 2 : 1;
  int64_t j = j0;
  for (; j + R <= j1; j += R) int8_rows_r<Q4, Base, M, R>(w, j, qa, ldq, sa, sq, lds, out, ldo, j - j0);
  for (; j < j1; ++j) int8_rows_r<Q4, Base, M, 1>(w, j, qa, ldq, sa, sq, lds, out, ldo, j - j0);
}

template <bool Q4, int Base>
MILRT_AVX512_VNNI void int8_rows_m(const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa, int64_t ldq,
                                   const float* sa, const int32_t* sq, int64_t lds, float* out, int64_t ldo) {
  switch (M) {
    case 1: int8_rows<Q4, Base, 1>(w, j0, j1, qa, ldq, sa, sq, lds, out, ldo); break;
    case 2: int8_rows<Q4, Base, 2>(w, j0, j1, qa, ldq, sa, sq, lds, out, ldo); break;
    case 3: int8_rows<Q4, Base, 3>(w, j0, j1, qa, ldq, sa, sq, lds, out, ldo); break;
    default: int8_rows<Q4, Base, 4>(w, j0, j1, qa, ldq, sa, sq, lds, out, ldo); break;
  }
}

// The rows of one format, Base (blocks a chunk covers) from the block.
template <bool Q4>
MILRT_AVX512_VNNI void int8_rows_q(const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa, int64_t ldq,
                                     const float* sa, const int32_t* sq, int64_t lds, float* out, int64_t ldo) {
  const int64_t chunk = Int8Row<Q4>::kChunk;
  switch (w.block < chunk ? chunk / w.block : 1) {
    case 16: int8_rows_m<Q4, 16>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
    case 8: int8_rows_m<Q4, 8>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
    case 4: int8_rows_m<Q4, 4>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
    case 2: int8_rows_m<Q4, 2>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
    default: int8_rows_m<Q4, 1>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
  }
}

}  // namespace

MILRT_AVX512_VNNI void int8_rows_avx512_vnni(const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa,
                                             int64_t ldq, const float* sa, const int32_t* sq, int64_t lds, float* out,
                                             int64_t ldo) {
  // The caller checked the block (vnni_fits in generic/weight_gemm.cpp): q8,
  // 4, 8, 16, 32 or a multiple of 64; q4, 8, 16, 32, 64 or a multiple of 128.
  // Base: the blocks one chunk covers.
  if (w.format == WeightFormat::q4) int8_rows_q<true>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo);
  else int8_rows_q<false>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo);
}

MILRT_AVX512 void weight_rows_avx512(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda,
                                     float* out, int64_t ldo) {
  weight_rows<Avx512Lanes>(w, j0, j1, M, a, lda, out, ldo);
}

MILRT_AVX512 void widen_rows_avx512(const WeightRef& w, int64_t j0, int64_t j1, float* dst) {
  widen_rows<Avx512Lanes>(w, j0, j1, dst);
}

// k q4 values (k even) from src into dst as int8: 32 bytes widened to 16-bit
// words, the high nibble shifted into the word's upper byte, so the bytes
// come out in element order; (v ^ 8) - 8 sign-extends each nibble.
MILRT_AVX512 void unpack_q4_avx512(const uint8_t* src, int64_t k, int8_t* dst) {
  const int64_t n = k / 2;
  const __m512i lo = _mm512_set1_epi16(0x000F), hi = _mm512_set1_epi16(0x0F00), eight = _mm512_set1_epi8(8);
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t left = n - i;
    const __mmask32 m = left >= 32 ? ~__mmask32(0) : (__mmask32(1) << left) - 1;
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, src + i));
    const __m512i v = _mm512_or_si512(_mm512_and_si512(b, lo), _mm512_and_si512(_mm512_slli_epi16(b, 4), hi));
    const __m512i q = _mm512_sub_epi8(_mm512_xor_si512(v, eight), eight);
    const __mmask64 mo = left >= 32 ? ~__mmask64(0) : (__mmask64(1) << (2 * left)) - 1;
    _mm512_mask_storeu_epi8(dst + 2 * i, mo, q);
  }
}

}  // namespace milrt::kernels

#pragma GCC diagnostic pop
#endif
