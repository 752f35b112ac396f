// A persistent thread pool for parallel work too short for OpenMP's wake-up.
//
// Decoding a token runs ~290 plan steps, most of them products of 20-100 µs.
// An OpenMP region costs about 1 µs while its workers spin, but 40-45 µs on a
// VM once they sleep (OMP_WAIT_POLICY=passive, which shared machines want),
// as long as a whole 768 x 768 product. The pool's workers spin for a short
// window after each job (kPoolSpinMicros), so back-to-back steps find them
// awake, and then sleep on a futex (std::atomic::wait), so an idle process
// costs nothing, whatever OMP_WAIT_POLICY says.
//
//   kernels::pool_for(threads, blocks, [&](int64_t b) { block(b); });
//
// Used by the decode-sized kernels (weight_gemm's streaming rows, attention
// over a KV cache); large kernels stay on OpenMP, whose static schedules they
// tune. Which thread runs an index never changes what it computes, so results
// do not depend on the thread count.
#pragma once

#include <cstdint>

#include "kernels/threads.h"

namespace milrt::kernels {

// How long a worker waits awake after its last job before it sleeps: longer
// than the gap between two decode steps (tens of µs), short enough that an
// idle process stops using the CPU at once to a user's eye. For the first
// kPoolPauseMicros it spins on the pause instruction; after that it yields
// the CPU between checks, so that OpenMP's workers of a larger step that
// follows are not slowed by a pool worker spinning on their core.
constexpr int kPoolPauseMicros = 100;
constexpr int kPoolSpinMicros = 1000;

namespace detail {
using PoolBody = void (*)(const void* ctx, int64_t index);
void pool_run(int threads, int64_t n, PoolBody body, const void* ctx);
}  // namespace detail

// body(i) for every i in [0, n), on up to `threads` threads: the caller and
// threads - 1 persistent workers, each taking one contiguous range of
// indices (as OpenMP's schedule(static)). Serial when threads <= 1, n <= 1,
// inside in_parallel(), or while another thread's job holds the pool. The
// first exception a body throws is rethrown here after every started index
// has finished.
template <class F>
void pool_for(int threads, int64_t n, const F& body) {
  if (threads <= 1 || n <= 1 || in_parallel()) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  detail::pool_run(
      threads, n, [](const void* ctx, int64_t i) { (*static_cast<const F*>(ctx))(i); }, &body);
}

// The wall time of one empty pool_for over `threads` threads after 20 µs of
// work on this thread (about the gap between two decode products): the median
// of five, measured once per thread count. Kernels compare it with their own
// run time to decide whether a second thread pays.
double pool_region_seconds(int threads);

}  // namespace milrt::kernels
