// `milrt inspect --target ane` and `milrt run --engine ane-sim|ane` as a user
// runs them: the partition printout, a run through the simulated device
// equal to --engine reference within fp16 tolerance, the summary line on
// stderr, and the clear error for --engine ane off macOS.
#include <cmath>
#include <filesystem>
#include <random>

#include "milrt/npy.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {

const std::string kSeed = std::string(MILRT_SOURCE_DIR) + "/tests/data/seed1/backprop_train.mil";

TEST(AneCli, InspectPrintsThePartition) {
  MILRT_REQUIRE_SHARED();
  const std::string m = shared_dir() + "/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc";
  CliResult r = run_cli({"inspect", m, "--target", "ane"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("2 engine programs, 1 host steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 0: engine program 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("input  fp16 [1, 3, 1, 576], 3456 bytes, packs: audio_input, hidden_state, cell_state"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step 1: host, 1 ops"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("on the host: 'lstm_out_batch_first_0' lstm: no engine route"), std::string::npos) << r.out;
  CliResult bad = run_cli({"inspect", m, "--target", "gpu"});
  EXPECT_NE(bad.exit_code, 0);
}

TEST(AneCli, RunOnTheSimulatedDeviceMatchesTheReference) {
  const std::string dir = temp_dir("ane_cli");
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<std::string> inputs;
  for (auto [name, shape] : std::vector<std::pair<std::string, Shape>>{{"x", {1, 1, 1, 64}},
                                                                       {"target", {1, 64, 1, 1}},
                                                                       {"neg_lr", {1, 64, 1, 1}},
                                                                       {"one", {1, 64, 1, 1}},
                                                                       {"W1", {1, 64, 1, 64}},
                                                                       {"W2", {1, 64, 1, 64}}}) {
    Tensor t(DType::FP16, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), name == "one" ? 1.0 : 0.25 * u(rng));
    write_npy(dir + "/" + name + ".npy", t);
    inputs.push_back("--input");
    inputs.push_back(name + "=" + dir + "/" + name + ".npy");
  }
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.end(), inputs.begin(), inputs.end());
    return a;
  };
  // backprop_train mixes [1, C, 1, 1] and [1, 1, 1, C] layouts: legalized first, as for every engine.
  CliResult sim = run_cli(args({"run", kSeed, "--engine", "ane-sim", "--output-dir", dir + "/sim"}));
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_NE(sim.err.find("ane-sim: 1 engine programs, 0 host steps, 1 compiles"), std::string::npos) << sim.err;
  CliResult ref = run_cli(args({"run", kSeed, "--engine", "reference", "--output-dir", dir + "/ref"}));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  size_t n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir + "/ref")) {
    Tensor want = read_npy(e.path().string());
    Tensor got = read_npy(dir + "/sim/" + e.path().filename().string());
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i)  // fp16 program: each op rounds as on the reference
      EXPECT_NEAR(got.at(size_t(i)), want.at(size_t(i)), 1e-2 * std::fabs(want.at(size_t(i))) + 1e-3);
    ++n;
  }
  EXPECT_GT(n, 0u);
  // A resident limit of 1 changes nothing here (one program).
  CliResult one = run_cli(args({"run", kSeed, "--engine", "ane-sim", "--ane-resident", "1"}));
  EXPECT_EQ(one.exit_code, 0) << one.err;
}

TEST(AneCli, EngineAneNeedsMacOs) {
  CliResult r = run_cli({"run", kSeed, "--engine", "ane", "--input", "x=none.npy"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("the Neural Engine needs macOS; use --engine ane-sim"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace milrt::test
