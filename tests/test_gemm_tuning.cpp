// GEMM backends chosen by measurement (runtime/gemm_tuning.h): the cache
// file's life (round trip, readonly, off, bad files, atomic replacement),
// tuned plans against the reference executor whichever backend wins,
// CompileOptions::deterministic across thread counts, and the CLI's
// --precision bf16 / --deterministic. Timing decides nothing checked here:
// the tests force winners through hand-written cache files or accept either.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemm_backend.h"
#include "runtime/gemm_tuning.h"
#include "kernels/onednn/onednn_gemm.h"
#include "kernels/threads.h"
#include "milrt/npy.h"
#include "milrt/plan.h"
#include "test_cli_util.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test {
namespace {

namespace k = milrt::kernels;
namespace rt = milrt::rt;
using rewrite::const_stmt;
using rewrite::expect_outputs_close;
using rewrite::parse_program;
using rewrite::random;
using rewrite::random_inputs;
using nlohmann::json;

#define SKIP_WITHOUT_ONEDNN() \
  if (!k::onednn_available()) GTEST_SKIP() << "this build has no oneDNN: there is nothing to choose between"

// Each test gets a cache directory of its own and fresh in-memory caches,
// and leaves the process as it found it.
class GemmTuning : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("XDG_CACHE_HOME");
    had_xdg_ = old != nullptr;
    if (old) old_xdg_ = old;
    dir_ = temp_dir("gemm_tuning");
    setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
    rt::reset_gemm_tuning();
  }
  void TearDown() override {
    if (had_xdg_) setenv("XDG_CACHE_HOME", old_xdg_.c_str(), 1);
    else unsetenv("XDG_CACHE_HOME");
    k::set_gemm_backend_mode(std::nullopt);
    k::set_num_threads(0);
    rt::reset_gemm_tuning();
  }
  std::string dir_, old_xdg_;
  bool had_xdg_ = false;
};

// Two products of different kinds: a linear (constant Bᵀ, bias) and a
// matmul of two variables.
Program two_gemms() {
  return parse_program("tensor<fp32, [8, 64]> x, tensor<fp32, [64, 32]> y",
                       const_stmt("w", random(DType::FP32, {48, 64}, 1)) +
                           const_stmt("b", random(DType::FP32, {48}, 2)) +
                           stmt("tensor<fp32, [8, 48]>", "l", "linear(x = x, weight = w, bias = b)") +
                           stmt("tensor<fp32, [8, 32]>", "m", "matmul(x = x, y = y)"),
                       "l, m");
}

std::vector<std::string> kernels_of(const Plan& plan) {
  std::vector<std::string> r;
  for (auto& s : plan.steps()) r.push_back(s.kernel);
  return r;
}

bool any_onednn(const Plan& plan) {
  for (auto& s : plan.steps())
    if (s.kernel.find("[onednn]") != std::string::npos) return true;
  return false;
}

Plan compile_with(const Program& p, CompileOptions::Tune tune, bool deterministic = false) {
  CompileOptions o;
  o.tune = tune;
  o.deterministic = deterministic;
  return compile(p, o);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A cache entry as gemm_tuning.cpp writes it, for this machine's ISA and threads.
json entry(int64_t m, int64_t n, int64_t kk, bool ta, bool tb, bool b_const, const std::string& winner) {
  return {{"isa", std::string(k::isa_name(k::current_isa()))}, {"m", m}, {"n", n}, {"k", kk}, {"trans_a", ta},
          {"trans_b", tb}, {"math", "fp32"}, {"b_const", b_const}, {"threads", k::num_threads()},
          {"winner", winner}, {"own_ms", 1.0}, {"onednn_ms", 0.5}};
}

// A valid cache naming `winner` for both products of two_gemms().
std::string cache_for_two_gemms(const std::string& winner) {
  json j = {{"format", "milrt-gemm-tuning"},
            {"version", rt::kGemmTuningCacheVersion},
            {"cpu", rt::cpu_model_name()},
            {"entries", {entry(8, 48, 64, false, true, true, winner), entry(8, 32, 64, false, false, false, winner)}}};
  return j.dump(1);
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> r;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) r.push_back(e.path().filename().string());
  return r;
}

TEST_F(GemmTuning, OffNeverTimesNorTouchesTheCache) {
  const Plan plan = compile_with(two_gemms(), CompileOptions::Tune::off);
  EXPECT_FALSE(any_onednn(plan));
  const rt::GemmTuneStats s = rt::gemm_tune_stats();
  EXPECT_EQ(s.timed, 0);
  EXPECT_EQ(s.cache_hits, 0);
  EXPECT_EQ(s.files_written, 0);
  EXPECT_TRUE(files_in(dir_).empty());
}

TEST_F(GemmTuning, CacheRoundTripReusesWinnersWithoutTiming) {
  SKIP_WITHOUT_ONEDNN();
  const Program p = two_gemms();
  const Plan first = compile_with(p, CompileOptions::Tune::on);
  rt::GemmTuneStats s = rt::gemm_tune_stats();
  EXPECT_EQ(s.timed, 2);
  EXPECT_EQ(s.files_written, 1);
  const std::string path = rt::gemm_tuning_cache_path();
  ASSERT_EQ(path.rfind(dir_ + "/milrt/gemm-tuning-", 0), 0u) << path;
  const json j = json::parse(read_text(path));
  EXPECT_EQ(j["cpu"], rt::cpu_model_name());
  EXPECT_EQ(j["entries"].size(), 2u);
  std::printf("[gemm tuning] %s: %s\n", path.c_str(), j["entries"].dump().c_str());

  // A new process, as far as the tuner can tell: the file alone decides.
  rt::reset_gemm_tuning();
  const Plan again = compile_with(p, CompileOptions::Tune::on);
  s = rt::gemm_tune_stats();
  EXPECT_EQ(s.timed, 0);
  EXPECT_EQ(s.cache_hits, 2);
  EXPECT_EQ(s.files_written, 0);
  EXPECT_EQ(kernels_of(again), kernels_of(first));
  const Plan ro = compile_with(p, CompileOptions::Tune::readonly);
  EXPECT_EQ(kernels_of(ro), kernels_of(first));
  EXPECT_EQ(rt::gemm_tune_stats().timed, 0);
}

TEST_F(GemmTuning, ReadonlyNeverTimesNorWrites) {
  const Plan plan = compile_with(two_gemms(), CompileOptions::Tune::readonly);
  EXPECT_FALSE(any_onednn(plan));  // a miss takes the fixed rule
  EXPECT_EQ(rt::gemm_tune_stats().timed, 0);
  EXPECT_EQ(rt::gemm_tune_stats().files_written, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/milrt"));
}

TEST_F(GemmTuning, EnvironmentDecidesByDefaultAndBadValuesAreOneLineErrors) {
  const char* old = std::getenv("MILRT_TUNE");
  const std::string saved = old ? old : "";
  setenv("MILRT_TUNE", "sometimes", 1);
  const std::string err = error_of([] { compile(two_gemms()); });
  EXPECT_NE(err.find("MILRT_TUNE=sometimes"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  setenv("MILRT_TUNE", "off", 1);
  compile(two_gemms());
  EXPECT_EQ(rt::gemm_tune_stats().timed, 0);
  if (old) setenv("MILRT_TUNE", saved.c_str(), 1);
  else unsetenv("MILRT_TUNE");
}

TEST_F(GemmTuning, BadCacheFilesAreIgnoredWithOneWarning) {
  SKIP_WITHOUT_ONEDNN();
  const std::string good = cache_for_two_gemms("onednn");
  json foreign = json::parse(good);
  foreign["cpu"] = "Some Other CPU @ 1.0GHz";
  json not_ours = json::parse(good);
  not_ours["format"] = "something-else";
  json future = json::parse(good);
  future["version"] = 99;
  json bad_dim = json::parse(good);
  bad_dim["entries"][0]["m"] = -8;
  json bad_winner = json::parse(good);
  bad_winner["entries"][1]["winner"] = "blas";
  json bad_type = json::parse(good);
  bad_type["entries"][0]["trans_b"] = "yes";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"corrupt", "{\"format\": milrt"},
      {"truncated", good.substr(0, good.size() / 2)},
      {"empty", ""},
      {"binary", std::string("\0\x01\xff\xfe garbage", 13)},
      {"not an object", "[1, 2, 3]"},
      {"foreign cpu", foreign.dump()},
      {"other format", not_ours.dump()},
      {"future version", future.dump()},
      {"negative dim", bad_dim.dump()},
      {"unknown winner", bad_winner.dump()},
      {"wrong type", bad_type.dump()},
  };
  const Program p = two_gemms();
  const std::string path = rt::gemm_tuning_cache_path();
  for (const auto& [what, text] : cases) {
    SCOPED_TRACE(what);
    write_text(path, text);
    rt::reset_gemm_tuning();
    testing::internal::CaptureStderr();
    Plan plan = compile_with(p, CompileOptions::Tune::readonly);
    Plan twice = compile_with(p, CompileOptions::Tune::readonly);  // read once per process: no second warning
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(any_onednn(plan));  // the file's "onednn" winners were not used
    EXPECT_EQ(rt::gemm_tune_stats().warnings, 1);
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find("milrt: warning: ignoring the GEMM tuning cache " + path), std::string::npos) << err;
    EXPECT_EQ(read_text(path), text);  // readonly leaves it alone
  }
  // With tuning on, a bad file is replaced by a good one.
  write_text(path, "{\"format\": milrt");
  rt::reset_gemm_tuning();
  testing::internal::CaptureStderr();
  compile_with(p, CompileOptions::Tune::on);
  testing::internal::GetCapturedStderr();
  rt::reset_gemm_tuning();
  testing::internal::CaptureStderr();
  compile_with(p, CompileOptions::Tune::readonly);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(rt::gemm_tune_stats().cache_hits, 2);
}

TEST_F(GemmTuning, CacheIsReplacedAtomicallyAndKeepsOtherEntries) {
  SKIP_WITHOUT_ONEDNN();
  const std::string path = rt::gemm_tuning_cache_path();
  // An entry another process tuned (a shape this test never compiles).
  json other = json::parse(cache_for_two_gemms("own"));
  other["entries"] = {entry(1024, 1024, 1024, true, false, false, "onednn")};
  write_text(path, other.dump());
  struct stat before {};
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  compile_with(two_gemms(), CompileOptions::Tune::on);
  struct stat after {};
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  // A rename over the old file, never a rewrite in place that a concurrent reader could see torn.
  EXPECT_NE(before.st_ino, after.st_ino);
  EXPECT_EQ(files_in(dir_ + "/milrt"), std::vector<std::string>{std::filesystem::path(path).filename().string()});
  const json j = json::parse(read_text(path));
  EXPECT_EQ(j["entries"].size(), 3u);
}

TEST_F(GemmTuning, AnUnwritableCacheIsOneWarningNotAnError) {
  SKIP_WITHOUT_ONEDNN();
  // A regular file where the cache directory should be (chmod would not stop root).
  const std::string blocker = dir_ + "/not_a_dir";
  write_text(blocker, "x");
  setenv("XDG_CACHE_HOME", blocker.c_str(), 1);
  testing::internal::CaptureStderr();
  Plan plan = compile_with(two_gemms(), CompileOptions::Tune::on);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(plan.steps().size(), 2u);
  EXPECT_EQ(rt::gemm_tune_stats().files_written, 0);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("milrt: warning: could not write the GEMM tuning cache"), std::string::npos) << err;
}

// K = 64, |x|, |w| <= 1: fp32 sums in any order stay far below 1e-4.
constexpr double kFp32Tol = 1e-4;

TEST_F(GemmTuning, ForcedWinnersMatchTheReference) {
  SKIP_WITHOUT_ONEDNN();
  const Program p = two_gemms();
  const TensorMap in = random_inputs(p, 7);
  const TensorMap want = run_reference(p, "main", in);
  for (const std::string winner : {"onednn", "own"}) {
    SCOPED_TRACE(winner);
    write_text(rt::gemm_tuning_cache_path(), cache_for_two_gemms(winner));
    rt::reset_gemm_tuning();
    Plan plan = compile_with(p, CompileOptions::Tune::readonly);
    EXPECT_EQ(rt::gemm_tune_stats().cache_hits, 2);
    const std::vector<std::string> ks = kernels_of(plan);
    ASSERT_EQ(ks.size(), 2u);
    for (const std::string& s : ks) EXPECT_EQ(s.find("[onednn]") != std::string::npos, winner == "onednn") << s;
    expect_outputs_close(want, plan.run(in), 0, kFp32Tol, winner);
  }
  // Tuned for real: whichever wins, the same values.
  std::filesystem::remove(rt::gemm_tuning_cache_path());
  rt::reset_gemm_tuning();
  Plan tuned = compile_with(p, CompileOptions::Tune::on);
  std::printf("[gemm tuning] tuned kernels: %s, %s\n", kernels_of(tuned)[0].c_str(), kernels_of(tuned)[1].c_str());
  expect_outputs_close(want, tuned.run(in), 0, kFp32Tol, "tuned");
}

// Large enough (M·N·K >= 2^20 multiply-adds) that the GEMMs run on several threads.
Program threaded_gemms() {
  return parse_program("tensor<fp32, [96, 256]> x, tensor<fp32, [256, 200]> y",
                       const_stmt("w", random(DType::FP32, {160, 256}, 3)) +
                           stmt("tensor<fp32, [96, 160]>", "l", "linear(x = x, weight = w)") +
                           stmt("tensor<fp32, [96, 200]>", "m", "matmul(x = x, y = y)"),
                       "l, m");
}

TEST_F(GemmTuning, DeterministicIsBitIdenticalAcrossThreadCounts) {
  const Program p = threaded_gemms();
  if (k::onednn_available()) {
    // oneDNN winning everywhere, as far as the cache says: deterministic must not listen.
    json j = json::parse(cache_for_two_gemms("onednn"));
    j["entries"] = {entry(96, 160, 256, false, true, true, "onednn"), entry(96, 200, 256, false, false, false, "onednn")};
    write_text(rt::gemm_tuning_cache_path(), j.dump());
  }
  Plan plan = compile_with(p, CompileOptions::Tune::on, /*deterministic=*/true);
  EXPECT_FALSE(any_onednn(plan));
  EXPECT_EQ(rt::gemm_tune_stats().timed, 0);
  const TensorMap in = random_inputs(p, 11);
  k::set_num_threads(1);
  const TensorMap one = plan.run(in);
  for (int threads : {2, 3}) {
    k::set_num_threads(threads);
    const TensorMap many = plan.run(in);
    for (const char* name : {"l", "m"}) {
      const Tensor &a = one.at(name), &b = many.at(name);
      ASSERT_EQ(a.numel(), b.numel());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)), 0) << name << ", " << threads
                                                                                           << " threads";
    }
  }
  expect_outputs_close(run_reference(p, "main", in), one, 0, 1e-3, "deterministic");
  if (k::onednn_available()) {
    k::set_gemm_backend_mode(k::GemmBackendMode::onednn);
    const std::string err = error_of([&] { compile_with(p, CompileOptions::Tune::off, true); });
    EXPECT_NE(err.find("deterministic"), std::string::npos) << err;
    EXPECT_NE(err.find("MILRT_GEMM=onednn"), std::string::npos) << err;
  }
}

// ---- the CLI: --precision bf16 and --deterministic on run and bench ----

TEST_F(GemmTuning, CliPrecisionBf16IsWithinBf16RoundingOfAnFp64Reference) {
  constexpr int64_t M = 16, N = 24, K = 96;
  const Tensor w = random(DType::FP32, {N, K}, 21), x = random(DType::FP32, {M, K}, 22);
  const std::string mil = dir_ + "/linear.mil", xnpy = dir_ + "/x.npy";
  write_text(mil, program_text("tensor<fp32, [16, 96]> x",
                               const_stmt("w", w) + stmt("tensor<fp32, [16, 24]>", "z", "linear(x = x, weight = w)"),
                               "z"));
  write_npy(xnpy, x);
  // Worst case of a K-term sum of products of bf16-rounded operands
  // (each within 2^-9 relative): 2·2^-9·Σ|x||w| plus fp32 accumulation.
  std::vector<double> exact(size_t(M * N)), bound(size_t(M * N)), rounded(size_t(M * N)), fp32_bound(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, a = 0, r = 0;
      for (int64_t kk = 0; kk < K; ++kk) {
        const double xv = x.at(size_t(i * K + kk)), wv = w.at(size_t(j * K + kk));
        s += xv * wv;
        a += std::fabs(xv * wv);
        r += bf16_round(xv) * bf16_round(wv);
      }
      exact[size_t(i * N + j)] = s;
      bound[size_t(i * N + j)] = 2.1 * std::ldexp(a, -9) + 1e-5;
      rounded[size_t(i * N + j)] = r;
      fp32_bound[size_t(i * N + j)] = double(K) * std::ldexp(a, -24) + 1e-7;  // fp32 summation in any order
    }
  for (const std::string precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    const std::string out = dir_ + "/out_" + precision;
    const CliResult r = run_cli({"run", mil, "--input", "x=" + xnpy, "--precision", precision, "--deterministic",
                                 "--output-dir", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Tensor z = read_npy(out + "/z.npy");
    double worst = 0, worst_vs_rounded = 0;
    for (size_t e = 0; e < exact.size(); ++e) {
      const double err = std::fabs(z.at(e) - exact[e]);
      worst = std::max(worst, err);
      worst_vs_rounded = std::max(worst_vs_rounded, std::fabs(z.at(e) - rounded[e]) - fp32_bound[e]);
      if (precision == "fp32") EXPECT_LE(err, fp32_bound[e]) << e;
      else EXPECT_LE(err, bound[e]) << e;
    }
    std::printf("[gemm tuning] --precision %s: max |z - fp64| = %g, max excess over fp32 rounding of |z - fp64 of "
                "bf16 operands| = %g\n",
                precision.c_str(), worst, worst_vs_rounded);
    if (precision == "bf16") {
      // bf16 did happen: the result is that of bf16 operands (to fp32 summation), not of the exact ones.
      EXPECT_GT(worst, 1e-4);
      EXPECT_LE(worst_vs_rounded, 0);
    }
  }
  const CliResult bench = run_cli({"bench", mil, "--runs", "2", "--precision", "bf16", "--deterministic"});
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("compiled plan: median"), std::string::npos) << bench.out;

  const CliResult bad = run_cli({"run", mil, "--input", "x=" + xnpy, "--precision", "fp8"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--precision"), std::string::npos) << bad.err;
  const CliResult ref = run_cli({"run", mil, "--input", "x=" + xnpy, "--precision", "bf16", "--engine", "reference"});
  EXPECT_NE(ref.exit_code, 0);
  EXPECT_NE(ref.err.find("--precision bf16 applies to compiled plans"), std::string::npos) << ref.err;
  EXPECT_EQ(std::count(ref.err.begin(), ref.err.end(), '\n'), 1) << ref.err;
}

}  // namespace
}  // namespace milrt::test
