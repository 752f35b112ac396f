// The thread count of the multi-threaded kernels (GEMM). Results never depend
// on it: kernels split work into independent output blocks whose arithmetic
// is the same whichever thread computes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace milrt::kernels {

// MILRT_THREADS when set to a positive integer, else default_cpu_count();
// read once. set_num_threads overrides it (n >= 1; n <= 0 restores the
// default).
int num_threads();
void set_num_threads(int n);

// True inside an OpenMP parallel region or a kernels::pool_for body
// (thread_pool.h): kernels called there run serially instead of starting
// threads of their own.
bool in_parallel();

// Threads for a memory-bound pass over `elements` values split into at most
// `pieces` independent parts: 1 inside a parallel region or below 2^16
// values, where waking the threads costs more than they save; else up to
// num_threads().
int pass_threads(int64_t elements, int64_t pieces = INT64_MAX);

// body(begin, end) over [0, n) in one chunk per thread of pass_threads(n)
// (serially when that is 1): for elementwise passes, whose results do not
// depend on the split.
// Only translation units built with OpenMP (the kernels') may instantiate it:
// elsewhere the pragma would be dropped and the pass would run on one thread.
template <class F>
void for_each_chunk(int64_t n, F body) {
#if !defined(_OPENMP)
  static_assert(sizeof(F) == 0, "for_each_chunk needs a translation unit compiled with OpenMP");
#endif
  const int threads = pass_threads(n);
  if (threads <= 1) return body(int64_t(0), n);
  const int64_t chunk = (n + threads - 1) / threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
  for (int t = 0; t < threads; ++t) {
    const int64_t b = int64_t(t) * chunk, e = n < b + chunk ? n : b + chunk;
    if (b < e) body(b, e);
  }
}

// The CPUs this process may use: the CPUs in its affinity mask
// (sched_getaffinity: taskset, cpusets, container --cpuset-cpus), lowered to
// the cgroup CPU quota rounded up (docker --cpus=1.5 gives 2) when one
// applies; at least 1. hardware_concurrency() counts the machine's CPUs
// instead, which oversubscribes a container limited by either means.
int default_cpu_count();

// The parts of default_cpu_count, exposed for tests. Each parser takes a
// file's text and returns the quota in CPUs (quota / period), or nullopt when
// the text says there is none ("max", -1) or cannot be read.
int affinity_cpu_count();  // 0 when sched_getaffinity fails
// cgroup v2 cpu.max: "QUOTA PERIOD" or "max PERIOD" (microseconds).
std::optional<double> parse_cgroup_v2_cpu_max(std::string_view text);
// cgroup v1 cpu.cfs_quota_us ("-1" when unlimited) and cpu.cfs_period_us.
std::optional<double> parse_cgroup_v1_quota(std::string_view quota_text, std::string_view period_text);
// A quota in CPUs as a thread count: rounded up, at least 1.
int cpus_for_quota(double cpus);

// Where this process's CPU controller lives according to /proc/self/cgroup's
// text: the cgroup v2 path ("0::PATH") and the v1 path of the hierarchy
// holding the "cpu" controller ("N:cpu,cpuacct:PATH"); empty when absent.
struct CgroupPaths {
  std::string v2;
  std::string v1_cpu;
};
CgroupPaths parse_proc_self_cgroup(std::string_view text);

// The tightest CPU quota over this process's cgroup and its ancestors
// (nullopt: none), read from /sys/fs/cgroup.
std::optional<double> cgroup_cpu_quota();

}  // namespace milrt::kernels
