// Fused attention for one (batch, head) slice, flash style:
//
//   O = softmax(scale·Q·Kᵀ + mask [+ causal]) · V
//
// Q [Tq, D], K [Tk, D], V [Tk, Dv] and O [Tq, Dv] are dense row-major fp32.
// Queries are taken in blocks and keys in tiles; each tile's scores go
// through an online softmax (running row maximum and sum) straight into O, so
// no Tq×Tk matrix exists. Causal: query i sees keys j <= i + (Tk - Tq) (the
// last query sees every key, as in decoding against a cache); tiles wholly
// above that line are skipped. A row that sees no key (all masked) gives NaN,
// as the reference does.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/gemm.h"

namespace milrt::kernels {

enum class AttentionMaskKind : uint8_t {
  none,
  additive,  // float, added to the scaled scores
  keep,      // one byte per element: nonzero keeps the score, zero masks it out
};

// The mask element of (query i, key j) is data[i·row_stride + j·col_stride];
// strides of 0 broadcast.
struct AttentionMask {
  AttentionMaskKind kind = AttentionMaskKind::none;
  const void* data = nullptr;
  int64_t row_stride = 0, col_stride = 0;
};

struct AttentionShape {
  int64_t tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1;
  bool causal = false;
  // The products' math (kernels/gemm.h): bf16 rounds their operands (Q, K, V,
  // the probabilities and, backward, dO and dS) to bf16 and accumulates in
  // fp32, as the AMX kernels do; on avx512_bf16 it runs on vdpbf16ps.
  GemmMath math = GemmMath::fp32;
};

// Adds the mask and, when s.causal, the causal limit (-inf) to the scores of
// queries [i0, i0 + bq) × keys [j0, j0 + bk), stored in rows `ld` apart.
// Shared with the backward kernel so both see exactly the same scores.
void attention_mask_tile(float* s, int64_t ld, int64_t i0, int64_t bq, int64_t j0, int64_t bk, const AttentionShape& sh,
                         const AttentionMask& mask);

// The keys [lo, hi) of [0, kend) that some query of rows [i0, i0 + bq) may
// see through `mask`: every key outside is masked out (additive -inf, or keep
// 0) for each of those queries, so its probability is exactly 0 and a kernel
// need not read its K and V rows. Decoding against a cache of `seq` rows
// then reads only the filled part. lo == hi when no query of the block sees
// any key. Reads at most bq·kend mask elements (one row when row_stride is 0).
struct KeySpan {
  int64_t lo = 0, hi = 0;
};
KeySpan attention_visible_keys(const AttentionMask& mask, int64_t i0, int64_t bq, int64_t kend);

// fp32 elements of scratch attention_f32 needs for `s` (allocate once, reuse).
size_t attention_scratch_floats(const AttentionShape& s);

// Keys that attention_visible_keys finds masked for a whole query block are
// skipped: their K and V rows are not read, so a non-finite value there does
// not turn the row into NaN as it would in the reference (where its score is
// NaN before the mask is added).
//
// Throws milrt::Error for negative sizes. Allocates nothing (the GEMMs it
// calls keep a per-thread buffer that only grows). `lse` [Tq], when given,
// receives each row's log Σ_j exp(s_ij) of the masked, scaled scores (-inf
// for a row that sees no key), which the backward kernel takes instead of
// recomputing it.
void attention_f32(const float* q, const float* k, const float* v, float* o, const AttentionShape& s,
                   const AttentionMask& mask, float* scratch, float* lse = nullptr);

}  // namespace milrt::kernels
