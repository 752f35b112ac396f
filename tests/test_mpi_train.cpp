// Data-parallel `milrt train` under mpirun (src/llm/distributed.h): two ranks
// equal one process that sees the same micro-batches, resume under MPI equals
// an uninterrupted run, a different world size is refused, and a rank that
// fails ends the job with its message instead of hanging it.
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "llm/checkpoint.h"
#include "llm/distributed.h"

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

// losses.csv rows: every column but the last (ms).
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
    if (!row.empty()) row.pop_back();
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

TEST_F(MpiTrain, TwoRanksEqualOneProcessWithTheSameBatchesAccum2) {
  const std::vector<std::string> common{"--steps", "8", "--batch", "4", "--eval-every", "4"};
  Result one = run(train(cat(common, {"--accum", "4", "--out", (dir_ / "one").string()})), "one");
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  Result two = run(cat(mpi(2), train(cat(common, {"--accum", "2", "--out", (dir_ / "two").string()}))), "two");
  ASSERT_EQ(two.exit_code, 0) << two.describe();
  expect_same_losses(dir_ / "one" / "losses.csv", dir_ / "two" / "losses.csv", 1e-5);
  EXPECT_LE(max_weight_diff(dir_ / "one" / "checkpoint.bin", dir_ / "two" / "checkpoint.bin"), 1e-5);
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
