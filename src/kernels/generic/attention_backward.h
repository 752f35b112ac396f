// Fused attention backward for one (batch, head) slice, FlashAttention-2
// style: the gradients of
//
//   O = softmax(scale·Q·Kᵀ + mask [+ causal]) · V
//
// with respect to Q, K and V, given O and dO = ∂loss/∂O. With
// lse_i = log Σ_j exp(s_ij) (the forward's row log-sum-exp) and
// D_i = Σ_c dO_ic·O_ic, each block of 64 keys j recomputes P = exp(S − lse)
// for the strip of queries that see it and forms
//
//   dV_j = Pᵀ·dO,   dS = P ∘ (dO·V_jᵀ − D),   dQ += scale·dS·K_j,   dK_j = scale·dSᵀ·Q
//
// so no Tq×Tk matrix exists (the strip is Tq×64). Shapes, masks and the causal convention (query
// i sees keys j <= i + Tk − Tq) are the forward's (attention.h); tiles wholly
// above the causal line are skipped. A query row that sees no key has a NaN
// output in the forward; here it contributes nothing (its dQ row is 0).
#pragma once

#include "kernels/generic/attention.h"
#include "kernels/thread_pool.h"

namespace milrt::kernels {

// q [Tq, D], k [Tk, D], v [Tk, Dv], o and dout [Tq, Dv]; writes dq [Tq, D],
// dk [Tk, D], dv [Tk, Dv] (overwritten, not accumulated). `lse` [Tq] is the
// forward's row log-sum-exp of the masked, scaled scores; null: recomputed
// here (one more Q·Kᵀ pass). Throws milrt::Error for negative sizes. Uses a
// per-thread scratch buffer that only grows, and the GEMM's; serial (callers
// run slices on different threads).
void attention_backward_f32(const float* q, const float* k, const float* v, const float* o, const float* dout,
                            const float* lse, float* dq, float* dk, float* dv, const AttentionShape& s,
                            const AttentionMask& mask);

// How n slices of attention are spread: on `threads` threads (1 inside a
// parallel region, or when all slices together hold fewer than 2^20
// multiply-adds (`macs_per_slice` each) and read fewer than 1 MiB of keys and
// values (`kv_bytes_per_slice` each), where waking the threads costs more
// than they save; else up to num_threads()), and on the persistent pool
// (thread_pool.h) when the threads are there for the KV cache alone (fewer
// than 2^20 multiply-adds: decoding, 20-70 µs a layer, too short for waking
// OpenMP's sleeping workers; two threads read the cache about twice as fast).
// Training's attention stays on OpenMP with the GEMMs around it: a pool
// worker spinning beside OpenMP's spinning workers (the default wait policy)
// made a small model's training step 5x slower on 2 cores.
struct AttentionSlicePlan {
  int threads = 1;
  bool on_pool = false;
};
AttentionSlicePlan attention_slice_plan(int64_t n, double macs_per_slice, double kv_bytes_per_slice);

// Runs body(slice) for every slice in [0, n) as attention_slice_plan() says.
// Each slice is computed whole by one thread, so results do not depend on
// the thread count; body must not throw. A template, so that a run allocates
// nothing (a std::function would hold a large closure on the heap, once per
// call: per layer per decoded token).
template <class Body>
void for_each_attention_slice(int64_t n, double macs_per_slice, double kv_bytes_per_slice, const Body& body) {
  const AttentionSlicePlan plan = attention_slice_plan(n, macs_per_slice, kv_bytes_per_slice);
  if (plan.threads <= 1) {
    for (int64_t b = 0; b < n; ++b) body(b);
    return;
  }
  if (plan.on_pool) return pool_for(plan.threads, n, body);
  // Slices differ in cost only through their masks; dynamic evens that out.
  // (Serial in a translation unit without OpenMP: a test of the pool branch.)
#if defined(_OPENMP)
#pragma omp parallel for num_threads(plan.threads) schedule(dynamic, 1)
#endif
  for (int64_t b = 0; b < n; ++b) body(b);
}

// A per-thread fp32 buffer of at least `floats` elements that only grows.
float* attention_thread_scratch(size_t floats);

}  // namespace milrt::kernels
