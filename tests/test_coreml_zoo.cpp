// The Core ML conformance zoo (issue #16 part 3): small PyTorch models that
// coremltools 9 converted to `.mlpackage` (tools/coreml_zoo/make_zoo.py), each
// with its inputs and PyTorch's outputs as .npy and a manifest.json giving the
// tolerance. Every model is loaded from its package, verified, compiled (tuning
// off) and run, and its outputs compared with PyTorch's; the reference executor
// is compared too. fp16 models also run compiled with CompileOptions::numerics
// fp16 (every fp16 value rounded as fp16 hardware does). Each package is also
// written as a .mlmodelc bundle and loaded back; its plan's outputs must be
// bit-identical to the package's.
//
// Error measure (as in the manifests): max|milrt - torch| / max(1, max|torch|)
// per output. Tolerances (manifest "tolerance", justified in make_zoo.py):
// fp32 models 1e-5 (both sides fp32; measured <= 4.9e-7), fp16 models 5e-3
// (weights and intermediates fp16, ulp 4.9e-4 relative; measured <= 1.6e-3),
// the int8-quantized MLP 5e-3 (measured 8.1e-4) and the 4-bit palettized MLP
// 5e-2 (measured 1.7e-2), both against the uncompressed PyTorch model, so
// that the bound is the compression error itself. The iOS18 compressed MLPs
// (int4 per block, pruned, pruned + int8) are compared with the PyTorch MLP
// carrying their decompressed weights, at 1e-5 (measured <= 4.5e-8). The
// measured errors are printed ("[zoo]" lines).
//
// Stateful models (manifest "steps"): states start at zero and persist over
// the steps; inputs and expected outputs are input_<name>_step<i>.npy,
// expected_<name>_step<i>.npy. Multifunction models (manifest "functions",
// "default_function"): each function is compiled and run on its own inputs.
// Cases too big to commit (all-MiniLM-L6-v2) run from $MILRT_COREML_ZOO_EXTRA
// (CoremlZooByHand; skipped when it is unset).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "milrt/model_description.h"
#include "milrt/npy.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

namespace fs = std::filesystem;

fs::path zoo_dir() { return fs::path(MILRT_SOURCE_DIR) / "tests" / "data" / "coreml_zoo"; }

// One input or output of a run: its name and .npy file (a pattern with a
// literal "{i}" for the step of a stateful model).
struct Io {
  std::string name, file;
};

// One function run: the function, its inputs and expected outputs.
struct FunctionRun {
  std::string function = "main";
  std::vector<Io> inputs, outputs;
};

struct Manifest {
  std::vector<FunctionRun> runs;  // one ("main") unless the model is multifunction
  double tolerance = 0;
  int steps = 0;  // 0: a stateless model (one run, files without _step<i>)
  std::string default_function;   // multifunction models only
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<Io> ios_in(const nlohmann::json& list) {
  std::vector<Io> out;
  for (const auto& e : list) out.push_back({e.at("name").get<std::string>(), e.at("file").get<std::string>()});
  return out;
}

// make_zoo.py's manifest.json: "inputs"/"outputs" for a model run as
// function "main", or "functions" (each with its "name", "inputs" and
// "outputs") and "default_function" for a multifunction model.
Manifest read_manifest(const fs::path& dir) {
  const nlohmann::json j = nlohmann::json::parse(slurp(dir / "manifest.json"));
  Manifest m;
  m.tolerance = j.at("tolerance").get<double>();
  m.steps = j.value("steps", 0);
  if (j.contains("functions")) {
    m.default_function = j.at("default_function").get<std::string>();
    for (const auto& f : j.at("functions"))
      m.runs.push_back({f.at("name").get<std::string>(), ios_in(f.at("inputs")), ios_in(f.at("outputs"))});
  } else {
    m.runs.push_back({"main", ios_in(j.at("inputs")), ios_in(j.at("outputs"))});
  }
  return m;
}

// The file of `io` at step `step` (the manifest's "{i}" replaced).
fs::path npy_path(const fs::path& dir, const Io& io, int step) {
  std::string f = io.file;
  const size_t at = f.find("{i}");
  if (at != std::string::npos) f.replace(at, 3, std::to_string(step));
  return dir / f;
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

// Loads, verifies, compiles and runs the case in `dir` (named `name` in the
// "[zoo]" lines) on every engine, from the package and from the .mlmodelc it
// converts to, and compares each output with PyTorch's.
void check_case(const fs::path& dir, const std::string& name) {
  ASSERT_TRUE(fs::exists(dir / "manifest.json")) << dir << ": run tools/coreml_zoo/make_zoo.py";
  const Manifest m = read_manifest(dir);
  ASSERT_FALSE(m.runs.empty());
  ASSERT_GT(m.tolerance, 0);
  const std::string pkg = (dir / "model.mlpackage").string();

  Program p = load_model(pkg);
  verify(p);
  // The same model as a compiled bundle (what `milrt convert` writes, the
  // form coremlc gives a package): run below as "compiled-mlmodelc", its
  // outputs must be bit-identical to the package's. (Its IR differs only in
  // where the weights lie in the blob file.)
  const std::string bundle = temp_dir("coreml_zoo") + "/" + name + ".mlmodelc";
  fs::remove_all(bundle);
  save_model(p, bundle);
  Program pc = load_model(bundle);
  verify(pc);
  if (!m.default_function.empty()) {
    // A multifunction package: its description names the same functions and default.
    const ModelDescription d = load_model_description(pkg);
    EXPECT_EQ(d.default_function, m.default_function);
    ASSERT_EQ(d.functions.size(), m.runs.size());
    for (size_t i = 0; i < m.runs.size(); ++i) {
      EXPECT_EQ(d.functions[i].name, m.runs[i].function);
      EXPECT_NE(p.function(m.runs[i].function), nullptr) << m.runs[i].function;
    }
  }
  const bool fp16 = name.find("_fp16") != std::string::npos;

  for (const FunctionRun& run : m.runs) {
    ASSERT_FALSE(run.inputs.empty());
    ASSERT_FALSE(run.outputs.empty());
    struct Engine {
      std::string label;
      std::function<TensorMap(const TensorMap&)> run;
    };
    CompileOptions co;
    co.tune = CompileOptions::Tune::off;
    co.function = run.function;
    Plan plan = compile(p, co), plan_c = compile(pc, co);
    TensorMap ref_states;
    std::vector<Engine> engines = {
        {"compiled", [&](const TensorMap& in) { return plan.run(in); }},
        {"compiled-mlmodelc", [&](const TensorMap& in) { return plan_c.run(in); }},
        {"reference", [&](const TensorMap& in) { return run_reference(p, run.function, in, ref_states); }},
    };
    Plan plan16;
    if (fp16) {
      CompileOptions c16 = co;
      c16.numerics = CompileOptions::Numerics::fp16;
      plan16 = compile(p, c16);
      engines.push_back({"compiled-fp16-numerics", [&](const TensorMap& in) { return plan16.run(in); }});
    }
    const std::string shown = run.function == "main" ? name : name + ":" + run.function;

    const int steps = std::max(1, m.steps);
    for (int s = 0; s < steps; ++s) {
      TensorMap inputs;
      for (const auto& in : run.inputs) inputs[in.name] = read_npy(npy_path(dir, in, s).string());
      TensorMap from_package;
      for (auto& e : engines) {
        const TensorMap got = e.run(inputs);
        if (e.label == "compiled") from_package = got;
        if (e.label == "compiled-mlmodelc")
          for (const auto& [out_name, t] : got) {
            ASSERT_TRUE(from_package.count(out_name)) << out_name;
            EXPECT_TRUE(t.same_bytes(from_package.at(out_name)))
                << shown << ": output '" << out_name << "' differs between the .mlpackage and the .mlmodelc";
          }
        for (const auto& out : run.outputs) {
          const Tensor want = read_npy(npy_path(dir, out, s).string());
          auto it = got.find(out.name);
          ASSERT_NE(it, got.end()) << e.label << " has no output '" << out.name << "'";
          const double err = scaled_error(it->second, want);
          std::printf("[zoo] %-26s %-24s step %d %-9s err %.3g (tolerance %g)\n", shown.c_str(), e.label.c_str(), s,
                      out.name.c_str(), err, m.tolerance);
          EXPECT_LE(err, m.tolerance) << shown << " " << e.label << " output '" << out.name << "' step " << s;
        }
      }
    }
  }
}

class CoremlZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(CoremlZoo, MatchesPyTorch) { check_case(zoo_dir() / GetParam(), GetParam()); }

// Cases too big to commit (make_zoo.py --only minilm --out DIR): every
// directory of $MILRT_COREML_ZOO_EXTRA holding a manifest.json, checked as the
// committed ones are.
TEST(CoremlZooByHand, MatchesPyTorch) {
  const char* extra = std::getenv("MILRT_COREML_ZOO_EXTRA");
  if (extra == nullptr || *extra == '\0')
    GTEST_SKIP() << "MILRT_COREML_ZOO_EXTRA is not set: by-hand zoo cases (e.g. all-MiniLM-L6-v2, made by "
                    "tools/coreml_zoo/make_zoo.py --only minilm --out DIR) skipped";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(extra))
    if (fs::exists(e.path() / "manifest.json")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  ASSERT_FALSE(cases.empty()) << extra << " holds no case directory (with a manifest.json)";
  for (const auto& c : cases) {
    SCOPED_TRACE(c.string());
    check_case(c, c.filename().string());
  }
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Zoo, CoremlZoo,
                         ::testing::Values("mlp_fp32", "mlp_fp16", "mlp_int8", "mlp_palettized4", "convnet_fp32",
                                           "convnet_fp16", "lstm_fp32", "lstm_fp16", "transformer_encoder_fp32",
                                           "transformer_encoder_fp16", "gpt2_block_fp32", "gpt2_block_fp16",
                                           "kv_cache_fp16", "cnn_fp32", "cnn_fp16", "gru_fp32", "gru_fp16",
                                           "llama_fp32", "llama_fp16", "bert_fp32", "bert_fp16", "vit_fp32",
                                           "vit_fp16", "whisper_encoder_fp32", "whisper_encoder_fp16",
                                           "mlp_int4_block", "mlp_pruned", "mlp_pruned_int8", "multifunction_mlp"),
                         param_name);

}  // namespace
}  // namespace milrt::test
