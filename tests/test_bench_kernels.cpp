// `milrt bench kernels`: the structure of its report, not its speed (the
// figures come from a shared, noisy machine; timing never gates a test).
// The quick run exercises every section on the smallest shapes in seconds.
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "test_cli_util.h"

namespace milrt::test {
namespace {
using nlohmann::json;

// The report of one run, parsed; stdout must be exactly one JSON object.
json run_json(const std::vector<std::string>& extra) {
  std::vector<std::string> args{"bench", "kernels", "--quick", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  CliResult r = run_cli(args, 600);
  EXPECT_TRUE(Succeeded(r));
  json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << "stdout is not one JSON object:\n" << r.out.substr(0, 2000);
  return j.is_object() ? j : json::object();
}

bool positive(const json& v) { return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0; }

// {unit: > 0, "fraction": > 0}, both finite.
void expect_figure(const json& f, const char* unit, const std::string& where) {
  ASSERT_TRUE(f.is_object()) << where << ": " << f.dump();
  EXPECT_TRUE(positive(f[unit])) << where << ": " << f.dump();
  EXPECT_TRUE(positive(f["fraction"])) << where << ": " << f.dump();
}

// A peer's figure: null (no library, no implementation) or a proper figure.
void expect_figure_or_null(const json& f, const char* unit, const std::string& where) {
  if (!f.is_null()) expect_figure(f, unit, where);
}

void expect_ratio_or_null(const json& v, const std::string& where) {
  EXPECT_TRUE(v.is_null() || positive(v)) << where << ": " << v.dump();
}

std::vector<int> thread_counts(const json& report) {
  std::vector<int> t;
  for (const json& v : report["machine"]["threads"]) t.push_back(v.get<int>());
  return t;
}

// Checks every section of a quick report; `threads` the counts it must cover.
void expect_quick_report(const json& j, const std::vector<int>& threads) {
  const json& m = j["machine"];
  EXPECT_TRUE(m["cpu_features"].is_string());
  EXPECT_TRUE(m["isa"].is_string());
  EXPECT_TRUE(m["threads_available"].is_number_integer() && m["threads_available"].get<int>() >= 1);
  EXPECT_EQ(m["quick"], true);
  EXPECT_TRUE(m["amx"].is_boolean());
  EXPECT_TRUE(m["onednn"].is_boolean());
  EXPECT_TRUE(m["openblas"].is_null() || m["openblas"].is_string());
  ASSERT_EQ(thread_counts(j), threads);
  const bool onednn = m["onednn"].get<bool>(), openblas = m["openblas"].is_string();
  const bool many = threads.size() > 1;

  for (const char* section : {"ceilings", "ceilings_after"}) {
    for (int t : threads) {
      const json& c = j[section][std::to_string(t)];
      for (const char* k : {"fp32_gflops", "bf16_gflops", "read_gbs", "update_gbs"})
        EXPECT_TRUE(positive(c[k])) << section << " " << t << " " << k << ": " << c.dump();
      EXPECT_TRUE(c["bf16_native"].is_boolean());
      EXPECT_TRUE(c["amx_bf16_gflops"].is_null() || positive(c["amx_bf16_gflops"]));
    }
  }

  // GEMM: M = 256 on the two smallest weight shapes.
  const json& g = j["gemm"];
  ASSERT_TRUE(g.is_array());
  std::set<std::vector<int64_t>> shapes;
  for (const json& row : g) {
    const std::vector<int64_t> mnk{row["m"].get<int64_t>(), row["n"].get<int64_t>(), row["k"].get<int64_t>()};
    shapes.insert(mnk);
    const std::string where = "gemm " + row.dump().substr(0, 60);
    EXPECT_TRUE(row["what"].is_string());
    EXPECT_TRUE(row["onednn_impl"]["fp32"].is_string());
    EXPECT_TRUE(row["onednn_impl"]["bf16"].is_string());
    for (int t : threads) {
      const json& e = row["threads"][std::to_string(t)];
      expect_figure(e["own_fp32"], "gflops", where + " own_fp32");
      expect_figure(e["own_bf16"], "gflops", where + " own_bf16");
      for (const char* peer : {"onednn_fp32", "onednn_bf16", "openblas"})
        expect_figure_or_null(e[peer], "gflops", where + " " + peer);
      if (!onednn) {
        EXPECT_TRUE(e["onednn_fp32"].is_null() && e["onednn_bf16"].is_null());
      }
      EXPECT_EQ(e["openblas"].is_null(), !openblas) << where;
      for (const char* r : {"own_vs_onednn", "own_vs_openblas", "own_bf16_vs_onednn_bf16"})
        expect_ratio_or_null(e[r], where + " " + r);
      EXPECT_EQ(e["own_vs_onednn"].is_null(), e["onednn_fp32"].is_null());
      EXPECT_EQ(e["own_vs_openblas"].is_null(), e["openblas"].is_null());
    }
    for (const char* col : {"own_fp32", "own_bf16", "onednn_fp32", "onednn_bf16", "openblas"}) {
      ASSERT_TRUE(row["scaling"].contains(col)) << where;
      if (!many) {
        EXPECT_TRUE(row["scaling"][col].is_null()) << where;
      }
    }
    if (many) {
      EXPECT_TRUE(positive(row["scaling"]["own_fp32"])) << where;
    }
  }
  EXPECT_EQ(shapes, (std::set<std::vector<int64_t>>{{256, 768, 768}, {256, 2048, 768}}));

  // Attention: T = 256, forward and backward, fp32 and bf16; the causal half's useful FLOPs.
  const json& a = j["attention"];
  ASSERT_TRUE(a.is_array());
  ASSERT_EQ(a.size(), 4u);
  std::set<std::string> seen;
  for (const json& row : a) {
    const std::string what = row["pass"].get<std::string>() + " " + row["math"].get<std::string>();
    seen.insert(what);
    EXPECT_EQ(row["t"], 256) << what;
    EXPECT_EQ(row["heads"], 12) << what;
    EXPECT_EQ(row["d"], 64) << what;
    // 12 heads x 256·257/2 visible (query, key) pairs x (2·64 + 2·64) FLOPs; backward's four products twice that.
    const double forward = 12.0 * (256.0 * 257.0 / 2) * 256.0;
    EXPECT_DOUBLE_EQ(row["flops"].get<double>(), row["pass"] == "backward" ? 2 * forward : forward) << what;
    for (int t : threads) expect_figure(row["threads"][std::to_string(t)], "gflops", "attention " + what);
    EXPECT_EQ(row["scaling"].is_null(), !many) << what;
  }
  EXPECT_EQ(seen, (std::set<std::string>{"forward fp32", "forward bf16", "backward fp32", "backward bf16"}));

  // Memory-bound kernels and the bytes each call must move.
  const json& mem = j["memory"];
  ASSERT_TRUE(mem.is_array());
  std::set<std::string> kernels;
  for (const json& row : mem) {
    const std::string k = row["kernel"].get<std::string>();
    kernels.insert(k);
    for (int t : threads) expect_figure(row["threads"][std::to_string(t)], "gbs", k);
    EXPECT_EQ(row["scaling"].is_null(), !many) << k;
    const double bytes = row["bytes"].get<double>();
    const json& s = row["shape"];
    if (k == "rms_norm_f32") {
      EXPECT_DOUBLE_EQ(bytes, 2048.0 * 768 * 8 + 768 * 4);  // x read, y written, gamma
      EXPECT_EQ(row["ceiling"], "update_gbs");
    } else if (k == "adamw_update_f32") {
      EXPECT_DOUBLE_EQ(bytes, s[0].get<double>() * 28);  // 4 streams read, 3 written
      EXPECT_EQ(row["ceiling"], "update_gbs");
    } else {
      const double nk = s[0].get<double>() * s[1].get<double>();
      const std::string f = row["format"].get<std::string>();
      EXPECT_DOUBLE_EQ(bytes, f == "f32" ? 4 * nk : f == "bf16" ? 2 * nk : nk + nk / 32 * 4) << k;
      EXPECT_EQ(row["ceiling"], "read_gbs");
    }
  }
  EXPECT_EQ(kernels, (std::set<std::string>{"rms_norm_f32", "adamw_update_f32", "weight_gemm M=1 f32",
                                            "weight_gemm M=1 bf16", "weight_gemm M=1 q8/32"}));
}

TEST(BenchKernels, QuickJsonHasEveryFigure) {
  json j = run_json({});
  ASSERT_FALSE(j.empty());
  // Default thread counts: 1 and 2, clipped to the cores available.
  const int cores = j["machine"]["threads_available"].get<int>();
  expect_quick_report(j, cores >= 2 ? std::vector<int>{1, 2} : std::vector<int>{1});
}

TEST(BenchKernels, OneThreadCountHasNoScaling) {
  json j = run_json({"--threads", "1", "--reps", "1"});
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["machine"]["reps"], 1);
  expect_quick_report(j, {1});
}

TEST(BenchKernels, TextTables) {
  CliResult r = run_cli({"bench", "kernels", "--quick", "--threads", "1", "--reps", "1"}, 600);
  ASSERT_TRUE(Succeeded(r));
  for (const char* s : {"fp32 FMA peak", "read bandwidth", "GEMM", "OpenBLAS", "attention", "rms_norm_f32",
                        "adamw_update_f32", "weight_gemm M=1 q8/32"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(BenchKernels, BadArgumentsAreOneLineErrors) {
  for (const std::vector<std::string>& bad : {
           std::vector<std::string>{"--threads", "0"},
           {"--threads", "1,x"},
           {"--threads", "-2"},
           {"--reps", "0"},
           {"--bogus"},
       }) {
    std::vector<std::string> args{"bench", "kernels", "--quick"};
    args.insert(args.end(), bad.begin(), bad.end());
    CliResult r = run_cli(args, 60);
    EXPECT_TRUE(IsOneLineError(r)) << bad[0];
  }
}

}  // namespace
}  // namespace milrt::test
