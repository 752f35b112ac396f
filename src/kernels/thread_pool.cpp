#include "kernels/thread_pool.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace milrt::kernels {
namespace {

thread_local bool t_in_task = false;

// More threads than this are taken as this many (a sanity bound, far above
// any core count milrt meets).
constexpr int kPoolMaxThreads = 1024;

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One worker's mailbox, on its own cache line: the submitter bumps `gen` for
// exactly the workers a job uses, so a worker wakes only for jobs it takes
// part in and never reads a later job's fields by mistake.
struct alignas(64) Worker {
  int rank = 0;  // 1, 2, ...: the caller is 0
  std::atomic<uint32_t> gen{0};
  std::atomic<bool> sleeping{false};
};

class Pool {
 public:
  // Runs a job; false when another thread's job holds the pool.
  bool run(int threads, int64_t n, detail::PoolBody body, const void* ctx) {
    std::unique_lock lock(submit_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    const int workers = grow(threads - 1);
    body_ = body, ctx_ = ctx, n_ = n, threads_ = workers + 1;
    pending_.store(workers, std::memory_order_relaxed);
    error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    for (int i = 0; i < workers; ++i) {
      Worker& w = *workers_[size_t(i)];
      // seq_cst against the worker's `sleeping` store then `gen` load: one
      // of the two sees the other, so a worker never sleeps through a job.
      w.gen.fetch_add(1, std::memory_order_seq_cst);
      if (w.sleeping.load(std::memory_order_seq_cst)) w.gen.notify_one();
    }
    t_in_task = true;
    take_indices(0);
    t_in_task = false;
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 4096) cpu_relax();
      else std::this_thread::yield();  // a worker was descheduled: let it run
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  // Starts workers until there are `want` (as many as the system gives);
  // returns how many this job uses.
  int grow(int want) {
    while (int(workers_.size()) < want) {
      auto* w = new Worker;  // lives as long as the process: its detached thread reads it
      w->rank = int(workers_.size()) + 1;
      try {
        std::thread(&Pool::work, this, w).detach();
      } catch (const std::exception&) {
        delete w;
        break;
      }
      workers_.push_back(w);
    }
    return std::min(want, int(workers_.size()));
  }

  // Participant `rank` of threads_ takes one contiguous range, as OpenMP's
  // schedule(static) does: each core then streams its own part of a weight
  // matrix, which its prefetchers follow (indices handed out one at a time
  // interleave the two cores' reads: int8 decode with int8 activations
  // measured 113-168 tok/s against 218-229 on the Zen 4 VM).
  void take_indices(int rank) {
    const int64_t begin = n_ * rank / threads_, end = n_ * (rank + 1) / threads_;
    for (int64_t i = begin; i < end; ++i) {
      try {
        body_(ctx_, i);
      } catch (...) {
        if (!failed_.exchange(true)) error_ = std::current_exception();
      }
    }
  }

  void work(Worker* w) {
    uint32_t seen = 0;  // not a load: the first job may be posted before this thread starts
    for (;;) {
      seen = wait_for_job(*w, seen);
      t_in_task = true;
      take_indices(w->rank);
      t_in_task = false;
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  // Spins on pause for kPoolPauseMicros, then yields the CPU between checks
  // until kPoolSpinMicros (a thread of OpenMP's that shares the core gets to
  // run), then sleeps until the next job's notify.
  static uint32_t wait_for_job(Worker& w, uint32_t seen) {
    using clock = std::chrono::steady_clock;
    constexpr auto kPause = std::chrono::microseconds(kPoolPauseMicros);
    constexpr auto kSpin = std::chrono::microseconds(kPoolSpinMicros);
    auto start = clock::now();
    for (int spins = 1;; ++spins) {
      const uint32_t g = w.gen.load(std::memory_order_acquire);
      if (g != seen) return g;
      if (spins < 256) {
        cpu_relax();
        continue;
      }
      const auto waited = clock::now() - start;
      if (waited < kPause) {
        cpu_relax();
      } else if (waited < kSpin) {
        std::this_thread::yield();
      } else {
        w.sleeping.store(true, std::memory_order_seq_cst);
        if (w.gen.load(std::memory_order_seq_cst) == seen) w.gen.wait(seen, std::memory_order_seq_cst);
        w.sleeping.store(false, std::memory_order_relaxed);
        start = clock::now();
        spins = 0;
      }
    }
  }

  std::mutex submit_;
  std::vector<Worker*> workers_;
  // The current job, written before the workers' `gen` is bumped.
  detail::PoolBody body_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t n_ = 0;
  int threads_ = 1;
  alignas(64) std::atomic<int> pending_{0};  // workers still in the job
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

// Never destroyed: detached workers may still spin on it while the process
// exits. A forked child has none of the parent's workers, so it starts a new
// pool (the old one, possibly locked mid-job, is left behind).
std::atomic<Pool*> g_pool{nullptr};

Pool& pool() {
  static const bool started = [] {
    g_pool.store(new Pool, std::memory_order_release);
    pthread_atfork(nullptr, nullptr, [] { g_pool.store(new Pool, std::memory_order_relaxed); });
    return true;
  }();
  (void)started;
  return *g_pool.load(std::memory_order_acquire);
}

}  // namespace

bool in_parallel() { return t_in_task || omp_in_parallel(); }

namespace detail {

void pool_run(int threads, int64_t n, PoolBody body, const void* ctx) {
  threads = int(std::min<int64_t>({int64_t(threads), n, int64_t(kPoolMaxThreads)}));
  if (threads > 1 && pool().run(threads, n, body, ctx)) return;
  for (int64_t i = 0; i < n; ++i) body(ctx, i);
}

}  // namespace detail

double pool_region_seconds(int threads) {
  static std::atomic<int64_t> ns[kPoolMaxThreads + 1];  // 0: not measured yet
  threads = std::clamp(threads, 1, kPoolMaxThreads);
  if (int64_t v = ns[threads].load(std::memory_order_relaxed); v > 0) return double(v) * 1e-9;
  using clock = std::chrono::steady_clock;
  std::atomic<int> sink{0};
  auto touch = [&](int64_t) { sink.fetch_add(1, std::memory_order_relaxed); };
  pool_for(threads, threads, touch);  // the workers exist before timing
  double t[5];
  for (double& s : t) {
    for (const auto t0 = clock::now(); clock::now() - t0 < std::chrono::microseconds(20);) {
    }
    const auto t0 = clock::now();
    pool_for(threads, threads, touch);
    s = std::chrono::duration<double>(clock::now() - t0).count();
  }
  std::sort(t, t + 5);
  const int64_t median_ns = std::max<int64_t>(1, int64_t(t[2] * 1e9));
  ns[threads].store(median_ns, std::memory_order_relaxed);
  return double(median_ns) * 1e-9;
}

}  // namespace milrt::kernels
