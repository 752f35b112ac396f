#include "kernels/generic/attention_backward.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/generic/softmax.h"
#include "kernels/threads.h"
#include "milrt/error.h"

namespace milrt::kernels {
namespace {

// Work goes by key block: each product runs over the strip of every query
// that sees the block at once, so the GEMM packs K_j and V_j once per block
// rather than once per 64-query tile (12 heads of 64, T = 512, causal, one
// AVX2 core: 27.2 ms against 31.1 ms with 64 × 64 tiles; 32 or 128 keys per
// block were slower). The strips (Tq × 64 scores and their gradient,
// 256 KiB at T = 512) stay in L2.
constexpr int64_t kBlockK = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Query i's last visible key is i + offset; rows of a tile need a cut when
// its last key lies past its first query's limit.
bool tile_cut(const AttentionShape& sh, int64_t i0, int64_t j0, int64_t bk) {
  return sh.causal && j0 + bk - 1 > i0 + (sh.tk - sh.tq);
}

// S = scale·Q·K_jᵀ for queries [i0, i0 + bq) and keys [j0, j0 + bk) into
// rows kBlockK apart, masked.
void scores_tile(const float* q, const float* k, float* s, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                 const AttentionShape& sh, const AttentionMask& mask) {
  gemm(bq, bk, sh.d, MatrixRef{q + i0 * sh.d, ElemType::f32, sh.d, false},
       MatrixRef{k + j0 * sh.d, ElemType::f32, sh.d, true}, OutputRef{s, ElemType::f32, kBlockK},
       Epilogue{.alpha = sh.scale}, sh.math);
  const bool cut = tile_cut(sh, i0, j0, bk);
  if (mask.kind != AttentionMaskKind::none || cut) {
    AttentionShape c = sh;
    c.causal = cut;
    attention_mask_tile(s, kBlockK, i0, bq, j0, bk, c, mask);
  }
}

// The first query that sees key j0 (Tq when none does).
int64_t first_query(const AttentionShape& sh, int64_t j0) {
  return sh.causal ? std::clamp<int64_t>(j0 - (sh.tk - sh.tq), 0, sh.tq) : 0;
}

// lse of every query row by an online pass over the key blocks (running
// maximum m and sum l per row, as the forward keeps them).
void row_lse(const float* q, const float* k, float* m, float* s, float* l, const AttentionShape& sh,
             const AttentionMask& mask) {
  std::fill(m, m + sh.tq, kNegInf);
  std::fill(l, l + sh.tq, 0.0f);
  for (int64_t j0 = 0; j0 < sh.tk; j0 += kBlockK) {
    const int64_t bk = std::min(kBlockK, sh.tk - j0), i0 = first_query(sh, j0);
    if (i0 == sh.tq) break;
    scores_tile(q, k, s, i0, sh.tq - i0, j0, bk, sh, mask);
    for (int64_t i = i0; i < sh.tq; ++i) {
      float* row = s + (i - i0) * kBlockK;
      const float m_new = std::max(m[i], row_max_f32(row, bk));
      if (m_new == kNegInf) continue;
      l[i] = l[i] * std::exp(m[i] - m_new) + exp_shift_sum_f32(row, bk, m_new);
      m[i] = m_new;
    }
  }
  for (int64_t i = 0; i < sh.tq; ++i) m[i] = l[i] > 0 ? m[i] + std::log(l[i]) : kNegInf;
}

}  // namespace

float* attention_thread_scratch(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

AttentionSlicePlan attention_slice_plan(int64_t n, double macs_per_slice, double kv_bytes_per_slice) {
  // The GEMM's threshold: below it a parallel region costs more than it saves
  // (config tiny, 4 heads of 16 at T = 64: forward 72 -> 60 µs per call),
  // unless the slices stream a KV cache (Stories110M decoding, 12 heads of
  // 256 cached keys: 64 -> 39 µs per layer on 2 threads).
  const double macs = double(n) * macs_per_slice, kv_bytes = double(n) * kv_bytes_per_slice;
  constexpr double kMinMacs = double(1 << 20), kMinKvBytes = double(1 << 20);
  if (in_parallel() || (macs < kMinMacs && kv_bytes < kMinKvBytes)) return {};
  return {int(std::min<int64_t>(n, num_threads())), macs < kMinMacs};
}

void attention_backward_f32(const float* q, const float* k, const float* v, const float* o, const float* dout,
                            const float* lse_in, float* dq, float* dk, float* dv, const AttentionShape& sh,
                            const AttentionMask& mask) {
  if (sh.tq < 0 || sh.tk < 0 || sh.d < 0 || sh.dv < 0) throw Error("attention backward: negative size");
  std::fill(dq, dq + sh.tq * sh.d, 0.0f);
  std::fill(dk, dk + sh.tk * sh.d, 0.0f);
  std::fill(dv, dv + sh.tk * sh.dv, 0.0f);
  if (sh.tq == 0 || sh.tk == 0) return;

  const size_t strip = size_t(sh.tq * kBlockK);
  float* s = attention_thread_scratch(2 * strip + 3 * size_t(sh.tq));
  float* dp = s + strip;
  float* drow = dp + strip;         // [Tq] D_i
  float* lse_own = drow + sh.tq;    // [Tq]
  float* l = lse_own + sh.tq;       // [Tq]
  const float* lse = lse_in;
  if (!lse) {
    row_lse(q, k, lse_own, s, l, sh, mask);
    lse = lse_own;
  }
  // A row that sees no key has P = 0 and a NaN output row (the forward's
  // 0/0): its D_i is 0, or 0·(dP − NaN) would spread NaN into dK and dV.
  for (int64_t i = 0; i < sh.tq; ++i)
    drow[i] = lse[i] == kNegInf ? 0.0f : dot_row_f32(dout + i * sh.dv, o + i * sh.dv, sh.dv);

  for (int64_t j0 = 0; j0 < sh.tk; j0 += kBlockK) {
    const int64_t bk = std::min(kBlockK, sh.tk - j0), i0 = first_query(sh, j0), bq = sh.tq - i0;
    if (bq == 0) break;  // causal: no later key is seen either
    scores_tile(q, k, s, i0, bq, j0, bk, sh, mask);
    for (int64_t r = 0; r < bq; ++r) {
      float* row = s + r * kBlockK;
      if (lse[i0 + r] == kNegInf) std::fill(row, row + bk, 0.0f);  // the row sees no key
      else exp_shift_sum_f32(row, bk, lse[i0 + r]);
    }
    const float* dob = dout + i0 * sh.dv;
    float* dkb = dk + j0 * sh.d;
    float* dvb = dv + j0 * sh.dv;
    float* dqb = dq + i0 * sh.d;
    gemm(bk, sh.dv, bq, MatrixRef{s, ElemType::f32, kBlockK, true}, MatrixRef{dob, ElemType::f32, sh.dv, false},
         OutputRef{dvb, ElemType::f32, sh.dv}, Epilogue{}, sh.math);
    gemm(bq, bk, sh.dv, MatrixRef{dob, ElemType::f32, sh.dv, false}, MatrixRef{v + j0 * sh.dv, ElemType::f32, sh.dv, true},
         OutputRef{dp, ElemType::f32, kBlockK}, Epilogue{}, sh.math);
    for (int64_t r = 0; r < bq; ++r) softmax_grad_row_f32(s + r * kBlockK, dp + r * kBlockK, bk, drow[i0 + r]);
    gemm(bq, sh.d, bk, MatrixRef{dp, ElemType::f32, kBlockK, false}, MatrixRef{k + j0 * sh.d, ElemType::f32, sh.d, false},
         OutputRef{dqb, ElemType::f32, sh.d},
         Epilogue{.alpha = sh.scale, .residual = dqb, .residual_type = ElemType::f32, .residual_ld = sh.d}, sh.math);
    gemm(bk, sh.d, bq, MatrixRef{dp, ElemType::f32, kBlockK, true}, MatrixRef{q + i0 * sh.d, ElemType::f32, sh.d, false},
         OutputRef{dkb, ElemType::f32, sh.d}, Epilogue{.alpha = sh.scale}, sh.math);
  }
}

}  // namespace milrt::kernels
