// llama2.c checkpoints (v0/v1), weight init, train state and atomic writes.
// File layouts are checked against byte offsets computed here from export.py's
// description, not through the loader's own layout table.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "llm/checkpoint.h"
#include "support/test_util.h"
#include "util/atomic_file.h"

namespace fs = std::filesystem;
using namespace milrt;
using namespace milrt::llm;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), std::streamsize(b.size()));
}

float float_at(const std::string& bytes, int64_t offset) {
  float v;
  std::memcpy(&v, bytes.data() + offset, 4);
  return v;
}

using test::error_of;

LlamaConfig tiny(bool shared = true) {
  LlamaConfig c = *llama_preset("tiny");
  c.shared_classifier = shared;
  return c;
}

bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

// Runs the peers' independent writer; "" (after GTEST_SKIP) when it cannot run.
std::string peers_checkpoint(const std::string& dir, const std::string& config, bool unshared, int seed) {
  std::string script = test::shared_dir() + "/peers/make_llama2c_checkpoint.py";
  std::string out = dir + "/" + config + (unshared ? "_unshared" : "") + ".bin";
  std::string cmd = "/usr/bin/python3 '" + script + "' '" + out + "' --config " + config + " --seed " +
                    std::to_string(seed) + (unshared ? " --unshared" : "");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return out;
}

#define REQUIRE_PEERS_SCRIPT()                                                                        \
  do {                                                                                                \
    MILRT_REQUIRE_SHARED();                                                                           \
    if (!have_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) is absent"; \
  } while (0)

void expect_same_weights(const LlamaWeights& a, const LlamaWeights& b) {
  EXPECT_EQ(a.cfg.str(), b.cfg.str());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << name;
    EXPECT_TRUE(t.same_bytes(b.tensors.at(name))) << name;
  }
}

}  // namespace

// ---- loading the peers' legacy files ----

TEST(Checkpoint, PeersV0LoadsWithShapesAndRawValues) {
  REQUIRE_PEERS_SCRIPT();
  std::string dir = test::temp_dir("ckpt_peers");
  for (bool unshared : {false, true}) {
    SCOPED_TRACE(unshared ? "unshared" : "shared");
    std::string path = peers_checkpoint(dir, "tiny", unshared, 7);
    LlamaWeights w = load_llama2c_checkpoint(path);
    // tiny: dim 64, hidden 172, layers 2, heads 4, kv_heads 2, vocab 512, seq 64.
    const int64_t D = 64, H = 172, L = 2, KV = 32, V = 512, S = 64, HS = 16;
    EXPECT_EQ(w.cfg.dim, D);
    EXPECT_EQ(w.cfg.hidden, H);
    EXPECT_EQ(w.cfg.layers, L);
    EXPECT_EQ(w.cfg.kv_heads, 2);
    EXPECT_EQ(w.cfg.vocab, V);
    EXPECT_EQ(w.cfg.seq, S);
    EXPECT_EQ(w.cfg.shared_classifier, !unshared);
    EXPECT_EQ(w.tensors.size(), size_t(2 + 9 * L + (unshared ? 1 : 0)));
    EXPECT_EQ(w.tensors.at("l1_wk").shape(), (Shape{KV, D}));
    EXPECT_EQ(w.tensors.at("l0_w2").shape(), (Shape{D, H}));
    EXPECT_EQ(w.tensors.at("l1_w3").shape(), (Shape{H, D}));

    // Offsets (in floats) from the script's docstring, layer-major per kind.
    std::string raw = read_bytes(path);
    auto at = [&](int64_t float_index) { return float_at(raw, 28 + 4 * float_index); };
    int64_t tok = 0, rms_att = tok + V * D, wq = rms_att + L * D, wk = wq + L * D * D, wv = wk + L * KV * D,
            wo = wv + L * KV * D, rms_ffn = wo + L * D * D, w1 = rms_ffn + L * D, w2 = w1 + L * H * D,
            w3 = w2 + L * D * H, rms_final = w3 + L * H * D, freqs = rms_final + D, wcls = freqs + S * HS;
    auto val = [&](const char* name, int64_t i) { return w.tensors.at(name).ptr<float>()[i]; };
    EXPECT_EQ(val("tok_embeddings", 3 * D + 5), at(tok + 3 * D + 5));
    EXPECT_EQ(val("l1_rms_att", 7), at(rms_att + D + 7));
    EXPECT_EQ(val("l0_wq", 10 * D + 2), at(wq + 10 * D + 2));
    EXPECT_EQ(val("l1_wk", 31 * D + 63), at(wk + KV * D + 31 * D + 63));
    EXPECT_EQ(val("l1_wv", 0), at(wv + KV * D));
    EXPECT_EQ(val("l0_wo", D * D - 1), at(wo + D * D - 1));
    EXPECT_EQ(val("l1_rms_ffn", 0), at(rms_ffn + D));
    EXPECT_EQ(val("l1_w1", 100 * D + 9), at(w1 + H * D + 100 * D + 9));
    EXPECT_EQ(val("l0_w2", 5 * H + 171), at(w2 + 5 * H + 171));
    EXPECT_EQ(val("l1_w3", H * D - 1), at(w3 + H * D + H * D - 1));
    EXPECT_EQ(val("rms_final", 63), at(rms_final + 63));
    if (unshared) {
      EXPECT_EQ(val("wcls", 0), at(wcls));
      EXPECT_EQ(val("wcls", V * D - 1), at(wcls + V * D - 1));
      EXPECT_EQ(int64_t(raw.size()), 28 + 4 * (wcls + V * D));
    } else {
      EXPECT_EQ(int64_t(raw.size()), 28 + 4 * wcls);
    }
    // The script's gains are 1 + 0.1·N(0,1), its matrices 0.02·N(0,1): a misplaced tensor shows.
    EXPECT_NEAR(val("l1_rms_ffn", 3), 1.0, 0.6);
    EXPECT_LT(std::abs(val("l1_w1", 3)), 0.2);
  }
}

TEST(Checkpoint, PeersV0ResavesByteIdentical) {
  REQUIRE_PEERS_SCRIPT();
  std::string dir = test::temp_dir("ckpt_resave");
  for (auto [config, unshared] : {std::pair{"tiny", false}, {"tiny", true}, {"stories15m-gqa", false}}) {
    SCOPED_TRACE(config + std::string(unshared ? " unshared" : ""));
    std::string path = peers_checkpoint(dir, config, unshared, 3);
    LlamaWeights w = load_llama2c_checkpoint(path);
    std::string again = dir + "/again.bin";
    save_llama2c_checkpoint(again, w, 0);
    // Whole file, RoPE tables included: both writers put zeros there.
    EXPECT_TRUE(read_bytes(path) == read_bytes(again));
    // And through version 1 and back to version 0.
    std::string v1 = dir + "/v1.bin";
    save_llama2c_checkpoint(v1, w, 1);
    save_llama2c_checkpoint(again, load_llama2c_checkpoint(v1), 0);
    EXPECT_TRUE(read_bytes(path) == read_bytes(again));
  }
}

// ---- round trips and the version 1 layout ----

TEST(Checkpoint, RoundTripsBitIdentical) {
  std::string dir = test::temp_dir("ckpt_rt");
  for (bool shared : {true, false})
    for (int version : {0, 1}) {
      SCOPED_TRACE(fmt::format("shared {} version {}", shared, version));
      LlamaWeights w = init_llama_weights(tiny(shared), 11);
      std::string a = dir + "/a.bin", b = dir + "/b.bin";
      save_llama2c_checkpoint(a, w, version);
      LlamaWeights r = load_llama2c_checkpoint(a);
      expect_same_weights(w, r);
      save_llama2c_checkpoint(b, r, version);
      EXPECT_TRUE(read_bytes(a) == read_bytes(b));
    }
}

TEST(Checkpoint, Version1HeaderAndOrder) {
  std::string dir = test::temp_dir("ckpt_v1");
  for (bool shared : {true, false}) {
    LlamaConfig c = tiny(shared);
    LlamaWeights w = init_llama_weights(c, 5);
    std::string path = dir + "/v1.bin";
    save_llama2c_checkpoint(path, w, 1);
    std::string raw = read_bytes(path);
    ASSERT_EQ(int64_t(raw.size()), 256 + 4 * c.param_count());  // no RoPE tables in version 1
    EXPECT_EQ(raw.substr(0, 4), "24ka");                        // uint32 0x616b3432, little-endian
    int32_t h[9];
    std::memcpy(h, raw.data() + 4, sizeof h);
    EXPECT_EQ(h[0], 1);
    EXPECT_EQ(std::vector<int32_t>(h + 1, h + 8), (std::vector<int32_t>{64, 172, 2, 4, 2, 512, 64}));
    EXPECT_EQ(uint8_t(raw[36]), shared ? 1 : 0);
    EXPECT_EQ(raw.substr(37, 256 - 37), std::string(256 - 37, '\0'));
    // export.py: all rms_att, all rms_ffn, rms_final, tok_embeddings, wq.., wo, w1, w2, w3, [wcls].
    const int64_t D = 64, H = 172, L = 2, KV = 32, V = 512;
    int64_t rms_att = 0, rms_ffn = L * D, rms_final = 2 * L * D, tok = rms_final + D, wq = tok + V * D,
            wk = wq + L * D * D, wv = wk + L * KV * D, wo = wv + L * KV * D, w1 = wo + L * D * D,
            w2 = w1 + L * H * D, w3 = w2 + L * D * H, wcls = w3 + L * H * D;
    // Gains are all 1 after init: perturb them so the positions can be told apart.
    w.tensors.at("l1_rms_att").mutable_ptr<float>()[3] = 2.5f;
    w.tensors.at("l0_rms_ffn").mutable_ptr<float>()[4] = 3.5f;
    w.tensors.at("rms_final").mutable_ptr<float>()[63] = 4.5f;
    save_llama2c_checkpoint(path, w, 1);
    raw = read_bytes(path);
    auto at = [&](int64_t i) { return float_at(raw, 256 + 4 * i); };
    auto val = [&](const char* name, int64_t i) { return w.tensors.at(name).ptr<float>()[i]; };
    EXPECT_EQ(at(rms_att + D + 3), 2.5f);
    EXPECT_EQ(at(rms_ffn + 4), 3.5f);
    EXPECT_EQ(at(rms_final + 63), 4.5f);
    EXPECT_EQ(at(tok + 7), val("tok_embeddings", 7));
    EXPECT_EQ(at(wq + D * D + 1), val("l1_wq", 1));
    EXPECT_EQ(at(wk + 5), val("l0_wk", 5));
    EXPECT_EQ(at(wv + KV * D + 9), val("l1_wv", 9));
    EXPECT_EQ(at(wo + 2), val("l0_wo", 2));
    EXPECT_EQ(at(w1 + H * D), val("l1_w1", 0));
    EXPECT_EQ(at(w2 + 17), val("l0_w2", 17));
    EXPECT_EQ(at(w3 + H * D + 3), val("l1_w3", 3));
    if (!shared) {
      EXPECT_EQ(at(wcls + 11), val("wcls", 11));
    }
    expect_same_weights(w, load_llama2c_checkpoint(path));
  }
}

// ---- bad files ----

TEST(Checkpoint, BadFilesGiveErrors) {
  std::string dir = test::temp_dir("ckpt_bad");
  LlamaWeights w = init_llama_weights(tiny(), 1);
  std::string good0 = dir + "/good0.bin", good1 = dir + "/good1.bin", bad = dir + "/bad.bin";
  save_llama2c_checkpoint(good0, w, 0);
  save_llama2c_checkpoint(good1, w, 1);
  std::string raw0 = read_bytes(good0), raw1 = read_bytes(good1);
  auto load_err = [&](const std::string& bytes) {
    write_bytes(bad, bytes);
    return error_of([&] { load_llama2c_checkpoint(bad); });
  };
  auto with_int = [](std::string b, size_t off, int32_t v) {
    std::memcpy(b.data() + off, &v, 4);
    return b;
  };

  EXPECT_NE(error_of([&] { load_llama2c_checkpoint(dir + "/nope.bin"); }).find("no such file"), std::string::npos);
  EXPECT_NE(error_of([&] { load_llama2c_checkpoint(dir); }).find("no such file"), std::string::npos);

  // Truncated: the message names both sizes.
  std::string e = load_err(raw0.substr(0, raw0.size() - 1));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(raw0.size())), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(raw0.size() - 1)), std::string::npos) << e;
  EXPECT_NE(e.find(bad), std::string::npos) << e;
  e = load_err(raw1.substr(0, raw1.size() - 4));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(load_err(raw0.substr(0, 10)).find("truncated"), std::string::npos);
  EXPECT_NE(load_err(raw1.substr(0, 100)).find("truncated"), std::string::npos);
  EXPECT_NE(load_err("").find("truncated"), std::string::npos);

  // Longer than the header says.
  e = load_err(raw0 + "xxxx");
  EXPECT_NE(e.find("disagrees"), std::string::npos) << e;
  // A header that disagrees with the data: one layer fewer is a size mismatch.
  e = load_err(with_int(raw0, 8, 1));
  EXPECT_NE(e.find("disagrees"), std::string::npos) << e;
  // Flipping the shared sign makes the header promise a classifier the file lacks.
  e = load_err(with_int(raw0, 20, -512));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("separate classifier"), std::string::npos) << e;

  // Version 1: bad version, bad flag.
  e = load_err(with_int(raw1, 4, 2));
  EXPECT_NE(e.find("unsupported version 2"), std::string::npos) << e;
  std::string flag = raw1;
  flag[36] = 7;
  e = load_err(flag);
  EXPECT_NE(e.find("shared_classifier"), std::string::npos) << e;
  e = load_err(with_int(raw1, 8 + 20, -512));  // v1 keeps vocab positive
  EXPECT_NE(e.find("vocab_size"), std::string::npos) << e;

  // Implausible headers are refused before any allocation (a 28-byte file
  // claiming 2^20 x 2^20 embeddings must not try to allocate 4 TiB).
  std::string h(28, '\0');
  int32_t huge[7] = {1 << 20, 1 << 20, 4096, 1 << 10, 1 << 10, 1 << 20, 1 << 20};
  std::memcpy(h.data(), huge, 28);
  e = load_err(h);
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  huge[0] = 1 << 30;
  std::memcpy(h.data(), huge, 28);
  e = load_err(h);
  EXPECT_NE(e.find("implausible header: dim = 1073741824"), std::string::npos) << e;
  e = load_err(with_int(raw0, 12, 5));  // 64 not divisible by 5 heads
  EXPECT_NE(e.find("implausible header"), std::string::npos) << e;
  e = load_err(with_int(raw0, 0, 0));
  EXPECT_NE(e.find("implausible header: dim = 0"), std::string::npos) << e;
  e = load_err(with_int(raw0, 20, INT32_MIN));
  EXPECT_NE(e.find("implausible header"), std::string::npos) << e;

  // Garbage of every small length never crashes.
  std::string noise;
  uint32_t s = 12345;
  for (int n = 0; n < 400; ++n) {
    s = s * 1664525u + 1013904223u;
    noise.push_back(char(s >> 24));
    write_bytes(bad, noise);
    EXPECT_THROW(load_llama2c_checkpoint(bad), Error) << n;
  }
}

// Found by fuzz/fuzz_llama2c_checkpoint (fuzz/corpus/llama2c_checkpoint/
// regress_4096_layers.bin: a 128-byte file whose header claims 4096 layers):
// the loader built the names of all ~37,000 weights, twice, before comparing
// the file's size with the header's, so each such file cost a tenth of a
// second. The size is now computed first, by arithmetic.
TEST(Checkpoint, ManyLayerHeaderRefusedBeforeTheLayoutIsBuilt) {
  const std::string seed = std::string(MILRT_SOURCE_DIR) + "/fuzz/corpus/llama2c_checkpoint/regress_4096_layers.bin";
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    std::string e = error_of([&] { load_llama2c_checkpoint(seed); });
    ASSERT_NE(e.find("truncated: the header (dim 8, hidden 16, layers 4096"), std::string::npos) << e;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 0.25) << "100 refusals of a 4096-layer header took " << s << " s";
}

// Found by fuzz/fuzz_tensor_file (fuzz/corpus/tensor_file/
// regress_zero_dim_reordered.bin): a record of shape [0, 141] followed by
// another loaded, but written back (in name order, last) it was refused: the
// reader bounded each dim by the bytes left, which a tensor without data
// need not have. Files the writers write must read back, also for the train
// state, which shares the record.
TEST(TensorFile, ZeroSizedTensorsRoundTripInAnyOrder) {
  std::string dir = test::temp_dir("tensor_file_zero");
  const std::string seed = std::string(MILRT_SOURCE_DIR) + "/fuzz/corpus/tensor_file/regress_zero_dim_reordered.bin";
  TensorMap t = load_tensor_file(seed);
  save_tensor_file(dir + "/again.bin", t);
  TensorMap back = load_tensor_file(dir + "/again.bin");
  ASSERT_EQ(back.size(), t.size());
  for (const auto& [name, x] : t) EXPECT_TRUE(back.at(name).same_bytes(x)) << name;

  TensorMap z = {{"z", Tensor(DType::FP32, {0, 1000000})}};
  save_tensor_file(dir + "/z.bin", z);
  EXPECT_EQ(load_tensor_file(dir + "/z.bin").at("z").shape(), (Shape{0, 1000000}));
  TrainState s;
  s.m = z, s.v = z;
  save_train_state(dir + "/ts.bin", s);
  EXPECT_EQ(load_train_state(dir + "/ts.bin").v.at("z").shape(), (Shape{0, 1000000}));
}

TEST(Checkpoint, SaveRefusesMismatchedWeights) {
  std::string dir = test::temp_dir("ckpt_save_bad");
  std::string path = dir + "/w.bin";
  LlamaWeights w = init_llama_weights(tiny(), 1);
  EXPECT_NE(error_of([&] { save_llama2c_checkpoint(path, w, 2); }).find("version 2"), std::string::npos);
  LlamaWeights missing = w;
  missing.tensors.erase("l1_w2");
  EXPECT_NE(error_of([&] { save_llama2c_checkpoint(path, missing, 0); }).find("'l1_w2' is missing"),
            std::string::npos);
  LlamaWeights shape = w;
  shape.tensors["l0_wk"] = Tensor(DType::FP32, {64, 64});
  EXPECT_NE(error_of([&] { save_llama2c_checkpoint(path, shape, 1); }).find("'l0_wk' is fp32 [64, 64]"),
            std::string::npos);
  LlamaWeights extra = w;
  extra.tensors["wcls"] = Tensor(DType::FP32, {512, 64});  // shared config: no wcls
  EXPECT_NE(error_of([&] { save_llama2c_checkpoint(path, extra, 0); }).find("unexpected tensor 'wcls'"),
            std::string::npos);
  LlamaWeights dtype = w;
  dtype.tensors["rms_final"] = Tensor(DType::FP16, {64});
  EXPECT_THROW(save_llama2c_checkpoint(path, dtype, 0), Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir));  // no temporary left behind either
}

// ---- init ----

TEST(Checkpoint, InitIsDeterministicWithTrainPyStatistics) {
  LlamaConfig c = *llama_preset("default");  // 4 layers
  LlamaWeights a = init_llama_weights(c, 42), b = init_llama_weights(c, 42), d = init_llama_weights(c, 43);
  expect_same_weights(a, b);
  EXPECT_FALSE(a.tensors.at("l0_wq").same_bytes(d.tensors.at("l0_wq")));
  EXPECT_FALSE(a.tensors.at("l0_wq").same_bytes(a.tensors.at("l0_wk")));  // streams differ per tensor
  ASSERT_EQ(a.tensors.size(), llama_weight_specs(c).size());
  for (const WeightSpec& s : llama_weight_specs(c)) {
    const Tensor& t = a.tensors.at(s.name);
    ASSERT_EQ(t.shape(), s.shape) << s.name;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) sum += t.ptr<float>()[i], sq += double(t.ptr<float>()[i]) * t.ptr<float>()[i];
    double n = double(t.numel()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    if (s.shape.size() == 1) {
      EXPECT_EQ(mean, 1.0) << s.name;
      EXPECT_EQ(sd, 0.0) << s.name;
      continue;
    }
    bool residual = s.name.ends_with("_wo") || s.name.ends_with("_w2");
    double want = residual ? 0.02 / std::sqrt(8.0) : 0.02;
    // n >= 16384 samples: the sample sd is within ~1% (3 sigma of sd/sqrt(2n)), the mean within 3·sd/sqrt(n).
    EXPECT_NEAR(sd, want, 0.02 * want) << s.name;
    EXPECT_NEAR(mean, 0.0, 4 * want / std::sqrt(n)) << s.name;
  }
  // The 4th moment of a normal is 3 sd^4: tells a normal from a uniform of the same sd (1.8).
  const Tensor& e = a.tensors.at("tok_embeddings");
  double m2 = 0, m4 = 0;
  for (int64_t i = 0; i < e.numel(); ++i) {
    double x = e.ptr<float>()[i];
    m2 += x * x, m4 += x * x * x * x;
  }
  m2 /= double(e.numel()), m4 /= double(e.numel());
  EXPECT_NEAR(m4 / (m2 * m2), 3.0, 0.15);
}

// ---- train state ----

TEST(TrainState, RoundTripAndErrors) {
  std::string dir = test::temp_dir("train_state");
  std::string path = dir + "/state.bin", bad = dir + "/bad.bin";
  TrainState s;
  s.step = 1234567890123;
  auto fill = [](Shape shape, float base) {
    Tensor t(DType::FP32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_ptr<float>()[i] = base + float(i) * 0.25f;
    return t;
  };
  s.m["l0_wq"] = fill({3, 4}, 1), s.v["l0_wq"] = fill({3, 4}, 100);
  s.m["rms_final"] = fill({5}, -2), s.v["rms_final"] = fill({5}, 7);
  s.m["empty"] = fill({0, 3}, 0), s.v["empty"] = fill({0, 3}, 0);
  s.extra = {0, 1, 2, 255, 'x'};
  save_train_state(path, s);
  TrainState r = load_train_state(path);
  EXPECT_EQ(r.step, s.step);
  EXPECT_EQ(r.extra, s.extra);
  ASSERT_EQ(r.m.size(), 3u);
  ASSERT_EQ(r.v.size(), 3u);
  for (const auto& [name, t] : s.m) {
    EXPECT_TRUE(r.m.at(name).same_bytes(t)) << name;
    EXPECT_TRUE(r.v.at(name).same_bytes(s.v.at(name))) << name;
  }
  // Empty state too.
  save_train_state(path, TrainState{});
  TrainState e = load_train_state(path);
  EXPECT_EQ(e.step, 0);
  EXPECT_TRUE(e.m.empty() && e.extra.empty());

  save_train_state(path, s);
  std::string raw = read_bytes(path);
  // Every truncation is an Error, never a crash or a partial state.
  for (size_t n = 0; n < raw.size(); ++n) {
    write_bytes(bad, raw.substr(0, n));
    EXPECT_THROW(load_train_state(bad), Error) << n;
  }
  write_bytes(bad, raw + "z");
  EXPECT_NE(error_of([&] { load_train_state(bad); }).find("1 unexpected bytes"), std::string::npos);
  std::string magic = raw;
  magic[0] = 'X';
  write_bytes(bad, magic);
  EXPECT_NE(error_of([&] { load_train_state(bad); }).find("bad magic"), std::string::npos);
  std::string version = raw;
  version[8] = 9;
  write_bytes(bad, version);
  EXPECT_NE(error_of([&] { load_train_state(bad); }).find("unsupported version 9"), std::string::npos);
  std::string count = raw;
  uint64_t big = uint64_t(1) << 60;
  std::memcpy(count.data() + 20, &big, 8);
  write_bytes(bad, count);
  EXPECT_NE(error_of([&] { load_train_state(bad); }).find("implausible tensor count"), std::string::npos);
  // A dimension claiming more data than the file holds (first tensor "empty", rank 2 at offset 28+4+5).
  std::string dim = raw;
  int64_t huge = int64_t(1) << 40;
  std::memcpy(dim.data() + 28 + 4 + 5 + 4, &huge, 8);
  write_bytes(bad, dim);
  EXPECT_NE(error_of([&] { load_train_state(bad); }).find("implausible dimension"), std::string::npos);
  EXPECT_NE(error_of([&] { load_train_state(dir + "/nope"); }).find("no such file"), std::string::npos);

  TrainState mismatch = s;
  mismatch.v["l0_wq"] = fill({4, 3}, 0);
  EXPECT_NE(error_of([&] { save_train_state(path, mismatch); }).find("'l0_wq': m is [3, 4], v is [4, 3]"),
            std::string::npos);
  mismatch = s;
  mismatch.v.erase("rms_final");
  EXPECT_THROW(save_train_state(path, mismatch), Error);
  EXPECT_TRUE(load_train_state(path).m.at("l0_wq").same_bytes(s.m.at("l0_wq")));  // old file kept
}

// ---- atomic writes ----

TEST(AtomicFile, FailedWriteKeepsOldFile) {
  std::string dir = test::temp_dir("atomic_fail");
  std::string path = dir + "/ckpt.bin";
  LlamaWeights w = init_llama_weights(tiny(), 1);
  save_llama2c_checkpoint(path, w, 0);
  std::string before = read_bytes(path);
  {
    AtomicFileWriter out(path);
    out.write("partial", 7);
    EXPECT_TRUE(fs::exists(out.temp_path()));
    EXPECT_EQ(fs::path(out.temp_path()).parent_path(), fs::path(path).parent_path());
    // Destroyed without commit, as when an exception unwinds a save.
  }
  EXPECT_TRUE(read_bytes(path) == before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // temp removed
  expect_same_weights(w, load_llama2c_checkpoint(path));

  write_file_atomic(path, "new", 3);
  EXPECT_EQ(read_bytes(path), "new");
  std::string e = error_of([&] { write_file_atomic(dir + "/no/such/dir/f", "x", 1); });
  EXPECT_NE(e.find(dir + "/no/such/dir/f"), std::string::npos) << e;
  AtomicFileWriter done(dir + "/d");
  done.commit();
  EXPECT_THROW(done.write("x", 1), Error);
  EXPECT_TRUE(fs::exists(dir + "/d"));
}

TEST(AtomicFile, WriterKilledMidWriteLeavesOldFileLoadable) {
  std::string dir = test::temp_dir("atomic_kill");
  std::string path = dir + "/ckpt.bin";
  LlamaWeights w = init_llama_weights(tiny(), 2);
  save_llama2c_checkpoint(path, w, 1);
  std::string before = read_bytes(path);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A slow, endless writer of the same file: killed while the temp grows.
    close(ready[0]);
    AtomicFileWriter out(path);
    std::vector<char> chunk(1 << 20, 'k');
    out.write(chunk.data(), chunk.size());
    out.write(chunk.data(), chunk.size());  // past the buffer: bytes reach the temp file
    if (::write(ready[1], "r", 1) != 1) _exit(2);
    for (;;) {
      out.write(chunk.data(), chunk.size());
      usleep(20000);
    }
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  usleep(50000);
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(read_bytes(path) == before);
  expect_same_weights(w, load_llama2c_checkpoint(path));
  // The killed writer's temp stays (nothing could remove it), beside, not instead of, the file.
  int temps = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with(".ckpt.bin.tmp.")) {
      ++temps;
      EXPECT_GE(fs::file_size(e), 2u << 20);
    }
  EXPECT_EQ(temps, 1);
  // A later save still works and replaces the file.
  save_llama2c_checkpoint(path, init_llama_weights(tiny(), 3), 0);
  expect_same_weights(init_llama_weights(tiny(), 3), load_llama2c_checkpoint(path));
}
