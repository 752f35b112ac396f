// AMX bf16 fused attention, forward and backward (kernels/attention_amx.h).
//
// Every product is C (+)= A·B on tiles of 16 rows × 64 bytes (palette 1):
// A is bf16 row-major along k (a tile: 16 rows × 32 k values), B holds k in
// pairs, one row of 32-bit words (B[2p][j], B[2p+1][j]) per pair p (the
// operand order of tdpbf16ps), C is fp32. Blocks of 32×32 of C use four C
// tiles (tmm0-3), two A (tmm4-5) and two B (tmm6-7), as in gemm_amx.cpp.
// Operands are laid out once per call, in per-thread scratch:
//
//   forward   S = Q·Kᵀ:   A = Q rows;        B = Kt, pair p of d, word j = (K[j][2p], K[j][2p+1])
//             O += P·V:   A = P rows (bf16); B = Vv, pair p of keys, word c = (V[2p][c], V[2p+1][c])
//   backward  S, dP = dO·Vᵀ as S (B = Kt, Vt);  dQ += dS·K: B = Kk (pairs of keys)
//             dVᵀ = dOᵀ·P and dKᵀ = Qᵀ·dS with A = dOᵀ, Qᵀ rows (bf16 along queries,
//             converted once) and B = P, dS in pairs of query rows (built per key
//             block by interleaving two rows' bf16); the 64-key results are
//             transposed into dV, dK.
//
// Padding: query rows to 16 (32 where queries are the k of a product), keys
// to 32, all with zeros; padded key columns of S are masked, padded query
// rows of P and dS are zero, so no product reads anything but zeros beyond
// the data.
//
// Work: the forward takes 32 queries × 128 keys of scores at a time (their
// fp32 scores, bf16 P and the 32 × Dv accumulator stay in L1); the backward
// goes by blocks of 64 keys over the strip of queries that see them, as
// attention_backward_f32 does. Causal tiles above the diagonal are skipped.
// The tile configuration is loaded at the start of each call and released
// at its end (one slice is thousands of tile operations; gemm_amx.cpp does
// the same per task).
//
// The ISA code is compiled through the target attribute (as
// convert_rows_avx512.cpp) rather than per-file flags, so the inline
// functions of shared headers this file uses (std::min, std::fill, the Error
// constructor) are emitted for the baseline ISA (the rule in gemm_micro.h);
// every function that executes AVX-512 or AMX carries MILRT_AMX_TARGET, and
// they run only when attention_amx_usable().
#include "kernels/attention_amx.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/convert_rows.h"
#include "kernels/cpu_features.h"
#include "kernels/scratch_carver.h"
#include "kernels/generic/attention_backward.h"
#include "milrt/error.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/x86/amx_bf16_common.h"
#include "kernels/x86/attention_avx512_common.h"
// GCC 12 reports the _mm512_undefined_* inside its own mask intrinsics as
// maybe-uninitialized when they are inlined into target-attribute functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define MILRT_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))
#endif

namespace milrt::kernels {

bool attention_amx_usable() {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  return f.amx_tile && f.amx_bf16 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
#else
  return false;
#endif
}

bool attention_amx_supports(const AttentionShape& s, const AttentionMask&) {
#if defined(__x86_64__)
  auto ok = [](int64_t d) { return d >= 32 && d <= 256 && d % 32 == 0; };
  return s.tq >= 0 && s.tk >= 0 && ok(s.d) && ok(s.dv);
#else
  (void)s;
  return false;
#endif
}

namespace {

constexpr int64_t kBlockQ = 32;    // forward: queries per block
constexpr int64_t kTileK = 128;    // forward: keys per score tile
constexpr int64_t kBlockK = 64;    // backward: keys per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Row strides of the operands whose rows run along keys (Kt, Vt: 32-bit
// words) or queries (Qᵀ, dOᵀ: bf16): padded by 64 bytes past a multiple of
// 32, so that the 16 rows of a tile do not fall into the same few L1 sets
// (T = 512: a 2 KiB or 1 KiB stride puts all 16 rows into 2 or 4 sets).
int64_t key_ld(const AttentionShape& sh) { return round_up(sh.tk, 32) + 16; }

struct FwdLayout {
  uint16_t *qb, *kb;
  uint32_t *kt, *vv;
  float* s;
  uint16_t* p;
  float *ob, *m, *l;
};

FwdLayout fwd_layout(char* base, const AttentionShape& sh, size_t* bytes) {
  const int64_t tq16 = round_up(sh.tq, 16), tkp = round_up(sh.tk, 32);
  Carver c{base};
  FwdLayout L;
  L.qb = c.take<uint16_t>(tq16 * sh.d);
  L.kb = c.take<uint16_t>(tkp * sh.d);
  L.kt = c.take<uint32_t>(sh.d / 2 * key_ld(sh));
  L.vv = c.take<uint32_t>(tkp / 2 * sh.dv);
  L.s = c.take<float>(kBlockQ * kTileK);
  L.p = c.take<uint16_t>(kBlockQ * kTileK);
  L.ob = c.take<float>(kBlockQ * sh.dv);
  L.m = c.take<float>(kBlockQ);
  L.l = c.take<float>(kBlockQ);
  if (bytes) *bytes = c.used + 64;  // + 64: the base is aligned up
  return L;
}

#if defined(__x86_64__)  // the backward layout and everything below run on x86 only

int64_t query_ld(const AttentionShape& sh) { return round_up(sh.tq, 32) + 32; }  // (see key_ld)

struct BwdLayout {
  uint16_t *qb, *qt, *kb, *vb, *dob, *dot, *dsb;
  uint32_t *kt, *kk, *vt, *pv, *dsv;
  float *drow, *lse, *dqacc, *s, *dp, *t;
};

BwdLayout bwd_layout(char* base, const AttentionShape& sh, size_t* bytes) {
  const int64_t tq32 = round_up(sh.tq, 32), tkp = round_up(sh.tk, 32);
  Carver c{base};
  BwdLayout L;
  L.qb = c.take<uint16_t>(tq32 * sh.d);
  L.qt = c.take<uint16_t>(sh.d * query_ld(sh));
  L.kb = c.take<uint16_t>(tkp * sh.d);
  L.vb = c.take<uint16_t>(tkp * sh.dv);
  L.dob = c.take<uint16_t>(tq32 * sh.dv);
  L.dot = c.take<uint16_t>(sh.dv * query_ld(sh));
  L.dsb = c.take<uint16_t>(tq32 * kBlockK);
  L.kt = c.take<uint32_t>(sh.d / 2 * key_ld(sh));
  L.kk = c.take<uint32_t>(tkp / 2 * sh.d);
  L.vt = c.take<uint32_t>(sh.dv / 2 * key_ld(sh));
  L.pv = c.take<uint32_t>(tq32 / 2 * kBlockK);
  L.dsv = c.take<uint32_t>(tq32 / 2 * kBlockK);
  L.drow = c.take<float>(tq32);
  L.lse = c.take<float>(tq32);
  L.dqacc = c.take<float>(tq32 * sh.d);
  L.s = c.take<float>(tq32 * kBlockK);
  L.dp = c.take<float>(tq32 * kBlockK);
  L.t = c.take<float>(std::max(sh.d, sh.dv) * kBlockK);
  if (bytes) *bytes = c.used + 64;
  return L;
}


using x86::kTileConfig;

// ---- AVX-512 helpers (kernels/x86/attention_avx512_common.h) ----

using x86::attn::bf16_lanes;
using x86::attn::dot_row;
using x86::attn::scale_row;
using x86::attn::scale_tile;
using x86::attn::softmax_row;
using x86::attn::exp2_nonpos16;
using x86::attn::kLog2e;
using x86::attn::lanes_below;
using x86::attn::pair_words;
using x86::attn::pairs_of_rows;
using x86::attn::rows_bf16;
using x86::attn::store_bf16;
using x86::attn::store_bf16_fast;
using x86::attn::transpose16;

// ---- layouts ----

// dst [cols × ld] bf16 = transpose of fp32 src [rows × cols], rounded as
// rows_bf16; columns [rows, ld) zero. ld % 16 == 0.
MILRT_AMX_TARGET void transpose_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(int(cols)));
  for (int64_t i = 0; i < ld; i += 16) {
    const __mmask16 k = lanes_below(i, rows);
    if (!k) {
      for (int64_t c = 0; c < cols; ++c) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * ld + i), _mm256_setzero_si256());
      continue;
    }
    const float* base = src + i * cols;
    for (int64_t c = 0; c < cols; ++c)
      store_bf16(dst + c * ld + i, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, base + c, 4));
  }
}

// out[c·rows + r] = f·t[r·ld + c] for keys c < n and r < rows (rows % 16 == 0;
// t holds at least round_up(n, 16) columns).
MILRT_AMX_TARGET void store_transposed(const float* t, int64_t ld, int64_t rows, int64_t n, float f, float* out) {
  const __m512 vf = _mm512_set1_ps(f);
  for (int64_t c0 = 0; c0 < n; c0 += 16) {
    const int64_t nc = std::min<int64_t>(16, n - c0);
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      __m512 b[16];
      for (int i = 0; i < 16; ++i) b[i] = _mm512_mul_ps(_mm512_loadu_ps(t + (r0 + i) * ld + c0), vf);
      transpose16(b);
      for (int64_t k = 0; k < nc; ++k) _mm512_storeu_ps(out + (c0 + k) * rows + r0, b[k]);
    }
  }
}

// ---- the tile product ----

// C (+)= A·B for one block of GI×GJ 16×16 tiles of C: A bf16 rows (lda
// elements apart), B pair rows (ldb words apart), C fp32 (ldc); k in ksteps
// of 32.
template <int GI, int GJ>
MILRT_AMX_TARGET void mm_block(int64_t ksteps, const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
                               float* c, int64_t ldc, bool acc) {
  const int64_t ldc_b = ldc * 4, lda_b = lda * 2, ldb_b = ldb * 4;
  if (acc) {
    _tile_loadd(0, c, ldc_b);
    if constexpr (GJ == 2) _tile_loadd(1, c + 16, ldc_b);
    if constexpr (GI == 2) _tile_loadd(2, c + 16 * ldc, ldc_b);
    if constexpr (GI == 2 && GJ == 2) _tile_loadd(3, c + 16 * ldc + 16, ldc_b);
  } else {
    _tile_zero(0);
    if constexpr (GJ == 2) _tile_zero(1);
    if constexpr (GI == 2) _tile_zero(2);
    if constexpr (GI == 2 && GJ == 2) _tile_zero(3);
  }
  for (int64_t s = 0; s < ksteps; ++s) {
    const uint32_t* bs = b + s * 16 * ldb;
    const uint16_t* as = a + s * 32;
    _tile_loadd(6, bs, ldb_b);
    if constexpr (GJ == 2) _tile_loadd(7, bs + 16, ldb_b);
    _tile_loadd(4, as, lda_b);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (GJ == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (GI == 2) {
      _tile_loadd(5, as + 16 * lda, lda_b);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (GJ == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, ldc_b);
  if constexpr (GJ == 2) _tile_stored(1, c + 16, ldc_b);
  if constexpr (GI == 2) _tile_stored(2, c + 16 * ldc, ldc_b);
  if constexpr (GI == 2 && GJ == 2) _tile_stored(3, c + 16 * ldc + 16, ldc_b);
}

// C [m × n] (+)= A [m × k] · B [k × n]; m, n multiples of 16, k of 32.
MILRT_AMX_TARGET void amx_mm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* b,
                             int64_t ldb, float* c, int64_t ldc, bool acc) {
  const int64_t ks = k / 32;
  if (ks == 0) {
    if (!acc)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  for (int64_t i = 0; i < m; i += 32) {
    const bool two_i = m - i >= 32;
    for (int64_t j = 0; j < n; j += 32) {
      const bool two_j = n - j >= 32;
      const uint16_t* ai = a + i * lda;
      const uint32_t* bj = b + j;
      float* cij = c + i * ldc + j;
      if (two_i && two_j) mm_block<2, 2>(ks, ai, lda, bj, ldb, cij, ldc, acc);
      else if (two_i) mm_block<2, 1>(ks, ai, lda, bj, ldb, cij, ldc, acc);
      else if (two_j) mm_block<1, 2>(ks, ai, lda, bj, ldb, cij, ldc, acc);
      else mm_block<1, 1>(ks, ai, lda, bj, ldb, cij, ldc, acc);
    }
  }
}

// ---- forward ----

MILRT_AMX_TARGET void forward(const float* q, const float* k, const float* v, float* o, const AttentionShape& sh,
                              const AttentionMask& mask, const FwdLayout& L, float* lse) {
  const int64_t d = sh.d, dv = sh.dv, tkp = round_up(sh.tk, 32), ldk = key_ld(sh), offset = sh.tk - sh.tq;
  rows_bf16(q, sh.tq, d, L.qb, round_up(sh.tq, 16));
  rows_bf16(k, sh.tk, d, L.kb, tkp);
  bf16_rows_to_pair_panel(L.kb, d, sh.tk, d, ldk, L.kt);
  pairs_of_rows(v, sh.tk, dv, L.vv, tkp);
  _tile_loadconfig(&kTileConfig);
  for (int64_t i0 = 0; i0 < sh.tq; i0 += kBlockQ) {
    const int64_t bq = std::min(kBlockQ, sh.tq - i0), bq16 = round_up(bq, 16);
    std::memset(L.ob, 0, size_t(bq16 * dv) * 4);
    std::fill(L.m, L.m + bq, kNegInf);
    std::fill(L.l, L.l + bq, 0.0f);
    if (bq16 > bq) std::memset(L.p + bq * kTileK, 0, size_t((bq16 - bq) * kTileK) * 2);
    // Keys past the block's last query's limit are masked for every row of it.
    const int64_t kend = sh.causal ? std::clamp<int64_t>(i0 + bq + offset, 0, sh.tk) : sh.tk;
    for (int64_t j0 = 0; j0 < kend; j0 += kTileK) {
      const int64_t bk = std::min(kTileK, kend - j0), bk16 = round_up(bk, 16), bk32 = round_up(bk, 32);
      amx_mm(bq16, bk16, d, L.qb + i0 * d, d, L.kt + j0, ldk, L.s, kTileK, false);
      const bool cut = sh.causal && j0 + bk - 1 > i0 + offset;  // some row of the tile sees fewer keys
      float scale = sh.scale;
      if (mask.kind != AttentionMaskKind::none) {
        scale_tile(L.s, kTileK, bq, bk, scale);
        AttentionShape c = sh;
        c.causal = cut;
        attention_mask_tile(L.s, kTileK, i0, bq, j0, bk, c, mask);
        scale = 1.0f;
      }
      for (int64_t r = 0; r < bq; ++r) {
        const int64_t n =
            cut && mask.kind == AttentionMaskKind::none ? std::clamp<int64_t>(i0 + r + offset + 1 - j0, 0, bk) : bk;
        const float corr = softmax_row(L.s + r * kTileK, n, bk32, scale, L.m[r], L.l[r], L.p + r * kTileK);
        if (corr != 1.0f) scale_row(L.ob + r * dv, dv, corr);
      }
      amx_mm(bq16, dv, bk32, L.p, kTileK, L.vv + j0 / 2 * dv, dv, L.ob, dv, true);
    }
    for (int64_t r = 0; r < bq; ++r) {
      // l = 0: the row saw no key; 0/0 as the reference gives.
      const float inv = L.l[r] > 0 ? 1.0f / L.l[r] : std::numeric_limits<float>::quiet_NaN();
      const __m512 vi = _mm512_set1_ps(inv);
      for (int64_t c = 0; c < dv; c += 16)
        _mm512_storeu_ps(o + (i0 + r) * dv + c, _mm512_mul_ps(_mm512_loadu_ps(L.ob + r * dv + c), vi));
      if (lse) lse[i0 + r] = L.l[r] > 0 ? L.m[r] + __builtin_logf(L.l[r]) : kNegInf;
    }
  }
  _tile_release();
}

// ---- backward ----

MILRT_AMX_TARGET void backward(const float* q, const float* k, const float* v, const float* o, const float* dout,
                               const float* lse, float* dq, float* dk, float* dv, const AttentionShape& sh,
                               const AttentionMask& mask, const BwdLayout& L) {
  const int64_t d = sh.d, dvn = sh.dv, tq32 = round_up(sh.tq, 32), tkp = round_up(sh.tk, 32);
  const int64_t ldk = key_ld(sh), ldq = query_ld(sh);
  const int64_t offset = sh.tk - sh.tq;
  rows_bf16(q, sh.tq, d, L.qb, tq32);
  transpose_bf16(q, sh.tq, d, L.qt, ldq);
  rows_bf16(k, sh.tk, d, L.kb, tkp);
  bf16_rows_to_pair_panel(L.kb, d, sh.tk, d, ldk, L.kt);
  pairs_of_rows(k, sh.tk, d, L.kk, tkp);
  rows_bf16(v, sh.tk, dvn, L.vb, tkp);
  bf16_rows_to_pair_panel(L.vb, dvn, sh.tk, dvn, ldk, L.vt);
  rows_bf16(dout, sh.tq, dvn, L.dob, tq32);
  transpose_bf16(dout, sh.tq, dvn, L.dot, ldq);
  for (int64_t i = 0; i < sh.tq; ++i) L.drow[i] = dot_row(dout + i * dvn, o + i * dvn, dvn);
  std::memset(L.dqacc, 0, size_t(tq32 * d) * 4);
  const __m512 vscale = _mm512_set1_ps(sh.scale);

  _tile_loadconfig(&kTileConfig);
  for (int64_t j0 = 0; j0 < sh.tk; j0 += kBlockK) {
    const int64_t bk = std::min(kBlockK, sh.tk - j0), bk16 = round_up(bk, 16), bk32 = round_up(bk, 32);
    // The strip of queries that see the block, from a multiple of 32 (the
    // rows before its first query are masked for every key of it).
    const int64_t first = sh.causal ? std::clamp<int64_t>(j0 - offset, 0, sh.tq) : 0;
    if (first == sh.tq) {  // causal: no later key is seen either
      std::memset(dk + j0 * d, 0, size_t((sh.tk - j0) * d) * 4);
      std::memset(dv + j0 * dvn, 0, size_t((sh.tk - j0) * dvn) * 4);
      break;
    }
    const int64_t i0 = first / 32 * 32, bq = sh.tq - i0, bq16 = round_up(bq, 16), bq32 = round_up(bq, 32);
    amx_mm(bq16, bk16, d, L.qb + i0 * d, d, L.kt + j0, ldk, L.s, kBlockK, false);
    amx_mm(bq16, bk16, dvn, L.dob + i0 * dvn, dvn, L.vt + j0, ldk, L.dp, kBlockK, false);
    const bool masked = mask.kind != AttentionMaskKind::none;
    const bool cut = sh.causal && j0 + bk - 1 > i0 + offset;
    if (masked) {
      scale_tile(L.s, kBlockK, bq, bk, sh.scale);
      AttentionShape c = sh;
      c.causal = cut;
      attention_mask_tile(L.s, kBlockK, i0, bq, j0, bk, c, mask);
    }
    // P = 2^(s·vmul − lse·log2 e): the scale (unless the mask step applied it) and log2 e in one factor.
    const __m512 vmul = _mm512_set1_ps((masked ? 1.0f : sh.scale) * kLog2e);
    // Two query rows at a time: P = exp(S − lse) and dS = P∘(dP − D) in fp32
    // (zero for masked keys, rows past Tq and rows that see no key), dS as
    // bf16 rows (A of dQ += dS·K_j), P and dS interleaved by pairs of rows
    // (B of dVᵀ = dOᵀ·P and dKᵀ = Qᵀ·dS).
    for (int64_t pr = 0; pr < bq32 / 2; ++pr) {
      int64_t n[2];
      __m512 vl[2], vd[2];
      for (int h = 0; h < 2; ++h) {
        const int64_t r = 2 * pr + h, i = i0 + r;
        const bool live = r < bq && lse[i] != kNegInf;
        n[h] = !live ? 0 : cut && !masked ? std::clamp<int64_t>(i + offset + 1 - j0, 0, bk) : bk;
        vl[h] = _mm512_set1_ps(live ? lse[i] * kLog2e : 0.0f);
        vd[h] = _mm512_set1_ps(live ? L.drow[i] : 0.0f);
      }
      const float* s0 = L.s + 2 * pr * kBlockK;
      const float* d0 = L.dp + 2 * pr * kBlockK;
      uint16_t* b0 = L.dsb + 2 * pr * kBlockK;
      for (int64_t c = 0; c < kBlockK; c += 16) {
        __m512 p[2], ds[2];
        for (int h = 0; h < 2; ++h) {
          const __mmask16 km = lanes_below(c, n[h]);
          const __m512 t = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(km, s0 + h * kBlockK + c), vmul, vl[h]);
          p[h] = _mm512_maskz_mov_ps(km, exp2_nonpos16(t));
          ds[h] = _mm512_maskz_mul_ps(km, p[h], _mm512_sub_ps(_mm512_maskz_loadu_ps(km, d0 + h * kBlockK + c), vd[h]));
          store_bf16_fast(b0 + h * kBlockK + c, ds[h]);
        }
        _mm512_storeu_si512(L.pv + pr * kBlockK + c, pair_words(p[0], p[1]));
        _mm512_storeu_si512(L.dsv + pr * kBlockK + c, pair_words(ds[0], ds[1]));
      }
    }
    // dV_j = (dOᵀ·P)ᵀ.
    amx_mm(dvn, bk16, bq32, L.dot + i0, ldq, L.pv, kBlockK, L.t, kBlockK, false);
    store_transposed(L.t, kBlockK, dvn, bk, 1.0f, dv + j0 * dvn);
    // dK_j = scale·(Qᵀ·dS)ᵀ.
    amx_mm(d, bk16, bq32, L.qt + i0, ldq, L.dsv, kBlockK, L.t, kBlockK, false);
    store_transposed(L.t, kBlockK, d, bk, sh.scale, dk + j0 * d);
    // dQ += dS·K_j (scaled at the end).
    amx_mm(bq16, d, bk32, L.dsb, kBlockK, L.kk + j0 / 2 * d, d, L.dqacc + i0 * d, d, true);
  }
  _tile_release();
  for (int64_t i = 0; i < sh.tq; ++i)
    for (int64_t c = 0; c < d; c += 16)
      _mm512_storeu_ps(dq + i * d + c, _mm512_mul_ps(_mm512_loadu_ps(L.dqacc + i * d + c), vscale));
}

#endif  // __x86_64__

void check(const AttentionShape& sh, const AttentionMask& mask, const char* what) {
  if (sh.tq < 0 || sh.tk < 0 || sh.d < 0 || sh.dv < 0) throw Error(std::string(what) + ": negative size");
  if (!attention_amx_supports(sh, mask))
    throw Error(std::string(what) + ": head dims must be multiples of 32 in [32, 256] (d " + std::to_string(sh.d) +
                ", dv " + std::to_string(sh.dv) + ")");
  if (!attention_amx_usable()) throw Error(std::string(what) + ": AMX bf16 is not usable on this machine");
}

}  // namespace

size_t attention_amx_scratch_floats(const AttentionShape& s) {
  if (s.tq < 0 || s.tk < 0 || s.d < 0 || s.dv < 0) return 0;
  size_t bytes = 0;
  fwd_layout(nullptr, s, &bytes);
  return (bytes + 3) / 4;
}

void attention_bf16_amx(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
                        const AttentionMask& mask, float* scratch, float* lse) {
  check(s, mask, "attention_bf16_amx");
  if (s.tq == 0) return;
#if defined(__x86_64__)
  FwdLayout L = fwd_layout(align64(scratch), s, nullptr);
  forward(q, k, v, o, s, mask, L, lse);
#else
  (void)q, (void)k, (void)v, (void)o, (void)scratch, (void)lse;
#endif
}

void attention_backward_bf16_amx(const float* q, const float* k, const float* v, const float* o, const float* dout,
                                 const float* lse, float* dq, float* dk, float* dv, const AttentionShape& s,
                                 const AttentionMask& mask) {
  check(s, mask, "attention_backward_bf16_amx");
  if (s.tq == 0 || s.tk == 0) {
    std::fill(dq, dq + s.tq * s.d, 0.0f);
    std::fill(dk, dk + s.tk * s.d, 0.0f);
    std::fill(dv, dv + s.tk * s.dv, 0.0f);
    return;
  }
#if defined(__x86_64__)
  size_t bwd_bytes = 0, fwd_bytes = 0;
  bwd_layout(nullptr, s, &bwd_bytes);
  if (!lse) fwd_layout(nullptr, s, &fwd_bytes);
  // Without the forward's lse: a forward pass (into scratch O) gives it.
  const size_t o_floats = lse ? 0 : size_t(s.tq * s.dv) + size_t(s.tq) + 32;
  float* base = attention_thread_scratch((bwd_bytes + fwd_bytes) / 4 + o_floats + 64);
  BwdLayout L = bwd_layout(align64(base), s, nullptr);
  if (!lse) {
    float* fwd_base = base + (bwd_bytes + 3) / 4 + 16;
    float* o_tmp = fwd_base + (fwd_bytes + 3) / 4 + 16;
    forward(q, k, v, o_tmp, s, mask, fwd_layout(align64(fwd_base), s, nullptr), L.lse);
    lse = L.lse;
  }
  backward(q, k, v, o, dout, lse, dq, dk, dv, s, mask, L);
#else
  (void)q, (void)k, (void)v, (void)o, (void)dout, (void)lse;
#endif
}

}  // namespace milrt::kernels
