#include "kernels/generic/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/gemm.h"
#include "kernels/generic/softmax.h"
#include "milrt/error.h"

namespace milrt::kernels {
namespace {

// 64 queries × 128 keys of scores (32 KiB) stay in L1/L2 beside the K and V
// tiles while both products and the softmax run over them.
constexpr int64_t kBlockQ = 64;
constexpr int64_t kTileK = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Scratch {
  float* s;     // [kBlockQ, kTileK] scores, then probabilities
  float* m;     // [kBlockQ] running row maxima
  float* l;     // [kBlockQ] running row sums
};

}  // namespace

void attention_mask_tile(float* s, int64_t ld, int64_t i0, int64_t bq, int64_t j0, int64_t bk, const AttentionShape& sh,
                         const AttentionMask& mask) {
  for (int64_t r = 0; r < bq; ++r) {
    float* row = s + r * ld;
    int64_t i = i0 + r;
    if (mask.kind == AttentionMaskKind::additive) {
      const float* mrow = static_cast<const float*>(mask.data) + i * mask.row_stride + j0 * mask.col_stride;
      if (mask.col_stride == 1)
        for (int64_t c = 0; c < bk; ++c) row[c] += mrow[c];
      else
        for (int64_t c = 0; c < bk; ++c) row[c] += mrow[c * mask.col_stride];
    } else if (mask.kind == AttentionMaskKind::keep) {
      const uint8_t* mrow = static_cast<const uint8_t*>(mask.data) + i * mask.row_stride + j0 * mask.col_stride;
      for (int64_t c = 0; c < bk; ++c)
        if (!mrow[c * mask.col_stride]) row[c] = kNegInf;
    }
    if (sh.causal) {
      int64_t last = i + (sh.tk - sh.tq);  // the last key this query sees
      for (int64_t c = std::max<int64_t>(last + 1 - j0, 0); c < bk; ++c) row[c] = kNegInf;
    }
  }
}

KeySpan attention_visible_keys(const AttentionMask& mask, int64_t i0, int64_t bq, int64_t kend) {
  if (kend <= 0) return {};
  if (mask.kind == AttentionMaskKind::none) return {0, kend};
  auto open = [&](int64_t i, int64_t j) {
    const int64_t at = i * mask.row_stride + j * mask.col_stride;
    if (mask.kind == AttentionMaskKind::keep) return static_cast<const uint8_t*>(mask.data)[at] != 0;
    return static_cast<const float*>(mask.data)[at] != kNegInf;  // NaN leaves the key open, as it is in the scores
  };
  int64_t lo = kend, hi = 0;
  const int64_t rows = mask.row_stride == 0 ? std::min<int64_t>(bq, 1) : bq;
  for (int64_t i = i0; i < i0 + rows; ++i) {
    for (int64_t j = 0; j < lo; ++j)
      if (open(i, j)) {
        lo = j;
        break;
      }
    for (int64_t j = kend - 1; j >= std::max(hi, lo); --j)
      if (open(i, j)) {
        hi = j + 1;
        break;
      }
  }
  return lo < hi ? KeySpan{lo, hi} : KeySpan{};
}

size_t attention_scratch_floats(const AttentionShape&) { return size_t(kBlockQ * kTileK + 2 * kBlockQ); }

void attention_f32(const float* q, const float* k, const float* v, float* o, const AttentionShape& sh,
                   const AttentionMask& mask, float* scratch, float* lse) {
  if (sh.tq < 0 || sh.tk < 0 || sh.d < 0 || sh.dv < 0) throw Error("attention: negative size");
  Scratch sc{scratch, scratch + kBlockQ * kTileK, scratch + kBlockQ * kTileK + kBlockQ};
  const int64_t offset = sh.tk - sh.tq;
  for (int64_t i0 = 0; i0 < sh.tq; i0 += kBlockQ) {
    const int64_t bq = std::min(kBlockQ, sh.tq - i0);
    float* ob = o + i0 * sh.dv;
    std::fill(ob, ob + bq * sh.dv, 0.0f);
    std::fill(sc.m, sc.m + bq, kNegInf);
    std::fill(sc.l, sc.l + bq, 0.0f);
    // Keys past the block's last query's limit are masked for every row of it.
    int64_t kend = sh.causal ? std::clamp<int64_t>(i0 + bq - 1 + offset + 1, 0, sh.tk) : sh.tk;
    const KeySpan keys = attention_visible_keys(mask, i0, bq, kend);
    for (int64_t j0 = keys.lo; j0 < keys.hi; j0 += kTileK) {
      const int64_t bk = std::min(kTileK, keys.hi - j0);
      gemm(bq, bk, sh.d, MatrixRef{q + i0 * sh.d, ElemType::f32, sh.d, false},
           MatrixRef{k + j0 * sh.d, ElemType::f32, sh.d, true}, OutputRef{sc.s, ElemType::f32, kTileK},
           Epilogue{.alpha = sh.scale}, sh.math);
      bool causal_cut = sh.causal && j0 + bk - 1 > i0 + offset;  // some row of the tile sees fewer keys
      if (mask.kind != AttentionMaskKind::none || causal_cut) {
        AttentionShape cut = sh;
        cut.causal = causal_cut;
        attention_mask_tile(sc.s, kTileK, i0, bq, j0, bk, cut, mask);
      }
      for (int64_t r = 0; r < bq; ++r) {
        float* row = sc.s + r * kTileK;
        float m_new = std::max(sc.m[r], row_max_f32(row, bk));
        if (m_new == kNegInf) {  // nothing seen yet: the tile adds nothing
          std::fill(row, row + bk, 0.0f);
          continue;
        }
        float corr = std::exp(sc.m[r] - m_new);  // 0 when m was -inf
        sc.l[r] = sc.l[r] * corr + exp_shift_sum_f32(row, bk, m_new);
        sc.m[r] = m_new;
        if (corr != 1.0f) scale_row_f32(ob + r * sh.dv, sh.dv, corr);
      }
      gemm(bq, sh.dv, bk, MatrixRef{sc.s, ElemType::f32, kTileK, false},
           MatrixRef{v + j0 * sh.dv, ElemType::f32, sh.dv, false}, OutputRef{ob, ElemType::f32, sh.dv},
           Epilogue{.residual = ob, .residual_type = ElemType::f32, .residual_ld = sh.dv}, sh.math);
    }
    for (int64_t r = 0; r < bq; ++r) {
      // l = 0: the row saw no key; 0/0 as the reference gives.
      float inv = sc.l[r] > 0 ? 1.0f / sc.l[r] : std::numeric_limits<float>::quiet_NaN();
      scale_row_f32(ob + r * sh.dv, sh.dv, inv);
      if (lse) lse[i0 + r] = sc.l[r] > 0 ? sc.m[r] + std::log(sc.l[r]) : kNegInf;
    }
  }
}

}  // namespace milrt::kernels
