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

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// One worker's mailbox, on its own cache line: the submitter writes the job's
// number into `job` for exactly the workers that job uses.
struct alignas(64) Worker {
  int rank = 0;  // 1, 2, ...: the caller is 0
  std::atomic<uint32_t> job{0};
  std::atomic<bool> sleeping{false};
};

// The indices [next, end) of one participant's range still unclaimed.
struct alignas(64) Range {
  std::atomic<int64_t> next{0};
  int64_t end = 0;
};

// A job is split into one contiguous range per participant, as OpenMP's
// schedule(static) does: each core then streams its own part of a weight
// matrix, which its prefetchers follow (indices handed out one at a time
// interleave the cores' reads; measured far slower on decode). A participant
// that finishes its range claims what is left of the others', so the caller
// never waits for a worker that has not started: where an OpenMP thread
// spinning on the same core keeps a worker from running, the caller does its
// range. A worker touches a job only after entering it (`active_`) while it is
// open (`state_`); the caller closes the job once every index is done and then
// waits only for workers that entered, which find nothing left to claim.
class Pool {
 public:
  // Runs a job; false when another thread's job holds the pool.
  bool run(int threads, int64_t n, detail::PoolBody body, const void* ctx) {
    std::unique_lock lock(submit_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    const int workers = grow(threads - 1);
    const int parts = workers + 1;
    body_ = body, ctx_ = ctx, parts_ = parts;
    for (int r = 0; r < parts; ++r) {
      ranges_[size_t(r)].next.store(n * r / parts, std::memory_order_relaxed);
      ranges_[size_t(r)].end = n * (r + 1) / parts;
    }
    done_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    if (++job_count_ == 0) ++job_count_;  // 0 is what a new worker has seen
    const uint32_t job = job_count_;
    state_.store(uint64_t(job) << 1 | 1, std::memory_order_seq_cst);  // open
    for (int i = 0; i < workers; ++i) {
      Worker& w = *workers_[size_t(i)];
      // seq_cst against the worker's `sleeping` store then `job` load: one
      // of the two sees the other, so a worker never sleeps through a job.
      w.job.store(job, std::memory_order_seq_cst);
      if (w.sleeping.load(std::memory_order_seq_cst)) w.job.notify_one();
    }
    t_in_task = true;
    participate(0);
    t_in_task = false;
    wait_until([&] { return done_.load(std::memory_order_acquire) == n; });
    // seq_cst against a worker's `active_` increment then `state_` load.
    state_.store(uint64_t(job) << 1, std::memory_order_seq_cst);  // closed
    wait_until([&] { return active_.load(std::memory_order_seq_cst) == 0; });
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  template <class Ready>
  static void wait_until(const Ready& ready) {
    for (int spins = 0; !ready(); ++spins) {
      if (spins < 4096) cpu_relax();
      else std::this_thread::yield();  // a participant was descheduled mid-index: let it run
    }
  }

  // Starts workers until there are `want` (as many as the system gives);
  // returns how many this job uses.
  int grow(int want) {
    if (ranges_.size() < size_t(want) + 1) ranges_ = std::vector<Range>(size_t(want) + 1);
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

  // Own range first, then what is left of the others'.
  void participate(int rank) {
    int64_t done = 0;
    for (int k = 0; k < parts_; ++k) {
      Range& r = ranges_[size_t((rank + k) % parts_)];
      for (int64_t i; (i = r.next.fetch_add(1, std::memory_order_relaxed)) < r.end; ++done) {
        try {
          body_(ctx_, i);
        } catch (...) {
          if (!failed_.exchange(true)) error_ = std::current_exception();
        }
      }
    }
    if (done) done_.fetch_add(done, std::memory_order_release);
  }

  void work(Worker* w) {
    uint32_t seen = 0;  // not a load: the first job may be posted before this thread starts
    for (;;) {
      seen = wait_for_job(*w, seen);
      active_.fetch_add(1, std::memory_order_seq_cst);
      if (state_.load(std::memory_order_seq_cst) == (uint64_t(seen) << 1 | 1)) {
        t_in_task = true;
        participate(w->rank);
        t_in_task = false;
      }
      active_.fetch_sub(1, std::memory_order_release);
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
      const uint32_t job = w.job.load(std::memory_order_acquire);
      if (job != seen) return job;
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
        if (w.job.load(std::memory_order_seq_cst) == seen) w.job.wait(seen, std::memory_order_seq_cst);
        w.sleeping.store(false, std::memory_order_relaxed);
        start = clock::now();
        spins = 0;
      }
    }
  }

  std::mutex submit_;
  std::vector<Worker*> workers_;
  // The current job, written before the workers' mailboxes.
  detail::PoolBody body_ = nullptr;
  const void* ctx_ = nullptr;
  int parts_ = 1;
  std::vector<Range> ranges_;
  uint32_t job_count_ = 0;
  alignas(64) std::atomic<uint64_t> state_{0};  // job number << 1 | open
  alignas(64) std::atomic<int> active_{0};      // workers inside a job
  alignas(64) std::atomic<int64_t> done_{0};    // indices finished
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
  constexpr int kMaxThreads = 1024;
  threads = int(std::min<int64_t>({int64_t(threads), n, int64_t(kMaxThreads)}));
  if (threads > 1 && pool().run(threads, n, body, ctx)) return;
  for (int64_t i = 0; i < n; ++i) body(ctx, i);
}

}  // namespace detail

double pool_region_seconds(int threads) {
  constexpr int kMax = 1024;
  static std::atomic<int64_t> ns[kMax + 1];  // 0: not measured yet
  threads = std::clamp(threads, 1, kMax);
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
