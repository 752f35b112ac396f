#include "kernels/gemm_backend.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "kernels/onednn/onednn_gemm.h"
#include "milrt/error.h"

namespace milrt::kernels {
namespace {

GemmBackendMode read_mode_env() {
  const char* env = std::getenv("MILRT_GEMM");
  if (!env || !*env) return GemmBackendMode::auto_;
  const std::string v = env;
  if (v == "own") return GemmBackendMode::own;
  if (v == "onednn") return GemmBackendMode::onednn;
  if (v == "auto") return GemmBackendMode::auto_;
  throw Error("MILRT_GEMM=" + v + ": unknown GEMM backend (expected own, onednn or auto)");
}

// -1: no override (MILRT_GEMM decides), else a GemmBackendMode.
std::atomic<int> g_override{-1};

}  // namespace

std::string_view gemm_backend_name(GemmBackend b) { return b == GemmBackend::onednn ? "onednn" : "own"; }

GemmBackendMode gemm_backend_mode() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return GemmBackendMode(o);
  static const GemmBackendMode env = read_mode_env();
  return env;
}

void set_gemm_backend_mode(std::optional<GemmBackendMode> mode) {
  g_override.store(mode ? int(*mode) : -1, std::memory_order_relaxed);
}

GemmBackend choose_gemm_backend(int64_t m, int64_t n, int64_t k, GemmMath math, bool b_const, Isa isa) {
  switch (gemm_backend_mode()) {
    case GemmBackendMode::own: return GemmBackend::own;
    case GemmBackendMode::onednn:
      if (!onednn_available())
        throw Error("MILRT_GEMM=onednn: this build has no oneDNN (install libdnnl-dev and rebuild)");
      return GemmBackend::onednn;
    case GemmBackendMode::auto_: break;
  }
  // The rule, from `milrt bench kernels` on an AVX2 machine (README): fp32
  // oneDNN (gemm:jit) is level with the own kernels, ahead on some shapes
  // and behind on others, by less than run-to-run noise at two threads, and
  // it has no bf16 matmul there; so the own kernels, whose bits do not
  // depend on the thread count and which allocate nothing per call. On AMX
  // oneDNN's brgemm would be the only tile kernel, but its bf16 path has
  // never run on an AMX machine here: until it has, it stays opt-in
  // (MILRT_GEMM=onednn) rather than the default of every AMX user.
  (void)m, (void)n, (void)k, (void)math, (void)b_const, (void)isa;
  return GemmBackend::own;
}

}  // namespace milrt::kernels
