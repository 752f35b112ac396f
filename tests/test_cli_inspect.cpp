// `milrt inspect`: the op count before and after each pass of the pipeline,
// the plan's steps, and `--dot FILE` (Graphviz: one node per step, edges by
// value with dtype and shape), on a small program of our own and on Silero VAD.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "milrt/npy.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {
namespace fs = std::filesystem;

// conv -> relu -> clip -> sigmoid; the weight literal [8, 2, 3] is built below.
std::string conv_program() {
  std::string w = "[";
  for (int o = 0; o < 8; ++o) {
    w += o ? ", [" : "[";
    for (int i = 0; i < 2; ++i) {
      w += i ? ", [" : "[";
      for (int k = 0; k < 3; ++k) w += (k ? ", " : "") + std::to_string(0.1 * ((o + i + k) % 5) - 0.2);
      w += "]";
    }
    w += "]";
  }
  w += "]";
  return R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [1, 2, 6]> x) {
        tensor<fp32, [8, 2, 3]> w = const()[name = string("w"), val = tensor<fp32, [8, 2, 3]>()" + w + R"()];
        tensor<fp32, [1, 8, 4]> c = conv(x = x, weight = w, pad_type = string("valid"))[name = string("c")];
        tensor<fp32, [1, 8, 4]> r = relu(x = c)[name = string("r")];
        tensor<fp32, [1, 8, 4]> k = clip(x = r, alpha = fp32(0.0), beta = fp32(0.5))[name = string("k")];
        tensor<fp32, [1, 8, 4]> s = sigmoid(x = k)[name = string("s")];
    } -> (s);
}
)";
}

std::string write_program(const std::string& tag) {
  std::string dir = temp_dir(tag);
  write_bytes(dir + "/conv.mil", conv_program());
  return dir;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The `PASS IN OUT` rows of inspect's pass table.
std::vector<std::tuple<std::string, int, int>> pass_rows(const std::string& out) {
  std::vector<std::tuple<std::string, int, int>> rows;
  std::istringstream in(out);
  std::regex row(R"(^([a-z-]+)\s+(\d+)\s+(\d+)$)");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, row)) rows.emplace_back(m[1], std::stoi(m[2]), std::stoi(m[3]));
  return rows;
}

TEST(CliInspect, CountsOpsAroundEveryPass) {
  std::string dir = write_program("cli_inspect_counts");
  CliResult r = run_cli({"inspect", dir + "/conv.mil"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = pass_rows(r.out);
  ASSERT_FALSE(rows.empty()) << r.out;
  EXPECT_EQ(std::get<0>(rows.front()), "legalize-layout-idioms");
  EXPECT_EQ(std::get<1>(rows.front()), 4) << "conv, relu, clip, sigmoid";
  // Each pass starts from what the previous one left.
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_EQ(std::get<1>(rows[i]), std::get<2>(rows[i - 1])) << i;
  bool saw_conv_fusion = false;
  for (auto& [pass, in, out] : rows)
    if (pass == "fuse-conv-epilogue") {
      saw_conv_fusion = true;
      EXPECT_EQ(out, in - 2) << "conv, relu and clip become one op";
    }
  EXPECT_TRUE(saw_conv_fusion) << r.out;
  EXPECT_NE(r.out.find("c, r, k"), std::string::npos) << "the fused step lists the ops it replaced\n" << r.out;
}

TEST(CliInspect, WritesTheGraphOfThePlan) {
  std::string dir = write_program("cli_inspect_dot");
  std::string dot = dir + "/plan.dot";
  CliResult r = run_cli({"inspect", dir + "/conv.mil", "--dot", dot});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string g = read_text(dot);
  EXPECT_EQ(g.rfind("digraph plan {", 0), 0u) << g;
  EXPECT_EQ(g.substr(g.size() - 2), "}\n");
  // One node per step: the summary line says how many.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"((\d+) steps,)"))) << r.out;
  const int steps = std::stoi(m[1]);
  int nodes = 0;
  std::istringstream in(g);
  for (std::string line; std::getline(in, line);) nodes += std::regex_search(line, std::regex(R"(^  s\d+ \[label=)"));
  EXPECT_EQ(nodes, steps) << g;
  EXPECT_NE(g.find("conv:"), std::string::npos) << g;
  EXPECT_NE(g.find("c, r, k"), std::string::npos) << g;
  // The input feeds a step, the fused conv feeds the sigmoid, and the result reaches the output node,
  // each edge labelled with the value's type.
  EXPECT_TRUE(std::regex_search(g, std::regex(R"(in_0 -> s\d+ \[label="x\\ntensor<fp32, \[1, 2, 6\]>"\])"))) << g;
  EXPECT_TRUE(std::regex_search(g, std::regex(R"(s\d+ -> s\d+ \[label="k\\ntensor<fp32, \[1, 8, 4\]>"\])"))) << g;
  EXPECT_TRUE(std::regex_search(g, std::regex(R"(s\d+ -> out_0 \[label="s\\ntensor<fp32, \[1, 8, 4\]>"\])"))) << g;
  // Atomic write: no temp file left beside it.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.path().filename().string().rfind("plan.dot", 0) == 0;
  EXPECT_EQ(files, 1);
}

TEST(CliInspect, UnwritableDotPathIsAnError) {
  std::string dir = write_program("cli_inspect_bad");
  CliResult r = run_cli({"inspect", dir + "/conv.mil", "--dot", dir + "/no/such/dir/plan.dot"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0) << "a clean error, not a crash";
  EXPECT_NE(r.err.find("plan.dot"), std::string::npos) << r.err;
}

TEST(CliInspect, SileroVadPlan) {
  if (shared_dir().empty()) GTEST_SKIP() << "../shared is absent: no Silero VAD bundle";
  std::string model = shared_dir() + "/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc";
  std::string dot = temp_dir("cli_inspect_silero") + "/silero.dot";
  CliResult r = run_cli({"inspect", model, "--dot", dot}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Four encoder convs, each with its relu and clip, in one step each.
  size_t fused = 0;
  for (size_t at = r.out.find("conv:gemm+clip"); at != std::string::npos; at = r.out.find("conv:gemm+clip", at + 1))
    ++fused;
  EXPECT_EQ(fused, 4u) << r.out;
  std::string g = read_text(dot);
  EXPECT_NE(g.find("lstm"), std::string::npos);
  EXPECT_NE(g.find("tensor<fp16, [1, 258, 4]>"), std::string::npos) << "the STFT's output edge";
}

}  // namespace
}  // namespace milrt::test
