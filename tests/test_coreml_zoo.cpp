// The Core ML conformance zoo (issue #16 part 3): small PyTorch models that
// coremltools 9 converted to `.mlpackage` (tools/coreml_zoo/make_zoo.py), each
// with its inputs and PyTorch's outputs as .npy and a manifest.json giving the
// tolerance. Every model is loaded from its package, verified, compiled (tuning
// off) and run, and its outputs compared with PyTorch's; the reference executor
// is compared too. fp16 models also run compiled with CompileOptions::numerics
// fp16 (every fp16 value rounded as fp16 hardware does).
//
// Error measure (as in the manifests): max|milrt - torch| / max(1, max|torch|)
// per output. Tolerances (manifest "tolerance", justified in make_zoo.py):
// fp32 models 1e-5 (both sides fp32; measured <= 1.6e-7), fp16 models 5e-3
// (weights and intermediates fp16, ulp 4.9e-4 relative; measured <= 1.1e-3),
// the int8-quantized MLP 5e-3 (measured 8.1e-4) and the 4-bit palettized MLP
// 5e-2 (measured 1.7e-2), both against the uncompressed PyTorch model, so
// that the bound is the compression error itself. The measured errors are
// printed ("[zoo]" lines).
//
// Stateful models (manifest "steps"): states start at zero and persist over
// the steps; inputs and expected outputs are input_<name>_step<i>.npy,
// expected_<name>_step<i>.npy.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "milrt/npy.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

namespace fs = std::filesystem;

fs::path zoo_dir() { return fs::path(MILRT_SOURCE_DIR) / "tests" / "data" / "coreml_zoo"; }

struct Manifest {
  std::vector<std::string> inputs, outputs;
  double tolerance = 0;
  int steps = 0;  // 0: a stateless model (one run, files without _step<i>)
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The names in the manifest's "inputs" or "outputs" list (make_zoo.py writes
// the manifest; this reads only what it writes).
std::vector<std::string> names_in(const std::string& text, const std::string& key) {
  std::vector<std::string> out;
  const size_t at = text.find("\"" + key + "\": [");
  if (at == std::string::npos) return out;
  const size_t end = text.find("\n  ]", at);
  const std::string list = text.substr(at, end - at);
  static const std::regex name_re("\"name\":\\s*\"([^\"]+)\"");
  for (std::sregex_iterator it(list.begin(), list.end(), name_re), e; it != e; ++it) out.push_back((*it)[1]);
  return out;
}

Manifest read_manifest(const fs::path& dir) {
  const std::string text = slurp(dir / "manifest.json");
  Manifest m;
  m.inputs = names_in(text, "inputs");
  m.outputs = names_in(text, "outputs");
  std::smatch sm;
  if (std::regex_search(text, sm, std::regex("\"tolerance\":\\s*([0-9.eE+-]+)"))) m.tolerance = std::stod(sm[1]);
  if (std::regex_search(text, sm, std::regex("\"steps\":\\s*([0-9]+)"))) m.steps = std::stoi(sm[1]);
  return m;
}

std::string npy_name(const std::string& kind, const std::string& name, const Manifest& m, int step) {
  return kind + "_" + name + (m.steps ? "_step" + std::to_string(step) : "") + ".npy";
}

// max|got - want| / max(1, max|want|); shapes must match.
double scaled_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.numel() != want.numel()) return INFINITY;
  double err = 0, scale = 1;
  for (size_t i = 0; i < size_t(want.numel()); ++i) {
    const double w = want.at(i), g = got.at(i);
    scale = std::max(scale, std::fabs(w));
    err = std::isfinite(g) ? std::max(err, std::fabs(g - w)) : INFINITY;
  }
  return err / scale;
}

class CoremlZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(CoremlZoo, MatchesPyTorch) {
  const std::string name = GetParam();
  const fs::path dir = zoo_dir() / name;
  ASSERT_TRUE(fs::exists(dir / "manifest.json")) << dir << ": run tools/coreml_zoo/make_zoo.py";
  const Manifest m = read_manifest(dir);
  ASSERT_FALSE(m.inputs.empty());
  ASSERT_FALSE(m.outputs.empty());
  ASSERT_GT(m.tolerance, 0);

  Program p = load_model((dir / "model.mlpackage").string());
  verify(p);

  struct Engine {
    std::string label;
    std::function<TensorMap(const TensorMap&)> run;
  };
  CompileOptions co;
  co.tune = CompileOptions::Tune::off;
  Plan plan = compile(p, co);
  TensorMap ref_states;
  std::vector<Engine> engines = {
      {"compiled", [&](const TensorMap& in) { return plan.run(in); }},
      {"reference", [&](const TensorMap& in) { return run_reference(p, "main", in, ref_states); }},
  };
  const bool fp16 = name.find("_fp16") != std::string::npos;
  Plan plan16;
  if (fp16) {
    CompileOptions c16 = co;
    c16.numerics = CompileOptions::Numerics::fp16;
    plan16 = compile(p, c16);
    engines.push_back({"compiled-fp16-numerics", [&](const TensorMap& in) { return plan16.run(in); }});
  }

  const int steps = std::max(1, m.steps);
  for (int s = 0; s < steps; ++s) {
    TensorMap inputs;
    for (const auto& in : m.inputs) inputs[in] = read_npy((dir / npy_name("input", in, m, s)).string());
    for (auto& e : engines) {
      const TensorMap got = e.run(inputs);
      for (const auto& out : m.outputs) {
        const Tensor want = read_npy((dir / npy_name("expected", out, m, s)).string());
        auto it = got.find(out);
        ASSERT_NE(it, got.end()) << e.label << " has no output '" << out << "'";
        const double err = scaled_error(it->second, want);
        std::printf("[zoo] %-26s %-24s step %d %-8s err %.3g (tolerance %g)\n", name.c_str(), e.label.c_str(), s,
                    out.c_str(), err, m.tolerance);
        EXPECT_LE(err, m.tolerance) << name << " " << e.label << " output '" << out << "' step " << s;
      }
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Zoo, CoremlZoo,
                         ::testing::Values("mlp_fp32", "mlp_fp16", "mlp_int8", "mlp_palettized4", "convnet_fp32",
                                           "convnet_fp16", "lstm_fp32", "lstm_fp16", "transformer_encoder_fp32",
                                           "transformer_encoder_fp16", "gpt2_block_fp32", "gpt2_block_fp16",
                                           "kv_cache_fp16", "cnn_fp32", "cnn_fp16", "gru_fp32", "gru_fp16"),
                         param_name);

}  // namespace
}  // namespace milrt::test
