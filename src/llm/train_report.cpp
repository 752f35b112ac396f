#include "llm/train_report.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "milrt/error.h"
#include "util/atomic_file.h"

namespace milrt::llm {

void write_loss_csv(const std::string& path, const TrainLog& log) {
  std::string s = "step,loss,val_loss,lr,grad_norm,ms,tok_s,comm_ms\n";
  auto opt = [](double v, const char* f) { return std::isnan(v) ? std::string() : fmt::format(fmt::runtime(f), v); };
  for (const TrainLog::Row& r : log.rows)
    s += fmt::format("{},{:.6f},{},{:.6e},{:.6f},{:.3f},{},{}\n", r.step, r.loss, opt(r.val_loss, "{:.6f}"), r.lr, r.grad_norm,
                     r.ms, opt(r.tok_s, "{:.1f}"), opt(r.comm_ms, "{:.3f}"));
  write_file_atomic(path, s.data(), s.size());
}

std::vector<TrainLog::Row> read_loss_csv(const std::string& path, int64_t up_to_step) {
  std::vector<TrainLog::Row> rows;
  std::ifstream in(path);
  if (!in) return rows;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1 || line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    if (line.back() == ',') f.push_back("");
    // 6 fields: written before tok_s and comm_ms existed.
    if (f.size() != 6 && f.size() != 8)
      throw Error(fmt::format("{}:{}: error: expected 8 comma-separated fields (6 in older runs)", path, line_no));
    try {
      auto num = [&](size_t i) { return i < f.size() && !f[i].empty() ? std::stod(f[i]) : NAN; };
      TrainLog::Row r{std::stoll(f[0]), std::stod(f[1]), num(2), std::stod(f[3]), std::stod(f[4]), std::stod(f[5]),
                      num(6), num(7)};
      if (r.step <= up_to_step) rows.push_back(r);
    } catch (const std::exception&) {
      throw Error(fmt::format("{}:{}: error: not a number in '{}'", path, line_no, line));
    }
  }
  return rows;
}

void write_loss_svg(const std::string& path, const TrainLog& log, const std::string& title) {
  const double W = 640, H = 400, L = 60, R = 20, T = 36, B = 44;  // size and margins
  double lo = INFINITY, hi = -INFINITY;
  int64_t s0 = log.rows.empty() ? 0 : log.rows.front().step, s1 = s0 + 1;
  for (const TrainLog::Row& r : log.rows) {
    for (double v : {r.loss, r.val_loss})
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    s1 = std::max(s1, r.step);
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  auto x = [&](double step) { return L + (W - L - R) * (step - double(s0)) / double(std::max<int64_t>(1, s1 - s0)); };
  auto y = [&](double v) { return T + (H - T - B) * (hi - v) / (hi - lo); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"20\" font-size=\"14\">{3}: loss per step</text>\n",
      W, H, L, title);
  // Axes with five ticks each.
  s += fmt::format("<path d=\"M{0} {1} V{2} H{3}\" stroke=\"black\" fill=\"none\"/>\n", L, T, H - B, W - R);
  for (int i = 0; i <= 4; ++i) {
    double v = lo + (hi - lo) * i / 4, st = double(s0) + double(s1 - s0) * i / 4;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3g}</text>\n", L - 6, y(v) + 4, v);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:.0f}</text>\n", x(st), H - B + 16, st);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 8);
  std::string d;
  for (const TrainLog::Row& r : log.rows)
    if (std::isfinite(r.loss)) d += fmt::format("{}{:.1f} {:.1f}", d.empty() ? "M" : " L", x(double(r.step)), y(r.loss));
  if (!d.empty()) s += "<path d=\"" + d + "\" stroke=\"#1f77b4\" stroke-width=\"1.5\" fill=\"none\"/>\n";
  for (const TrainLog::Row& r : log.rows)
    if (std::isfinite(r.val_loss))
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#d62728\"/>\n", x(double(r.step)), y(r.val_loss));
  s += fmt::format("<text x=\"{0}\" y=\"{1}\" fill=\"#1f77b4\" text-anchor=\"end\">train</text>"
                   "<text x=\"{0}\" y=\"{2}\" fill=\"#d62728\" text-anchor=\"end\">validation</text>\n</svg>\n",
                   W - R, T + 4, T + 20);
  write_file_atomic(path, s.data(), s.size());
}

std::string efficiency_report(const TrainTask& task, const TrainOptions& opt, const TrainLog& log) {
  const double accum = double(opt.accum);
  const double fwd = std::min(log.ms_fwd, log.ms_fwd_bwd), bwd = log.ms_fwd_bwd - fwd;
  const double step_ms = accum * (log.ms_fwd_bwd + log.ms_data) + log.ms_optimizer;
  auto pct = [&](double ms) { return step_ms > 0 ? 100 * ms / step_ms : 0; };
  std::string s = fmt::format("efficiency of {} ({} micro-step{} per optimizer step, {} thread{}; medians):\n", task.name,
                              opt.accum, opt.accum == 1 ? "" : "s", log.threads, log.threads == 1 ? "" : "s");
  s += fmt::format("  forward     {:9.2f} ms/step  {:5.1f}%\n", accum * fwd, pct(accum * fwd));
  s += fmt::format("  backward    {:9.2f} ms/step  {:5.1f}%\n", accum * bwd, pct(accum * bwd));
  s += fmt::format("  optimizer   {:9.2f} ms/step  {:5.1f}%\n", log.ms_optimizer, pct(log.ms_optimizer));
  s += fmt::format("  data        {:9.2f} ms/step  {:5.1f}%\n", accum * log.ms_data, pct(accum * log.ms_data));
  s += fmt::format("  total       {:9.2f} ms/step\n", step_ms);
  if (task.tokens_per_microstep > 0)
    s += fmt::format("  throughput  {:9.0f} tokens/s\n", accum * double(task.tokens_per_microstep) / (step_ms / 1000));
  if (task.flops_per_microstep > 0 && step_ms > 0) {
    const double gflops = accum * task.flops_per_microstep / (step_ms / 1000) * 1e-9;
    if (log.peak_gflops > 0)
      s += fmt::format("  useful      {:9.1f} GFLOP/s = {:.1f}% of the measured {} peak ({:.0f} GFLOP/s on {} thread{})\n",
                       gflops, 100 * gflops / log.peak_gflops, log.peak_kind, log.peak_gflops, log.threads,
                       log.threads == 1 ? "" : "s");
    else
      s += fmt::format("  useful      {:9.1f} GFLOP/s\n", gflops);
  }
  if (!log.family_ms.empty()) {  // TrainOptions::profile
    double sum = 0;
    for (auto& [family, ms] : log.family_ms) sum += ms;
    s += fmt::format("  by kernel family (profiled, mean of {} step{}):\n", log.profiled_steps, log.profiled_steps == 1 ? "" : "s");
    for (auto& [family, ms] : log.family_ms)
      s += fmt::format("    {:<20} {:9.2f} ms/step  {:5.1f}%\n", family, ms, sum > 0 ? 100 * ms / sum : 0.0);
  }
  return s;
}

}  // namespace milrt::llm
