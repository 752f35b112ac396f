// milrt bench kernels: the machine's ceilings (register-only compute peaks,
// streaming bandwidth) and every kernel on Stories110M's and the seed layer's
// shapes against them and against oneDNN and OpenBLAS, on 1 and 2 threads, in
// one run (issue #4). The measurements live in src/kernels/bench/; this file
// parses the options and prints each table as its rows finish (or, with
// --json, only the one JSON object at the end).
#include <algorithm>
#include <cstdio>
#include <string>

#include "commands.h"
#include "kernels/bench/kernel_bench.h"
#include "kernels/threads.h"
#include "milrt/error.h"

namespace milrt::cli {
namespace {

using nlohmann::json;
namespace kb = kernels::bench;

std::vector<int> parse_threads(const std::string& list) {
  std::vector<int> r;
  if (list.empty()) {  // default: 1 and 2, clipped to the cores available
    for (int t : {1, 2})
      if (t <= kernels::num_threads()) r.push_back(t);
    return r;
  }
  for (const std::string& s : split_commas(list)) {
    size_t used = 0;
    int t = 0;
    try {
      t = std::stoi(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || t < 1 || t > 1024)
      throw Error("error: bench kernels: --threads expects positive thread counts like 1,2, got '" + s + "'");
    r.push_back(t);
  }
  if (r.empty()) throw Error("error: bench kernels: --threads expects positive thread counts like 1,2");
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// "  85.1 (0.89)" for a figure, "-" for a missing one: 13 columns.
std::string cell(const json& f, const char* unit) {
  char b[32];
  if (f.is_null()) return "            -";
  std::snprintf(b, sizeof b, "%7.1f (%.2f)", f.at(unit).get<double>(), f.at("fraction").get<double>());
  return b;
}

std::string num(const json& v, const char* fmt) {
  char b[32];
  if (v.is_null()) return "-";
  std::snprintf(b, sizeof b, fmt, v.get<double>());
  return b;
}

void print_ceilings(const json& c, const json& machine, const kb::Options& o) {
  std::printf("\nceilings (best window)          ");
  for (int t : o.threads) std::printf("  %2d thr", t);
  auto line = [&](const char* name, const char* key, const char* note) {
    std::printf("\n%-32s", name);
    for (int t : o.threads) std::printf(" %7.1f", c.at(std::to_string(t)).at(key).get<double>());
    std::printf("%s", note);
  };
  const bool native = c.at(std::to_string(o.threads.front())).at("bf16_native").get<bool>();
  line("fp32 FMA peak, GFLOP/s", "fp32_gflops", "");
  line("bf16 dot peak, GFLOP/s", "bf16_gflops", native ? "  (vdpbf16ps)" : "  (no bf16 dot: emulated = fp32)");
  if (machine["amx"].get<bool>()) line("AMX bf16 peak, GFLOP/s", "amx_bf16_gflops", "  (tdpbf16ps)");
  else std::printf("\n%-32s %s", "AMX bf16 peak", "no AMX on this CPU");
  line("read bandwidth, GB/s", "read_gbs", "  (sum of one array)");
  line("update bandwidth, GB/s", "update_gbs", "  (x = a*x + y in place, 12 B/element)");
  std::printf("\n");
}

struct GemmPrinter {
  const kb::Options& o;
  std::string last_impl;
  void header() {
    std::printf(
        "\nGEMM C[M,N] = A[M,K] * W^T, W [N,K] constant (pre-packed / reordered once), fp32 A and C\n"
        "GFLOP/s = 2MNK / median time (fraction of the fp32 peak; for bf16 math of the bf16 dot peak, or the AMX peak on AMX)\n"
        "%5s %5s %5s %4s %13s %13s %13s %13s %13s %8s %8s %8s\n",
        "M", "N", "K", "thr", "own fp32", "own bf16", "oneDNN fp32", "oneDNN bf16", "OpenBLAS", "own/dnn", "own/blas",
        "bf16/dnn");
  }
  bool told_why = false;
  // oneDNN's implementation name, or "unavailable" (its reason, which names the shape, printed once).
  std::string impl_of(const json& r, const char* math) {
    std::string s = r["onednn_impl"][math].get<std::string>();
    if (s.rfind("unavailable", 0) != 0) return s;
    if (!told_why) std::printf("  (oneDNN %s %s)\n", math, s.c_str());
    told_why = true;
    return "unavailable";
  }
  void operator()(const json& r) {
    std::string impl = "oneDNN: fp32 " + impl_of(r, "fp32") + "; bf16 " + impl_of(r, "bf16");
    if (impl != last_impl) std::printf("  (%s)\n", (last_impl = impl).c_str());
    for (int t : o.threads) {
      const json& e = r["threads"][std::to_string(t)];
      std::printf("%5lld %5lld %5lld %4d %s %s %s %s %s %8s %8s %8s\n", r["m"].get<long long>(),
                  r["n"].get<long long>(), r["k"].get<long long>(), t, cell(e["own_fp32"], "gflops").c_str(),
                  cell(e["own_bf16"], "gflops").c_str(), cell(e["onednn_fp32"], "gflops").c_str(),
                  cell(e["onednn_bf16"], "gflops").c_str(), cell(e["openblas"], "gflops").c_str(),
                  num(e["own_vs_onednn"], "%.2f").c_str(), num(e["own_vs_openblas"], "%.2f").c_str(),
                  num(e["own_bf16_vs_onednn_bf16"], "%.2f").c_str());
    }
    if (o.threads.size() > 1) {
      std::printf("%17s %4s", "scaling",
                  (std::to_string(o.threads.back()) + "/" + std::to_string(o.threads.front())).c_str());
      for (const char* c : {"own_fp32", "own_bf16", "onednn_fp32", "onednn_bf16", "openblas"})
        std::printf(" %13s", num(r["scaling"][c], "%.2fx").c_str());
      std::printf("\n");
    }
    std::fflush(stdout);
  }
};

// Attention and memory rows: one figure per thread count, then the scaling.
void print_simple_row(const json& r, const kb::Options& o, const std::string& label, const char* unit) {
  for (int t : o.threads) {
    const json& e = r["threads"][std::to_string(t)];
    std::printf("%-48s %4d %9.2f %8.2f\n", label.c_str(), t, e[unit].get<double>(), e["fraction"].get<double>());
  }
  if (o.threads.size() > 1)
    std::printf("%-48s %4s %9s\n", "",
                (std::to_string(o.threads.back()) + "/" + std::to_string(o.threads.front())).c_str(),
                num(r["scaling"], "%.2fx").c_str());
  std::fflush(stdout);
}

}  // namespace

void add_bench_kernels(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("kernels", "The machine's peaks and each kernel against them, oneDNN and OpenBLAS");
  static std::string threads;
  static int reps = 0;
  static bool quick = false, as_json = false;
  cmd->add_option("--threads", threads, "thread counts to run, e.g. 1,2 (default 1,2 clipped to the cores available)");
  cmd->add_option("--reps", reps, "timed repetitions per figure (default: enough for ~0.3 s, at least 3)")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--quick", quick, "smallest shapes and short windows: a smoke run of a few seconds");
  cmd->add_flag("--json", as_json, "print only one JSON object holding every figure");
  cmd->callback([] {
    kb::Options o;
    o.threads = parse_threads(threads);
    o.reps = reps;
    o.quick = quick;
    const bool text = !as_json;
    json report;
    report["machine"] = kb::machine_info(o);
    if (text) {
      const json& m = report["machine"];
      std::printf("milrt bench kernels%s: medians of %s timed repetitions after a warm-up call\n",
                  quick ? " --quick" : "",
                  reps > 0 ? std::to_string(reps).c_str()
                  : quick  ? "~0.02 s of"
                           : "~0.3 s of");
      std::printf("cpu: %s; kernel path %s; %d threads available\nOpenBLAS: %s; oneDNN: %s\n",
                  m["cpu_features"].get<std::string>().c_str(), m["isa"].get<std::string>().c_str(),
                  m["threads_available"].get<int>(),
                  m["openblas"].is_null() ? "not found (libopenblas.so.0)" : m["openblas"].get<std::string>().c_str(),
                  m["onednn"].get<bool>() ? "in this build" : "not in this build");
      std::fflush(stdout);
    }
    report["ceilings"] = kb::measure_ceilings(o);
    if (text) print_ceilings(report["ceilings"], report["machine"], o);

    GemmPrinter gp{o, ""};
    if (text) gp.header();
    report["gemm"] = kb::bench_gemm(o, report["ceilings"], [&](const json& r) {
      if (text) gp(r);
    });

    if (text)
      std::printf(
          "\nFused causal attention, 12 heads, D = Dv = 64, heads spread over the threads\n"
          "GFLOP/s of the useful FLOPs heads*T*(T+1)*(D+Dv) (the causal half's two products; backward: twice "
          "that),\nfraction of the fp32 FMA peak (fp32) or the bf16 dot peak (bf16)\n%-48s %4s %9s %8s\n",
          "shape", "thr", "GFLOP/s", "fraction");
    report["attention"] = kb::bench_attention(o, report["ceilings"], [&](const json& r) {
      if (text)
        print_simple_row(r, o,
                         r["pass"].get<std::string>() + " " + r["math"].get<std::string>() +
                             " T=" + std::to_string(r["t"].get<long long>()),
                         "gflops");
    });

    if (text)
      std::printf(
          "\nMemory-bound kernels: GB/s = bytes a call must move / median time (operands evicted from the "
          "caches first),\nfraction of the read bandwidth (weight_gemm) or the update bandwidth (rms_norm, "
          "AdamW: read+write)\n%-48s %4s %9s %8s\n",
          "kernel [shape] (MB per call)", "thr", "GB/s", "fraction");
    report["memory"] = kb::bench_memory(o, report["ceilings"], [&](const json& r) {
      if (!text) return;
      std::string shape;
      for (auto& d : r["shape"]) shape += (shape.empty() ? "" : ",") + std::to_string(d.get<long long>());
      char mb[32];
      std::snprintf(mb, sizeof mb, " (%.1f MB)", r["bytes"].get<double>() / 1e6);
      print_simple_row(r, o, r["kernel"].get<std::string>() + " [" + shape + "]" + mb, "gbs");
    });
    // Measured again: on a shared VM the ceilings drift while the kernels run; a large change between the two
    // says the fractions above are unreliable (they use the first measurement).
    report["ceilings_after"] = kb::measure_ceilings(o);
    if (text) {
      std::printf("\nceilings again after the kernels (fractions above use the first measurement)");
      print_ceilings(report["ceilings_after"], report["machine"], o);
    }
    if (as_json) std::printf("%s\n", report.dump(1).c_str());
  });
}

}  // namespace milrt::cli
