#include "runtime/gemm_tuning.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "kernels/onednn/onednn_gemm.h"
#include "kernels/threads.h"
#include "milrt/error.h"
#include "util/atomic_file.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace milrt::rt {
// Everything here times and caches kernels' GEMMs.
using namespace milrt::kernels;
namespace {

using nlohmann::json;

constexpr int kMaxPairs = 15;
// A cache file is a few KB; anything far larger is not one of ours.
constexpr std::uintmax_t kMaxCacheFileBytes = 16u << 20;
constexpr const char* kFormat = "milrt-gemm-tuning";

struct Entry {
  GemmBackend winner = GemmBackend::own;
  double own_ms = 0;
  std::optional<double> onednn_ms;  // none: oneDNN had no fast kernel for it
};

struct KeyFields {
  std::string isa;
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  std::string math;
  bool b_const = false;
  int threads = 1;
};

std::string key_string(const KeyFields& f) {
  return f.isa + " " + std::to_string(f.m) + "x" + std::to_string(f.n) + "x" + std::to_string(f.k) + " " +
         (f.ta ? "T" : "N") + (f.tb ? "T" : "N") + " " + f.math + (f.b_const ? " const" : " var") + " t" +
         std::to_string(f.threads);
}

struct Cache {
  bool loaded = false;
  std::map<std::string, std::pair<KeyFields, Entry>> entries;
};

std::mutex g_mu;
std::map<std::string, Cache> g_caches;  // by file path ("" when there is no cache directory)
GemmTuneStats g_stats;

void warn(const std::string& msg) {
  std::fprintf(stderr, "milrt: warning: %s\n", msg.c_str());
  ++g_stats.warnings;
}

std::string trimmed(std::string s) {
  const auto sp = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!s.empty() && sp(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && sp(s[i])) ++i;
  return s.substr(i);
}

std::string read_cpu_model() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned r[12] = {};
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
    for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    std::string s(reinterpret_cast<const char*>(r), sizeof(r));
    s = s.substr(0, s.find('\0'));
    if (!trimmed(s).empty()) return trimmed(s);
  }
#endif
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && !trimmed(line.substr(colon + 1)).empty())
        return trimmed(line.substr(colon + 1));
    }
  return "unknown-cpu";
}

// "AMD EPYC 7B13 64-Core Processor" -> "AMD-EPYC-7B13-64-Core-Processor".
std::string file_safe(const std::string& s) {
  std::string r;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_') r += char(c);
    else if (!r.empty() && r.back() != '-') r += '-';
  }
  while (!r.empty() && r.back() == '-') r.pop_back();
  return r.empty() ? "unknown-cpu" : r.substr(0, 120);
}

// The entries of a cache file; nullopt (with `why`) when it cannot be used.
// A missing file is an empty cache, not a problem.
std::optional<std::map<std::string, std::pair<KeyFields, Entry>>> read_cache_file(const std::string& path,
                                                                                   std::string& why) {
  std::map<std::string, std::pair<KeyFields, Entry>> out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return why = "cannot read it (" + ec.message() + ")", std::nullopt;
  if (size > kMaxCacheFileBytes) return why = "too large to be a tuning cache", std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return why = "cannot read it", std::nullopt;
  const json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return why = "not valid JSON (truncated?)", std::nullopt;
  if (!j.is_object() || j.value("format", json()) != kFormat) return why = "not a milrt GEMM tuning file", std::nullopt;
  if (j.value("version", json()) != kGemmTuningCacheVersion) return why = "written by another milrt version (timed again)", std::nullopt;
  const json cpu = j.value("cpu", json());
  if (!cpu.is_string()) return why = "no \"cpu\"", std::nullopt;
  if (cpu.get<std::string>() != cpu_model_name())
    return why = "written for CPU '" + cpu.get<std::string>() + "', this is '" + cpu_model_name() + "'", std::nullopt;
  const json entries = j.value("entries", json());
  if (!entries.is_array()) return why = "no \"entries\" list", std::nullopt;
  for (const json& e : entries) {
    const auto bad = [&](const char* what) { return why = std::string("bad entry: ") + what, std::nullopt; };
    if (!e.is_object()) return bad("not an object");
    KeyFields f;
    auto dim = [&](const char* name, int64_t& v) {
      const json x = e.value(name, json());
      if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > (int64_t(1) << 40)) return false;
      v = x.get<int64_t>();
      return true;
    };
    auto flag = [&](const char* name, bool& v) {
      const json x = e.value(name, json());
      if (!x.is_boolean()) return false;
      v = x.get<bool>();
      return true;
    };
    int64_t threads = 0;
    if (!dim("m", f.m) || !dim("n", f.n) || !dim("k", f.k) || !dim("threads", threads) || threads > 4096)
      return bad("m, n, k and threads must be positive integers");
    f.threads = int(threads);
    if (!flag("trans_a", f.ta) || !flag("trans_b", f.tb) || !flag("b_const", f.b_const))
      return bad("trans_a, trans_b and b_const must be booleans");
    const json isa = e.value("isa", json()), math = e.value("math", json()), winner = e.value("winner", json());
    if (!isa.is_string() || !isa_from_name(isa.get<std::string>())) return bad("unknown isa");
    if (math != "fp32" && math != "bf16") return bad("math must be fp32 or bf16");
    if (winner != "own" && winner != "onednn") return bad("winner must be own or onednn");
    f.isa = isa.get<std::string>();
    f.math = math.get<std::string>();
    Entry en;
    en.winner = winner == "onednn" ? GemmBackend::onednn : GemmBackend::own;
    const json own_ms = e.value("own_ms", json()), dnn_ms = e.value("onednn_ms", json());
    if (!own_ms.is_number() || !(dnn_ms.is_null() || dnn_ms.is_number())) return bad("times must be numbers");
    en.own_ms = own_ms.get<double>();
    if (dnn_ms.is_number()) en.onednn_ms = dnn_ms.get<double>();
    out[key_string(f)] = {f, en};
  }
  return out;
}

std::string cache_json(const Cache& c) {
  json entries = json::array();
  for (const auto& [key, fe] : c.entries) {
    const auto& [f, e] = fe;
    entries.push_back({{"isa", f.isa}, {"m", f.m}, {"n", f.n}, {"k", f.k}, {"trans_a", f.ta}, {"trans_b", f.tb},
                       {"math", f.math}, {"b_const", f.b_const}, {"threads", f.threads},
                       {"winner", std::string(gemm_backend_name(e.winner))}, {"own_ms", e.own_ms},
                       {"onednn_ms", e.onednn_ms ? json(*e.onednn_ms) : json(nullptr)}});
  }
  json j = {{"format", kFormat}, {"version", kGemmTuningCacheVersion}, {"cpu", cpu_model_name()}, {"entries", entries}};
  return j.dump(1) + "\n";
}

// The in-memory cache of `path`, read from the file the first time.
Cache& cache_for(const std::string& path) {
  Cache& c = g_caches[path];
  if (c.loaded) return c;
  c.loaded = true;
  if (path.empty()) return c;
  std::string why;
  if (auto entries = read_cache_file(path, why)) c.entries = std::move(*entries);
  else warn("ignoring the GEMM tuning cache " + path + ": " + why);
  return c;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double time_ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return ms_since(t0);
}

// Values in [-1, 1) without a slow generator: only the memory traffic and
// the absence of subnormals matter to the timing.
void fill(std::vector<float>& v, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(s >> 9) * (1.0f / 4194304.0f) - 1.0f;
  }
}

// Times the own kernels and (when it has a fast kernel) oneDNN on one product.
Entry time_product(const KeyFields& f, GemmMath math, double budget_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> a(size_t(f.m * f.k)), b(size_t(f.k * f.n)), c(size_t(f.m * f.n));
  fill(a, 1);
  fill(b, 2);
  const MatrixRef ar{a.data(), ElemType::f32, f.ta ? f.m : f.k, f.ta};
  const MatrixRef br{b.data(), ElemType::f32, f.tb ? f.k : f.n, f.tb};
  const OutputRef cr{c.data(), ElemType::f32, f.n};
  std::optional<PackedB> packed;
  if (f.b_const) packed.emplace(br, f.k, f.n, math);
  const std::function<void()> own = [&] {
    if (packed) gemm(f.m, ar, *packed, cr);
    else gemm(f.m, f.n, f.k, ar, br, cr, {}, math);
  };
  std::optional<OnednnGemm> dnn;
  try {
    OnednnGemmDesc d;
    d.m = f.m;
    d.n = f.n;
    d.k = f.k;
    d.a = MatrixRef{nullptr, ElemType::f32, ar.ld, f.ta};
    d.b = br;
    d.b_const = f.b_const;
    d.c_ld = f.n;
    d.math = math;
    dnn.emplace(d);
  } catch (const Error&) {
    // No fast oneDNN kernel for it (bf16 on AVX2, ...): the own kernels win unopposed.
  }
  Entry e;
  if (!dnn) return e;
  const std::function<void()> other = [&] { dnn->run(a.data(), f.b_const ? nullptr : b.data(), cr, nullptr, nullptr); };
  // A first call each (C's pages are already touched, oneDNN compiled its
  // kernel when the primitive was made), then pairs in alternating order so
  // that a burst of load elsewhere hits both alike. A product whose first
  // calls used up the budget (hundreds of MFLOP) is decided by them: one
  // call is then long against the noise, and another pair would double the cost.
  const double own0 = time_ms(own), dnn0 = time_ms(other);
  std::vector<double> to{own0}, td{dnn0};
  const double left = budget_ms - ms_since(t0);
  const int pairs = left <= 0 ? 0 : std::clamp(int(left / std::max(own0 + dnn0, 1e-3)), 1, kMaxPairs);
  for (int i = 0; i < pairs; ++i) {
    if (i % 2) {
      td.push_back(time_ms(other));
      to.push_back(time_ms(own));
    } else {
      to.push_back(time_ms(own));
      td.push_back(time_ms(other));
    }
  }
  // The fastest call of each, not the median: other processes only ever
  // slow a call down, so on a shared machine (2 cores, load 5) the median of
  // a few calls follows the load; the minimum is the least disturbed estimate.
  e.own_ms = *std::min_element(to.begin(), to.end());
  e.onednn_ms = *std::min_element(td.begin(), td.end());
  // No margin for the own kernels on a near tie: in the seed layer's plan
  // (`bench train --profile`) the weight-gradient products that tied here
  // (768x768x512, Aᵀ) ran 1.1-1.6x faster on oneDNN; likely because there A
  // and B come from memory, while repeated calls here find them in cache,
  // which flatters the own kernels' packing of a variable B on every call.
  e.winner = *e.onednn_ms < e.own_ms ? GemmBackend::onednn : GemmBackend::own;
  return e;
}

}  // namespace

std::string_view tune_mode_name(TuneMode m) {
  switch (m) {
    case TuneMode::off: return "off";
    case TuneMode::readonly: return "readonly";
    case TuneMode::on: return "on";
  }
  return "?";
}

TuneMode tune_mode_from_env() {
  const char* env = std::getenv("MILRT_TUNE");
  if (!env || !*env) return TuneMode::on;
  const std::string v = env;
  if (v == "on") return TuneMode::on;
  if (v == "readonly") return TuneMode::readonly;
  if (v == "off") return TuneMode::off;
  throw Error("MILRT_TUNE=" + v + ": unknown tuning mode (expected on, readonly or off)");
}

const std::string& cpu_model_name() {
  static const std::string name = read_cpu_model();
  return name;
}

std::string gemm_tuning_cache_path() {
  std::filesystem::path dir;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  // The XDG spec: a relative XDG_CACHE_HOME is invalid and ignored.
  if (xdg && *xdg == '/') dir = std::filesystem::path(xdg) / "milrt";
  else if (home && *home == '/') dir = std::filesystem::path(home) / ".cache" / "milrt";
  else return "";
  return (dir / ("gemm-tuning-" + file_safe(cpu_model_name()) + ".json")).string();
}

GemmTuner::GemmTuner(TuneMode mode, bool deterministic) : mode_(mode), deterministic_(deterministic) {}

GemmBackend GemmTuner::choose(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, GemmMath math,
                              bool b_const) {
  const GemmBackendMode forced = gemm_backend_mode();
  if (deterministic_) {
    if (forced == GemmBackendMode::onednn)
      throw Error("deterministic: MILRT_GEMM=onednn asks for oneDNN, whose sums depend on the thread count "
                  "(unset it or set MILRT_GEMM=own)");
    return GemmBackend::own;
  }
  if (forced != GemmBackendMode::auto_ || mode_ == TuneMode::off || !onednn_available())
    return choose_gemm_backend(m, n, k, math, b_const);
  const KeyFields f{std::string(isa_name(current_isa())), m, n, k, trans_a, trans_b,
                    math == GemmMath::bf16 ? "bf16" : "fp32", b_const, num_threads()};
  const std::string key = key_string(f);
  std::lock_guard<std::mutex> lock(g_mu);
  Cache& c = cache_for(gemm_tuning_cache_path());
  if (auto it = c.entries.find(key); it != c.entries.end()) {
    ++g_stats.cache_hits;
    return it->second.second.winner;
  }
  const double scratch = 4.0 * double(m * k + k * n + m * n) * (b_const ? 3 : 1);  // + packed and reordered B
  if (mode_ == TuneMode::readonly || spent_ms_ >= kCompileBudgetMs || scratch > kMaxScratchBytes)
    return choose_gemm_backend(m, n, k, math, b_const);
  const auto t0 = std::chrono::steady_clock::now();
  const Entry e = time_product(f, math, std::min(kShapeBudgetMs, kCompileBudgetMs - spent_ms_));
  const double ms = ms_since(t0);
  spent_ms_ += ms;
  g_stats.tuning_ms += ms;
  ++g_stats.timed;
  c.entries[key] = {f, e};
  dirty_ = true;
  return e.winner;
}

void GemmTuner::flush() {
  if (!dirty_ || mode_ != TuneMode::on) return;
  dirty_ = false;
  std::lock_guard<std::mutex> lock(g_mu);
  const std::string path = gemm_tuning_cache_path();
  if (path.empty()) return;
  Cache& c = cache_for(path);
  // Another process may have tuned other products since this one read the
  // file: keep those (ours win where both have one).
  std::string why;
  if (auto disk = read_cache_file(path, why))
    for (auto& [key, fe] : *disk) c.entries.emplace(key, fe);
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    const std::string text = cache_json(c);
    write_file_atomic(path, text.data(), text.size());
    ++g_stats.files_written;
  } catch (const std::exception& e) {
    warn(std::string("could not write the GEMM tuning cache: ") + e.what());
  }
}

GemmTuneStats gemm_tune_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_stats;
}

void reset_gemm_tuning() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_caches.clear();
  g_stats = {};
}

}  // namespace milrt::rt
