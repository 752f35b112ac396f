// What a profiled plan measured (Plan::profile()), for people and for tools:
// a table of the plan's steps sorted by time (`--profile` on `milrt run`,
// `bench`, `train`, `bench train`), the time per kernel family (the training
// report's split), and Chrome trace-event JSON (`--trace FILE`; opens in
// Perfetto or chrome://tracing, one track per thread).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "milrt/plan.h"

namespace milrt {

// The family of a kernel (StepInfo::kernel), for the training split:
// "matmul" (gemm, conv, lstm), "attention" (fused attention, softmax),
// "norms" (rms_norm, layer_norm), "elementwise" (unary, binary, fused loops,
// select, reductions), "conversions/packing" (transposes, copies, casts,
// concat, slices, gathers, pads, state copies), else "other". The trainer
// adds its own "optimizer" and "data".
std::string kernel_family(const std::string& kernel);

// Milliseconds per family over all the profile's calls, largest first.
std::vector<std::pair<std::string, double>> family_totals(const Plan::Profile& p);

struct ProfileTableOptions {
  std::string title;           // first line ("" : "profile")
  double peak_gflops = 0;      // > 0: a column with each step's fraction of it
  std::string peak_kind = "fp32 FMA";
  size_t max_rows = 0;         // 0: every step; else the largest, then one line for the rest
  size_t max_ops = 4;          // fused MIL ops named per row, then "+N"
};

// One row per step, by total time: kernel, calls, total ms, share of the
// plans' step time, median µs, FLOPs and bytes per call, GFLOP/s, GB/s, %
// of the peak, the MIL ops.
std::string profile_table(const Plan::Profile& p, const ProfileTableOptions& o = {});

// One complete event ("ph":"X") of a trace.
struct TraceSpan {
  std::string name, cat;
  uint32_t thread = 1;          // Plan::trace_thread_id()
  int64_t start_ns = 0, dur_ns = 0;  // steady_clock
  std::string ops;              // args.ops when not empty
  int32_t step = -1;            // args.step when >= 0
};

// A plan's trace events as spans named by kernel, of category `cat`.
void append_trace_spans(std::vector<TraceSpan>& out, const Plan::Profile& p, const std::string& cat);

// {"traceEvents": [...], "displayTimeUnit": "ms"}: the spans as "X" events
// (ts and dur in µs from the earliest span; pid the process; tid the
// thread), and "M" events naming the process and each thread.
std::string chrome_trace_json(const std::vector<TraceSpan>& spans);
// The same written atomically to `path` (Error naming the path on failure).
void write_chrome_trace(const std::string& path, const std::vector<TraceSpan>& spans);

}  // namespace milrt
