#include "runtime/profile_report.h"

#include <unistd.h>

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "util/atomic_file.h"

namespace milrt {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string ops_text(const std::vector<std::string>& ops, size_t max_ops) {
  std::string r;
  const size_t n = max_ops == 0 ? ops.size() : std::min(ops.size(), max_ops);
  for (size_t i = 0; i < n; ++i) r += (i ? " " : "") + ops[i];
  if (n < ops.size()) r += fmt::format(" +{}", ops.size() - n);
  return r;
}

// 1234567 -> "1.23M" (k, M, G, T; "-" for 0): FLOPs and bytes per call.
std::string si(double v) {
  if (v <= 0) return "-";
  const char* units[] = {"", "k", "M", "G", "T"};
  int u = 0;
  while (v >= 1000 && u < 4) v /= 1000, ++u;
  return u == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.3g}{}", v, units[u]);
}

}  // namespace

std::string kernel_family(const std::string& k) {
  for (const char* p : {"gemm", "matmul", "conv", "lstm", "linear"})
    if (starts_with(k, p)) return "matmul";
  for (const char* p : {"attention", "softmax", "sdpa"})
    if (starts_with(k, p)) return "attention";
  for (const char* p : {"rms_norm", "layer_norm", "batch_norm", "instance_norm", "l2_norm"})
    if (starts_with(k, p)) return "norms";
  for (const char* p : {"elementwise", "binary", "unary", "select", "reduce", "logical_not", "cumsum", "clip", "rope", "silu_mul"})
    if (starts_with(k, p)) return "elementwise";
  for (const char* p : {"transpose", "copy", "cast", "concat", "split", "slice", "pad", "tile", "gather", "scatter",
                        "one_hot", "band_part", "read_state", "coreml_update_state", "reverse", "stack", "reshape",
                        "fill", "range", "expand", "squeeze"})
    if (starts_with(k, p)) return "conversions/packing";
  return "other";
}

std::vector<std::pair<std::string, double>> family_totals(const Plan::Profile& p) {
  std::map<std::string, double> ms;
  for (const Plan::StepProfile& s : p.steps) ms[kernel_family(s.kernel)] += s.total_ms;
  std::vector<std::pair<std::string, double>> r(ms.begin(), ms.end());
  std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return r;
}

std::string profile_table(const Plan::Profile& p, const ProfileTableOptions& o) {
  double total = 0;
  for (const Plan::StepProfile& s : p.steps) total += s.total_ms;
  std::vector<size_t> order(p.steps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return p.steps[a].total_ms > p.steps[b].total_ms; });
  std::string s = fmt::format("{}: {} steps, {} run{}, {:.3f} ms in steps ({:.2f} µs per run)", o.title.empty() ? "profile" : o.title,
                              p.steps.size(), p.runs, p.runs == 1 ? "" : "s", total,
                              p.runs > 0 ? total * 1e3 / double(p.runs) : 0.0);
  if (o.peak_gflops > 0) s += fmt::format("; measured {} peak {:.1f} GFLOP/s", o.peak_kind, o.peak_gflops);
  s += "\n";
  s += fmt::format("{:>4} {:>5}  {:<34} {:>8} {:>10} {:>6} {:>10} {:>7} {:>7} {:>8} {:>7}{}  {}\n", "rank", "step", "kernel",
                   "calls", "total ms", "share", "median µs", "FLOPs", "bytes", "GFLOP/s", "GB/s",
                   o.peak_gflops > 0 ? "   peak" : "", "MIL ops");
  auto rate = [](double per_call, const Plan::StepProfile& st) {
    return st.total_ms > 0 && per_call > 0 ? per_call * double(st.calls) / (st.total_ms * 1e6) : 0.0;
  };
  const size_t rows = o.max_rows == 0 ? order.size() : std::min(order.size(), o.max_rows);
  for (size_t r = 0; r < rows; ++r) {
    const Plan::StepProfile& st = p.steps[order[r]];
    const double gflops = rate(st.flops, st), gbs = rate(st.bytes, st);
    std::string line = fmt::format("{:>4} {:>5}  {:<34} {:>8} {:>10.3f} {:>5.1f}% {:>10.2f} {:>7} {:>7} ", r + 1, order[r],
                                   st.kernel, st.calls, st.total_ms, total > 0 ? 100 * st.total_ms / total : 0.0,
                                   st.median_ms * 1e3, si(st.flops), si(st.bytes));
    line += st.flops > 0 ? fmt::format("{:>8.2f}", gflops) : fmt::format("{:>8}", "-");
    line += st.bytes > 0 ? fmt::format(" {:>7.2f}", gbs) : fmt::format(" {:>7}", "-");
    if (o.peak_gflops > 0)
      line += st.flops > 0 ? fmt::format(" {:>5.1f}%", 100 * gflops / o.peak_gflops) : fmt::format(" {:>6}", "-");
    s += line + "  " + ops_text(st.ops, o.max_ops) + "\n";
  }
  if (rows < order.size()) {
    double rest = 0;
    for (size_t r = rows; r < order.size(); ++r) rest += p.steps[order[r]].total_ms;
    s += fmt::format("{:>4} {:>5}  {:<34} {:>8} {:>10.3f} {:>5.1f}%\n", "", "", fmt::format("({} more steps)", order.size() - rows),
                     "", rest, total > 0 ? 100 * rest / total : 0.0);
  }
  if (p.dropped_events > 0)
    s += fmt::format("trace: {} events past the first {} were not recorded\n", p.dropped_events, Plan::kMaxTraceEvents);
  return s;
}

void append_trace_spans(std::vector<TraceSpan>& out, const Plan::Profile& p, const std::string& cat) {
  out.reserve(out.size() + p.events.size());
  for (const Plan::TraceEvent& e : p.events) {
    TraceSpan s;
    if (e.step >= 0 && size_t(e.step) < p.steps.size()) {
      s.name = p.steps[size_t(e.step)].kernel;
      s.ops = ops_text(p.steps[size_t(e.step)].ops, 0);
    }
    s.cat = cat;
    s.thread = e.thread;
    s.start_ns = e.start_ns;
    s.dur_ns = e.dur_ns;
    s.step = e.step;
    out.push_back(std::move(s));
  }
}

std::string chrome_trace_json(const std::vector<TraceSpan>& spans) {
  using nlohmann::json;
  const int pid = int(getpid());
  int64_t t0 = 0;
  if (!spans.empty()) {
    t0 = spans.front().start_ns;
    for (const TraceSpan& s : spans) t0 = std::min(t0, s.start_ns);
  }
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", "milrt"}}}});
  std::set<uint32_t> threads;
  for (const TraceSpan& s : spans) threads.insert(s.thread);
  for (uint32_t t : threads)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", t},
                      {"args", {{"name", fmt::format("thread {}", t)}}}});
  for (const TraceSpan& s : spans) {
    json e = {{"ph", "X"},  {"name", s.name}, {"cat", s.cat.empty() ? "plan" : s.cat},
              {"pid", pid}, {"tid", s.thread}, {"ts", double(s.start_ns - t0) * 1e-3},
              {"dur", double(s.dur_ns) * 1e-3}};
    json args = json::object();
    if (s.step >= 0) args["step"] = s.step;
    if (!s.ops.empty()) args["ops"] = s.ops;
    if (!args.empty()) e["args"] = std::move(args);
    events.push_back(std::move(e));
  }
  json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return doc.dump() + "\n";
}

void write_chrome_trace(const std::string& path, const std::vector<TraceSpan>& spans) {
  const std::string s = chrome_trace_json(spans);
  write_file_atomic(path, s.data(), s.size());
}

}  // namespace milrt
