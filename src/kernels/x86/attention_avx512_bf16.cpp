// bf16 fused attention, forward and backward, on AVX-512 with vdpbf16ps
// (kernels/attention_avx512_bf16.h).
//
// Every product is C (+)= A·B with k in pairs: A is read one 32-bit word
// (a pair of bf16 along k) at a time and broadcast, B holds one row of
// 32-bit words per pair p, word j = (B[2p][j], B[2p+1][j]) (the operand
// order of vdpbf16ps), C is fp32. The micro-kernel keeps MR × 16·NV of C in
// zmm registers (6 × 64: 24 accumulators) and takes A with any row and k
// strides, so the same kernel reads A as rows (Q, dO, P, dS) or as columns
// (Pᵀ, dSᵀ from their pair-interleaved form). Operands are laid out once
// per call in per-thread scratch:
//
//   forward   S = Q·Kᵀ:    A = Q rows (bf16);  B = Kt, pair p of d, word j = (K[j][2p], K[j][2p+1])
//             O += P·V:    A = P rows (bf16);  B = Vv, pair p of keys, word c = (V[2p][c], V[2p+1][c])
//   backward  S, dP = dO·Vᵀ as S (B = Kt, Vt);  dQ += dS·K: A = dS rows, B = Kk (pairs of keys)
//             dV = Pᵀ·dO, dK = dSᵀ·Q: A = P, dS interleaved by pairs of query rows (word
//             (p, j) = (X[2p][j], X[2p+1][j]), read down column j), B = dO, Q in pairs of rows.
//
// Padding: key columns of B to 16 with zeros (S past Tk is masked), pairs
// to whole words with zeros; rows of A are never padded (the micro-kernel
// takes 1..6 rows).
//
// Work: the forward takes 24 queries × 256 keys of scores at a time (their
// fp32 scores, bf16 P and the 24 × Dv accumulator stay in L1); the
// backward goes by blocks of 64 keys over the strip of queries that see
// them, in chunks of 96 queries (scores, dP, P and dS of one chunk in L1
// and L2), accumulating dV_j and dK_j in place. Key tiles above the causal
// line are skipped, and the last tile of a query block ends at its last
// query's limit.
//
// Softmax: as the AMX kernels': exp(x) is computed as 2^(x·log2 e) by
// exp2_nonpos16 (attention_avx512_common.h; log2 e folded into the scale and
// the row maximum or lse, ten operations a vector against sixteen, relative
// error below 3e-7), the softmax being the largest cost besides the products
// (forward 131 -> 148 GFLOP/s at T = 512 on one Zen 4 core).
//
// As attention_amx.cpp, the ISA code is compiled through the target
// attribute rather than per-file flags, so the inline functions of shared
// headers this file uses (std::min, std::fill, the Error constructor) are
// emitted for the baseline ISA (the rule in gemm_micro.h); every function
// that executes AVX-512 carries MILRT_ATTN_AVX512_TARGET and runs only when
// attention_avx512_bf16_usable().
#include "kernels/attention_avx512_bf16.h"

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

#include "kernels/x86/attention_avx512_common.h"
#define MILRT_VB16 MILRT_ATTN_AVX512_TARGET
#endif

namespace milrt::kernels {

bool attention_avx512_bf16_usable() {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_bf16;
#else
  return false;
#endif
}

bool attention_avx512_bf16_supports(const AttentionShape& s, const AttentionMask&) {
#if defined(__x86_64__)
  auto ok = [](int64_t d) { return d >= 16 && d <= 256 && d % 16 == 0; };
  return s.tq >= 0 && s.tk >= 0 && ok(s.d) && ok(s.dv);
#else
  (void)s;
  return false;
#endif
}

namespace {

// Measured on the Zen 4 VM (12 heads of 64, T = 512, causal, one thread):
// forward 24 × 256 against 48 × 128 +10%; backward chunks of 96 queries
// against 48 +5%.
constexpr int64_t kBlockQ = 24;   // forward: queries per block (a multiple of the micro-kernel's 6 rows)
constexpr int64_t kTileK = 256;   // forward: keys per score tile
constexpr int64_t kBlockK = 64;   // backward: keys per block
constexpr int64_t kChunkQ = 96;   // backward: queries per chunk of the strip (even)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Row stride (32-bit words) of the operands whose rows run along keys (Kt,
// Vt): padded by 64 bytes past a multiple of 16 words, so that successive
// pair rows do not fall into the same few L1 sets (T = 512: a 2 KiB stride
// puts all 32 rows of a D = 64 panel into 2 sets).
int64_t key_ld(const AttentionShape& sh) { return round_up(sh.tk, 16) + 16; }

struct FwdLayout {
  uint16_t *qb, *kb;
  uint32_t *kt, *vv;
  float* s;
  uint16_t* p;
  float *ob, *m, *l;
};

FwdLayout fwd_layout(char* base, const AttentionShape& sh, size_t* bytes) {
  Carver c{base};
  FwdLayout L;
  L.qb = c.take<uint16_t>(sh.tq * sh.d);
  L.kb = c.take<uint16_t>(sh.tk * sh.d);
  L.kt = c.take<uint32_t>(sh.d / 2 * key_ld(sh));
  L.vv = c.take<uint32_t>(round_up(sh.tk, 2) / 2 * sh.dv);
  L.s = c.take<float>(kBlockQ * kTileK);
  L.p = c.take<uint16_t>(kBlockQ * kTileK);
  L.ob = c.take<float>(kBlockQ * sh.dv);
  L.m = c.take<float>(kBlockQ);
  L.l = c.take<float>(kBlockQ);
  if (bytes) *bytes = c.used + 64;  // + 64: the base is aligned up
  return L;
}

#if defined(__x86_64__)  // the backward layout and everything below run on x86 only

struct BwdLayout {
  uint16_t *qb, *kb, *vb, *dob, *dsb;
  uint32_t *kt, *vt, *kk, *qv, *dov, *pv, *dsv;
  float *drow, *lse, *dqacc, *s, *dp;
};

BwdLayout bwd_layout(char* base, const AttentionShape& sh, size_t* bytes) {
  const int64_t tq2 = round_up(sh.tq, 2), tk2 = round_up(sh.tk, 2);
  Carver c{base};
  BwdLayout L;
  L.qb = c.take<uint16_t>(sh.tq * sh.d);
  L.kb = c.take<uint16_t>(sh.tk * sh.d);
  L.vb = c.take<uint16_t>(sh.tk * sh.dv);
  L.dob = c.take<uint16_t>(sh.tq * sh.dv);
  L.dsb = c.take<uint16_t>(kChunkQ * kBlockK);
  L.kt = c.take<uint32_t>(sh.d / 2 * key_ld(sh));
  L.vt = c.take<uint32_t>(sh.dv / 2 * key_ld(sh));
  L.kk = c.take<uint32_t>(tk2 / 2 * sh.d);
  L.qv = c.take<uint32_t>(tq2 / 2 * sh.d);
  L.dov = c.take<uint32_t>(tq2 / 2 * sh.dv);
  L.pv = c.take<uint32_t>(kChunkQ / 2 * kBlockK);
  L.dsv = c.take<uint32_t>(kChunkQ / 2 * kBlockK);
  L.drow = c.take<float>(sh.tq);
  L.lse = c.take<float>(sh.tq);
  L.dqacc = c.take<float>(sh.tq * sh.d);
  L.s = c.take<float>(kChunkQ * kBlockK);
  L.dp = c.take<float>(kChunkQ * kBlockK);
  if (bytes) *bytes = c.used + 64;
  return L;
}


using x86::attn::dot_row;
using x86::attn::exp2_nonpos16;
using x86::attn::kLog2e;
using x86::attn::interleave_halves;
using x86::attn::lanes_below;
using x86::attn::pairs_of_rows;
using x86::attn::rows_bf16;
using x86::attn::scale_row;
using x86::attn::scale_tile;
using x86::attn::softmax_row;

// dst [rows_pad/2 × cols] words from bf16 rows src [rows × cols] (already
// rounded by rows_bf16): word c of pair row p = (src[2p][c], src[2p+1][c]);
// rows past `rows` read as zero. cols % 16 == 0. As pairs_of_rows of the
// fp32 rows, from half the bytes and without rounding again.
MILRT_VB16 void pairs_of_bf16_rows(const uint16_t* src, int64_t rows, int64_t cols, uint32_t* dst, int64_t rows_pad) {
  for (int64_t p = 0; p < rows_pad / 2; ++p) {
    const int64_t r0 = 2 * p, r1 = 2 * p + 1;
    for (int64_t c = 0; c < cols; c += 16) {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + r0 * cols + c));
      const __m256i hi = r1 < rows ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + r1 * cols + c))
                                   : _mm256_setzero_si256();
      _mm512_storeu_si512(dst + p * cols + c,
                          interleave_halves(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)));
    }
  }
}

// ---- the vdpbf16ps product ----

// C[MR × 16·NV] (+)= A·B over kp pairs of k: A word (i, p) at a[i·ars + p·aks],
// B pair row p at b + p·ldb (16·NV words), C rows ldc floats apart.
template <int MR, int NV, bool ACC>
MILRT_VB16 void mk(int64_t kp, const uint32_t* a, int64_t ars, int64_t aks, const uint32_t* b, int64_t ldb, float* c,
                   int64_t ldc) {
  __m512 r[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) r[i][v] = ACC ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    const uint32_t* ap = a + p * aks;
    const uint32_t* bp = b + p * ldb;
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bp + 16 * v);
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(ap[i * ars]));
      for (int v = 0; v < NV; ++v) r[i][v] = _mm512_dpbf16_ps(r[i][v], av, bv[v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + i * ldc + 16 * v, r[i][v]);
}

constexpr int kMr = 6, kNv = 4;
using MicroKernel = void (*)(int64_t, const uint32_t*, int64_t, int64_t, const uint32_t*, int64_t, float*, int64_t);

template <int MR, bool ACC>
constexpr MicroKernel kRow[kNv] = {mk<MR, 1, ACC>, mk<MR, 2, ACC>, mk<MR, 3, ACC>, mk<MR, 4, ACC>};
template <bool ACC>
constexpr const MicroKernel* kKernels[kMr] = {kRow<1, ACC>, kRow<2, ACC>, kRow<3, ACC>,
                                              kRow<4, ACC>, kRow<5, ACC>, kRow<6, ACC>};

// Causal trimming of a product, per tile of rows [i, i + mr) (t = i + c0 is
// the tile's first row on the causal line's scale): what lies past the line
// is zero (P, dS) or never read (scores past a row's last key), so it is
// skipped, exactly: adding the zero products changes no bit.
//   NEnd:    rows are queries, columns keys: columns [0, round16(t + mr)) only;
//            the rest of C is left as it was (not read: the rows' keys end there).
//   KEnd:    rows are queries, k pairs of keys: pairs up to key t + mr (its P, dS zero past it).
//   KBegin:  rows are keys, k pairs of queries: pairs from query t on (the
//            first query that sees key i; P, dS zero before it).
enum class Trim { None, NEnd, KEnd, KBegin };

// C [m × n] (+)= A [m × 2kp] · B [2kp × n]; n a multiple of 16. A as in mk.
MILRT_VB16 void vmm(int64_t m, int64_t n, int64_t kp, const uint32_t* a, int64_t ars, int64_t aks, const uint32_t* b,
                    int64_t ldb, float* c, int64_t ldc, bool acc, Trim trim = Trim::None, int64_t c0 = 0) {
  for (int64_t j = 0; j < n; j += 16 * kNv) {
    const int64_t nv = std::min<int64_t>(kNv, (n - j) / 16);
    for (int64_t i = 0; i < m; i += kMr) {
      const int64_t mr = std::min<int64_t>(kMr, m - i), t = i + c0;
      int64_t tile_nv = nv, kb = 0, ke = kp;
      if (trim == Trim::NEnd) {
        const int64_t n_end = round_up(std::clamp<int64_t>(t + mr, 0, n), 16);
        tile_nv = std::clamp<int64_t>((n_end - j) / 16, 0, nv);
      }
      if (trim == Trim::KEnd) ke = std::min(kp, (std::clamp<int64_t>(t + mr, 0, 2 * kp) + 1) / 2);
      if (trim == Trim::KBegin) kb = std::min(kp, std::max<int64_t>(t, 0) / 2);
      if (tile_nv == 0) continue;
      (acc ? kKernels<true> : kKernels<false>)[mr - 1][tile_nv - 1](ke - kb, a + i * ars + kb * aks, ars, aks,
                                                                    b + kb * ldb + j, ldb, c + i * ldc + j, ldc);
    }
  }
}

// ---- forward ----

MILRT_VB16 void forward(const float* q, const float* k, const float* v, float* o, const AttentionShape& sh,
                        const AttentionMask& mask, const FwdLayout& L, float* lse) {
  const int64_t d = sh.d, dv = sh.dv, ldk = key_ld(sh), offset = sh.tk - sh.tq;
  rows_bf16(q, sh.tq, d, L.qb, sh.tq);
  rows_bf16(k, sh.tk, d, L.kb, sh.tk);
  bf16_rows_to_pair_panel(L.kb, d, sh.tk, d, ldk, L.kt);
  pairs_of_rows(v, sh.tk, dv, L.vv, round_up(sh.tk, 2));
  const uint32_t* qw = reinterpret_cast<const uint32_t*>(L.qb);
  const uint32_t* pw = reinterpret_cast<const uint32_t*>(L.p);
  for (int64_t i0 = 0; i0 < sh.tq; i0 += kBlockQ) {
    const int64_t bq = std::min(kBlockQ, sh.tq - i0);
    std::memset(L.ob, 0, size_t(bq * dv) * 4);
    std::fill(L.m, L.m + bq, kNegInf);
    std::fill(L.l, L.l + bq, 0.0f);
    // Keys past the block's last query's limit are masked for every row of it.
    const int64_t kend = sh.causal ? std::clamp<int64_t>(i0 + bq + offset, 0, sh.tk) : sh.tk;
    for (int64_t j0 = 0; j0 < kend; j0 += kTileK) {
      const int64_t bk = std::min(kTileK, kend - j0), bk16 = round_up(bk, 16), bk2 = round_up(bk, 2);
      const bool cut = sh.causal && j0 + bk - 1 > i0 + offset;  // some row of the tile sees fewer keys
      // Row r sees keys [j0, i0 + r + offset + 1): without a mask, the
      // products stop there (a mask needs every score of the tile).
      const bool trim = cut && mask.kind == AttentionMaskKind::none;
      const int64_t c0 = i0 + offset - j0;
      vmm(bq, bk16, d / 2, qw + i0 * (d / 2), d / 2, 1, L.kt + j0, ldk, L.s, kTileK, false,
          trim ? Trim::NEnd : Trim::None, c0);
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
        const float corr = softmax_row(L.s + r * kTileK, n, bk16, scale, L.m[r], L.l[r], L.p + r * kTileK);
        if (corr != 1.0f) scale_row(L.ob + r * dv, dv, corr);
      }
      vmm(bq, dv, bk2 / 2, pw, kTileK / 2, 1, L.vv + j0 / 2 * dv, dv, L.ob, dv, true, trim ? Trim::KEnd : Trim::None,
          c0);
    }
    for (int64_t r = 0; r < bq; ++r) {
      // l = 0: the row saw no key; 0/0 as the reference gives.
      const float inv = L.l[r] > 0 ? 1.0f / L.l[r] : std::numeric_limits<float>::quiet_NaN();
      scale_row(L.ob + r * dv, dv, inv);
      std::memcpy(o + (i0 + r) * dv, L.ob + r * dv, size_t(dv) * 4);
      if (lse) lse[i0 + r] = L.l[r] > 0 ? L.m[r] + __builtin_logf(L.l[r]) : kNegInf;
    }
  }
}

// ---- backward ----

MILRT_VB16 void backward(const float* q, const float* k, const float* v, const float* o, const float* dout,
                         const float* lse, float* dq, float* dk, float* dv, const AttentionShape& sh,
                         const AttentionMask& mask, const BwdLayout& L) {
  const int64_t d = sh.d, dvn = sh.dv, ldk = key_ld(sh), offset = sh.tk - sh.tq;
  rows_bf16(q, sh.tq, d, L.qb, sh.tq);
  rows_bf16(k, sh.tk, d, L.kb, sh.tk);
  bf16_rows_to_pair_panel(L.kb, d, sh.tk, d, ldk, L.kt);
  pairs_of_bf16_rows(L.kb, sh.tk, d, L.kk, round_up(sh.tk, 2));
  rows_bf16(v, sh.tk, dvn, L.vb, sh.tk);
  bf16_rows_to_pair_panel(L.vb, dvn, sh.tk, dvn, ldk, L.vt);
  rows_bf16(dout, sh.tq, dvn, L.dob, sh.tq);
  pairs_of_bf16_rows(L.qb, sh.tq, d, L.qv, round_up(sh.tq, 2));
  pairs_of_bf16_rows(L.dob, sh.tq, dvn, L.dov, round_up(sh.tq, 2));
  // A row that sees no key has P = 0 and a NaN output row: its D_i is unused.
  for (int64_t i = 0; i < sh.tq; ++i)
    L.drow[i] = lse[i] == kNegInf ? 0.0f : dot_row(dout + i * dvn, o + i * dvn, dvn);
  std::memset(L.dqacc, 0, size_t(sh.tq * d) * 4);
  const uint32_t* qw = reinterpret_cast<const uint32_t*>(L.qb);
  const uint32_t* dow = reinterpret_cast<const uint32_t*>(L.dob);
  const uint32_t* dsw = reinterpret_cast<const uint32_t*>(L.dsb);
  const bool masked = mask.kind != AttentionMaskKind::none;
  // P = 2^(s·vmul − lse·log2 e): the scale (unless the mask step applied it) and log2 e in one factor.
  const __m512 vmul = _mm512_set1_ps((masked ? 1.0f : sh.scale) * kLog2e);

  for (int64_t j0 = 0; j0 < sh.tk; j0 += kBlockK) {
    const int64_t bk = std::min(kBlockK, sh.tk - j0), bk16 = round_up(bk, 16), bk2 = round_up(bk, 2);
    // The strip of queries that see the block, from an even row (the rows
    // before its first query are masked for every key of it).
    const int64_t first = sh.causal ? std::clamp<int64_t>(j0 - offset, 0, sh.tq) : 0;
    if (first == sh.tq) {  // causal: no later key is seen either
      std::memset(dk + j0 * d, 0, size_t((sh.tk - j0) * d) * 4);
      std::memset(dv + j0 * dvn, 0, size_t((sh.tk - j0) * dvn) * 4);
      break;
    }
    float* dkj = dk + j0 * d;
    float* dvj = dv + j0 * dvn;
    for (int64_t r0 = first / 2 * 2; r0 < sh.tq; r0 += kChunkQ) {
      const int64_t cq = std::min(kChunkQ, sh.tq - r0), cp = round_up(cq, 2) / 2;
      const bool acc = r0 >= first / 2 * 2 + kChunkQ;  // dV_j, dK_j: the first chunk overwrites
      const bool cut = sh.causal && j0 + bk - 1 > r0 + offset;
      // Without a mask, the products skip what lies past the causal line
      // (Trim); row r of the chunk sees keys [j0, r0 + r + offset + 1).
      const Trim trim_n = cut && !masked ? Trim::NEnd : Trim::None;
      const Trim trim_k = cut && !masked ? Trim::KEnd : Trim::None;
      const Trim trim_kb = cut && !masked ? Trim::KBegin : Trim::None;
      const int64_t c0 = r0 + offset - j0;
      vmm(cq, bk16, d / 2, qw + r0 * (d / 2), d / 2, 1, L.kt + j0, ldk, L.s, kBlockK, false, trim_n, c0);
      vmm(cq, bk16, dvn / 2, dow + r0 * (dvn / 2), dvn / 2, 1, L.vt + j0, ldk, L.dp, kBlockK, false, trim_n, c0);
      if (masked) {
        scale_tile(L.s, kBlockK, cq, bk, sh.scale);
        AttentionShape c = sh;
        c.causal = cut;
        attention_mask_tile(L.s, kBlockK, r0, cq, j0, bk, c, mask);
      }
      // Two query rows at a time: P = exp(S − lse) (as 2^) and dS = P∘(dP − D) in
      // fp32 (zero for masked keys, rows past the chunk and rows that see no
      // key), dS as bf16 rows (A of dQ += dS·K_j), P and dS interleaved by
      // pairs of rows (A of dV_j = Pᵀ·dO and dK_j = dSᵀ·Q).
      for (int64_t pr = 0; pr < cp; ++pr) {
        int64_t n[2];
        __m512 vl[2], vd[2];
        for (int h = 0; h < 2; ++h) {
          const int64_t r = 2 * pr + h, i = r0 + r;
          const bool live = r < cq && lse[i] != kNegInf;
          n[h] = !live ? 0 : cut && !masked ? std::clamp<int64_t>(i + offset + 1 - j0, 0, bk) : bk;
          vl[h] = _mm512_set1_ps(live ? lse[i] * kLog2e : 0.0f);
          vd[h] = _mm512_set1_ps(live ? L.drow[i] : 0.0f);
        }
        const float* s0 = L.s + 2 * pr * kBlockK;
        const float* d0 = L.dp + 2 * pr * kBlockK;
        uint16_t* b0 = L.dsb + 2 * pr * kBlockK;
        for (int64_t c = 0; c < bk16; c += 16) {
          __m512 p[2], ds[2];
          for (int h = 0; h < 2; ++h) {
            const __mmask16 km = lanes_below(c, n[h]);
            const __m512 t = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(km, s0 + h * kBlockK + c), vmul, vl[h]);
            p[h] = _mm512_maskz_mov_ps(km, exp2_nonpos16(t));
            const __m512 dp = _mm512_maskz_loadu_ps(km, d0 + h * kBlockK + c);
            ds[h] = _mm512_maskz_mul_ps(km, p[h], _mm512_sub_ps(dp, vd[h]));
          }
          // VCVTNE2PS2BF16 (the rounding of cvt_bf16): words [0, 16) row 2pr,
          // [16, 32) row 2pr + 1; VPERMW interleaves them into pair words.
          const __m512i pb = (__m512i)_mm512_cvtne2ps_pbh(p[1], p[0]);
          const __m512i db = (__m512i)_mm512_cvtne2ps_pbh(ds[1], ds[0]);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(b0 + c), _mm512_castsi512_si256(db));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(b0 + kBlockK + c), _mm512_extracti64x4_epi64(db, 1));
          _mm512_storeu_si512(L.pv + pr * kBlockK + c, interleave_halves(pb));
          _mm512_storeu_si512(L.dsv + pr * kBlockK + c, interleave_halves(db));
        }
      }
      // dV_j (+)= Pᵀ·dO and dK_j (+)= dSᵀ·Q (scaled after the last chunk).
      vmm(bk, dvn, cp, L.pv, 1, kBlockK, L.dov + r0 / 2 * dvn, dvn, dvj, dvn, acc, trim_kb, -c0);
      vmm(bk, d, cp, L.dsv, 1, kBlockK, L.qv + r0 / 2 * d, d, dkj, d, acc, trim_kb, -c0);
      // dQ += dS·K_j (scaled at the end).
      vmm(cq, d, bk2 / 2, dsw, kBlockK / 2, 1, L.kk + j0 / 2 * d, d, L.dqacc + r0 * d, d, true, trim_k, c0);
    }
    for (int64_t j = 0; j < bk; ++j) scale_row(dkj + j * d, d, sh.scale);
  }
  for (int64_t i = 0; i < sh.tq; ++i) {
    std::memcpy(dq + i * d, L.dqacc + i * d, size_t(d) * 4);
    scale_row(dq + i * d, d, sh.scale);
  }
}

#endif  // __x86_64__

void check(const AttentionShape& sh, const AttentionMask& mask, const char* what) {
  if (sh.tq < 0 || sh.tk < 0 || sh.d < 0 || sh.dv < 0) throw Error(std::string(what) + ": negative size");
  if (!attention_avx512_bf16_supports(sh, mask))
    throw Error(std::string(what) + ": head dims must be multiples of 16 in [16, 256] (d " + std::to_string(sh.d) +
                ", dv " + std::to_string(sh.dv) + ")");
  if (!attention_avx512_bf16_usable())
    throw Error(std::string(what) + ": AVX-512 with avx512_bf16 is not usable on this machine");
}

}  // namespace

size_t attention_avx512_bf16_scratch_floats(const AttentionShape& s) {
  if (s.tq < 0 || s.tk < 0 || s.d < 0 || s.dv < 0) return 0;
  size_t bytes = 0;
  fwd_layout(nullptr, s, &bytes);
  return (bytes + 3) / 4;
}

void attention_bf16_avx512(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
                           const AttentionMask& mask, float* scratch, float* lse) {
  check(s, mask, "attention_bf16_avx512");
  if (s.tq == 0) return;
#if defined(__x86_64__)
  forward(q, k, v, o, s, mask, fwd_layout(align64(scratch), s, nullptr), lse);
#else
  (void)q, (void)k, (void)v, (void)o, (void)scratch, (void)lse;
#endif
}

void attention_backward_bf16_avx512(const float* q, const float* k, const float* v, const float* o,
                                    const float* dout, const float* lse, float* dq, float* dk, float* dv,
                                    const AttentionShape& s, const AttentionMask& mask) {
  check(s, mask, "attention_backward_bf16_avx512");
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
  const size_t o_floats = lse ? 0 : size_t(s.tq * s.dv) + 32;
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
