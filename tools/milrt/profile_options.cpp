// --profile and --trace FILE, shared by run, bench, train and bench train:
// one subcommand runs per process, so one set of values serves them all.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "kernels/peak.h"
#include "kernels/threads.h"
#include "llm/trainer.h"
#include "milrt/error.h"
#include "util/atomic_file.h"

namespace milrt::cli {
namespace {
ProfileFlags& flags() {
  static ProfileFlags f;
  return f;
}
void write_trace(const std::string& path, const std::vector<TraceSpan>& spans) {
  write_chrome_trace(path, spans);
  std::fprintf(stderr, "wrote %s (%zu trace events)\n", path.c_str(), spans.size());
}
}  // namespace

void add_profile_options(CLI::App& cmd) {
  cmd.add_flag("--profile", flags().profile,
               "time every plan step: a table on stderr (kernel, fused MIL ops, calls, total and median time, "
               "GFLOP/s, GB/s, fraction of the measured peak)");
  cmd.add_option("--trace", flags().trace,
                 "FILE: write every plan step's run as Chrome trace-event JSON (Perfetto, chrome://tracing)");
}

const ProfileFlags& profile_flags() {
  ProfileFlags& f = flags();
  if (!f.trace.empty() && !f.checked) {
    // Before any work: a trace that cannot be written is an error now, not after the run.
    if (std::filesystem::is_directory(f.trace)) throw Error("error: --trace " + f.trace + ": is a directory");
    try {
      AtomicFileWriter probe(f.trace);  // creates and removes a temporary file beside it
    } catch (const Error& e) {
      throw Error(std::string("error: --trace: ") + e.what());
    }
    f.checked = true;
  }
  return f;
}

double profile_peak_gflops(bool bf16) {
  return kernels::measure_peak_gflops(bf16 ? kernels::bf16_peak_kind() : kernels::PeakKind::fp32_fma,
                                      kernels::num_threads());
}

void report_profile(const Plan& plan, const std::string& title) { report_profiles({{&plan, title}}); }

void report_profiles(const std::vector<std::pair<const Plan*, std::string>>& plans) {
  const ProfileFlags& f = profile_flags();
  if (!f.on()) return;
  std::vector<TraceSpan> spans;
  // Measured once for all the tables (each measurement runs the peak loops for a while).
  const double peak = f.profile ? profile_peak_gflops(false) : 0;
  for (const auto& [plan, title] : plans) {
    const Plan::Profile p = plan->profile();
    if (f.profile) {
      ProfileTableOptions o;
      o.title = title;
      o.peak_gflops = peak;
      std::fprintf(stderr, "%s", profile_table(p, o).c_str());
    }
    append_trace_spans(spans, p, plans.size() == 1 ? "plan" : title);
  }
  if (!f.trace.empty()) write_trace(f.trace, spans);
}

void report_train_profile(const llm::TrainLog& log) {
  const ProfileFlags& f = profile_flags();
  if (!f.on()) return;
  if (f.profile) {
    ProfileTableOptions o;
    o.peak_gflops = log.peak_gflops;
    o.peak_kind = log.peak_kind;
    o.max_rows = 40;
    o.title = "profile of the step plan (loss + gradients)";
    std::fprintf(stderr, "%s", profile_table(log.step_profile, o).c_str());
    o.title = "profile of the eval plan (loss)";
    o.max_rows = 15;
    std::fprintf(stderr, "%s", profile_table(log.eval_profile, o).c_str());
  }
  if (!f.trace.empty()) {
    std::vector<TraceSpan> spans = log.phase_spans;
    append_trace_spans(spans, log.step_profile, "step plan");
    append_trace_spans(spans, log.eval_profile, "eval plan");
    write_trace(f.trace, spans);
  }
}

}  // namespace milrt::cli
