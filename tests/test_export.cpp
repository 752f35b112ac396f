// `milrt export` (tools/milrt/cmd_export.cpp): a checkpoint as a Core ML
// bundle. The bundle is read back three ways: by milrt (load_model, compile,
// run) against llm::Generator's logits on the same checkpoint; by `milrt run`
// on .npy inputs; and byte by byte here, against mil-format.md's layout of
// weight.bin, with no milrt reader involved.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <algorithm>
#include <tuple>

#include "llm/checkpoint.h"
#include "llm/generator.h"
#include "llm/llama_decoder.h"
#include "llm/quantize.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "milrt/plan.h"
#include "support/test_util.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {

namespace fs = std::filesystem;
using llm::LlamaConfig;
using llm::LlamaWeights;

// ---- checkpoints and exports

// A random checkpoint from ../shared/peers/make_llama2c_checkpoint.py when it
// and numpy are there; else one from init_llama_weights (said on stdout).
std::string checkpoint(const std::string& config, bool unshared) {
  static std::string dir = temp_dir("export_ckpt");
  const std::string path = dir + "/" + config + (unshared ? "_unshared" : "") + ".bin";
  if (fs::exists(path)) return path;
  const std::string script = shared_dir().empty() ? "" : shared_dir() + "/peers/make_llama2c_checkpoint.py";
  if (!script.empty() && fs::exists(script) && fs::exists("/usr/bin/python3")) {
    const std::string cmd = "/usr/bin/python3 " + script + " " + path + " --config " + config + " --seed 11" +
                            (unshared ? " --unshared" : "") + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0 && fs::exists(path)) return path;
  }
  std::printf("[ note ] make_llama2c_checkpoint.py (or numpy) unavailable: %s from init_llama_weights\n",
              config.c_str());
  LlamaConfig cfg = *llm::llama_preset(config);
  cfg.shared_classifier = !unshared;
  llm::save_llama2c_checkpoint(path, llm::init_llama_weights(cfg, 11), 0);
  return path;
}

// Exports through the CLI and returns the bundle path (a fresh directory).
std::string export_bundle(const std::string& ckpt, const std::vector<std::string>& extra,
                          CliResult* result = nullptr) {
  static int n = 0;
  static std::string dir = temp_dir("export_out");
  const std::string out = dir + "/m" + std::to_string(n++) + ".mlmodelc";
  std::vector<std::string> args = {"export", "--checkpoint", ckpt, "--out", out};
  args.insert(args.end(), extra.begin(), extra.end());
  // fp32 caches unless a test asks: the program milrt generate runs, so logits compare exactly.
  if (std::find(extra.begin(), extra.end(), "--cache") == extra.end()) args.insert(args.end(), {"--cache", "fp32"});
  CliResult r = run_cli(args, 300);
  if (result) {
    *result = r;
  } else if (std::find(extra.begin(), extra.end(), "bf16") != extra.end()) {
    // bf16 warns on stderr (ExportErrors.Bf16WarnsThatCoreMlCannotLoadIt checks the line).
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.err.rfind("warning: ", 0), 0u) << describe(r);
  } else {
    EXPECT_TRUE(Succeeded(r));
  }
  return out;
}

Tensor ids_tensor(const std::vector<int32_t>& ids) {
  Tensor t(DType::Int32, {1, int64_t(ids.size())});
  for (size_t i = 0; i < ids.size(); ++i) t.set(i, ids[i]);
  return t;
}
Tensor pos_tensor(int64_t pos) {
  Tensor t(DType::Int32, {1});
  t.set(0, double(pos));
  return t;
}

// Runs a bundle's program as `milrt run` would: parsed from disk, verified, compiled.
Plan compile_bundle(const std::string& bundle) {
  Program p = load_model(bundle);
  verify(p);
  return compile(p);
}

std::vector<float> logits_of(Plan& plan, const std::vector<int32_t>& ids, int64_t pos) {
  Tensor out = plan.run({{"tokens", ids_tensor(ids)}, {"pos", pos_tensor(pos)}}).at("logits");
  return std::vector<float>(out.ptr<float>(), out.ptr<float>() + out.numel());
}

struct Diff {
  double abs = 0, rel = 0;
};
Diff diff(const float* got, const float* want, size_t n) {
  Diff d;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(double(got[i]) - double(want[i]));
    d.abs = std::max(d.abs, e);
    d.rel = std::max(d.rel, e / std::max(std::fabs(double(want[i])), 1e-30));
  }
  return d;
}

// ---- round trip against the Generator (fp32)

// The largest |got - want| over the largest |want|: logits cross zero, so an
// elementwise relative error says nothing about the small ones.
double scaled_diff(const float* got, const float* want, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(want[i])));
  return diff(got, want, n).abs / std::max(m, 1e-30);
}

// Decodes the same 8 tokens with the bundle's plan, the in-memory program's
// plan and the Generator: the worst |bundle - in-memory| logit difference and
// the worst bundle vs Generator difference relative to the largest |logit|.
struct DecodeDiffs {
  double direct = 0, generator = 0;
};
DecodeDiffs decode_diffs(Plan& plan, Plan& direct, llm::Generator& gen) {
  const std::vector<int32_t> tokens = {1, 17, 300, 42, 99, 5, 250, 3};
  DecodeDiffs d;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const float* want = i == 0 ? gen.prefill({tokens[0]}) : gen.decode(tokens[i]);
    std::vector<float> got = logits_of(plan, {tokens[i]}, int64_t(i));
    std::vector<float> mem = logits_of(direct, {tokens[i]}, int64_t(i));
    EXPECT_EQ(got.size(), size_t(gen.config().vocab));
    d.direct = std::max(d.direct, diff(got.data(), mem.data(), got.size()).abs);
    d.generator = std::max(d.generator, scaled_diff(got.data(), want, got.size()));
  }
  return d;
}

// The decode bundle, run token after token from position 0 with its states
// carried between runs, against
//  - the same program built in memory (fp32 const weights) and compiled:
//    bit for bit, as the bundle holds the same ops and the same fp32 bytes;
//  - llm::Generator on the same checkpoint: within 1e-6 of the largest
//    |logit|, not bit for bit, because the Generator's weights are plan inputs
//    while the bundle's are consts, which the compiler packs for its GEMMs at
//    compile time (src/runtime/lower/linalg.cpp): another kernel path, another
//    summation order (measured: max |diff| ~1.5e-7 on logits up to ~1).
void expect_decode_round_trip(const std::string& config, bool unshared) {
  const std::string ckpt = checkpoint(config, unshared);
  const std::string bundle = export_bundle(ckpt, {});
  LlamaWeights w = llm::load_llama2c_checkpoint(ckpt);
  llm::Generator gen(w);
  Plan direct = compile(llm::build_llama_decoder(w, 1, {llm::WeightStorage::fp32, 32}));
  Plan plan = compile_bundle(bundle);
  const DecodeDiffs d = decode_diffs(plan, direct, gen);
  const double worst_direct = d.direct, worst_gen = d.generator;
  EXPECT_EQ(worst_direct, 0.0) << config << ": bundle vs the in-memory fp32 program";
  EXPECT_LT(worst_gen, 1e-6) << config << ": bundle vs Generator";
  std::printf("[ info ] %s%s decode bundle, 8 tokens: max |logit diff| vs in-memory program %.3g, "
              "vs Generator %.3g of the largest |logit|\n",
              config.c_str(), unshared ? " unshared" : "", worst_direct, worst_gen);
}

TEST(ExportRoundTrip, DecodeSharedClassifierEqualsGenerator) { expect_decode_round_trip("tiny", false); }
TEST(ExportRoundTrip, DecodeUnsharedClassifierEqualsGenerator) { expect_decode_round_trip("tiny", true); }

// --tokens T: the prefill bundle run once on T tokens from position 0 equals
// Generator::prefill of the same prompt (which runs its own T-token plan).
TEST(ExportRoundTrip, PrefillEqualsGeneratorPrefill) {
  const std::string ckpt = checkpoint("tiny", true);
  const std::vector<int32_t> prompt = {1, 17, 300, 42, 99, 5};
  const std::string bundle = export_bundle(ckpt, {"--tokens", std::to_string(prompt.size())});
  llm::Generator gen(llm::load_llama2c_checkpoint(ckpt));
  const float* want = gen.prefill(prompt);
  Plan plan = compile_bundle(bundle);
  std::vector<float> got = logits_of(plan, prompt, 0);
  Plan direct = compile(llm::build_llama_decoder(llm::load_llama2c_checkpoint(ckpt), int64_t(prompt.size()),
                                                 {llm::WeightStorage::fp32, 32}));
  std::vector<float> mem = logits_of(direct, prompt, 0);
  EXPECT_EQ(diff(got.data(), mem.data(), got.size()).abs, 0.0) << "prefill bundle vs the in-memory program";
  const double d = scaled_diff(got.data(), want, got.size());
  EXPECT_LT(d, 1e-6) << "prefill bundle vs Generator::prefill";
  std::printf("[ info ] tiny prefill bundle (6 tokens): vs Generator %.3g of the largest |logit|\n", d);
  // A prefill program is not a decode program: its tokens input is [1, T].
  Program p = load_model(bundle);
  EXPECT_EQ(p.functions.at(0).param("tokens")->type.str(), "tensor<int32, [1, 6]>");
}

// ---- other storages against the same program built in memory

// Without GeneratorOptions (helper G's), fp16/int8/bf16 bundles are compared
// with build_llama_decoder(w, T, {storage, block}) compiled directly: the
// bundle must compute exactly what the in-memory program computes (the same
// weight values, only stored in weight.bin and read back). Then, as a check
// that the storage is what it claims (not fp32 again, not garbage), the
// distance to the fp32 Generator: fp16 rounds each weight by <= 2^-11
// relative, bf16 by <= 2^-8, int8 by <= 1/254 of its block's max |w|
// (measured on logits up to ~1: fp16 2.1e-4, bf16 1.5e-3, int8 2.2e-3;
// bounds ~10x that).
void expect_storage_round_trip(const std::string& storage, int64_t block, double tol_vs_fp32) {
  const std::string ckpt = checkpoint("tiny", true);
  LlamaWeights w = llm::load_llama2c_checkpoint(ckpt);
  Plan direct;
  try {
    direct = compile(llm::build_llama_decoder(w, 1, {llm::parse_weight_storage(storage), block}));
  } catch (const Error& e) {
    GTEST_SKIP() << storage << " programs do not build or compile yet (" << e.what() << ")";
  }
  const std::string bundle = export_bundle(ckpt, {"--weights", storage, "--block", std::to_string(block)});
  Plan plan = compile_bundle(bundle);
  llm::Generator gen(w);
  const std::vector<int32_t> tokens = {1, 300, 42, 7};
  double worst_direct = 0, worst_fp32 = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<float> got = logits_of(plan, {tokens[i]}, int64_t(i));
    std::vector<float> want = logits_of(direct, {tokens[i]}, int64_t(i));
    const float* fp32 = i == 0 ? gen.prefill({tokens[0]}) : gen.decode(tokens[i]);
    worst_direct = std::max(worst_direct, diff(got.data(), want.data(), got.size()).abs);
    worst_fp32 = std::max(worst_fp32, diff(got.data(), fp32, got.size()).abs);
  }
  EXPECT_EQ(worst_direct, 0.0) << storage << ": bundle vs the in-memory program";
  EXPECT_LT(worst_fp32, tol_vs_fp32) << storage << ": bundle vs the fp32 Generator";
  EXPECT_GT(worst_fp32, 0.0) << storage << ": logits identical to fp32: were the weights really stored as " << storage
                             << "?";
  std::printf("[ info ] %s bundle: max |logit diff| vs in-memory program %.3g, vs fp32 Generator %.3g\n",
              storage.c_str(), worst_direct, worst_fp32);
}

TEST(ExportRoundTrip, Fp16BundleEqualsInMemoryProgram) { expect_storage_round_trip("fp16", 32, 2e-3); }
TEST(ExportRoundTrip, Int8BundleEqualsInMemoryProgram) { expect_storage_round_trip("int8", 4, 2e-2); }
TEST(ExportRoundTrip, Bf16BundleEqualsInMemoryProgram) { expect_storage_round_trip("bf16", 32, 1.5e-2); }

// ---- `milrt run` on the bundle

// The CLI reads the bundle, takes tokens and pos as .npy and every state's
// starting value as an --input too (zeros: a fresh cache), and writes logits
// equal to the Generator's first-token logits.
TEST(ExportCli, MilrtRunOnTheBundleWritesTheGeneratorsLogits) {
  const std::string ckpt = checkpoint("tiny", false);
  const std::string bundle = export_bundle(ckpt, {});
  LlamaWeights w = llm::load_llama2c_checkpoint(ckpt);
  llm::Generator gen(w);
  const float* want = gen.prefill({42});
  const std::string dir = temp_dir("export_run");
  write_npy(dir + "/tokens.npy", ids_tensor({42}));
  write_npy(dir + "/pos.npy", pos_tensor(0));
  std::vector<std::string> args = {"run", bundle, "--input", "tokens=" + dir + "/tokens.npy", "--input",
                                   "pos=" + dir + "/pos.npy", "--output-dir", dir + "/out"};
  const Tensor zeros(DType::FP32, {1, w.cfg.kv_heads, w.cfg.seq, w.cfg.head_dim()});
  write_npy(dir + "/cache.npy", zeros);
  for (const std::string& s : llm::llama_cache_names(w.cfg)) {
    args.push_back("--input");
    args.push_back(s + "=" + dir + "/cache.npy");
  }
  CliResult r = run_cli(args, 120);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  Tensor got = read_npy(dir + "/out/logits.npy");
  ASSERT_EQ(got.shape(), (Shape{1, w.cfg.vocab}));
  ASSERT_EQ(got.dtype(), DType::FP32);
  const double d = scaled_diff(got.ptr<float>(), want, size_t(w.cfg.vocab));
  EXPECT_LT(d, 1e-6) << "milrt run on the bundle vs Generator (as in DecodeSharedClassifierEqualsGenerator)";
  // And bit for bit what the bundle computes in process.
  Plan plan = compile_bundle(bundle);
  std::vector<float> direct = logits_of(plan, {42}, 0);
  EXPECT_EQ(diff(got.ptr<float>(), direct.data(), direct.size()).abs, 0.0);
}

void without_dialect(Type& t) {
  t.bare = false;
  for (Type& e : t.elems) without_dialect(e);
}
void without_dialect(Arg& a) {
  if (a.kind == Arg::Kind::Const) {
    Literal l = *a.lit;
    without_dialect(l.type);
    a.lit = std::make_shared<const Literal>(std::move(l));
  }
  for (Arg& e : a.elems) without_dialect(e);
}
// A program as an .mlpackage can hold it: version 1.0, no bare scalar
// types, each op's inputs in name order (attributes last).
void without_dialect(Program& p) {
  p.version = "1.0";
  for (Function& f : p.functions) {
    for (Param& prm : f.params) without_dialect(prm.type);
    for (Op& op : f.ops) {
      for (Output& o : op.outputs) without_dialect(o.type);
      for (Input& in : op.inputs) without_dialect(in.arg);
      std::stable_sort(op.inputs.begin(), op.inputs.end(), [](const Input& x, const Input& y) {
        return std::tie(x.in_attr_block, x.key) < std::tie(y.in_attr_block, y.key);
      });
    }
  }
}

// --format mlpackage (or an .mlpackage --out) writes what coremltools writes;
// loaded back it is the bundle's program, so a plan gives the same logits
// bit for bit, for fp32 and int8 (iOS18 constexpr) weights; --overwrite
// replaces only a package with a package.
TEST(ExportCli, PackageComputesWhatTheBundleComputes) {
  const std::string ckpt = checkpoint("tiny", false);
  for (const char* weights : {"fp32", "int8"}) {
    SCOPED_TRACE(weights);
    const std::string bundle = export_bundle(ckpt, {"--weights", weights, "--block", "4"});
    const std::string pkg = temp_dir("export_pkg") + "/m.mlpackage";
    CliResult r = run_cli({"export", "--checkpoint", ckpt, "--out", pkg, "--weights", weights, "--block", "4", "--cache",
                           "fp32"}, 300);
    ASSERT_TRUE(Succeeded(r)) << describe(r);
    EXPECT_TRUE(fs::exists(pkg + "/Manifest.json"));
    EXPECT_NE(r.out.find(fs::absolute(pkg).string()), std::string::npos) << r.out;
    // Only the text dialect may differ: a protobuf program has no spelling
    // for program 1.3's bare scalars (a package loads as 1.0, scalars as
    // tensor<T, []>), and its op inputs are a map, read back in name order.
    Program from_pkg = load_model(pkg), from_bundle = load_model(bundle);
    without_dialect(from_pkg);
    without_dialect(from_bundle);
    EXPECT_EQ(ir_diff(from_pkg, from_bundle), "");
    Plan a = compile_bundle(bundle), b = compile_bundle(pkg);
    const std::vector<float> la = logits_of(a, {42}, 0), lb = logits_of(b, {42}, 0);
    EXPECT_EQ(diff(la.data(), lb.data(), la.size()).abs, 0.0);
    // An existing package is replaced only with --overwrite, and a bundle never by a package.
    EXPECT_NE(run_cli({"export", "--checkpoint", ckpt, "--out", pkg}).err.find("exists; give --overwrite"),
              std::string::npos);
    EXPECT_TRUE(Succeeded(run_cli({"export", "--checkpoint", ckpt, "--out", pkg, "--overwrite"}, 300)));
    EXPECT_NE(run_cli({"export", "--checkpoint", ckpt, "--out", bundle, "--format", "mlpackage", "--overwrite"})
                  .err.find("is not a package"),
              std::string::npos);
  }
  EXPECT_NE(run_cli({"export", "--checkpoint", ckpt, "--out", "x.zip", "--format", "zip"}).err.find("--format must be"),
            std::string::npos);
}

// The summary line names the program, the storage, the cache, weight.bin's size and the path.
TEST(ExportCli, PrintsASummaryLine) {
  CliResult r;
  const std::string bundle = export_bundle(checkpoint("tiny", false), {"--weights", "int8", "--block", "4", "--tokens", "3"}, &r);
  ASSERT_TRUE(Succeeded(r));
  const uintmax_t bytes = fs::file_size(bundle + "/weights/weight.bin");
  EXPECT_EQ(r.out, "exported prefill (3 tokens per run) program, int8 (block 4) weights, fp32 KV cache, weight.bin " +
                       std::to_string(bytes) + " bytes: " + fs::absolute(bundle).string() + "\n");
}

// ---- the bundle's bytes, read here without milrt's reader

uint32_t rd32(const std::string& b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);  // little-endian host, as the format
  return v;
}
uint64_t rd64(const std::string& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

struct Record {
  uint32_t dtype;
  uint64_t size, data;
};

// Walks weight.bin as mil-format.md lays it out and fails on any deviation:
// 64-byte header {count, version 2, zeros}; per blob a 64-byte record
// {0xDEADBEEF, dtype, size, data offset = record + 64, padding_bits 0, 32
// zero bytes} on a 64-byte boundary, the next record at the next boundary
// after the data. Returns the records by offset.
std::map<uint64_t, Record> walk_weight_bin(const std::string& b) {
  std::map<uint64_t, Record> recs;
  EXPECT_GE(b.size(), 64u);
  if (b.size() < 64) return recs;
  const uint32_t count = rd32(b, 0);
  EXPECT_EQ(rd32(b, 4), 2u) << "version";
  for (size_t i = 8; i < 64; ++i) EXPECT_EQ(b[i], 0) << "header reserved byte " << i;
  uint64_t at = 64;
  for (uint32_t k = 0; k < count; ++k) {
    EXPECT_EQ(at % 64, 0u);
    if (at + 64 > b.size()) {
      ADD_FAILURE() << "record " << k << " at " << at << " past the end of the file";
      return recs;
    }
    EXPECT_EQ(rd32(b, at), 0xDEADBEEFu) << "sentinel of record " << k;
    Record r{rd32(b, at + 4), rd64(b, at + 8), rd64(b, at + 16)};
    EXPECT_EQ(r.data, at + 64) << "record " << k;
    EXPECT_EQ(rd64(b, at + 24), 0u) << "padding_bits of record " << k;
    for (size_t i = 32; i < 64; ++i) EXPECT_EQ(b[at + i], 0) << "reserved byte " << i << " of record " << k;
    EXPECT_LE(r.data + r.size, b.size());
    recs[at] = r;
    at = (r.data + r.size + 63) / 64 * 64;
  }
  EXPECT_LE(b.size(), at) << "bytes after the last record";
  return recs;
}

// Each BLOBFILE literal of model.mil: its declared dtype, element count and offset.
struct BlobRef {
  std::string dtype;
  int64_t numel;
  uint64_t offset;
};
std::vector<BlobRef> blob_refs(const std::string& mil) {
  static const std::regex re(
      R"(tensor<(\w+), \[([0-9, ]*)\]>\(BLOBFILE\(path = string\("@model_path/weights/weight\.bin"\), offset = uint64\((\d+)\)\)\))");
  std::vector<BlobRef> r;
  for (auto it = std::sregex_iterator(mil.begin(), mil.end(), re); it != std::sregex_iterator(); ++it) {
    int64_t n = 1;
    std::stringstream dims((*it)[2].str());
    for (std::string d; std::getline(dims, d, ',');) n *= std::stoll(d);
    r.push_back({(*it)[1].str(), n, std::stoull((*it)[3].str())});
  }
  return r;
}

// mil-format.md's dtype codes and element sizes for the dtypes an export writes.
const std::map<std::string, std::pair<uint32_t, int>> kCodes = {
    {"fp16", {1, 2}}, {"fp32", {2, 4}}, {"int8", {4, 1}}, {"bf16", {5, 2}}, {"int32", {14, 4}}};

// Every BLOBFILE points at a record of the declared dtype's code and exact
// size, every record is referenced, and the records' bytes are the
// checkpoint's (fp32), or its quantization (int8 data and scales).
// bf16 weights need the compiler's bf16 support (matmul's schema); until it
// is there the decoder does not build, and the bf16 tests say so and skip.
#define SKIP_UNLESS_BUILDS(storage, ckpt)                                                                  \
  do {                                                                                                  \
    try {                                                                                               \
      llm::build_llama_decoder(llm::load_llama2c_checkpoint(ckpt), 1, {llm::parse_weight_storage(storage), 4}); \
    } catch (const Error& e) {                                                                          \
      GTEST_SKIP() << storage << " decoders do not build yet (" << e.what() << ")";                     \
    }                                                                                                   \
  } while (0)

// int8: `scales` is --scales (fp16, the default, or fp32).
void expect_bundle_bytes(const std::string& storage, int64_t block, const std::string& scales = "fp16") {
  const std::string ckpt = checkpoint("tiny", true);
  SKIP_UNLESS_BUILDS(storage, ckpt);
  std::vector<std::string> args = {"--weights", storage, "--block", std::to_string(block)};
  if (storage == "int8") args.insert(args.end(), {"--scales", scales});
  const std::string bundle = export_bundle(ckpt, args);
  const std::string mil = read_bytes(bundle + "/model.mil");
  const std::string bin = read_bytes(bundle + "/weights/weight.bin");
  const std::map<uint64_t, Record> recs = walk_weight_bin(bin);
  const std::vector<BlobRef> refs = blob_refs(mil);
  ASSERT_FALSE(refs.empty());
  EXPECT_EQ(refs.size(), recs.size()) << "one BLOBFILE per record";
  std::set<uint64_t> seen;
  std::map<std::string, int> by_dtype;
  for (const BlobRef& ref : refs) {
    ASSERT_TRUE(recs.count(ref.offset)) << "BLOBFILE offset " << ref.offset << " is not a record";
    const Record& rec = recs.at(ref.offset);
    ASSERT_TRUE(kCodes.count(ref.dtype)) << ref.dtype;
    EXPECT_EQ(rec.dtype, kCodes.at(ref.dtype).first) << ref.dtype << " at " << ref.offset;
    EXPECT_EQ(rec.size, uint64_t(ref.numel * kCodes.at(ref.dtype).second)) << ref.dtype << " at " << ref.offset;
    seen.insert(ref.offset);
    ++by_dtype[ref.dtype];
  }
  EXPECT_EQ(seen.size(), recs.size()) << "a record is referenced twice";

  // The bytes themselves: the embedding table (always fp32) and l0's wq in the storage.
  LlamaWeights w = llm::load_llama2c_checkpoint(ckpt);
  auto record_of = [&](const std::string& var) -> const Record* {
    const std::regex re(var + R"([^\n]*?offset = uint64\((\d+)\))");
    std::smatch m;
    if (!std::regex_search(mil, m, re)) return nullptr;
    auto it = recs.find(std::stoull(m[1].str()));
    return it == recs.end() ? nullptr : &it->second;
  };
  auto bytes_equal = [&](const Record* r, const Tensor& t) {
    return r && r->size == t.nbytes() && std::memcmp(bin.data() + r->data, t.data(), t.nbytes()) == 0;
  };
  const int64_t L = w.cfg.layers;
  EXPECT_TRUE(bytes_equal(record_of(" tok_embeddings = const"), w.tensors.at("tok_embeddings")));
  const Tensor& wq = w.tensors.at("l0_wq");
  if (storage == "fp32") {
    EXPECT_TRUE(bytes_equal(record_of(" l0_wq = const"), wq));
  } else if (storage == "fp16") {
    EXPECT_TRUE(bytes_equal(record_of(" l0_wq = const"), wq.cast(DType::FP16)));
    EXPECT_EQ(by_dtype["fp16"], 7 * L + 1);  // 7 matrices per layer and the (unshared) classifier
  } else if (storage == "bf16") {
    EXPECT_TRUE(bytes_equal(record_of(" l0_wq = const"), wq.cast(DType::BF16)));
    EXPECT_EQ(by_dtype["bf16"], 7 * L + 1);
  } else if (storage == "int8") {
    // coremlc's iOS18 form: constexpr_blockwise_shift_scale with inline int8
    // data and scale literals, no const ops in between. Its output has the
    // scale's dtype (coremltools' definition): with fp16 scales an fp16
    // weight, cast to fp32 for the fp32 matmul.
    const std::string sd = scales, out = scales == "fp16" ? "_fp16" : "";
    const std::regex op("tensor<" + sd + R"(, \[(\d+), (\d+)\]> (\w+) = constexpr_blockwise_shift_scale\(data = tensor<int8, \[(\d+), (\d+)\]>\(BLOBFILE\(path = string\("[^"]*"\), offset = uint64\(\d+\)\)\), scale = tensor<)" + sd + R"(, \[(\d+), (\d+)\]>\(BLOBFILE)");
    int ops = 0;
    for (auto it = std::sregex_iterator(mil.begin(), mil.end(), op); it != std::sregex_iterator(); ++it, ++ops) {
      const auto& m = *it;
      EXPECT_EQ(m[1].str(), m[4].str());
      EXPECT_EQ(m[2].str(), m[5].str());
      EXPECT_EQ(m[1].str(), m[6].str()) << m[3];
      EXPECT_EQ(std::stoll(m[2].str()), std::stoll(m[7].str()) * block) << m[3];
      if (!out.empty()) {
        const std::string w = m[3].str().substr(0, m[3].str().size() - out.size());
        EXPECT_NE(mil.find("tensor<fp32, [" + m[1].str() + ", " + m[2].str() + "]> " + w + " = cast(x = " + m[3].str() +
                           ", dtype = string(\"fp32\"))"),
                  std::string::npos)
            << "no fp32 cast of " << m[3];
      }
    }
    EXPECT_EQ(ops, 7 * L + 1);
    EXPECT_EQ(by_dtype["int8"], 7 * L + 1);
    if (sd == "fp16") {
      EXPECT_EQ(by_dtype["fp16"], 7 * L + 1) << "the scales";
    }
    EXPECT_EQ(mil.find("_q8 = const"), std::string::npos) << "constexpr inputs should be inline literals";
    const llm::BlockQuantized q = llm::quantize_int8_blockwise(wq, block, llm::parse_scale_dtype(sd));
    const std::string name = " l0_wq" + out + " = constexpr_blockwise_shift_scale\\(data";
    EXPECT_TRUE(bytes_equal(record_of(name), q.data));
    EXPECT_TRUE(bytes_equal(record_of(name + " = [^\\n]*?scale"), q.scale));
  }
  std::printf("[ info ] %s bundle: %zu records, weight.bin %zu bytes, model.mil %zu bytes\n", storage.c_str(),
              recs.size(), bin.size(), mil.size());
}

TEST(ExportBundle, Fp32WeightBinFollowsTheFormat) { expect_bundle_bytes("fp32", 32); }
TEST(ExportBundle, Fp16WeightBinFollowsTheFormat) { expect_bundle_bytes("fp16", 32); }
TEST(ExportBundle, Bf16WeightBinFollowsTheFormat) { expect_bundle_bytes("bf16", 32); }
TEST(ExportBundle, Int8WeightBinFollowsTheFormat) { expect_bundle_bytes("int8", 4); }
TEST(ExportBundle, Int8Fp32ScalesWeightBinFollowsTheFormat) { expect_bundle_bytes("int8", 4, "fp32"); }

// model.mil is the program(1.3) dialect with an ios18 main whose caches are
// state<tensor<fp32, [1, kv_heads, seq, head_dim]>> parameters after tokens
// and pos; metadata.json describes the same inputs, states and output.
TEST(ExportBundle, ModelMilDeclaresStatesAndMetadataDescribesThem) {
  const std::string ckpt = checkpoint("tiny", false);
  const std::string bundle = export_bundle(ckpt, {"--tokens", "4", "--cache", "fp16"});
  const LlamaConfig c = llm::load_llama2c_checkpoint(ckpt).cfg;
  const std::string mil = read_bytes(bundle + "/model.mil");
  EXPECT_EQ(mil.rfind("program(1.3)\n", 0), 0u) << mil.substr(0, 100);
  const std::string cache = "state<tensor<fp16, [1, " + std::to_string(c.kv_heads) + ", " + std::to_string(c.seq) +
                            ", " + std::to_string(c.head_dim()) + "]>>";
  std::string sig = "func main<ios18>(tensor<int32, [1, 4]> tokens, tensor<int32, [1]> pos";
  for (const std::string& s : llm::llama_cache_names(c)) sig += ", " + cache + " " + s;
  EXPECT_NE(mil.find(sig + ")"), std::string::npos) << "expected the signature " << sig;
  EXPECT_NE(mil.find("} -> (logits);"), std::string::npos);
  EXPECT_NE(mil.find("coreml_update_state(state = l0_kcache"), std::string::npos);
  EXPECT_NE(mil.find("read_state(input = l0_kcache)"), std::string::npos);
  // It parses (and verifies) on its own, without the bundle around it.
  const std::string bare = temp_dir("export_bare") + "/model.mil";
  write_bytes(bare, mil);
  EXPECT_NO_THROW(parse_mil(mil, bare, fs::path(bundle).string()));

  const nlohmann::json m = nlohmann::json::parse(read_bytes(bundle + "/metadata.json")).at(0);
  EXPECT_EQ(m.at("modelType").at("name"), "MLModelType_mlProgram");
  ASSERT_EQ(m.at("inputSchema").size(), 2u);
  EXPECT_EQ(m.at("inputSchema")[0].at("name"), "tokens");
  EXPECT_EQ(m.at("inputSchema")[0].at("shape"), "[1, 4]");
  EXPECT_EQ(m.at("inputSchema")[0].at("dataType"), "Int32");
  EXPECT_EQ(m.at("inputSchema")[1].at("name"), "pos");
  ASSERT_EQ(m.at("outputSchema").size(), 1u);
  EXPECT_EQ(m.at("outputSchema")[0].at("name"), "logits");
  EXPECT_EQ(m.at("outputSchema")[0].at("shape"), "[1, " + std::to_string(c.vocab) + "]");
  ASSERT_EQ(m.at("stateSchema").size(), size_t(2 * c.layers));
  EXPECT_EQ(m.at("stateSchema")[1].at("name"), "l0_vcache");
  EXPECT_EQ(m.at("stateSchema")[1].at("type"), "State");
  EXPECT_EQ(m.at("stateSchema")[1].at("shape"), "[1, " + std::to_string(c.kv_heads) + ", " + std::to_string(c.seq) +
                                                    ", " + std::to_string(c.head_dim()) + "]");
  EXPECT_EQ(m.at("mlProgramOperationTypeHistogram").at("CoremlUpdateState"), 2 * c.layers);
}

// Without --cache the states are fp16, as Core ML requires: keys and values
// are rounded to fp16 on their way into the cache. Bit for bit the in-memory
// program with fp16 caches; against the fp32 Generator within fp16 rounding
// of K and V (relative 2^-11 each; measured 2.1e-4 of the largest |logit|
// on this model: bound 5e-3).
TEST(ExportRoundTrip, DefaultFp16CacheIsCloseToTheFp32Generator) {
  const std::string ckpt = checkpoint("tiny", false);
  const std::string out = temp_dir("export_fp16_cache") + "/m.mlmodelc";
  CliResult r = run_cli({"export", "--checkpoint", ckpt, "--out", out}, 300);
  ASSERT_TRUE(Succeeded(r));
  EXPECT_NE(r.out.find("fp16 KV cache"), std::string::npos) << r.out;
  EXPECT_NE(read_bytes(out + "/model.mil").find("state<tensor<fp16, "), std::string::npos);
  LlamaWeights w = llm::load_llama2c_checkpoint(ckpt);
  llm::Generator gen(w);
  llm::DecoderOptions opt{llm::WeightStorage::fp32, 32, DType::FP16};
  Plan direct = compile(llm::build_llama_decoder(w, 1, opt));
  Plan plan = compile_bundle(out);
  const DecodeDiffs d = decode_diffs(plan, direct, gen);
  const double worst_direct = d.direct, worst_gen = d.generator;
  EXPECT_EQ(worst_direct, 0.0);
  EXPECT_LT(worst_gen, 5e-3);
  EXPECT_GT(worst_gen, 0.0) << "fp16 caches round: some difference is expected";
  std::printf("[ info ] fp16-cache bundle vs fp32 Generator: %.3g of the largest |logit|\n", worst_gen);
  EXPECT_NE(run_cli({"export", "--checkpoint", ckpt, "--out", out + "x", "--cache", "bf16"}).err.find("--cache"),
            std::string::npos);
}

// ---- atomicity and errors

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> r;
  for (auto& e : fs::directory_iterator(dir)) r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  return r;
}

TEST(ExportErrors, ExistingOutIsRefusedWithoutOverwriteAndReplacedWhole) {
  const std::string ckpt = checkpoint("tiny", false);
  const std::string parent = temp_dir("export_atomic");
  const std::string out = parent + "/m.mlmodelc";
  ASSERT_TRUE(Succeeded(run_cli({"export", "--checkpoint", ckpt, "--out", out})));
  write_bytes(out + "/marker", "old");
  const std::string old_mil = read_bytes(out + "/model.mil");

  CliResult r = run_cli({"export", "--checkpoint", ckpt, "--out", out, "--weights", "int8", "--block", "4"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("--overwrite"), std::string::npos) << r.err;
  EXPECT_EQ(read_bytes(out + "/marker"), "old");
  EXPECT_EQ(read_bytes(out + "/model.mil"), old_mil);
  EXPECT_EQ(listing(parent), std::vector<std::string>{"m.mlmodelc"}) << "no temporary left behind";

  // A failing export with --overwrite (bad block) leaves the old bundle too.
  r = run_cli({"export", "--checkpoint", ckpt, "--out", out, "--weights", "int8", "--block", "7", "--overwrite"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_EQ(read_bytes(out + "/marker"), "old");
  EXPECT_EQ(listing(parent), std::vector<std::string>{"m.mlmodelc"});

  r = run_cli({"export", "--checkpoint", ckpt, "--out", out, "--weights", "int8", "--block", "4", "--overwrite"});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_FALSE(fs::exists(out + "/marker")) << "replaced whole, not written over";
  EXPECT_NE(read_bytes(out + "/model.mil").find("constexpr_blockwise_shift_scale"), std::string::npos);
  EXPECT_EQ(listing(parent), std::vector<std::string>{"m.mlmodelc"}) << "the old bundle is gone";

  // --overwrite replaces bundles only: not a file, not a directory without model.mil.
  const std::string file = parent + "/notes.txt", dir = parent + "/data";
  write_bytes(file, "keep");
  fs::create_directory(dir);
  for (const std::string& o : {file, dir}) {
    r = run_cli({"export", "--checkpoint", ckpt, "--out", o, "--overwrite"});
    EXPECT_TRUE(IsOneLineError(r)) << o;
    EXPECT_NE(r.err.find("not a bundle"), std::string::npos) << r.err;
  }
  EXPECT_EQ(read_bytes(file), "keep");
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(ExportErrors, BadArgumentsAreOneLineErrorsAndWriteNothing) {
  const std::string ckpt = checkpoint("tiny", false);
  const std::string parent = temp_dir("export_errors");
  const std::string out = parent + "/m.mlmodelc";
  const std::string cut = parent + "/cut.bin";
  const std::string whole = read_bytes(ckpt);
  write_bytes(cut, whole.substr(0, whole.size() / 2));
  const std::string seq = std::to_string(llm::load_llama2c_checkpoint(ckpt).cfg.seq);
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--checkpoint", parent + "/missing.bin"}, "missing.bin"},
      {{"--checkpoint", cut}, "cut.bin"},
      {{"--checkpoint", ckpt, "--weights", "q4"}, "q4"},
      {{"--checkpoint", ckpt, "--tokens", "0"}, "--tokens"},
      {{"--checkpoint", ckpt, "--tokens", std::to_string(std::stoi(seq) + 1)}, "1.." + seq},
      {{"--checkpoint", ckpt, "--block", "0"}, "--block"},
      {{"--checkpoint", ckpt, "--weights", "int8", "--block", "7"}, "block size 7"},
      {{"--checkpoint", ckpt, "--tokens", "x"}, "--tokens"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"export", "--out", out};
    args.insert(args.end(), c.args.begin(), c.args.end());
    CliResult r = run_cli(args);
    EXPECT_TRUE(IsOneLineError(r)) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.says;
  }
  EXPECT_EQ(listing(parent), (std::vector<std::string>{"cut.bin"})) << "no temporary left behind";
  CliResult r = run_cli({"export", "--checkpoint", ckpt});
  EXPECT_TRUE(IsOneLineError(r)) << "--out is required";
}

// bf16 exports (milrt runs them) but warns once that Core ML cannot load them.
// While the compiler cannot take bf16 matmuls, the export fails with the
// builder's error, on one line (no warning before it).
TEST(ExportErrors, Bf16WarnsThatCoreMlCannotLoadIt) {
  try {
    llm::build_llama_decoder(llm::load_llama2c_checkpoint(checkpoint("tiny", false)), 1,
                             {llm::WeightStorage::bf16, 32});
  } catch (const Error& e) {
    CliResult r;
    export_bundle(checkpoint("tiny", false), {"--weights", "bf16"}, &r);
    EXPECT_TRUE(IsOneLineError(r));
    GTEST_SKIP() << "bf16 decoders do not build yet (" << e.what() << "); checked the one-line error only";
  }
  CliResult r;
  const std::string bundle = export_bundle(checkpoint("tiny", false), {"--weights", "bf16"}, &r);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("warning: Core ML cannot load bf16"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fp16 or int8"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(bundle + "/model.mil"));
  r = run_cli({"export", "--checkpoint", checkpoint("tiny", false), "--out", bundle + "_b", "--weights", "fp16"});
  EXPECT_TRUE(Succeeded(r)) << "no warning for fp16";
}

}  // namespace
}  // namespace milrt::test
