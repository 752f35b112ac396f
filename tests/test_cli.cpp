// End-to-end tests of the milrt CLI: check, run (inputs, outputs, --compare)
// and print, on a small program of our own and on every real bundle in
// ../shared/testdata.
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <regex>
#include <set>
#include <sstream>

#include "milrt/npy.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------
// A small self-contained program, so the CLI's behaviour is tested without ../shared.

constexpr const char* kSmallProgram = R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [2, 3]> audio, tensor<fp32, [3]> bias) {
        tensor<fp32, [2, 3]> shifted = add(x = audio, y = bias)[name = string("shifted")];
        tensor<fp32, [2, 3]> rectified = relu(x = shifted)[name = string("rectified")];
    } -> (shifted, rectified);
}
)";

struct Small {
  std::string dir, mil, audio, bias;
};

// Writes the small program and its two inputs (fp32 .npy) into a fresh dir.
Small write_small(const std::string& tag) {
  Small s;
  s.dir = temp_dir(tag);
  s.mil = s.dir + "/small.mil";
  s.audio = s.dir + "/audio.npy";
  s.bias = s.dir + "/bias.npy";
  write_bytes(s.mil, kSmallProgram);
  write_npy(s.audio, make(DType::FP32, {2, 3}, {-3, -1, 0, 1, 2, 4}));
  write_npy(s.bias, make(DType::FP32, {3}, {0.5, 1, -2}));
  return s;
}

// shifted = audio + bias and rectified = relu(shifted) for write_small's inputs.
const std::vector<double> kShifted = {-2.5, 0, -2, 1.5, 3, 2};
const std::vector<double> kRectified = {0, 0, 0, 1.5, 3, 2};

// The summary line `NAME: [shape] dtype min X max Y mean Z` for output `name`,
// or "" when stdout has none.
std::string summary_line(const std::string& out, const std::string& name) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ": ", 0) == 0) return line;
  return "";
}

struct Summary {
  std::string shape, dtype;
  double min = 0, max = 0, mean = 0;
};

::testing::AssertionResult ParseSummary(const std::string& line, const std::string& name, Summary* s) {
  static const std::regex re(R"(^(\S+): (\[[0-9, ]*\]) (\w+) min (\S+) max (\S+) mean (\S+)$)");
  std::smatch m;
  if (!std::regex_match(line, m, re) || m[1] != name)
    return ::testing::AssertionFailure() << "not a summary line of '" << name << "': '" << line << "'";
  s->shape = m[2];
  s->dtype = m[3];
  s->min = std::stod(m[4]);
  s->max = std::stod(m[5]);
  s->mean = std::stod(m[6]);
  return ::testing::AssertionSuccess();
}

// The summary was printed with %.6g: six significant digits.
void expect_close_6g(double printed, double exact, const std::string& what) {
  EXPECT_NEAR(printed, exact, 1e-5 * std::max(1.0, std::fabs(exact)) + 1e-12) << what;
}

// Checks a summary line against the tensor it summarizes.
void expect_summary_of(const std::string& out, const std::string& name, const Tensor& t) {
  Summary s;
  ASSERT_TRUE(ParseSummary(summary_line(out, name), name, &s)) << out;
  EXPECT_EQ(s.shape, shape_str(t.shape()));
  EXPECT_EQ(s.dtype, dtype_name(t.dtype()));
  std::vector<double> v = values(t);
  ASSERT_FALSE(v.empty());
  double lo = v[0], hi = v[0], sum = 0;
  for (double x : v) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  expect_close_6g(s.min, lo, name + " min");
  expect_close_6g(s.max, hi, name + " max");
  expect_close_6g(s.mean, sum / double(v.size()), name + " mean");
}

TEST(CliSmall, RunPrintsSummariesAndWritesOutputs) {
  Small s = write_small("cli_run");
  std::string out_dir = s.dir + "/out/nested";  // --output-dir creates missing folders
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias,
                         "--output-dir", out_dir});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_EQ(summary_line(r.out, "shifted"), "shifted: [2, 3] fp32 min -2.5 max 3 mean 0.333333");
  EXPECT_EQ(summary_line(r.out, "rectified"), "rectified: [2, 3] fp32 min 0 max 3 mean 1.08333");
  // Outputs are reported in the function's declared order.
  EXPECT_LT(r.out.find("shifted: "), r.out.find("rectified: "));
  Tensor shifted = read_npy(out_dir + "/shifted.npy");
  Tensor rectified = read_npy(out_dir + "/rectified.npy");
  EXPECT_EQ(shifted.dtype(), DType::FP32);
  EXPECT_EQ(shifted.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(shifted), kShifted);
  EXPECT_EQ(rectified.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(rectified), kRectified);
}

TEST(CliSmall, ExplicitFunctionAndEngine) {
  Small s = write_small("cli_fn");
  CliResult r = run_cli({"run", s.mil, "--function", "main", "--engine", "reference", "--input",
                         "audio=" + s.audio, "--input", "bias=" + s.bias});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_NE(summary_line(r.out, "rectified"), "");
}

TEST(CliSmall, CompareWithEqualFileExitsZero) {
  Small s = write_small("cli_cmp_eq");
  std::string want = s.dir + "/want.npy";
  write_npy(want, make(DType::FP32, {2, 3}, kRectified));
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias, "--compare",
                         "rectified=" + want, "--tolerance", "0"});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_NE(r.out.find("compare rectified:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("within tolerance"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("EXCEEDS"), std::string::npos) << r.out;
}

TEST(CliSmall, ComparePerturbedFileExceedsToleranceExitsOne) {
  Small s = write_small("cli_cmp_bad");
  std::vector<double> perturbed = kRectified;
  perturbed[4] += 0.5;
  std::string want = s.dir + "/want.npy";
  write_npy(want, make(DType::FP32, {2, 3}, perturbed));
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias, "--compare",
                         "rectified=" + want, "--tolerance", "0.1"});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.out.find("EXCEEDS"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("max |diff| 0.5"), std::string::npos) << describe(r);
}

TEST(CliSmall, ComparePerturbedWithinToleranceExitsZero) {
  Small s = write_small("cli_cmp_tol");
  std::vector<double> perturbed = kShifted;
  perturbed[0] += 0.05;
  std::string want = s.dir + "/want.npy";
  write_npy(want, make(DType::FP32, {2, 3}, perturbed));
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias, "--compare",
                         "shifted=" + want, "--tolerance", "0.1"});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_NE(r.out.find("within tolerance"), std::string::npos) << r.out;
}

TEST(CliSmall, CompareWithoutToleranceOnlyReports) {
  Small s = write_small("cli_cmp_report");
  std::string want = s.dir + "/want.npy";
  write_npy(want, make(DType::FP32, {2, 3}, {9, 9, 9, 9, 9, 9}));
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias, "--compare",
                         "rectified=" + want});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_NE(r.out.find("compare rectified: max |diff| 9"), std::string::npos) << r.out;
}

TEST(CliSmall, CompareShapeMismatchIsAnError) {
  Small s = write_small("cli_cmp_shape");
  std::string want = s.dir + "/want.npy";
  write_npy(want, make(DType::FP32, {3, 2}, kRectified));
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias, "--compare",
                         "rectified=" + want, "--tolerance", "0"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("rectified"), std::string::npos) << r.err;
}

TEST(CliSmall, CompareOfUnknownOutputIsAnError) {
  Small s = write_small("cli_cmp_name");
  std::string want = s.dir + "/want.npy";
  write_npy(want, make(DType::FP32, {2, 3}, kRectified));
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias, "--compare",
                         "nonesuch=" + want, "--tolerance", "0"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("nonesuch"), std::string::npos) << r.err;
}

TEST(CliSmall, InputsAreConvertedToTheDeclaredDtype) {
  Small s = write_small("cli_convert");
  // fp64 values that fp32 cannot hold exactly: the program sees them rounded to fp32.
  std::string audio64 = s.dir + "/audio64.npy";
  std::vector<double> a = {0.1, -0.2, 1.0 / 3, 1e-3, 2.5, -7.25};
  write_npy(audio64, make(DType::FP64, {2, 3}, a));
  std::string bias_i32 = s.dir + "/bias_i32.npy";
  write_npy(bias_i32, make(DType::Int32, {3}, {1, -2, 3}));
  std::string out_dir = s.dir + "/out";
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + audio64, "--input", "bias=" + bias_i32,
                         "--output-dir", out_dir});
  ASSERT_TRUE(Succeeded(r));
  Tensor shifted = read_npy(out_dir + "/shifted.npy");
  ASSERT_EQ(shifted.dtype(), DType::FP32);
  ASSERT_EQ(shifted.shape(), (Shape{2, 3}));
  const double b[3] = {1, -2, 3};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(shifted.at(i), double(float(float(a[i]) + float(b[i % 3])))) << i;
}

TEST(CliSmall, InputShapeMismatchNamesTheInput) {
  Small s = write_small("cli_shape");
  std::string wrong = s.dir + "/wrong.npy";
  write_npy(wrong, make(DType::FP32, {3, 2}, {1, 2, 3, 4, 5, 6}));
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + wrong, "--input", "bias=" + s.bias});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("audio"), std::string::npos) << r.err;
}

TEST(CliSmall, InputRankMismatchNamesTheInput) {
  Small s = write_small("cli_rank");
  std::string wrong = s.dir + "/wrong.npy";
  write_npy(wrong, make(DType::FP32, {1, 3}, {1, 2, 3}));
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + wrong});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("bias"), std::string::npos) << r.err;
}

TEST(CliSmall, MissingInputIsNamed) {
  Small s = write_small("cli_missing");
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("bias"), std::string::npos) << r.err;
}

TEST(CliSmall, UnknownInputNameIsAnError) {
  Small s = write_small("cli_unknown");
  CliResult r = run_cli(
      {"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias, "--input", "bogus=" + s.bias});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
}

TEST(CliSmall, InputSpecWithoutEqualsIsAnError) {
  Small s = write_small("cli_spec");
  CliResult r = run_cli({"run", s.mil, "--input", s.audio, "--input", "bias=" + s.bias});
  EXPECT_TRUE(IsOneLineError(r));
}

TEST(CliSmall, UnknownFunctionIsAnError) {
  Small s = write_small("cli_func");
  CliResult r = run_cli(
      {"run", s.mil, "--function", "nonesuch", "--input", "audio=" + s.audio, "--input", "bias=" + s.bias});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("nonesuch"), std::string::npos) << r.err;
}

// A multifunction package (the zoo's, converted by coremltools) runs its
// default function when --function is not given, as Core ML does; the output
// is compared with PyTorch's.
TEST(CliSmall, MultifunctionPackageRunsItsDefaultFunction) {
  const std::string dir = std::string(MILRT_SOURCE_DIR) + "/tests/data/coreml_zoo/multifunction_mlp/";
  CliResult r = run_cli({"run", dir + "model.mlpackage", "--input", "x=" + dir + "input_x_classify.npy", "--compare",
                         "y=" + dir + "expected_y_classify.npy", "--tolerance", "1e-4"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("within tolerance"), std::string::npos) << r.out;
  // The other function is still reachable by name; a wrong name lists the real ones.
  r = run_cli({"run", dir + "model.mlpackage", "--function", "features", "--input",
               "x=" + dir + "input_x_features.npy", "--compare", "h=" + dir + "expected_h_features.npy", "--tolerance",
               "1e-4"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_cli({"run", dir + "model.mlpackage", "--function", "main", "--input", "x=" + dir + "input_x_classify.npy"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("(functions: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("classify"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("features"), std::string::npos) << r.err;
}

TEST(CliSmall, CheckPrintsHistogramAndOk) {
  Small s = write_small("cli_check");
  CliResult r = run_cli({"check", s.mil});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_NE(r.out.find("function main<ios18>: 2 inputs, 2 ops, 2 outputs"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n\s+add\s+1\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n\s+relu\s+1\n)"))) << r.out;
  EXPECT_TRUE(r.out.size() >= 3 && r.out.substr(r.out.size() - 3) == "ok\n") << r.out;
}

TEST(CliSmall, CheckOpsListsSupportedOps) {
  CliResult r = run_cli({"check", "--ops"});
  ASSERT_TRUE(Succeeded(r));
  std::set<std::string> ops;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) ops.insert(line);
  for (const char* op : {"const", "add", "relu", "conv", "lstm", "reduce_argmax", "transpose"})
    EXPECT_TRUE(ops.count(op)) << op << " missing from:\n" << r.out;
}

TEST(CliSmall, PrintParsesBackToTheSameProgram) {
  Small s = write_small("cli_print");
  CliResult r = run_cli({"print", s.mil});
  ASSERT_TRUE(Succeeded(r));
  Program printed = parse_mil(r.out, "printed.mil", s.dir);
  Program original = parse_mil(kSmallProgram, s.mil, s.dir);
  EXPECT_EQ(ir_diff(original, printed), "");
}

// Usage errors follow the same contract as every other error: exit 2 and one
// line on stderr saying "error:".
TEST(CliUsage, NoSubcommand) { EXPECT_TRUE(IsOneLineError(run_cli({}))); }

TEST(CliUsage, UnknownSubcommand) {
  CliResult r = run_cli({"frobnicate"});
  EXPECT_TRUE(IsOneLineError(r));
}

TEST(CliUsage, RunWithoutModel) { EXPECT_TRUE(IsOneLineError(run_cli({"run"}))); }

TEST(CliUsage, CheckWithoutModel) { EXPECT_TRUE(IsOneLineError(run_cli({"check"}))); }

TEST(CliUsage, UnknownOption) {
  Small s = write_small("cli_usage_opt");
  CliResult r = run_cli({"check", s.mil, "--bogus"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
}

TEST(CliUsage, NonNumericTolerance) {
  Small s = write_small("cli_usage_tol");
  CliResult r = run_cli({"run", s.mil, "--input", "audio=" + s.audio, "--input", "bias=" + s.bias, "--tolerance",
                         "abc"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("abc"), std::string::npos) << r.err;
}

TEST(CliUsage, UnknownEngine) {
  Small s = write_small("cli_usage_engine");
  CliResult r = run_cli({"run", s.mil, "--engine", "warp", "--input", "audio=" + s.audio, "--input",
                         "bias=" + s.bias});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("warp"), std::string::npos) << r.err;
}

TEST(CliUsage, HelpExitsZero) {
  CliResult r = run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("run"), std::string::npos) << r.out;
}

// ---------------------------------------------------------------------------
// The real bundles in ../shared/testdata.

std::vector<std::string> bundles() {
  std::vector<std::string> r;
  for (auto& group : fs::directory_iterator(shared_dir() + "/testdata/coreml")) {
    if (!group.is_directory()) continue;
    for (auto& b : fs::directory_iterator(group.path()))
      if (b.is_directory() && b.path().extension() == ".mlmodelc") r.push_back(b.path().string());
  }
  std::sort(r.begin(), r.end());
  return r;
}

json metadata(const std::string& bundle) {
  std::ifstream f(bundle + "/metadata.json");
  return json::parse(f).at(0);
}

std::string bundle_name(const std::string& bundle) { return fs::path(bundle).stem().string(); }

// Core ML's histogram names ("Ios16.constexprAffineDequantize", "SliceByIndex")
// as MIL op types ("constexpr_affine_dequantize", "slice_by_index").
std::string mil_op_name(const std::string& coreml) {
  std::string s = coreml;
  if (s.rfind("Ios", 0) == 0 && s.find('.') != std::string::npos) s = s.substr(s.find('.') + 1);
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::isupper(static_cast<unsigned char>(s[i]))) {
      if (i) r += '_';
      r += char(std::tolower(static_cast<unsigned char>(s[i])));
    } else {
      r += s[i];
    }
  }
  return r;
}

TEST(CliHelpers, MilOpName) {
  EXPECT_EQ(mil_op_name("Ios16.conv"), "conv");
  EXPECT_EQ(mil_op_name("Ios16.constexprAffineDequantize"), "constexpr_affine_dequantize");
  EXPECT_EQ(mil_op_name("SliceByIndex"), "slice_by_index");
  EXPECT_EQ(mil_op_name("Ios16.reduceArgmax"), "reduce_argmax");
}

std::map<std::string, int> histogram_of(const std::string& check_out) {
  std::map<std::string, int> h;
  static const std::regex line_re(R"(^\s+(\S+)\s+(\d+)$)");
  std::istringstream in(check_out);
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, line_re)) h[m[1]] += std::stoi(m[2]);
  return h;
}

TEST(CliBundles, CheckEveryBundleMatchesItsMetadataHistogram) {
  MILRT_REQUIRE_SHARED();
  auto all = bundles();
  ASSERT_GE(all.size(), 19u);
  for (auto& b : all) {
    SCOPED_TRACE(b);
    CliResult r = run_cli({"check", b});
    ASSERT_TRUE(Succeeded(r));
    EXPECT_TRUE(r.out.size() >= 3 && r.out.substr(r.out.size() - 3) == "ok\n") << r.out;
    json meta = metadata(b);
    std::string header = "function main<";
    EXPECT_NE(r.out.find(header), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(">: " + std::to_string(meta.at("inputSchema").size()) + " inputs, "), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find(" ops, " + std::to_string(meta.at("outputSchema").size()) + " outputs"),
              std::string::npos)
        << r.out;
    auto hist = histogram_of(r.out);
    auto& want = meta.at("mlProgramOperationTypeHistogram");
    ASSERT_FALSE(want.empty());
    for (auto& [coreml_name, count] : want.items())
      EXPECT_EQ(hist[mil_op_name(coreml_name)], count.get<int>()) << coreml_name;
  }
}

TEST(CliBundles, CheckAcceptsTheBareModelMil) {
  MILRT_REQUIRE_SHARED();
  const std::string root = shared_dir() + "/testdata/coreml/";
  for (const std::string& b : {root + "silero-vad/unified_palette_4bit.mlmodelc",
                               root + "silero-vad/unified_256ms_int8.mlmodelc",
                               root + "fluidaudio-small/TransposeEncoder.mlmodelc"}) {
    SCOPED_TRACE(b);
    // Blob paths (@model_path/...) resolve against the .mil file's folder, the bundle.
    CliResult r = run_cli({"check", b + "/model.mil"});
    ASSERT_TRUE(Succeeded(r));
  }
}

DType dtype_of_coreml(const std::string& s) {
  if (s == "Float32") return DType::FP32;
  if (s == "Float16") return DType::FP16;
  if (s == "Int32") return DType::Int32;
  ADD_FAILURE() << "unexpected metadata dataType " << s;
  return DType::FP32;
}

Shape shape_of(const json& schema_entry) {
  return json::parse(schema_entry.at("shape").get<std::string>()).get<Shape>();
}

// Inputs that make each bundle's outputs predictable where that is easy:
// planted maxima for the argmax models, distinct small integers (exact in
// fp16) for the transpose, a tone with zero state for Silero.
TensorMap inputs_for(const std::string& name, const json& meta) {
  TensorMap in;
  for (auto& entry : meta.at("inputSchema")) {
    std::string input = entry.at("name");
    Shape shape = name == "TransposeEncoder" ? Shape{1, 4, 6} : shape_of(entry);
    Tensor t(DType::FP32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v = 0;
      if (input == "audio_input") v = 0.3 * std::sin(double(i) * 2 * std::numbers::pi * 440 / 16000);
      else if (input == "logits") v = std::sin(double(i)) * 0.5;
      else if (input == "x") v = double(i);
      t.set(size_t(i), v);
    }
    if (name == "Argmax") t.set(700, 3.0);
    if (name == "TokenDurationPrediction") {
      t.set(3, 2.5);     // token logits are [0, 1025)
      t.set(1027, 1.5);  // duration logits are [1025, 1030)
    }
    in[input] = t;
  }
  return in;
}

TEST(CliBundles, RunEveryBundle) {
  MILRT_REQUIRE_SHARED();
  for (auto& b : bundles()) {
    SCOPED_TRACE(b);
    const std::string name = bundle_name(b);
    json meta = metadata(b);
    std::string dir = temp_dir("cli_bundle");
    TensorMap in = inputs_for(name, meta);
    std::vector<std::string> args = {"run", b, "--output-dir", dir + "/out"};
    for (auto& [input, t] : in) {
      std::string path = dir + "/" + input + ".npy";
      write_npy(path, t);
      args.push_back("--input");
      args.push_back(input + "=" + path);
    }
    CliResult r = run_cli(args, 120);
    ASSERT_TRUE(Succeeded(r));

    TensorMap out;
    for (auto& entry : meta.at("outputSchema")) {
      std::string output = entry.at("name");
      SCOPED_TRACE(output);
      std::string file = dir + "/out/" + output + ".npy";
      ASSERT_TRUE(fs::exists(file));
      Tensor t = read_npy(file);
      // TransposeEncoder's metadata gives its flexible output's shape as [].
      Shape want = name == "TransposeEncoder" ? Shape{1, 6, 4} : shape_of(entry);
      EXPECT_EQ(t.shape(), want);
      EXPECT_EQ(t.dtype(), dtype_of_coreml(entry.at("dataType")));
      expect_summary_of(r.out, output, t);
      out[output] = t;
    }

    if (name.find("silero") != std::string::npos || name.find("unified") != std::string::npos) {
      double p = out.at("vad_output").at(0);
      EXPECT_GE(p, 0.0);
      EXPECT_LE(p, 1.0);
    } else if (name == "Argmax") {
      EXPECT_EQ(out.at("index").at(0), 700);
      EXPECT_EQ(out.at("score").at(0), 3.0);
    } else if (name == "TokenDurationPrediction") {
      EXPECT_EQ(out.at("token_id").at(0), 3);
      EXPECT_EQ(out.at("token_score").at(0), 2.5);
      EXPECT_EQ(out.at("duration_index").at(0), 2);
    } else if (name == "TransposeEncoder") {
      const Tensor& y = out.at("var_4");
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 6; ++j) EXPECT_EQ(y.at(size_t(j * 4 + i)), double(i * 6 + j)) << i << "," << j;
    }
  }
}

TEST(CliBundles, CompareAgainstOwnOutputPassesAndPerturbedExceeds) {
  MILRT_REQUIRE_SHARED();
  std::string b = shared_dir() + "/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc";
  json meta = metadata(b);
  std::string dir = temp_dir("cli_bundle_cmp");
  std::vector<std::string> args = {"run", b};
  for (auto& [input, t] : inputs_for(bundle_name(b), meta)) {
    write_npy(dir + "/" + input + ".npy", t);
    args.insert(args.end(), {"--input", input + "=" + dir + "/" + input + ".npy"});
  }
  std::vector<std::string> first = args;
  first.insert(first.end(), {"--output-dir", dir + "/out"});
  ASSERT_TRUE(Succeeded(run_cli(first)));

  std::vector<std::string> same = args;
  same.insert(same.end(), {"--compare", "new_hidden_state=" + dir + "/out/new_hidden_state.npy", "--compare",
                           "vad_output=" + dir + "/out/vad_output.npy", "--tolerance", "0"});
  CliResult r = run_cli(same);
  ASSERT_TRUE(Succeeded(r));
  EXPECT_NE(r.out.find("compare new_hidden_state: max |diff| 0,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compare vad_output: max |diff| 0,"), std::string::npos) << r.out;

  Tensor h = read_npy(dir + "/out/new_hidden_state.npy").clone();
  h.set(17, h.at(17) + 0.25);
  write_npy(dir + "/perturbed.npy", h);
  std::vector<std::string> off = args;
  off.insert(off.end(), {"--compare", "new_hidden_state=" + dir + "/perturbed.npy", "--tolerance", "0.01"});
  r = run_cli(off);
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_NE(r.out.find("EXCEEDS"), std::string::npos) << describe(r);
}

TEST(CliBundles, PrintOfEveryBundleParsesBackToTheSameIr) {
  MILRT_REQUIRE_SHARED();
  for (auto& b : bundles()) {
    SCOPED_TRACE(b);
    CliResult r = run_cli({"print", b});
    ASSERT_TRUE(Succeeded(r));
    Program original = parse_mil(read_bytes(b + "/model.mil"), b + "/model.mil", b);
    Program printed = parse_mil(r.out, "printed.mil", b);
    EXPECT_EQ(ir_diff(original, printed), "");
    // The printed BLOBFILE references still find the same weights.
    if (fs::exists(b + "/weights/weight.bin")) {
      load_blobs(original);
      load_blobs(printed);
      EXPECT_EQ(ir_diff(original, printed), "");
    }
  }
}

}  // namespace
}  // namespace milrt::test
