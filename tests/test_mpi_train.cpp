// Data-parallel `milrt train` under mpirun (src/llm/distributed.h): two ranks
// equal one process that sees the same micro-batches, resume under MPI equals
// an uninterrupted run, a different world size is refused, ZeRO-1 (--zero 1)
// equals the unsharded optimizer and its state resumes either way, a rank
// that throws (at start-up or mid-run) ends the job with its message and a
// rank killed by SIGKILL ends it too, instead of hanging it; `milrt bench
// train` runs under mpirun.
//
// Runs only when this build has MPI and `mpirun` is on PATH (skipped with a
// message otherwise). Open MPI as root in a container needs
// --allow-run-as-root; --oversubscribe and --bind-to none let 2 ranks share
// fewer cores; vader's single-copy mechanism (CMA) is often not permitted in
// containers, so it is switched off.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "llm/checkpoint.h"
#include "llm/distributed.h"
#include "llm/run_record.h"
#include "milrt/error.h"

namespace fs = std::filesystem;
using namespace milrt;

namespace {

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && access((fs::path(dir) / "mpirun").c_str(), X_OK) == 0) return (fs::path(dir) / "mpirun").string();
  return "";
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct Proc {
  pid_t pid = -1;
  fs::path out, err;
};

// Starts argv in its own process group, stdout and stderr to files.
Proc spawn(const std::vector<std::string>& args, const fs::path& log_prefix) {
  Proc p{-1, log_prefix.string() + ".out", log_prefix.string() + ".err"};
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  p.pid = fork();
  if (p.pid == 0) {
    setpgid(0, 0);
    int in = open("/dev/null", O_RDONLY);
    int o = open(p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(p.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(in, 0), dup2(o, 1), dup2(e, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return p;
}

struct Result {
  int exit_code = -1;
  bool timed_out = false;
  std::string out, err;
  std::string describe() const {
    return "exit " + std::to_string(exit_code) + (timed_out ? " TIMED OUT" : "") + "\n--- stdout ---\n" +
           out.substr(0, 4000) + "\n--- stderr ---\n" + err.substr(0, 4000);
  }
};

// Waits for p, killing its whole process group (mpirun and the ranks) after timeout_s.
Result wait_for(const Proc& p, int timeout_s) {
  Result r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    pid_t w = waitpid(p.pid, &status, WNOHANG);
    if (w == p.pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      kill(-p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = slurp(p.out), r.err = slurp(p.err);
  return r;
}

class MpiTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!llm::dist::built_with_mpi()) GTEST_SKIP() << "this milrt build has no MPI (install libopenmpi-dev and rebuild)";
    mpirun_ = find_mpirun();
    if (mpirun_.empty()) GTEST_SKIP() << "mpirun is not on PATH (install openmpi-bin)";
    setenv("MILRT_THREADS", "1", 1);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    dir_ = fs::temp_directory_path() / ("milrt_mpi_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }

  std::vector<std::string> mpi(int np) const {
    return {mpirun_, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", std::to_string(np)};
  }
  static std::vector<std::string> train(const std::vector<std::string>& extra) {
    std::vector<std::string> a{MILRT_CLI, "train", "--config", "tiny", "--samples", "0", "--log-every", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  static std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  Result run(const std::vector<std::string>& args, const std::string& name, int timeout_s = 120) {
    return wait_for(spawn(args, dir_ / name), timeout_s);
  }

  std::string mpirun_;
  fs::path dir_;
};

// losses.csv rows: every column but the timing ones (ms, tok_s, comm_ms: the last three).
std::vector<std::vector<double>> loss_rows(const fs::path& csv) {
  std::vector<std::vector<double>> rows;
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::vector<double> row;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) row.push_back(cell.empty() || cell == "nan" ? NAN : std::stod(cell));
    row.resize(row.size() >= 3 ? row.size() - 3 : 0);
    rows.push_back(row);
  }
  return rows;
}

void expect_same_losses(const fs::path& a, const fs::path& b, double tol) {
  auto ra = loss_rows(a), rb = loss_rows(b);
  ASSERT_EQ(ra.size(), rb.size());
  ASSERT_FALSE(ra.empty());
  for (size_t i = 0; i < ra.size(); ++i) {
    ASSERT_EQ(ra[i].size(), rb[i].size());
    for (size_t j = 0; j < ra[i].size(); ++j) {
      if (std::isnan(ra[i][j]) || std::isnan(rb[i][j])) {
        EXPECT_EQ(std::isnan(ra[i][j]), std::isnan(rb[i][j])) << "row " << i << " column " << j;
        continue;
      }
      EXPECT_NEAR(ra[i][j], rb[i][j], tol * std::max(1.0, std::abs(ra[i][j]))) << "row " << i << " column " << j;
    }
  }
}

double max_weight_diff(const fs::path& a, const fs::path& b) {
  llm::LlamaWeights wa = llm::load_llama2c_checkpoint(a.string()), wb = llm::load_llama2c_checkpoint(b.string());
  double worst = 0;
  for (const auto& [name, t] : wa.tensors) {
    const Tensor& u = wb.tensors.at(name);
    EXPECT_EQ(t.numel(), u.numel()) << name;
    for (int64_t i = 0; i < std::min(t.numel(), u.numel()); ++i)
      worst = std::max(worst, double(std::abs(t.ptr<float>()[i] - u.ptr<float>()[i])));
  }
  return worst;
}


}  // namespace

// N ranks with --accum A see, per optimizer step, the micro-batches one
// process with --accum N*A sees (rank r keeps micro-batch r of every N in a
// row; validation batches are split the same way). The accumulation order
// differs ((g0+g2)/2 + (g1+g3)/2 against g0+g1+g2+g3, then a mean over
// ranks), so the equality is to float rounding, amplified a little by AdamW:
// losses within 1e-5 relative, weights within 1e-5 absolute after 8 steps.
// With --accum 1 per rank the sum of two floats is the same in either order,
// so that case comes out bit-identical in practice (the test still allows the
// tolerance).
TEST_F(MpiTrain, TwoRanksEqualOneProcessWithTheSameBatchesAccum1) {
  const std::vector<std::string> common{"--steps", "8", "--batch", "4", "--eval-every", "4"};
  Result one = run(train(cat(common, {"--accum", "2", "--out", (dir_ / "one").string()})), "one");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  Result two = run(cat(mpi(2), train(cat(common, {"--accum", "1", "--out", (dir_ / "two").string()}))), "two");
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  EXPECT_NE(two.out.find("final weights identical on all 2 ranks"), std::string::npos) << two.describe();
  EXPECT_NE(two.out.find("tok/s global"), std::string::npos) << two.describe();
  expect_same_losses(dir_ / "one" / "losses.csv", dir_ / "two" / "losses.csv", 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "one" / "checkpoint.bin", dir_ / "two" / "checkpoint.bin"), 1e-5);
  EXPECT_NE(slurp(dir_ / "two" / "run.json").find("\"world_size\": 2"), std::string::npos);
}

// Two "machines": two network namespaces joined by a veth pair, one rank in
// each, so the ranks can reach each other only over TCP, as on two hosts.
// mpirun runs in the first; Open MPI starts the second rank's daemon through
// an rsh agent (written here) that enters the namespace of the host it is
// given, where a real cluster would use ssh. The result must equal one
// process with the same batches, as on one machine. Needs root and `ip netns`
// (skipped, visibly, where the container does not allow them).
TEST_F(MpiTrain, TwoHostsOverTcpEqualOneProcess) {
  if (geteuid() != 0 || (!fs::exists("/usr/sbin/ip") && !fs::exists("/sbin/ip") && !fs::exists("/usr/bin/ip")))
    GTEST_SKIP() << "two-host test needs root and iproute2's ip (network namespaces)";
  const std::string tag = std::to_string(getpid() % 100000);
  const std::string ns[2] = {"milrt" + tag + "a", "milrt" + tag + "b"};
  const std::string veth[2] = {"mv" + tag + "a", "mv" + tag + "b"};
  const std::string ip[2] = {"10.77.0.1", "10.77.0.2"};
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; };
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] { sh("ip netns del " + ns[0]), sh("ip netns del " + ns[1]); }};
  if (!sh("ip netns add " + ns[0]) || !sh("ip netns add " + ns[1]))
    GTEST_SKIP() << "`ip netns add` is not permitted here: two-host test skipped";
  if (!sh("ip link add " + veth[0] + " type veth peer name " + veth[1]))
    GTEST_SKIP() << "no veth pairs here (`ip link add ... type veth`): two-host test skipped";
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(sh("ip link set " + veth[i] + " netns " + ns[i]));
    ASSERT_TRUE(sh("ip -n " + ns[i] + " addr add " + ip[i] + "/24 dev " + veth[i]));
    ASSERT_TRUE(sh("ip -n " + ns[i] + " link set " + veth[i] + " up"));
    ASSERT_TRUE(sh("ip -n " + ns[i] + " link set lo up"));
  }
  const fs::path agent = dir_ / "netns_rsh", hosts = dir_ / "hosts";
  {
    std::ofstream a(agent);
    a << "#!/bin/sh\n# rsh agent: run \"$@\" on host $1, i.e. in its network namespace\nhost=$1; shift\n"
      << "case \"$host\" in " << ip[0] << ") ns=" << ns[0] << " ;; " << ip[1] << ") ns=" << ns[1]
      << " ;; *) echo \"netns_rsh: unknown host $host\" >&2; exit 1 ;; esac\n"
      << "echo \"$host $ns\" >> " << (dir_ / "agent.log").string() << "\n"
      << "exec ip netns exec \"$ns\" sh -c \"$*\"\n";
    std::ofstream h(hosts);
    h << ip[0] << " slots=1\n" << ip[1] << " slots=1\n";
  }
  fs::permissions(agent, fs::perms::owner_all);
  const std::vector<std::string> common{"--steps", "6", "--batch", "4", "--eval-every", "3"};
  Result one = run(train(cat(common, {"--accum", "2", "--out", (dir_ / "one").string()})), "one");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  const std::vector<std::string> launch{"/usr/bin/env", "ip", "netns", "exec", ns[0], mpirun_, "--allow-run-as-root",
                                        "--hostfile", hosts.string(), "-np", "2", "--bind-to", "none",
                                        "--mca", "plm_rsh_agent", agent.string(), "--mca", "btl", "tcp,self",
                                        "--mca", "btl_tcp_if_include", "10.77.0.0/24",
                                        "--mca", "oob_tcp_if_include", "10.77.0.0/24"};
  Result two = run(cat(launch, train(cat(common, {"--accum", "1", "--out", (dir_ / "two").string()}))), "two", 180);
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  // The second rank's daemon was started through the agent, in the other namespace.
  EXPECT_EQ(slurp(dir_ / "agent.log"), ip[1] + " " + ns[1] + "\n");
  EXPECT_NE(two.out.find("final weights identical on all 2 ranks"), std::string::npos) << two.describe();
  expect_same_losses(dir_ / "one" / "losses.csv", dir_ / "two" / "losses.csv", 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "one" / "checkpoint.bin", dir_ / "two" / "checkpoint.bin"), 1e-5);
}

TEST_F(MpiTrain, TwoRanksEqualOneProcessWithTheSameBatchesAccum2) {
  const std::vector<std::string> common{"--steps", "8", "--batch", "4", "--eval-every", "4"};
  Result one = run(train(cat(common, {"--accum", "4", "--out", (dir_ / "one").string()})), "one");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  Result two = run(cat(mpi(2), train(cat(common, {"--accum", "2", "--out", (dir_ / "two").string()}))), "two");
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  expect_same_losses(dir_ / "one" / "losses.csv", dir_ / "two" / "losses.csv", 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "one" / "checkpoint.bin", dir_ / "two" / "checkpoint.bin"), 1e-5);
}

// The all-reduce overlapped with the backward pass (buckets started from the
// step plan's hook as gradients become final) sums exactly what the
// all-reduce after the pass sums, bucket for bucket: the checkpoints are
// the same bytes, and small buckets make most of them start during the pass.
TEST_F(MpiTrain, OverlappedAllReduceEqualsTheOneAfterTheBackwardPass) {
  const std::vector<std::string> common{"--steps", "4", "--batch", "4", "--accum", "2", "--bucket-mb", "0.001"};
  Result on = run(cat(mpi(2), train(cat(common, {"--comm-overlap", "on", "--out", (dir_ / "on").string()}))), "on");
  ASSERT_EQ(on.exit_code, 0) << on.describe();
  Result off = run(cat(mpi(2), train(cat(common, {"--comm-overlap", "off", "--out", (dir_ / "off").string()}))), "off");
  ASSERT_EQ(off.exit_code, 0) << off.describe();
  auto bytes = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string checkpoint = bytes(dir_ / "on" / "checkpoint.bin");
  EXPECT_FALSE(checkpoint.empty());
  EXPECT_TRUE(checkpoint == bytes(dir_ / "off" / "checkpoint.bin")) << "the checkpoints differ";
  std::smatch m;
  const std::string& report = on.out;
  ASSERT_TRUE(std::regex_search(report, m, std::regex(R"((\d+) of (\d+) buckets started during the backward pass)")))
      << report;
  EXPECT_GE(std::stoi(m[2]), 4) << report;
  EXPECT_GT(std::stoi(m[1]), std::stoi(m[2]) / 2) << "most buckets start before the pass ends\n" << report;
  EXPECT_EQ(off.out.find("started during the backward pass"), std::string::npos) << off.describe();
}

// SIGUSR1 to mpirun (which forwards it to every rank) stops the job after one
// step on all ranks, rank 0 saves; --resume under 2 ranks then ends exactly
// where the uninterrupted run does.
TEST_F(MpiTrain, ResumeUnderMpiEqualsAnUninterruptedRun) {
  const std::vector<std::string> common{"--steps", "60", "--batch", "4", "--eval-every", "20"};
  Result whole = run(cat(mpi(2), train(cat(common, {"--out", (dir_ / "whole").string()}))), "whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.describe();

  Proc p = spawn(cat(mpi(2), train(cat(common, {"--out", (dir_ / "cut").string()}))), dir_ / "cut");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(p.out).find("step 5/60") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(p.pid, SIGUSR1);
  Result cut = wait_for(p, 60);
  ASSERT_EQ(cut.exit_code, 0) << cut.describe();
  ASSERT_NE(cut.out.find("interrupted: checkpoint saved at step"), std::string::npos)
      << "the run ended before the signal arrived: " << cut.describe();

  Result resumed = run(cat(mpi(2), train(cat(common, {"--resume", "--out", (dir_ / "cut").string()}))), "resumed");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  expect_same_losses(dir_ / "whole" / "losses.csv", dir_ / "cut" / "losses.csv", 0);
  EXPECT_EQ(slurp(dir_ / "whole" / "checkpoint.bin"), slurp(dir_ / "cut" / "checkpoint.bin"));

  // A different number of ranks is refused, in one line.
  Result single = run(train({"--resume", "--steps", "61", "--out", (dir_ / "cut").string()}), "single");
  EXPECT_EQ(single.exit_code, 2) << single.describe();
  EXPECT_NE(single.err.find("trained by 2 processes (mpirun -np 2), not 1"), std::string::npos) << single.describe();
  EXPECT_EQ(std::count(single.err.begin(), single.err.end(), '\n'), 1) << single.describe();
}

// One rank cannot read its data: the job ends promptly with that rank's
// message (MPI_Abort), the other rank does not wait forever in a collective.
TEST_F(MpiTrain, AFailingRankEndsTheJobWithItsMessage) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> args = mpi(1);
  args = cat(args, train({"--steps", "50", "--out", (dir_ / "ok").string()}));
  args.push_back(":");
  args = cat(args, {"-np", "1"});
  args = cat(args, train({"--steps", "50", "--data", (dir_ / "missing.txt").string(), "--out", (dir_ / "ok").string()}));
  Result r = run(args, "fail", 60);
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("error: rank 1 of 2:"), std::string::npos) << r.describe();
  EXPECT_NE(r.err.find("missing.txt"), std::string::npos) << r.describe();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  EXPECT_FALSE(fs::exists(dir_ / "ok" / "checkpoint.bin"));
}

namespace {

// The largest difference between two training states' moments (same tensors).
double max_state_diff(const fs::path& a, const fs::path& b) {
  llm::TrainState sa = llm::load_train_state(a.string()), sb = llm::load_train_state(b.string());
  EXPECT_EQ(sa.step, sb.step);
  EXPECT_EQ(sa.m.size(), sb.m.size());
  EXPECT_EQ(sa.v.size(), sb.v.size());
  double worst = 0;
  for (const auto* maps : {&sa.m, &sa.v}) {
    const TensorMap& other = maps == &sa.m ? sb.m : sb.v;
    for (const auto& [name, t] : *maps) {
      auto it = other.find(name);
      if (it == other.end()) {
        ADD_FAILURE() << "tensor " << name << " is missing";
        continue;
      }
      EXPECT_EQ(t.numel(), it->second.numel()) << name;
      for (int64_t i = 0; i < std::min(t.numel(), it->second.numel()); ++i)
        worst = std::max(worst, double(std::abs(t.ptr<float>()[i] - it->second.ptr<float>()[i])));
    }
  }
  return worst;
}

// The parent of `pid` (0 when unknown): field 4 of /proc/PID/stat, after the
// command name in parentheses.
pid_t parent_of(pid_t pid) {
  const std::string stat = slurp(fs::path("/proc") / std::to_string(pid) / "stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::stringstream ss(stat.substr(close + 1));
  std::string state;
  long ppid = 0;
  ss >> state >> ppid;
  return pid_t(ppid);
}

// The milrt processes below `root` (mpirun) whose environment says they are
// MPI rank `rank`.
std::vector<pid_t> ranks_below(pid_t root, int rank) {
  std::vector<pid_t> found;
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const pid_t pid = pid_t(std::stol(name));
    bool below = false;
    for (pid_t p = parent_of(pid), hops = 0; p > 1 && hops < 8; p = parent_of(p), ++hops)
      if (p == root) below = true;
    if (!below || slurp(e.path() / "comm").find("milrt") == std::string::npos) continue;
    std::stringstream ss(slurp(e.path() / "environ"));
    std::string var;
    while (std::getline(ss, var, '\0'))
      if (var == want) found.push_back(pid);
  }
  return found;
}

}  // namespace

// ZeRO-1: the AdamW moments sharded over the ranks (reduce-scatter, update
// the part, all-gather) compute what the unsharded optimizer computes; only
// the order of the sums of squares behind the clipping norm differs. Against
// one process with the same micro-batches (--accum N*A): the tolerance of the
// unsharded tests above. train_state.bin holds the whole moments (gathered to
// rank 0), equal to the one process's.
TEST_F(MpiTrain, ZeroOneEqualsOneProcessWithTheSameBatchesAccum1) {
  const std::vector<std::string> common{"--steps", "8", "--batch", "4", "--eval-every", "4"};
  Result one = run(train(cat(common, {"--accum", "2", "--out", (dir_ / "one").string()})), "one");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  Result two = run(cat(mpi(2), train(cat(common, {"--accum", "1", "--zero", "1", "--out", (dir_ / "two").string()}))), "two");
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  EXPECT_NE(two.out.find("ZeRO-1: AdamW moments sharded"), std::string::npos) << two.describe();
  EXPECT_NE(two.out.find("final weights identical on all 2 ranks"), std::string::npos) << two.describe();
  expect_same_losses(dir_ / "one" / "losses.csv", dir_ / "two" / "losses.csv", 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "one" / "checkpoint.bin", dir_ / "two" / "checkpoint.bin"), 1e-5);
  EXPECT_LE(max_state_diff(dir_ / "one" / "train_state.bin", dir_ / "two" / "train_state.bin"), 1e-6);
}

TEST_F(MpiTrain, ZeroOneEqualsOneProcessWithTheSameBatchesAccum4) {
  const std::vector<std::string> common{"--steps", "8", "--batch", "2", "--eval-every", "4"};
  Result one = run(train(cat(common, {"--accum", "8", "--out", (dir_ / "one").string()})), "one");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  Result two = run(cat(mpi(2), train(cat(common, {"--accum", "4", "--zero", "1", "--out", (dir_ / "two").string()}))), "two");
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  expect_same_losses(dir_ / "one" / "losses.csv", dir_ / "two" / "losses.csv", 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "one" / "checkpoint.bin", dir_ / "two" / "checkpoint.bin"), 1e-5);
  EXPECT_LE(max_state_diff(dir_ / "one" / "train_state.bin", dir_ / "two" / "train_state.bin"), 1e-6);
}

// A run stopped under --zero 1 resumes with --zero 1 and without it (the
// state file is whole either way), and both end where the uninterrupted
// unsharded 2-rank run ends.
TEST_F(MpiTrain, ZeroOneRunResumesWithOrWithoutSharding) {
  const std::vector<std::string> common{"--steps", "40", "--batch", "4", "--eval-every", "20"};
  Result whole = run(cat(mpi(2), train(cat(common, {"--out", (dir_ / "whole").string()}))), "whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.describe();

  Proc p = spawn(cat(mpi(2), train(cat(common, {"--zero", "1", "--out", (dir_ / "cut").string()}))), dir_ / "cut");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(p.out).find("step 5/40") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(p.pid, SIGUSR1);
  Result cut = wait_for(p, 60);
  ASSERT_EQ(cut.exit_code, 0) << cut.describe();
  ASSERT_NE(cut.out.find("interrupted: checkpoint saved at step"), std::string::npos)
      << "the run ended before the signal arrived: " << cut.describe();
  fs::copy(dir_ / "cut", dir_ / "cut_plain", fs::copy_options::recursive);

  Result sharded = run(cat(mpi(2), train(cat(common, {"--resume", "--zero", "1", "--out", (dir_ / "cut").string()}))), "resumed");
  ASSERT_EQ(sharded.exit_code, 0) << sharded.describe();
  Result plain = run(cat(mpi(2), train(cat(common, {"--resume", "--out", (dir_ / "cut_plain").string()}))), "resumed_plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.describe();
  for (const char* d : {"cut", "cut_plain"}) {
    SCOPED_TRACE(d);
    expect_same_losses(dir_ / "whole" / "losses.csv", dir_ / d / "losses.csv", 1e-5);
    EXPECT_LE(max_weight_diff(dir_ / "whole" / "checkpoint.bin", dir_ / d / "checkpoint.bin"), 1e-5);
    EXPECT_LE(max_state_diff(dir_ / "whole" / "train_state.bin", dir_ / d / "train_state.bin"), 1e-6);
  }
}

// One process has nothing to shard: --zero 1 says so and changes nothing.
TEST_F(MpiTrain, ZeroOneInOneProcessIsANoOp) {
  const std::vector<std::string> common{"--steps", "4", "--batch", "4", "--eval-every", "2"};
  Result plain = run(train(cat(common, {"--out", (dir_ / "plain").string()})), "plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.describe();
  Result zero = run(train(cat(common, {"--zero", "1", "--out", (dir_ / "zero").string()})), "zero");
  ASSERT_EQ(zero.exit_code, 0) << zero.describe();
  EXPECT_NE(zero.out.find("--zero 1: one process, nothing to shard"), std::string::npos) << zero.describe();
  expect_same_losses(dir_ / "plain" / "losses.csv", dir_ / "zero" / "losses.csv", 0);
  EXPECT_EQ(slurp(dir_ / "plain" / "checkpoint.bin"), slurp(dir_ / "zero" / "checkpoint.bin"));
  EXPECT_EQ(slurp(dir_ / "plain" / "train_state.bin"), slurp(dir_ / "zero" / "train_state.bin"));
}

// A rank that throws in the middle of training (injected: MILRT_TEST_FAIL_RANK)
// while the other waits in the step's collectives: the job ends promptly with
// the failing rank's one-line message, and rank 0's run directory holds the
// last periodic save, whole (checkpoint, state and record of step 2).
TEST_F(MpiTrain, ARankThatThrowsMidRunEndsTheJob) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> args = mpi(2);
  args.insert(args.begin() + 1, {"-x", "MILRT_TEST_FAIL_RANK=1", "-x", "MILRT_TEST_FAIL_STEP=3"});
  Result r = run(cat(args, train({"--steps", "50", "--batch", "4", "--save-every", "2", "--zero", "1", "--out",
                                  (dir_ / "run").string()})),
                 "fail", 60);
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("error: rank 1 of 2: train: failure injected at step 3"), std::string::npos) << r.describe();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 45.0);
  ASSERT_TRUE(fs::exists(dir_ / "run" / "checkpoint.bin")) << r.describe();
  EXPECT_NO_THROW(llm::load_llama2c_checkpoint((dir_ / "run" / "checkpoint.bin").string()));
  EXPECT_EQ(llm::load_train_state((dir_ / "run" / "train_state.bin").string()).step, 2);
  EXPECT_NE(slurp(dir_ / "run" / "run.json").find("\"optimizer_steps\": 2"), std::string::npos);
}

// A rank killed outright (SIGKILL: no message, no MPI_Abort) mid-run: mpirun
// notices the rank died without MPI_Finalize and ends the job; the test's
// timeout turns a hang into a failure instead of a blocked CI.
TEST_F(MpiTrain, ARankKilledBySigkillEndsTheJob) {
  Proc p = spawn(cat(mpi(2), train({"--steps", "400", "--batch", "4", "--save-every", "2", "--out", (dir_ / "run").string()})),
                 dir_ / "killed");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(p.out).find("step 3/400") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<pid_t> victims = ranks_below(p.pid, 1);
  ASSERT_EQ(victims.size(), 1u) << "rank 1's process not found";
  const auto t0 = std::chrono::steady_clock::now();
  kill(victims[0], SIGKILL);
  Result r = wait_for(p, 60);
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.find("step 400/400"), std::string::npos) << r.describe();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 45.0);
  // Whatever rank 0 saved last is whole (files are replaced atomically).
  if (fs::exists(dir_ / "run" / "checkpoint.bin")) {
    EXPECT_NO_THROW(llm::load_llama2c_checkpoint((dir_ / "run" / "checkpoint.bin").string()));
  }
  if (fs::exists(dir_ / "run" / "train_state.bin")) {
    EXPECT_NO_THROW(llm::load_train_state((dir_ / "run" / "train_state.bin").string()));
  }
}

// A rank alive but stuck (SIGSTOP: it neither answers nor dies, so mpirun
// sees nothing wrong): rank 0's collective watchdog ends the job after
// --comm-timeout seconds with a one-line message naming the collective.
TEST_F(MpiTrain, AStuckRankEndsTheJobAfterTheCommTimeout) {
  Proc p = spawn(cat(mpi(2), train({"--steps", "400", "--batch", "4", "--comm-timeout", "2", "--out",
                                    (dir_ / "run").string()})),
                 dir_ / "stuck");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (slurp(p.out).find("step 3/400") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<pid_t> stuck = ranks_below(p.pid, 1);
  ASSERT_EQ(stuck.size(), 1u) << "rank 1's process not found";
  const auto t0 = std::chrono::steady_clock::now();
  kill(stuck[0], SIGSTOP);
  Result r = wait_for(p, 60);
  kill(stuck[0], SIGKILL);  // in case mpirun left it stopped
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("error: rank 0 of 2: no reply from every rank for"), std::string::npos) << r.describe();
  EXPECT_NE(r.err.find("--comm-timeout"), std::string::npos) << r.describe();
  EXPECT_EQ(r.out.find("step 400/400"), std::string::npos) << r.describe();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 2.0) << "ended before the timeout";
  EXPECT_LT(took, 45.0);
}

// The documented default, and a negative timeout refused (no MPI needed).
TEST(CommTimeout, DefaultIsTenMinutesAndNegativeIsRefused) {
  EXPECT_THROW(llm::dist::set_collective_timeout(-1), Error);
  const double before = llm::dist::collective_timeout();
  EXPECT_EQ(before, 600);
  llm::dist::set_collective_timeout(5);
  EXPECT_EQ(llm::dist::collective_timeout(), 5);
  llm::dist::set_collective_timeout(before);
}

// run.json's world_size (no MPI needed): written, read back, 1 for a record
// without it, and a different world size refused by check_same_run in one line.
TEST(RunRecordWorldSize, RoundTripAndRefusal) {
  const fs::path dir = fs::temp_directory_path() / ("milrt_runrecord_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  llm::RunRecord r;
  r.config = "tiny", r.precision = "fp32", r.batch = 4, r.seq = 32, r.accum = 2, r.world_size = 4;
  llm::save_run_record(dir.string(), r);
  EXPECT_NE(slurp(dir / "run.json").find("\"world_size\": 4"), std::string::npos);
  std::optional<llm::RunRecord> back = llm::load_run_record(dir.string());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->world_size, 4);
  llm::RunRecord want = r;
  EXPECT_NO_THROW(llm::check_same_run(*back, want, "DIR"));
  want.world_size = 2;
  try {
    llm::check_same_run(*back, want, "DIR");
    ADD_FAILURE() << "a different world size was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("DIR was trained by 4 processes (mpirun -np 4), not 2"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // A record from before the field: one process.
  std::string text = slurp(dir / "run.json");
  const size_t at = text.find("  \"world_size\": 4\n");
  ASSERT_NE(at, std::string::npos) << text;
  text.erase(at, std::string("  \"world_size\": 4\n").size());
  const size_t comma = text.rfind(',', at);
  if (comma != std::string::npos && text.find_first_not_of(" \n", comma + 1) == at) text.erase(comma, 1);
  std::ofstream(dir / "run.json") << text;
  back = llm::load_run_record(dir.string());
  ASSERT_TRUE(back.has_value()) << text;
  EXPECT_EQ(back->world_size, 1);
  fs::remove_all(dir);
}

// Fewer validation batches than ranks: rank 1 evaluates none of its own, and
// must still join every collective (it once waited alone in an extra
// evaluation's all-reduce while rank 0 finished: a hang).
TEST_F(MpiTrain, FewerValidationBatchesThanRanksDoesNotHang) {
  Result r = run(cat(mpi(2), train({"--steps", "3", "--batch", "2", "--eval-every", "0", "--eval-batches", "1", "--out",
                                    (dir_ / "run").string()})),
                 "run", 60);
  EXPECT_FALSE(r.timed_out) << r.describe();
  EXPECT_EQ(r.exit_code, 0) << r.describe();
}

// `milrt bench train` under mpirun: data parallel, global figures from rank 0.
TEST_F(MpiTrain, BenchTrainUnderMpirunPrintsGlobalTokensAndCommunication) {
  for (const char* zero : {"0", "1"}) {
    Result r = run(cat(mpi(2), {MILRT_CLI, "bench", "train", "--config", "tiny", "--steps", "2", "--accum", "1", "--threads",
                                "1", "--zero", zero, "--json"}),
                   std::string("bench") + zero, 60);
    EXPECT_FALSE(r.timed_out) << r.describe();
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find("global: 2 ranks x 1 thread"), std::string::npos) << r.describe();
    EXPECT_NE(r.out.find("\"ranks\": 2"), std::string::npos) << r.describe();
    EXPECT_NE(r.out.find("final weights identical on all 2 ranks"), std::string::npos) << r.describe();
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '{'), 1) << "one rank prints: " << r.describe();
  }
}
