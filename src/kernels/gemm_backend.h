// Which implementation runs a plan's GEMM: milrt's own kernels (gemm.h) or
// oneDNN (onednn/onednn_gemm.h). Chosen once per GEMM at plan compilation:
// by measurement (runtime/gemm_tuning.h, MILRT_TUNE=on, the default), else by the
// fixed rule below (MILRT_TUNE=off, a cache miss under readonly, and
// CompileOptions::deterministic, which always takes the own kernels).
//
// The rule picks the own kernels everywhere (gemm_backend.cpp says why).
// MILRT_GEMM=own|onednn|auto (default auto) overrides both rule and tuning:
// `own` never uses oneDNN; `onednn` uses it wherever it has a primitive.
// Forcing onednn in a build without oneDNN is an error.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"

namespace milrt::kernels {

enum class GemmBackend : uint8_t { own, onednn };
std::string_view gemm_backend_name(GemmBackend b);  // "own", "onednn"

enum class GemmBackendMode : uint8_t { own, onednn, auto_ };
// MILRT_GEMM, read once (throws milrt::Error naming the variable for an unknown value).
GemmBackendMode gemm_backend_mode();
// For tests and tools: replaces the mode until called with nullopt (back to MILRT_GEMM).
void set_gemm_backend_mode(std::optional<GemmBackendMode> mode);

// The backend for C[M,N] = A[M,K]·B[K,N] under the current mode; `b_const`:
// B is a constant the plan may reorder once.
GemmBackend choose_gemm_backend(int64_t m, int64_t n, int64_t k, GemmMath math, bool b_const,
                                Isa isa = current_isa());

}  // namespace milrt::kernels
