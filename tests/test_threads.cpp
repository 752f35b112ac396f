// kernels::num_threads's default: the CPUs of the process's affinity mask,
// lowered to its cgroup CPU quota. The parsers of the cgroup files against
// hand-written expectations; the default against /proc/self/status's
// Cpus_allowed_list, read independently here.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

TEST(Threads, CgroupV2CpuMax) {
  EXPECT_EQ(parse_cgroup_v2_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("max"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("200000 100000\n"), 2.0);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("150000 100000\n"), 1.5);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("50000 100000"), 0.5);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("400000 200000\n"), 2.0);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("300000\n"), 3.0);  // period left at its default 100000
  EXPECT_EQ(parse_cgroup_v2_cpu_max(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("abc 100000"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("100000 0"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("-5 100000"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("100000 100000 7"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("12x 100000"), std::nullopt);
}

TEST(Threads, CgroupV1Quota) {
  EXPECT_EQ(parse_cgroup_v1_quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_quota("400000\n", "100000\n"), 4.0);
  EXPECT_EQ(parse_cgroup_v1_quota("250000\n", "100000\n"), 2.5);
  EXPECT_EQ(parse_cgroup_v1_quota("50000", "200000"), 0.25);
  EXPECT_EQ(parse_cgroup_v1_quota("100000\n", "0\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_quota("", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_quota("100000\n", ""), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_quota("max\n", "100000\n"), std::nullopt);
}

TEST(Threads, QuotaRoundsUp) {
  EXPECT_EQ(cpus_for_quota(2.0), 2);
  EXPECT_EQ(cpus_for_quota(1.5), 2);
  EXPECT_EQ(cpus_for_quota(0.25), 1);
  EXPECT_EQ(cpus_for_quota(0.0), 1);
  EXPECT_EQ(cpus_for_quota(-1.0), 1);
  EXPECT_EQ(cpus_for_quota(1.0), 1);
  EXPECT_EQ(cpus_for_quota(1.01), 2);
  EXPECT_EQ(cpus_for_quota(16.01), 17);
}

TEST(Threads, ProcSelfCgroup) {
  // cgroup v2 only (systemd's unified mode, Docker on current distributions).
  CgroupPaths v2 = parse_proc_self_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n");
  EXPECT_EQ(v2.v2, "/user.slice/user-1000.slice/session-3.scope");
  EXPECT_EQ(v2.v1_cpu, "");
  // cgroup v1 (hybrid: a v2 line beside the v1 controllers).
  CgroupPaths v1 = parse_proc_self_cgroup(
      "12:pids:/docker/abc\n"
      "4:cpu,cpuacct:/docker/abc\n"
      "3:cpuset:/docker/abc\n"
      "1:name=systemd:/docker/abc\n"
      "0::/system.slice/docker.service\n");
  EXPECT_EQ(v1.v1_cpu, "/docker/abc");
  EXPECT_EQ(v1.v2, "/system.slice/docker.service");
  // cpuacct alone is not the cpu controller; a path may contain ':'.
  CgroupPaths odd = parse_proc_self_cgroup("2:cpuacct:/a\n1:cpu:/b:c\n");
  EXPECT_EQ(odd.v1_cpu, "/b:c");
  EXPECT_EQ(odd.v2, "");
  EXPECT_EQ(parse_proc_self_cgroup("").v1_cpu, "");
  EXPECT_EQ(parse_proc_self_cgroup("garbage\n").v2, "");
}

// The number of CPUs in a list such as "0-3,8,10-11".
int count_cpu_list(const std::string& list) {
  int n = 0;
  std::stringstream ss(list);
  std::string part;
  while (std::getline(ss, part, ',')) {
    size_t dash = part.find('-');
    if (dash == std::string::npos)
      n += 1;
    else
      n += std::stoi(part.substr(dash + 1)) - std::stoi(part.substr(0, dash)) + 1;
  }
  return n;
}

int cpus_allowed_from_proc_status() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      std::string list = line.substr(line.find(':') + 1);
      list.erase(0, list.find_first_not_of(" \t"));
      return count_cpu_list(list);
    }
  return -1;
}

TEST(Threads, DefaultIsTheAffinityCountUnlessAQuotaIsLower) {
  int allowed = cpus_allowed_from_proc_status();
  ASSERT_GT(allowed, 0);
  EXPECT_EQ(affinity_cpu_count(), allowed);
  auto quota = cgroup_cpu_quota();
  if (quota) {
    EXPECT_EQ(default_cpu_count(), std::min(allowed, cpus_for_quota(*quota))) << "quota " << *quota;
  } else {
    EXPECT_EQ(default_cpu_count(), allowed);
  }
  if (!std::getenv("MILRT_THREADS")) {
    EXPECT_EQ(num_threads(), default_cpu_count());
  }
}

TEST(Threads, FollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  int first = -1;
  for (int i = 0; i < CPU_SETSIZE && first < 0; ++i)
    if (CPU_ISSET(i, &saved)) first = i;
  ASSERT_GE(first, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  int n = affinity_cpu_count(), def = default_cpu_count();
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(def, 1);
}

}  // namespace
}  // namespace milrt::kernels
