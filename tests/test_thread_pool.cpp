// kernels::pool_for, the persistent pool for decode-sized work: every index
// runs exactly once on any thread count, work really spreads over threads,
// bodies see in_parallel() and nest serially, exceptions come back to the
// caller, sleeping workers wake for the next job, concurrent callers and a
// forked child each get their work done. A missed wake-up or a lost index
// shows as a wrong count or a hang (ctest's timeout).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/generic/attention_backward.h"
#include "kernels/thread_pool.h"

namespace milrt::kernels {
namespace {

// Runs pool_for(threads, n) and returns how often each index ran.
std::vector<int> run_counts(int threads, int64_t n) {
  std::vector<std::atomic<int>> counts(static_cast<size_t>(n));
  pool_for(threads, n, [&](int64_t i) { counts[size_t(i)].fetch_add(1); });
  std::vector<int> out;
  for (auto& c : counts) out.push_back(c.load());
  return out;
}

TEST(ThreadPool, EveryIndexRunsOnce) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t n : {0, 1, 2, 5, 1000}) {
      const std::vector<int> counts = run_counts(threads, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(counts[size_t(i)], 1) << "threads " << threads << " n " << n << " i " << i;
    }
}

// Indices taking 1 ms each: with two threads both take some.
std::set<std::thread::id> threads_used(int threads, int64_t n) {
  std::mutex m;
  std::set<std::thread::id> ids;
  pool_for(threads, n, [&](int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard lock(m);
    ids.insert(std::this_thread::get_id());
  });
  return ids;
}

TEST(ThreadPool, WorkSpreadsOverThreads) {
  EXPECT_EQ(threads_used(1, 16).size(), 1u);
  const std::set<std::thread::id> ids = threads_used(2, 64);
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_TRUE(ids.count(std::this_thread::get_id())) << "the caller takes indices too";
}

TEST(ThreadPool, SleepingWorkersWakeForTheNextJob) {
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(3 * kPoolSpinMicros));  // past the spin window
    EXPECT_EQ(threads_used(2, 64).size(), 2u) << "round " << round;
  }
}

TEST(ThreadPool, BodiesAreInParallelAndNestSerially) {
  EXPECT_FALSE(in_parallel());
  std::atomic<int> outside{0}, nested{0};
  std::mutex m;
  std::set<std::thread::id> ids;
  pool_for(2, 64, [&](int64_t) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the worker takes some too
    if (!in_parallel()) outside.fetch_add(1);
    {
      std::lock_guard lock(m);
      ids.insert(std::this_thread::get_id());
    }
    const std::thread::id self = std::this_thread::get_id();
    pool_for(2, 8, [&](int64_t) {
      if (std::this_thread::get_id() == self) nested.fetch_add(1);
    });
  });
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(outside.load(), 0);
  EXPECT_EQ(nested.load(), 64 * 8) << "a nested pool_for runs on the thread that calls it";
  EXPECT_FALSE(in_parallel());
}

TEST(ThreadPool, ExceptionReachesTheCallerAndThePoolGoesOn) {
  std::atomic<int> ran{0};
  EXPECT_THROW(pool_for(2, 100,
                        [&](int64_t i) {
                          ran.fetch_add(1);
                          if (i == 7) throw std::runtime_error("index 7");
                        }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 100) << "the other indices still run";
  const std::vector<int> counts = run_counts(2, 500);
  for (int c : counts) ASSERT_EQ(c, 1);
}

TEST(ThreadPool, ConcurrentCallersEachGetTheirWorkDone) {
  std::atomic<int> wrong{0};
  auto caller = [&] {
    for (int job = 0; job < 300; ++job) {
      const std::vector<int> counts = run_counts(2, 33);
      for (int c : counts)
        if (c != 1) wrong.fetch_add(1);
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ThreadPool, ForkedChildHasAWorkingPool) {
  ASSERT_EQ(threads_used(2, 16).size(), 2u);  // the parent's workers exist
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::vector<int> counts = run_counts(2, 200);
    bool ok = threads_used(2, 64).size() == 2;
    for (int c : counts) ok = ok && c == 1;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ThreadPool, RegionCostIsMeasured) {
  const double s = pool_region_seconds(2);
  EXPECT_LT(s, 0.1) << "an empty two-thread job should not take 100 ms";
  EXPECT_EQ(pool_region_seconds(2), s) << "measured once per thread count";
}

// Decode's attention (threads there for the KV cache) runs on the pool;
// training's (threads there for the arithmetic) stays on OpenMP with the GEMMs
// around it, where a spinning pool worker would compete with OpenMP's. (The
// plan, not the template: this file is not compiled with OpenMP, so the
// template's OpenMP loop would run serially here.)
TEST(ThreadPool, AttentionSlicesRunOnThePoolOnlyWhenDecoding) {
  set_num_threads(2);
  // Stories110M decoding: 12 heads, 256 cached keys of 64 (K and V in fp32).
  constexpr int64_t kHeads = 12;
  constexpr double kMacs = 256 * 128, kKvBytes = 256 * 64 * 4 * 2;
  AttentionSlicePlan p = attention_slice_plan(kHeads, kMacs, kKvBytes);
  EXPECT_EQ(p.threads, 2);
  EXPECT_TRUE(p.on_pool);
  std::atomic<int> on_pool{0};
  for_each_attention_slice(kHeads, kMacs, kKvBytes, [&](int64_t) {
    if (in_parallel()) on_pool.fetch_add(1);
  });
  EXPECT_EQ(on_pool.load(), 12);
  // The default config's training: 4 heads, T = 128, 32 per head.
  p = attention_slice_plan(4, 128.0 * 128 * 64, 128 * 32 * 4 * 2);
  EXPECT_EQ(p.threads, 2);
  EXPECT_FALSE(p.on_pool);
  // Too little of either: one thread; inside a pool job: one thread.
  EXPECT_EQ(attention_slice_plan(4, 1000, 1000).threads, 1);
  pool_for(2, 2, [&](int64_t) {
    if (attention_slice_plan(kHeads, kMacs, kKvBytes).threads != 1) on_pool.fetch_add(1000);
  });
  EXPECT_EQ(on_pool.load(), 12);
  set_num_threads(0);
}

}  // namespace
}  // namespace milrt::kernels
