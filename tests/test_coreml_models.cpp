// Every real Core ML bundle in ../shared/testdata run end to end on the
// reference executor, the way a user would: load_model -> legalize_layout_idioms
// -> verify -> run_reference.
//
// Silero VAD (16 bundles): a synthetic speech-like signal (silence, voiced
// vowel, silence; tests/support/speechlike.h) is streamed through every
// variant with the state fed back. Expected behaviour comes from the task
// (probabilities in [0, 1], speech detected in the vowel and not in silence),
// from the models' own structure (the 256 ms bundle is eight 32 ms steps
// combined by noisy-OR) and from the uncompressed originals, whose weights
// the compressed variants' decoded weights are checked against element by
// element. Measured values are quoted next to every threshold; the test log
// prints them again ("[silero]" lines).
//
// fluidaudio-small (3 bundles): small argmax / slicing / transpose programs,
// checked against results computed here.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "milrt/dtype.h"
#include "support/speechlike.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

Program load_checked(const std::string& dir) {
  Program p = load_model(dir);
  legalize_layout_idioms(p);
  verify(p);
  return p;
}

// The spacing of fp16 values at |v| (the subnormal spacing near 0).
double ulp_f16(double v) {
  int e = 0;
  std::frexp(std::fabs(v), &e);
  return std::ldexp(1.0, std::max(e - 1, -14) - 10);
}

// ============================================================================
// Silero VAD
// ============================================================================

constexpr int kContext = 64;  // samples of the previous chunk prepended to each input
constexpr int kState = 128;
constexpr int kChunk32 = 512, kChunk256 = 4096;
constexpr int kSubSteps = kChunk256 / kChunk32;  // 32 ms steps inside one 256 ms call
// The 2 s signal is streamed as 32768 samples (zero-padded, i.e. more
// silence), so that 64 calls of 32 ms and 8 calls of 256 ms cover the same audio.
constexpr size_t kStreamSamples = 32768;

const char* const kOriginal32 = "silero-vad-unified-v6.0.0";
const char* const kOriginal256 = "silero-vad-unified-256ms-v6.0.0";

// A compressed variant: the kind in its bundle name ("unified_<kind>",
// "unified_256ms_<kind>") and how far its per-chunk probability may be from
// the uncompressed original's over the whole stream.
struct Compression {
  std::string kind;
  double max_dp;
};

// Bounds are about twice the largest |p - p_orig| measured over all chunks of
// both chunk sizes (32 ms / 256 ms). They follow the weights' error after
// decoding (relative RMS vs the original, per tensor; printed by
// DecodedWeightsMatchTheOriginal): 8-bit palette 0.3-0.8%, int8 0.5-1.3%,
// pruned_int8 0.5-2%, mixed 0.5-2.7%, 6-bit palette 1.6-3.8%, 4-bit palette
// 8-17%, 2-bit palette 31-56%.
const std::vector<Compression>& compressions() {
  static const std::vector<Compression> c = {
      {"int8", 0.025},          // measured 0.0103 / 0.0034
      {"mixed", 0.07},          // measured 0.0352 / 0.0132
      {"palette_8bit", 0.02},   // measured 0.0066 / 0.0098
      {"pruned_int8", 0.06},    // measured 0.0315 / 0.0088
      {"palette_6bit", 0.15},   // measured 0.0854 / 0.0278
      {"palette_4bit", 0.3},    // measured 0.1523 / 0.1216
      // 2-bit palettization (one 4-entry palette per tensor) destroys the
      // model: it never reports speech (mean 0.016 in the vowel, 32 ms), so
      // over the vowel it disagrees with the original by up to 0.955 / 0.920.
      // The bound applies only to the leading silence, where both start from
      // a zero state on zero input (measured 0.012 / 0.034).
      // DecodedWeightsMatchTheOriginal shows milrt decodes the weights as the
      // palette prescribes, so the loss is the model's own.
      {"palette_2bit", 0.1},
  };
  return c;
}

bool is_2bit(const std::string& kind) { return kind == "palette_2bit"; }

struct Variant {
  std::string name;      // bundle directory without .mlmodelc
  int chunk = kChunk32;  // new samples per call
  std::string original;  // the uncompressed bundle of the same chunk size
  std::string kind;      // compression kind, "" for the originals
  double max_dp = 0;
};

// gtest prints parameters of failing tests with this.
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

std::vector<Variant> all_variants() {
  std::vector<Variant> r = {{kOriginal32, kChunk32, kOriginal32, "", 0},
                            {kOriginal256, kChunk256, kOriginal256, "", 0}};
  for (const Compression& c : compressions()) {
    r.push_back({"unified_" + c.kind, kChunk32, kOriginal32, c.kind, c.max_dp});
    r.push_back({"unified_256ms_" + c.kind, kChunk256, kOriginal256, c.kind, c.max_dp});
  }
  return r;
}

std::vector<Variant> compressed_variants() {
  std::vector<Variant> r;
  for (const Variant& v : all_variants())
    if (!v.kind.empty()) r.push_back(v);
  return r;
}

std::string bundle_path(const std::string& name) {
  return shared_dir() + "/testdata/coreml/silero-vad/" + name + ".mlmodelc";
}

// New samples per call, from the declared input [1, 64 + chunk].
int chunk_of(const Program& p) {
  return int(p.function("main")->param("audio_input")->type.shape.at(1)) - kContext;
}

const SpeechlikeSignal& signal() {
  static const SpeechlikeSignal s = make_speechlike(0.5, 1.0, 0.5, 16000, 0.5);
  return s;
}

struct Step {
  double p = 0;                 // vad_output
  std::vector<double> h, c;     // new_hidden_state, new_cell_state
  size_t begin = 0, end = 0;    // the chunk's new samples, as indices into the signal
};
using Stream = std::vector<Step>;

// Streams the signal through a model: each call gets `chunk` new samples
// with the previous 64 prepended (zeros before the start) and the state the
// previous call returned. `reset` zeros the state before every call instead.
Stream run_stream(const Program& p, int chunk, bool reset = false) {
  const std::vector<float>& x = signal().samples;
  std::vector<double> h(kState, 0.0), c(kState, 0.0);
  Stream steps;
  for (size_t k = 0; k < kStreamSamples / chunk; ++k) {
    Tensor audio(DType::FP32, {1, kContext + chunk});
    for (int i = 0; i < kContext + chunk; ++i) {
      long s = long(k) * chunk - kContext + i;
      if (s >= 0 && size_t(s) < x.size()) audio.set(size_t(i), x[size_t(s)]);
    }
    if (reset) h.assign(kState, 0.0), c.assign(kState, 0.0);
    TensorMap out = run_reference(p, "main", {{"audio_input", audio},
                                              {"hidden_state", make(DType::FP32, {1, kState}, h)},
                                              {"cell_state", make(DType::FP32, {1, kState}, c)}});
    Step s;
    s.p = out.at("vad_output").at(0);
    s.h = h = values(out.at("new_hidden_state"));
    s.c = c = values(out.at("new_cell_state"));
    s.begin = k * chunk;
    s.end = s.begin + chunk;
    steps.push_back(std::move(s));
  }
  return steps;
}

// The stream of a bundle with the state carried, computed once per process.
const Stream& stream(const std::string& name) {
  static std::map<std::string, Stream> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  auto t0 = std::chrono::steady_clock::now();
  Program p = load_checked(bundle_path(name));
  int chunk = chunk_of(p);
  Stream s = run_stream(p, chunk);
  std::printf("[silero] %s: %zu chunks of %d samples in %.2f s\n", name.c_str(), s.size(), chunk,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return cache.emplace(name, std::move(s)).first->second;
}

bool in_vowel(const Step& s) {
  return s.begin >= signal().vowel_begin && s.end <= signal().vowel_end;
}
// In the leading or trailing silence, not counting the very first call (no
// real context, zero state). The new samples and their 64-sample context are
// both silent since the vowel sits at sample multiples of 64.
bool in_silence(const Step& s) {
  return (s.begin > 0 && s.end <= signal().vowel_begin) || s.begin >= signal().vowel_end;
}

template <class Pred>
double mean_p(const Stream& st, Pred pred) {
  double sum = 0;
  int n = 0;
  for (const Step& s : st)
    if (pred(s)) sum += s.p, ++n;
  return n ? sum / n : NAN;
}

std::string test_name(std::string s) {
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

// (a) Every output of every call is a finite probability / LSTM state.
void expect_valid_outputs(const Stream& st) {
  for (size_t k = 0; k < st.size(); ++k) {
    EXPECT_TRUE(std::isfinite(st[k].p) && st[k].p >= 0 && st[k].p <= 1) << "chunk " << k << ": " << st[k].p;
    for (int i = 0; i < kState; ++i) {
      // h = o * tanh(c) with o in (0, 1), so |h| <= 1; c is only bounded by the stream length.
      EXPECT_TRUE(std::isfinite(st[k].h[i]) && std::fabs(st[k].h[i]) <= 1)
          << "chunk " << k << " hidden[" << i << "] = " << st[k].h[i];
      EXPECT_TRUE(std::isfinite(st[k].c[i])) << "chunk " << k << " cell[" << i << "] = " << st[k].c[i];
    }
  }
}

// (b) Speech in the vowel, none in the silence.
//
// Measured means over the chunks fully inside the vowel / the silence:
//   32 ms:  vowel 0.853 (palette_6bit) .. 0.921 (palette_4bit), original 0.891;
//           silence (31 chunks) 0.034 .. 0.048 (palette_4bit).
//   256 ms: vowel 1.000 for all (noisy-OR of eight ~0.9 steps rounds to 1 in
//           fp16); silence (the 2 calls after the vowel) 0.237 .. 0.365
//           (palette_4bit). The 256 ms output is 1 - prod(1 - p_i) over its
//           eight 32 ms steps, so the small per-step silence probabilities
//           (0.015 .. 0.03) and the LSTM's decay after the vowel (0.17, 0.08,
//           ... in the first call after it) add up: 0.2 is unreachable there
//           by construction, hence the bound 0.5. The 32 ms bounds carry the
//           real claim and Stream256IsNoisyOrOf32 ties the two together.
//   palette_2bit: vowel 0.016 / 0.108, silence 0.012 / 0.089 -- no detection
//           at all (see compressions()); only the silence bound applies.
void expect_detection(const Variant& v, const Stream& st) {
  double vowel = mean_p(st, in_vowel), silence = mean_p(st, in_silence);
  std::printf("[silero] %s: mean p in vowel %.4f, in silence %.4f\n", v.name.c_str(), vowel, silence);
  bool long_chunks = v.chunk == kChunk256;
  EXPECT_LT(silence, long_chunks ? 0.5 : 0.1) << "mean probability in silence";
  if (!is_2bit(v.kind)) {
    EXPECT_GT(vowel, long_chunks ? 0.9 : 0.7) << "mean probability in the vowel";
  }
}

// (c) A compressed variant tracks its original call by call (each running
// its own state). Bounds and measurements: see compressions().
void expect_agreement(const Variant& v, const Stream& st, const Stream& orig) {
  ASSERT_EQ(st.size(), orig.size());
  double worst = 0;
  for (size_t k = 0; k < st.size(); ++k) {
    // 2-bit: only the leading silence, up to the first call that hears the vowel.
    if (is_2bit(v.kind) && st[k].end > signal().vowel_begin) break;
    double d = std::fabs(st[k].p - orig[k].p);
    worst = std::max(worst, d);
    EXPECT_LE(d, v.max_dp) << "chunk " << k << ": " << st[k].p << " vs original " << orig[k].p;
  }
  std::printf("[silero] %s vs %s: max |dp| %.4f (bound %.3f%s)\n", v.name.c_str(), v.original.c_str(), worst,
              v.max_dp, is_2bit(v.kind) ? ", leading silence only" : "");
}

// (a), (b) and (c) in one test per bundle: each test process computes its
// streams once (ctest runs every test in its own process).
class SileroVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(SileroVariant, StreamsTheSpeechlikeSignal) {
  MILRT_REQUIRE_SHARED();
  const Variant& v = GetParam();
  const Stream& st = stream(v.name);
  ASSERT_EQ(st.size(), kStreamSamples / size_t(v.chunk));
  {
    SCOPED_TRACE("(a) valid outputs");
    expect_valid_outputs(st);
  }
  {
    SCOPED_TRACE("(b) vowel vs silence");
    expect_detection(v, st);
  }
  if (!v.kind.empty()) {
    SCOPED_TRACE("(c) agreement with " + v.original);
    expect_agreement(v, st, stream(v.original));
  }
}

INSTANTIATE_TEST_SUITE_P(Bundles, SileroVariant, ::testing::ValuesIn(all_variants()),
                         [](const auto& info) { return test_name(info.param.name); });

// Every value of one call on silent input with a zero state, constants and
// decompressed weights included.
TensorMap all_values(const Program& p) {
  return run_reference_all(p, "main", {{"audio_input", Tensor(DType::FP32, {1, kContext + chunk_of(p)})},
                                       {"hidden_state", Tensor(DType::FP32, {1, kState})},
                                       {"cell_state", Tensor(DType::FP32, {1, kState})}});
}

// The constant an op input holds (the iOS16 constexpr ops keep all their
// inputs in the attribute block as literals).
const Tensor& literal_input(const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  if (!a || a->kind != Arg::Kind::Const) throw Error(op.type + ": input '" + key + "' is not a literal");
  return a->lit->value;
}

std::string strip_suffix(const std::string& s) {
  for (std::string suf : {"_palettized", "_quantized", "_sparsified"})
    if (s.size() > suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0)
      return s.substr(0, s.size() - suf.size());
  return s;
}

// Each decoded weight must be what the compression scheme would produce from
// the original weight of the same name, checked element by element with the
// scheme's own parameters (not milrt's decoder):
//  - palette: a palette entry, the one nearest the original value (k-means
//    assignment), up to near ties. Measured: every element except at most 3
//    per tensor, each farther than the nearest entry by one fp16 ulp of the
//    original (fp32 tensors: ~1e-6): ties that the clustering (done before
//    the weights were rounded to fp16, centroids updated after the last
//    assignment) may resolve either way;
//  - affine int8: within 0.75 quantization steps of the original (0.5 from
//    rounding plus the fp16 rounding of scale and result; measured 0.61);
//  - sparse: the original value where kept, zero where pruned, and every
//    pruned value no larger in magnitude than every kept one (magnitude
//    pruning; measured 0.01000 pruned vs 0.01001 kept).
// This also shows that the 2-bit models' failure is theirs, not milrt's.
class SileroCompressed : public ::testing::TestWithParam<Variant> {};

TEST_P(SileroCompressed, DecodedWeightsMatchTheOriginal) {
  MILRT_REQUIRE_SHARED();
  const Variant& v = GetParam();
  Program p = load_checked(bundle_path(v.name));
  TensorMap got = all_values(p);
  TensorMap want = all_values(load_checked(bundle_path(v.original)));

  int checked = 0;
  for (const Op& op : p.function("main")->ops) {
    if (op.type.rfind("constexpr_", 0) != 0) continue;
    const std::string& name = op.outputs.at(0).name;
    SCOPED_TRACE(op.type + " " + name);
    ASSERT_TRUE(want.count(strip_suffix(name))) << "no original weight " << strip_suffix(name);
    std::vector<double> dec = values(got.at(name)), ref = values(want.at(strip_suffix(name)));
    ASSERT_EQ(dec.size(), ref.size());
    double rel_err = 0, sig = 0;
    for (size_t i = 0; i < dec.size(); ++i) rel_err += (dec[i] - ref[i]) * (dec[i] - ref[i]), sig += ref[i] * ref[i];

    if (op.type == "constexpr_lut_to_dense") {
      std::vector<double> lut = values(literal_input(op, "lut"));
      size_t not_entry = 0, not_nearest = 0, near_ties = 0;
      for (size_t i = 0; i < dec.size(); ++i) {
        double nearest = INFINITY;
        for (double e : lut) nearest = std::min(nearest, std::fabs(e - ref[i]));
        double excess = std::fabs(dec[i] - ref[i]) - nearest;
        if (std::find(lut.begin(), lut.end(), dec[i]) == lut.end()) ++not_entry;
        if (excess > ulp_f16(ref[i])) ++not_nearest;
        if (excess > 0) ++near_ties;
      }
      EXPECT_EQ(not_entry, 0u) << "decoded values that are not palette entries";
      EXPECT_EQ(not_nearest, 0u) << "elements not decoded to the palette entry nearest the original";
      if (near_ties) std::printf("[silero] %s %s: %zu near ties\n", v.name.c_str(), name.c_str(), near_ties);
    } else if (op.type == "constexpr_affine_dequantize") {
      std::vector<double> scale = values(literal_input(op, "scale"));
      const Shape& shape = got.at(name).shape();
      int64_t axis = int64_t(values(literal_input(op, "axis")).at(0));
      int64_t inner = 1;
      for (size_t d = size_t(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
      double worst_steps = 0;
      for (size_t i = 0; i < dec.size(); ++i) {
        double step = scale.size() == 1 ? scale[0] : scale[(int64_t(i) / inner) % shape[size_t(axis)]];
        double err = std::fabs(dec[i] - ref[i]);
        EXPECT_LE(err, 0.75 * step) << "element " << i << ": " << dec[i] << " vs original " << ref[i];
        if (step > 0) worst_steps = std::max(worst_steps, err / step);
      }
      EXPECT_GT(worst_steps, 0.25) << "suspiciously exact: is this really quantized?";
    } else if (op.type == "constexpr_sparse_to_dense") {
      double max_pruned = 0, min_kept = INFINITY;
      size_t pruned = 0;
      for (size_t i = 0; i < dec.size(); ++i) {
        if (dec[i] == 0) {
          ++pruned;
          max_pruned = std::max(max_pruned, std::fabs(ref[i]));
        } else {
          EXPECT_EQ(dec[i], ref[i]) << "kept element " << i;
          min_kept = std::min(min_kept, std::fabs(dec[i]));
        }
      }
      EXPECT_GT(pruned, dec.size() / 4) << "expected a pruned tensor";
      EXPECT_LE(max_pruned, min_kept);
    } else {
      ADD_FAILURE() << "unexpected compression op";
    }
    std::printf("[silero] %s %s: relative RMS error vs original %.4f\n", v.name.c_str(), name.c_str(),
                std::sqrt(rel_err / sig));
    ++checked;
  }
  // Both convolution stacks' weights, the STFT basis and the two LSTM matrices.
  EXPECT_EQ(checked, 7);
}

INSTANTIATE_TEST_SUITE_P(Bundles, SileroCompressed, ::testing::ValuesIn(compressed_variants()),
                         [](const auto& info) { return test_name(info.param.name); });

// Whether two bundles' weights (constants of more than 16 elements, after
// decompression) are identical, by name.
bool same_weights(const std::string& a, const std::string& b) {
  auto weights = [](const std::string& name) {
    Program p = load_checked(bundle_path(name));
    TensorMap all = all_values(p);
    std::map<std::string, Tensor> w;
    for (const Op& op : p.function("main")->ops)
      if ((op.type == "const" || op.type.rfind("constexpr_", 0) == 0) && op.outputs.at(0).type.is_tensor() &&
          all.at(op.outputs[0].name).numel() > 16)
        w[op.outputs[0].name] = all.at(op.outputs[0].name);
    return w;
  };
  std::map<std::string, Tensor> wa = weights(a), wb = weights(b);
  if (wa.size() != wb.size()) return false;
  for (auto& [name, t] : wa)
    if (!wb.count(name) || !t.same_bytes(wb.at(name))) return false;
  return true;
}

// The 256 ms bundles run the 32 ms network eight times inside one call (each
// step's context is the previous step's last 64 samples, the state chained)
// and return 1 - prod(1 - p_i): so a 256 ms stream must reproduce the 32 ms
// stream of the same weights. That holds for the original, int8, mixed and
// pruned_int8 pairs (checked first); the palettized pairs' fp32 LSTM palettes
// were clustered separately per bundle, so they are left out (measured
// anyway: |dp| <= 0.0011, states within 0.016).
// Measured: |dp| <= 0.00083 (the product is taken in fp16: eight roundings
// near 1, where the ulp is 2^-11 .. 2^-10), bound 0.004; states identical,
// bound 2 fp16 ulps.
class SileroPair : public ::testing::TestWithParam<std::string> {};

TEST_P(SileroPair, Stream256IsNoisyOrOf32) {
  MILRT_REQUIRE_SHARED();
  std::string n32 = GetParam().empty() ? kOriginal32 : "unified_" + GetParam();
  std::string n256 = GetParam().empty() ? kOriginal256 : "unified_256ms_" + GetParam();
  ASSERT_TRUE(same_weights(n32, n256)) << n32 << " and " << n256 << " no longer share their weights";
  const Stream& s32 = stream(n32);
  const Stream& s256 = stream(n256);
  ASSERT_EQ(s32.size(), s256.size() * kSubSteps);
  double worst_p = 0, worst_state_ulps = 0;
  for (size_t k = 0; k < s256.size(); ++k) {
    double none = 1;
    for (int j = 0; j < kSubSteps; ++j) none *= 1 - s32[k * kSubSteps + j].p;
    double d = std::fabs(s256[k].p - (1 - none));
    worst_p = std::max(worst_p, d);
    EXPECT_LE(d, 0.004) << "chunk " << k;
    const Step& last = s32[k * kSubSteps + kSubSteps - 1];
    for (int i = 0; i < kState; ++i) {
      for (auto [a, b] : {std::pair{s256[k].h[i], last.h[i]}, std::pair{s256[k].c[i], last.c[i]}}) {
        double ulps = std::fabs(a - b) / ulp_f16(std::max(std::fabs(a), std::fabs(b)));
        worst_state_ulps = std::max(worst_state_ulps, ulps);
        EXPECT_LE(ulps, 2) << "chunk " << k << " state element " << i << ": " << a << " vs " << b;
      }
    }
  }
  std::printf("[silero] %s vs noisy-OR of %s: max |dp| %.5f, max state difference %.0f fp16 ulps\n",
              n256.c_str(), n32.c_str(), worst_p, worst_state_ulps);
}

INSTANTIATE_TEST_SUITE_P(Bundles, SileroPair, ::testing::Values("", "int8", "mixed", "pruned_int8"),
                         [](const auto& info) { return info.param.empty() ? std::string("original") : info.param; });

// (d) The LSTM state carries information between calls.
//
// Measured on the 32 ms original: resetting the state before every call
// changes the vowel chunks' probabilities by 0.185 on average (at most
// 0.687). After the vowel every input is exactly zero (chunk 47 on, context
// included), yet the probability decays 0.447, 0.166, 0.076, 0.047, 0.035,
// 0.029, ... down to 0.015 at the end, while a zero input with a zero state
// gives 0.041. For 256 ms the first call after the vowel gives 0.358 with
// the state carried, 0.077 (the zero-input value) with it reset.
TEST(SileroVad, StateCarriesAcrossCalls) {
  MILRT_REQUIRE_SHARED();
  Program p = load_checked(bundle_path(kOriginal32));
  const Stream& carried = stream(kOriginal32);
  Stream reset = run_stream(p, kChunk32, /*reset=*/true);
  ASSERT_EQ(carried.size(), reset.size());

  double sum = 0, worst = 0;
  int n = 0;
  for (size_t k = 0; k < carried.size(); ++k) {
    if (!in_vowel(carried[k])) continue;
    double d = std::fabs(carried[k].p - reset[k].p);
    sum += d, worst = std::max(worst, d), ++n;
  }
  std::printf("[silero] %s vowel chunks, carried vs reset state: mean |dp| %.4f, max %.4f\n", kOriginal32,
              sum / n, worst);
  EXPECT_GT(sum / n, 0.1);
  EXPECT_GT(worst, 0.4);

  // The first call whose input (context included) is all zeros.
  size_t first = (signal().vowel_end + kContext + kChunk32 - 1) / kChunk32;
  ASSERT_EQ(first, 47u);
  double silent_zero_state = reset[first].p;
  std::printf("[silero] after the vowel:");
  for (size_t k = first; k < carried.size(); ++k) std::printf(" %.3f", carried[k].p);
  std::printf(" (zero state: %.3f)\n", silent_zero_state);
  EXPECT_GT(carried[first].p, 5 * silent_zero_state) << "the vowel is not remembered";
  EXPECT_GT(carried[first + 1].p, 0.1) << "dropped at once instead of decaying";
  for (size_t k = first + 1; k < first + 6; ++k)
    EXPECT_LT(carried[k].p, carried[k - 1].p) << "not decaying at chunk " << k;
  EXPECT_LT(carried.back().p, 0.03) << "never forgets";

  Program p256 = load_checked(bundle_path(kOriginal256));
  const Stream& carried256 = stream(kOriginal256);
  Stream reset256 = run_stream(p256, kChunk256, /*reset=*/true);
  size_t after = (signal().vowel_end + kContext + kChunk256 - 1) / kChunk256;
  ASSERT_EQ(after, 6u);
  std::printf("[silero] %s first call after the vowel: %.3f carried, %.3f reset\n", kOriginal256,
              carried256[after].p, reset256[after].p);
  EXPECT_GT(carried256[after].p, 3 * reset256[after].p);
}

// ============================================================================
// fluidaudio-small
// ============================================================================

std::string fluid_path(const std::string& name) {
  return shared_dir() + "/testdata/coreml/fluidaudio-small/" + name + ".mlmodelc";
}

// Deterministic fp16 logits in [-4, 4): varied, and with repeated values.
std::vector<double> logits(size_t n, uint32_t seed) {
  std::vector<double> v(n);
  uint32_t s = seed;
  for (double& x : v) {
    s = s * 1664525u + 1013904223u;
    x = f16_to_f32(f32_to_f16(float(int((s >> 8) % 8192) - 4096) / 1024.0f));
  }
  return v;
}

// Index of the first maximum, and the maximum.
std::pair<int, double> first_argmax(const std::vector<double>& v, size_t begin, size_t end) {
  size_t best = begin;
  for (size_t i = begin; i < end; ++i)
    if (v[i] > v[best]) best = i;
  return {int(best - begin), v[best]};
}

TEST(FluidAudio, ArgmaxFindsTheFirstMaximum) {
  MILRT_REQUIRE_SHARED();
  Program p = load_checked(fluid_path("Argmax"));
  struct Case {
    std::string what;
    std::vector<double> x;
  };
  std::vector<Case> cases;
  cases.push_back({"max at 777", logits(1025, 1)});
  cases.back().x[777] = 6.5;
  cases.push_back({"tie at 100 and 900", logits(1025, 2)});
  cases.back().x[100] = cases.back().x[900] = 5.25;
  cases.push_back({"all negative, max last", std::vector<double>(1025, -3.0)});
  cases.back().x[1024] = -0.5;
  cases.push_back({"max first", logits(1025, 3)});
  cases.back().x[0] = 4.0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TensorMap out = run_reference(p, "main", {{"logits", make(DType::FP16, {1025}, c.x)}});
    auto [idx, score] = first_argmax(c.x, 0, c.x.size());
    const Tensor& index = out.at("index");
    EXPECT_EQ(index.dtype(), DType::Int32);
    EXPECT_EQ(index.shape(), Shape{1});
    EXPECT_EQ(index.at(0), idx);
    EXPECT_EQ(out.at("score").dtype(), DType::FP16);
    EXPECT_EQ(out.at("score").shape(), Shape{1});
    EXPECT_EQ(out.at("score").at(0), score);
  }
  EXPECT_THROW(run_reference(p, "main", {{"logits", Tensor(DType::FP16, {1024})}}), Error);
}

TEST(FluidAudio, TokenDurationPredictionSplitsTheLogits) {
  MILRT_REQUIRE_SHARED();
  Program p = load_checked(fluid_path("TokenDurationPrediction"));
  struct Case {
    std::string what;
    std::vector<double> x;
  };
  std::vector<Case> cases;
  // The overall maximum sits in the duration part: a token argmax over all
  // 1030 values would pick it.
  cases.push_back({"global max in durations", logits(1030, 4)});
  cases.back().x[321] = 5.0;
  cases.back().x[1027] = 7.0;
  // Last token vs first duration (the slice boundary), and a duration tie.
  cases.push_back({"boundary and duration tie", logits(1030, 5)});
  cases.back().x[1024] = 6.0;
  cases.back().x[1025] = 1.0;
  cases.back().x[1026] = 4.5;
  cases.back().x[1029] = 4.5;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TensorMap out = run_reference(p, "main", {{"logits", make(DType::FP16, {1030}, c.x)}});
    auto [token, token_score] = first_argmax(c.x, 0, 1025);
    auto [duration, ignored] = first_argmax(c.x, 1025, 1030);
    EXPECT_EQ(out.at("token_id").at(0), token);
    EXPECT_EQ(out.at("token_score").at(0), token_score);
    EXPECT_EQ(out.at("duration_index").at(0), duration);
    EXPECT_EQ(out.at("token_id").dtype(), DType::Int32);
    EXPECT_EQ(out.at("token_score").dtype(), DType::FP16);
    EXPECT_EQ(out.at("duration_index").dtype(), DType::Int32);
  }
}

TEST(FluidAudio, TransposeEncoderTakesFlexibleShapes) {
  MILRT_REQUIRE_SHARED();
  Program p = load_checked(fluid_path("TransposeEncoder"));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {17, 2}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    std::vector<double> x(size_t(rows * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = double(i) * 0.25 - 3;  // exact in fp16
    TensorMap out = run_reference(p, "main", {{"x", make(DType::FP16, {1, rows, cols}, x)}});
    const Tensor& y = out.at("var_4");
    EXPECT_EQ(y.dtype(), DType::FP16);
    ASSERT_EQ(y.shape(), (Shape{1, cols, rows}));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(y.at(size_t(j * rows + i)), x[size_t(i * cols + j)]);
  }
}

}  // namespace
}  // namespace milrt::test
