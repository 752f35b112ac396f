// GEMM backends chosen by measurement. For each product a plan needs (shape,
// transposes, math, constant B or not, thread count) the candidates that can
// serve it (milrt's own kernels on the current ISA; oneDNN where this build
// has it and it has a non-reference kernel for the description) are timed
// once on scratch data of that shape, in alternating calls, and the one with
// the fastest call wins. Winners are kept in a small JSON file per CPU model,
//   $XDG_CACHE_HOME/milrt/gemm-tuning-<cpu model>.json (else ~/.cache/milrt/),
// so later compiles on the same CPU reuse them without timing anything.
//
// MILRT_TUNE (or CompileOptions::tune) says how:
//   on        time products missing from the cache, then write it (default);
//   readonly  use cached winners, never time or write (a miss: the fixed rule);
//   off       no timing, no cache: gemm_backend.h's fixed rule, as before tuning.
// MILRT_GEMM=own|onednn still forces a backend and overrides all of this.
//
// Why measure: on an AVX2 EPYC oneDNN's fp32 gemm:jit beats the own kernels
// on some shapes and loses on others (README, `milrt bench kernels`); a rule
// cannot know the CPU at hand. The price: two plans compiled on differently
// tuned machines may sum in different orders (results agree to fp32 rounding,
// not bit for bit), and a oneDNN step allocates a little per call.
// `deterministic` restricts the candidates to the own kernels, whose results
// are bit-identical for any thread count (gemm.h); oneDNN's are not (it may
// split K across threads).
//
// Bounds: each product's timing stops after about kShapeBudgetMs (at least
// one call per candidate: a large product takes longer), a compile's after
// kCompileBudgetMs (products past it take the fixed rule and stay untimed, so
// a later compile times them), and a product whose scratch would pass
// kMaxScratchBytes is not timed. A cache file that is unreadable, corrupt or
// written for another CPU is ignored with one warning line on stderr (and
// replaced at the next write); a failed write is one warning line, never an error.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kernels/gemm.h"
#include "kernels/gemm_backend.h"

namespace milrt::rt {

enum class TuneMode : uint8_t { off, readonly, on };
std::string_view tune_mode_name(TuneMode m);  // "off", "readonly", "on"
// MILRT_TUNE (unset or empty: on). Throws milrt::Error naming the variable for another value.
TuneMode tune_mode_from_env();

// The cache file's "version". Bumped whenever a candidate kernel changes enough
// to change winners, so that caches timed on the old kernels are set aside
// (with one warning line) and timed again. 2: the AMX bf16 kernel and
// stable-input packing. 3: per-call B and transposed A packed on vector units
// and threads (own kernels won the weight-gradient products oneDNN had won).
// 4: transposed fp32 A converted to bf16 rows as pair words (AMX weight
// gradients about a quarter faster). 5: AMX tiles start from an fp32
// residual (C += A·B in one K block: no epilogue pass). 6: the AMX K block
// is 2048 (products with K <= 2048 keep their sums in the tiles).
inline constexpr int kGemmTuningCacheVersion = 6;

inline constexpr double kShapeBudgetMs = 100;
inline constexpr double kCompileBudgetMs = 3000;
inline constexpr double kMaxScratchBytes = 512.0 * 1024 * 1024;

// The CPU's brand string (CPUID, else /proc/cpuinfo's "model name"; "unknown-cpu").
const std::string& cpu_model_name();
// The cache file for this CPU under the current environment ("" when neither
// XDG_CACHE_HOME nor HOME names a directory: winners are then kept in memory only).
std::string gemm_tuning_cache_path();

// One compile's tuning: choose() per product, flush() once lowering is done.
class GemmTuner {
 public:
  GemmTuner(TuneMode mode, bool deterministic);
  // The backend for C[M,N] = op(A)[M,K]·op(B)[K,N]. With deterministic and
  // MILRT_GEMM=onednn this throws (the two contradict each other).
  kernels::GemmBackend choose(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, kernels::GemmMath math,
                              bool b_const);
  // Writes the winners timed by this compile (mode on) into the cache file.
  void flush();

 private:
  TuneMode mode_;
  bool deterministic_;
  double spent_ms_ = 0;
  bool dirty_ = false;
};

// Process-wide counters, for tests and `milrt bench`'s compile report.
struct GemmTuneStats {
  int64_t timed = 0;          // products timed
  int64_t cache_hits = 0;     // products answered from the cache
  int64_t files_written = 0;  // cache files written
  int64_t warnings = 0;       // cache files ignored or not written
  double tuning_ms = 0;       // time spent timing
};
GemmTuneStats gemm_tune_stats();
// Forgets the in-memory caches and zeroes the counters (tests: the next
// choose() reads the file again).
void reset_gemm_tuning();

}  // namespace milrt::rt
