#include "kernels/threads.h"


#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#ifdef __linux__
#include <sched.h>
#endif

namespace milrt::kernels {
namespace {

// Whitespace-separated fields of a small file's text.
std::string_view next_field(std::string_view& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) {
    s = {};
    return {};
  }
  size_t e = s.find_first_of(" \t\r\n", b);
  if (e == std::string_view::npos) e = s.size();
  std::string_view f = s.substr(b, e - b);
  s.remove_prefix(e);
  return f;
}

std::optional<long long> parse_int(std::string_view s) {
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<std::string> read_small_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return std::nullopt;
  char buf[4096];
  size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  return std::string(buf, n);
}

void take_min(std::optional<double>& best, std::optional<double> q) {
  if (q && (!best || *q < *best)) best = q;
}

// The quota of the cgroup at DIR (under ROOT) and of each ancestor up to
// ROOT, the tightest one. A DIR that does not exist (a cgroup namespace shows
// the host's path) contributes nothing; ROOT itself is still read.
template <class ReadQuota>
std::optional<double> walk_up(const std::string& root, std::string_view path, ReadQuota read) {
  std::optional<double> best;
  std::string rel(path);
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  for (;;) {
    take_min(best, read(root + rel));
    if (rel.empty()) break;
    size_t slash = rel.rfind('/');
    rel.resize(slash == std::string::npos ? 0 : slash);
  }
  return best;
}

int default_threads() {
  if (const char* s = std::getenv("MILRT_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(s, &end, 10);
    if (end != s && *end == '\0' && n > 0) return int(n > 1024 ? 1024 : n);
  }
  return default_cpu_count();
}

std::atomic<int> g_override{0};

}  // namespace

std::optional<double> parse_cgroup_v2_cpu_max(std::string_view text) {
  std::string_view quota = next_field(text);
  std::string_view period = next_field(text);
  if (quota.empty() || quota == "max") return std::nullopt;
  auto q = parse_int(quota);
  // The kernel accepts a quota written alone; the period then stays 100 ms.
  auto p = period.empty() ? std::optional<long long>(100000) : parse_int(period);
  if (!q || !p || *q <= 0 || *p <= 0 || !next_field(text).empty()) return std::nullopt;
  return double(*q) / double(*p);
}

std::optional<double> parse_cgroup_v1_quota(std::string_view quota_text, std::string_view period_text) {
  std::string_view quota = next_field(quota_text);
  std::string_view period = next_field(period_text);
  auto q = parse_int(quota);
  auto p = parse_int(period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;  // -1: no quota
  return double(*q) / double(*p);
}

int cpus_for_quota(double cpus) {
  if (!(cpus > 0)) return 1;
  if (cpus >= 1 << 20) return 1 << 20;
  // 1e-9 absorbs quotas such as 3 x 33333 us over 100000 us.
  return std::max(1, int(std::ceil(cpus - 1e-9)));
}

CgroupPaths parse_proc_self_cgroup(std::string_view text) {
  CgroupPaths out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    // "hierarchy-ID:controller-list:cgroup-path"; the path may contain ':'.
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    if (id == "0" && controllers.empty()) {
      out.v2 = std::string(path);
      continue;
    }
    while (!controllers.empty()) {
      size_t comma = controllers.find(',');
      std::string_view name = controllers.substr(0, comma);
      controllers.remove_prefix(comma == std::string_view::npos ? controllers.size() : comma + 1);
      if (name == "cpu") out.v1_cpu = std::string(path);
    }
  }
  return out;
}

std::optional<double> cgroup_cpu_quota() {
  auto self = read_small_file("/proc/self/cgroup");
  if (!self) return std::nullopt;
  CgroupPaths paths = parse_proc_self_cgroup(*self);
  std::optional<double> best;
  if (!paths.v1_cpu.empty()) {
    // The v1 cpu controller's usual mount points (systemd and Docker).
    for (const char* root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct,cpu"}) {
      take_min(best, walk_up(root, paths.v1_cpu, [](const std::string& dir) -> std::optional<double> {
                 auto q = read_small_file(dir + "/cpu.cfs_quota_us");
                 auto p = read_small_file(dir + "/cpu.cfs_period_us");
                 return q && p ? parse_cgroup_v1_quota(*q, *p) : std::nullopt;
               }));
    }
  } else if (!paths.v2.empty()) {
    // Pure v2 (no v1 cpu controller): the unified hierarchy at /sys/fs/cgroup.
    take_min(best, walk_up("/sys/fs/cgroup", paths.v2, [](const std::string& dir) -> std::optional<double> {
               auto t = read_small_file(dir + "/cpu.max");
               return t ? parse_cgroup_v2_cpu_max(*t) : std::nullopt;
             }));
  }
  return best;
}

int affinity_cpu_count() {
#ifdef __linux__
  // A dynamically sized set: machines with more than CPU_SETSIZE (1024) CPUs exist.
  for (int n = 1024; n <= (1 << 18); n *= 4) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (!set) return 0;
    size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      int count = CPU_COUNT_S(size, set);
      CPU_FREE(set);
      return count;
    }
    int err = errno;
    CPU_FREE(set);
    if (err != EINVAL) return 0;
  }
#endif
  return 0;
}

int default_cpu_count() {
  int n = affinity_cpu_count();
  if (n <= 0) n = int(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  if (auto q = cgroup_cpu_quota()) n = std::min(n, cpus_for_quota(*q));
  return n;
}

int pass_threads(int64_t elements, int64_t pieces) {
  if (elements < (int64_t(1) << 16) || in_parallel()) return 1;
  return int(std::max<int64_t>(1, std::min<int64_t>(num_threads(), pieces)));
}

int num_threads() {
  static const int def = default_threads();
  int o = g_override.load(std::memory_order_relaxed);
  return o > 0 ? o : def;
}

void set_num_threads(int n) { g_override.store(n > 0 ? n : 0, std::memory_order_relaxed); }

}  // namespace milrt::kernels
