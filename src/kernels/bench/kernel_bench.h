// The measurements behind `milrt bench kernels` (issue #4): the machine's
// ceilings (register-only compute peaks, streaming bandwidth) and each kernel
// on Stories110M's and the seed layer's shapes against them and against the
// peers (oneDNN, OpenBLAS sgemm), on each requested thread count. Benchmarks
// are programs, never tests: every figure is a median of timed repetitions
// after one warm-up call.
//
// Each function returns one section of the report as JSON; figures keyed by
// thread count ("1", "2", ...) are {"gflops"|"gbs": value, "fraction": of the
// matching ceiling at that thread count}, or null where a peer has no figure.
// "scaling" is a figure at the largest thread count over the smallest.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

namespace milrt::kernels::bench {

struct Options {
  std::vector<int> threads{1};  // ascending, each >= 1
  int reps = 0;                 // timed repetitions per figure; 0: enough for ~0.3 s (at least 3)
  bool quick = false;           // smallest shapes, short windows (a smoke run in seconds)
};

// One finished row of a section, for printing as the run goes.
using RowSink = std::function<void(const nlohmann::json& row)>;

// {"cpu_features", "isa", "threads_available", "amx" (usable), "threads", "quick", "reps", "openblas", "onednn"}
nlohmann::json machine_info(const Options& o);

// {"<t>": {"fp32_gflops", "bf16_gflops", "bf16_native", "amx_bf16_gflops" (null without AMX), "read_gbs",
// "update_gbs"}} for each thread count t.
nlohmann::json measure_ceilings(const Options& o);

// GEMM C[M,N] = A[M,K]·Wᵀ, W [N,K] constant (pre-packed). Rows:
// {"m", "n", "k", "what", "onednn_impl": {"fp32", "bf16"}, "threads": {"<t>": {"own_fp32", "own_bf16",
// "onednn_fp32", "onednn_bf16", "openblas", "own_vs_onednn", "own_vs_openblas", "own_bf16_vs_onednn_bf16"}},
// "scaling": {column: ratio}}.
nlohmann::json bench_gemm(const Options& o, const nlohmann::json& ceilings, const RowSink& sink);

// Fused causal attention, forward and backward, fp32 and bf16 products (the
// vector kernels: vdpbf16ps where the CPU has avx512_bf16), 12 heads of dim
// 64, heads spread over threads. Rows: {"pass": "forward"|"backward", "math":
// "fp32"|"bf16", "heads", "t", "d", "flops", "threads": {"<t>": {"gflops",
// "fraction" (of the fp32 FMA or the bf16 dot peak)}}, "scaling"}.
nlohmann::json bench_attention(const Options& o, const nlohmann::json& ceilings, const RowSink& sink);

// Memory-bound kernels (rms_norm, AdamW, M=1 weight_gemm) in GB/s of the bytes
// each call must move, against the read or update bandwidth. Rows:
// {"kernel", "shape", "bytes", "ceiling", "threads": {"<t>": {"gbs", "fraction"}}, "scaling"}.
nlohmann::json bench_memory(const Options& o, const nlohmann::json& ceilings, const RowSink& sink);

}  // namespace milrt::kernels::bench
