// weight_gemm's AVX2 loops (see kernels/weight_gemm.h): weight rows streamed
// once against up to four rows of A, and panel widening (the width-generic
// loops of x86/weight_rows.h on 8 lanes), for CPUs with AVX2+FMA+F16C but no
// AVX-512 (Zen 1-4 desktops, most laptops). Weights are
// widened in registers right after the load: fp16 with vcvtph2ps, bf16 by a
// 16-bit shift into an fp32 word (exact), int8 with vpmovsxbd + vcvtdq2ps
// (exact). With int8 activations, q8 rows are multiplied by the quantized A
// with vpmaddubsw + vpmaddwd instead (also on AVX-512 CPUs without VNNI), and
// q4 rows whose blocks come in whole groups of 8 stream through the same
// loops, 64 values a 32-byte load, their nibbles split in registers. Other
// q4 rows are unpacked to int8 here (unpack_q4_avx2) and then run as q8 rows.
// Compiled through the target attribute (no special flags), so any
// inline code from shared headers this file instantiates stays baseline x86-64;
// only called when the avx2 path is usable (generic/weight_gemm.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/weight_gemm.h"

#define MILRT_AVX2 __attribute__((target("avx2,fma,f16c")))

// GCC 12 flags its own `__Y = __Y` idiom in the _mm*_undefined_* intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define MILRT_WEIGHT_ROWS_TARGET MILRT_AVX2
#include "kernels/x86/weight_rows.h"

namespace milrt::kernels {
namespace {

// Elements k..k+7 of a row as fp32.
template <WeightFormat F>
MILRT_AVX2 inline __m256 load8(const void* row, int64_t k) {
  if constexpr (F == WeightFormat::f32) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k)));
  } else if constexpr (F == WeightFormat::bf16) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  } else {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(row) + k))));
  }
}

// Lanes [0, left) set, left < 8: AVX2 has masked loads for 32-bit lanes only.
MILRT_AVX2 inline __m256i tail_mask(int64_t left) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(left)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The last `left` < 8 elements from k as fp32, other lanes zero. fp16/bf16
// have no masked load, so the tail goes through a zeroed buffer: reading past
// the row could leave the allocation (ld may equal k), and a zero times
// whatever padding holds could still be NaN.
template <WeightFormat F>
MILRT_AVX2 inline __m256 load_tail(const void* row, int64_t k, int64_t left, __m256i mask) {
  if constexpr (F == WeightFormat::f32) {
    return _mm256_maskload_ps(static_cast<const float*>(row) + k, mask);
  } else {
    alignas(16) unsigned char buf[16] = {};
    std::memcpy(buf, static_cast<const std::byte*>(row) + size_t(k) * kElemBytes<F>, size_t(left) * kElemBytes<F>);
    return load8<F>(buf, 0);
  }
}

// Σ of the 8 lanes as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): the
// order of the portable loop's eight partial sums.
MILRT_AVX2 inline float reduce8(__m256 v) {
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// The width's operations for the loops of x86/weight_rows.h.
struct Avx2Lanes {
  using V = __m256;
  static constexpr int kWidth = 8;
  // One accumulator per (row, A row): with 16 ymm, eight rows' accumulators,
  // a row of A and a weight vector already fill them.
  static constexpr int kAccs = 1;
  MILRT_AVX2 static V zero() { return _mm256_setzero_ps(); }
  MILRT_AVX2 static V set1(float x) { return _mm256_set1_ps(x); }
  MILRT_AVX2 static V add(V x, V y) { return _mm256_add_ps(x, y); }
  MILRT_AVX2 static V mul(V x, V y) { return _mm256_mul_ps(x, y); }
  MILRT_AVX2 static V fmadd(V x, V y, V z) { return _mm256_fmadd_ps(x, y, z); }
  MILRT_AVX2 static float reduce(V x) { return reduce8(x); }
  MILRT_AVX2 static __m256i tail_mask(int64_t left) { return kernels::tail_mask(left); }
  MILRT_AVX2 static V load_a(const float* p) { return _mm256_loadu_ps(p); }
  MILRT_AVX2 static V load_a_tail(const float* p, __m256i m) { return _mm256_maskload_ps(p, m); }
  template <WeightFormat F>
  MILRT_AVX2 static V load_w(const void* row, int64_t k) {
    return load8<F>(row, k);
  }
  template <WeightFormat F>
  MILRT_AVX2 static V load_w_tail(const void* row, int64_t k, int64_t left, __m256i m) {
    return load_tail<F>(row, k, left, m);
  }
  MILRT_AVX2 static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
  MILRT_AVX2 static void store_tail(float* p, __m256i m, V x) { _mm256_maskstore_ps(p, m, x); }
};

// ---- int8 activations (vpmaddubsw + vpmaddwd) -------------------------------------
//
// Laid out as the AVX-512 VNNI loops (x86/weight_gemm_avx512.cpp), with
// 32-byte chunks and groups of 8 blocks. Without VNNI a chunk takes
// vpmaddubsw and vpmaddwd by ones (int32 lanes of 4 products). vpmaddubsw
// sums adjacent products to int16 with saturation, so the VNNI loops' w + 128
// (pairs up to 2·255·127) cannot be its unsigned operand: |w| is, times the
// activation negated where w < 0 (pairs at most 2·128·127 = 32512, never
// saturated). Pairs of vectors are reduced with vphaddd, whose in-lane order
// a vpermq puts back in block order.

// The int8 helpers are recursive templates called many times per row: forced
// inline, else GCC leaves the row's last group as out-of-line calls.
#define MILRT_INLINE __attribute__((always_inline))

// Q4: w holds q4 nibbles, two a byte, taken 64 values a chunk instead of
// q8's 32 (see chunk_dp); only whole groups of 8 blocks.
template <bool Q4>
struct Int8Row {
  static constexpr int64_t kChunk = Q4 ? 64 : 32;  // row elements one vector of sums covers
  const int8_t* w;    // the weight row
  const int8_t* qa;   // A's quantized rows, ldq apart, zero from k on
  int64_t ldq, k, block;
  const void* sc;     // the row's block scales (weight_scale_row)
  bool f16;           // ... as fp16
};

// Bytes ahead of the chunks being read that are requested early, into L2
// (one prefetch per 64-byte line): as in the AVX-512 VNNI loops, where 16 KB
// measured best on Zen 4.
constexpr int64_t kInt8Ahead = 16384;

// acc[m] += the 8 lanes of chunk [k, k + kChunk) of the row against A row m,
// lane l summing elements k + l·kChunk/8 .. + kChunk/8 - 1 (in some order).
//  q8: bytes from k + left on count as zero (Masked: the end of the row,
//  read through a zeroed copy as AVX2 has no byte-masked load).
//  q4: 32 bytes of nibbles n = w & 15; xor 0x88 makes each w + 8 (0..15), a
//  mask and a 16-bit shift split the chunk's even and odd elements, and each
//  half meets 32 bytes of A, which stream() stores for this path as each
//  64-value chunk's even elements, then its odd ones. vpmaddubsw takes
//  w + 8 as its unsigned operand (pairs at most 2·15·127, the two halves'
//  sum 7620: never saturated); 8·Σ qa per block comes off in int8_group.
//  Never masked: these rows run only whole groups.
template <int M, bool Masked, bool Q4>
MILRT_AVX2 MILRT_INLINE inline void chunk_dp(const Int8Row<Q4>& r, int64_t k, int64_t left, __m256i* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (Q4) {
    static_assert(!Masked, "q4 rows run whole groups only");
    const auto* p = reinterpret_cast<const uint8_t*>(r.w) + k / 2;
    if (k % 128 == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kInt8Ahead, _MM_HINT_T1);
    const __m256i b = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                                       _mm256_set1_epi8(char(0x88)));
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i even = _mm256_and_si256(b, low), odd = _mm256_and_si256(_mm256_srli_epi16(b, 4), low);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      // A is zero-padded to a multiple of 64 bytes: whole loads stay in its buffer.
      const int8_t* x = r.qa + m * r.ldq + k;
      const __m256i p16 =
          _mm256_add_epi16(_mm256_maddubs_epi16(even, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
                           _mm256_maddubs_epi16(odd, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32))));
      acc[m] = _mm256_add_epi32(acc[m], _mm256_madd_epi16(p16, ones));
    }
  } else {
    __m256i w;
    if constexpr (Masked) {
      alignas(32) int8_t buf[32] = {};
      std::memcpy(buf, r.w + k, size_t(std::min<int64_t>(left, 32)));
      w = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
    } else {
      w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.w + k));
    }
    if (k % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(r.w + k) + kInt8Ahead, _MM_HINT_T1);
    const __m256i aw = _mm256_abs_epi8(w);  // -128 -> 0x80: 128 as the unsigned operand
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      // A is zero-padded to a multiple of 64 bytes: whole loads stay in its buffer.
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.qa + m * r.ldq + k));
      const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
      acc[m] = _mm256_add_epi32(acc[m], _mm256_madd_epi16(p16, ones));
    }
  }
}

// [x0+x1, x2+x3, x4+x5, x6+x7, y0+y1, ..., y6+y7].
MILRT_AVX2 MILRT_INLINE inline __m256i pair_sums(__m256i x, __m256i y) {
  return _mm256_permute4x64_epi64(_mm256_hadd_epi32(x, y), 0xD8);
}

// Blocks [b0, b0 + Nb) of the row against each A row m: out[m]'s 8 lanes
// hold 8 / Nb partial sums per block, in block order. Base is the number of
// blocks one chunk-vector covers (chunk / block, or 1 for a multiple of the
// chunk).
template <int Nb, int Base, int M, bool Tail, bool Q4>
MILRT_AVX2 MILRT_INLINE inline void block_sums(const Int8Row<Q4>& r, int64_t b0, __m256i* out) {
  if constexpr (Nb == Base) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) out[m] = _mm256_setzero_si256();
    const int64_t k0 = b0 * r.block;
    if (Tail && k0 >= r.k) return;
    if constexpr (Base == 1) {
      for (int64_t k = k0; k < k0 + r.block; k += r.kChunk) chunk_dp<M, false>(r, k, r.kChunk, out);
    } else if constexpr (Tail) {
      if (r.k - k0 < r.kChunk) chunk_dp<M, true>(r, k0, r.k - k0, out);
      else chunk_dp<M, false>(r, k0, r.kChunk, out);
    } else {
      chunk_dp<M, false>(r, k0, r.kChunk, out);
    }
  } else {
    __m256i x[M], y[M];
    block_sums<Nb / 2, Base, M, Tail>(r, b0, x);
    block_sums<Nb / 2, Base, M, Tail>(r, b0 + Nb / 2, y);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) out[m] = pair_sums(x[m], y[m]);
  }
}

// Nb blocks from b0 (Nb = 8, or a power of two for the row's last blocks;
// `count` of them exist, the rest add zero) into acc[m]: the block sums,
// 8 / Nb lanes a block in block order, are scaled lane by lane by their
// block's weight scale · activation scale (spread from block order with one
// vpermps when Nb < 8; the lanes of a block are added in the accumulator).
// Masked: the group ends in a part of a chunk. Q4 (whole groups only): 8·Σ qa
// of each block (sq, in the activation scales' layout) comes off its sum.
template <int Nb, int Base, int M, bool Masked, bool Q4>
MILRT_AVX2 MILRT_INLINE inline void int8_group(const Int8Row<Q4>& r, int64_t b0, int64_t count, const float* sa,
                                               const int32_t* sq, int64_t lds, __m256* acc) {
  __m256i sums[M];
  block_sums<Nb, Base, M, Masked>(r, b0, sums);
  if constexpr (Q4) {
    static_assert(Nb == 8 && !Masked, "q4 rows run whole groups only: one lane a block");
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m)
      sums[m] = _mm256_sub_epi32(sums[m], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sq + m * lds + b0)));
  }
  constexpr bool whole = Nb == 8 && !Masked;
  const __m256i have = tail_mask(count);
  // Whole groups read 8 scales in bounds (A's are padded to a multiple of 16).
  __m256 ws;
  if (r.f16) {
    // No 16-bit masked load in AVX2: a part group goes through a zeroed copy.
    const auto* s16 = static_cast<const uint16_t*>(r.sc) + b0;
    alignas(16) uint16_t part[8] = {};
    if (!whole) std::memcpy(part, s16, size_t(std::min<int64_t>(count, 8)) * 2);
    ws = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(whole ? s16 : part)));
  } else {
    const auto* s32 = static_cast<const float*>(r.sc) + b0;
    ws = whole ? _mm256_loadu_ps(s32) : _mm256_maskload_ps(s32, have);
  }
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m) {
    const __m256 as = whole ? _mm256_loadu_ps(sa + m * lds + b0) : _mm256_maskload_ps(sa + m * lds + b0, have);
    __m256 d = _mm256_mul_ps(ws, as);
    if constexpr (Nb < 8)
      d = _mm256_permutevar8x32_ps(
          d, _mm256_srli_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), __builtin_ctz(8 / Nb)));
    acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[m]), d, acc[m]);
  }
}

// The row's last nb - b0 < 8 blocks: halves of a group while whole chunks
// remain, then a masked chunk for the blocks that only fill part of one.
template <int Base, int M>
MILRT_AVX2 MILRT_INLINE inline void int8_tail(const Int8Row<false>& r, int64_t nb, int64_t b0, const float* sa,
                                              int64_t lds, __m256* acc) {
  if constexpr (Base <= 4)
    if (nb - b0 >= 4) int8_group<4, Base, M, false>(r, b0, 4, sa, nullptr, lds, acc), b0 += 4;
  if constexpr (Base <= 2)
    if (nb - b0 >= 2) int8_group<2, Base, M, false>(r, b0, 2, sa, nullptr, lds, acc), b0 += 2;
  if constexpr (Base == 1)
    if (nb - b0 >= 1) int8_group<1, Base, M, false>(r, b0, 1, sa, nullptr, lds, acc), b0 += 1;
  if (b0 < nb) int8_group<Base, Base, M, true>(r, b0, nb - b0, sa, nullptr, lds, acc);
}

// R weight rows from j, each against the M rows of A, interleaved (their
// dependency chains are independent); int8_rows takes R = 1.
template <bool Q4, int Base, int M, int R>
MILRT_AVX2 MILRT_INLINE inline void int8_rows_r(const WeightRef& w, int64_t j, const int8_t* qa, int64_t ldq,
                                                const float* sa, const int32_t* sq, int64_t lds, float* out,
                                                int64_t ldo, int64_t col) {
  const int64_t K = w.k, nb = K / w.block;
  Int8Row<Q4> r[R];
  __m256 acc[R][M];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    r[i] = Int8Row<Q4>{static_cast<const int8_t*>(w.data) + (j + i) * (Q4 ? w.ld / 2 : w.ld), qa, ldq, K, w.block,
                       weight_scale_row(w, j + i), w.scale_type == ElemType::f16};
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) acc[i][m] = _mm256_setzero_ps();
  }
  int64_t b0 = 0;
  for (; b0 + 8 <= nb; b0 += 8)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) int8_group<8, Base, M, false>(r[i], b0, 8, sa, sq, lds, acc[i]);
  if constexpr (!Q4)  // the caller gives q4 rows whole groups only
    if (b0 < nb)
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) int8_tail<Base, M>(r[i], nb, b0, sa, lds, acc[i]);
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) out[m * ldo + col + i] = reduce8(acc[i][m]);
}

template <bool Q4, int Base, int M>
MILRT_AVX2 void int8_rows(const WeightRef& w, int64_t j0, int64_t j1, const int8_t* qa, int64_t ldq,
                          const float* sa, const int32_t* sq, int64_t lds, float* out, int64_t ldo) {
  // One row at a time: with 16 ymm, interleaving rows (as the AVX-512 loops
  // do) spilled and measured 10-30% slower on Zen 4 (MILRT_ISA=avx2).
  for (int64_t j = j0; j < j1; ++j) int8_rows_r<Q4, Base, M, 1>(w, j, qa, ldq, sa, sq, lds, out, ldo, j - j0);
}

template <bool Q4, int Base>
MILRT_AVX2 void int8_rows_m(const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa, int64_t ldq,
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
MILRT_AVX2 void int8_rows_q(const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa, int64_t ldq,
                              const float* sa, const int32_t* sq, int64_t lds, float* out, int64_t ldo) {
  const int64_t chunk = Int8Row<Q4>::kChunk;
  switch (w.block < chunk ? chunk / w.block : 1) {
    case 8: int8_rows_m<Q4, 8>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
    case 4: int8_rows_m<Q4, 4>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
    case 2: int8_rows_m<Q4, 2>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
    default: int8_rows_m<Q4, 1>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo); break;
  }
}

}  // namespace

MILRT_AVX2 void int8_rows_avx2(const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa, int64_t ldq,
                               const float* sa, const int32_t* sq, int64_t lds, float* out, int64_t ldo) {
  // The caller checked the block (avx2_q4_fits, int8_fits in
  // generic/weight_gemm.cpp): q4, 8, 16, 32 or a multiple of 64, in whole
  // groups of 8 blocks; q8, 4, 8, 16 or a multiple of 32. Base: the blocks
  // one chunk covers.
  if (w.format == WeightFormat::q4) int8_rows_q<true>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo);
  else int8_rows_q<false>(w, j0, j1, M, qa, ldq, sa, sq, lds, out, ldo);
}

MILRT_AVX2 void weight_rows_avx2(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda,
                                 float* out, int64_t ldo) {
  weight_rows<Avx2Lanes>(w, j0, j1, M, a, lda, out, ldo);
}

MILRT_AVX2 void widen_rows_avx2(const WeightRef& w, int64_t j0, int64_t j1, float* dst) {
  widen_rows<Avx2Lanes>(w, j0, j1, dst);
}

// k q4 values (k even) from src into dst as int8: 16 bytes widened to 16-bit
// words, the high nibble shifted into the word's upper byte, so the bytes
// come out in element order; (v ^ 8) - 8 sign-extends each nibble. The last
// bytes that fill no whole step go through the same arithmetic one by one.
MILRT_AVX2 void unpack_q4_avx2(const uint8_t* src, int64_t k, int8_t* dst) {
  const int64_t n = k / 2;
  const __m256i lo = _mm256_set1_epi16(0x000F), hi = _mm256_set1_epi16(0x0F00), eight = _mm256_set1_epi8(8);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    const __m256i v = _mm256_or_si256(_mm256_and_si256(b, lo), _mm256_and_si256(_mm256_slli_epi16(b, 4), hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), _mm256_sub_epi8(_mm256_xor_si256(v, eight), eight));
  }
  for (; i < n; ++i) {
    dst[2 * i] = int8_t(((src[i] & 15) ^ 8) - 8);
    dst[2 * i + 1] = int8_t(((src[i] >> 4) ^ 8) - 8);
  }
}

}  // namespace milrt::kernels

#pragma GCC diagnostic pop
#endif
