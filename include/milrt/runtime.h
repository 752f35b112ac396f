// Process-wide execution settings, for programs that embed milrt. Each one
// defaults to its environment variable (MILRT_THREADS, MILRT_ISA,
// MILRT_GEMM), which the `milrt` tool and scripts keep using; a setter
// overrides the variable until it is called with its "default" value.
// Settings are read when a plan is compiled (which kernels and GEMM backend
// each step gets) and when kernels run (thread count, vector path), so set
// them before compile(). Not meant to be changed while another thread runs
// a plan.
//
//   milrt::set_threads(4);            // at most 4 threads per kernel
//   milrt::set_isa("avx2");           // as MILRT_ISA=avx2: e.g. to compare paths
//   milrt::Plan plan = milrt::compile(program);
#pragma once
#include <string>
#include <vector>

namespace milrt {

// Threads of the multi-threaded kernels (GEMM, conv, attention, the
// elementwise passes). n >= 1 sets it; n <= 0 restores the default:
// MILRT_THREADS, else the CPUs of the process's affinity mask, lowered to
// its cgroup CPU quota (containers).
void set_threads(int n);
int threads();

// Kernel path: "generic", "avx2", "avx512" or "amx" (AMX tiles for bf16
// matrix products, AVX-512 elsewhere). Throws milrt::Error for an unknown
// name or one this CPU cannot run; "" restores MILRT_ISA, else the best
// path. isa() is the path in use; usable_isas() lists this CPU's, ascending.
void set_isa(const std::string& name);
std::string isa();
std::vector<std::string> usable_isas();

// GEMM backend: "own" (milrt's kernels), "onednn" (oneDNN wherever it has a
// primitive; an error at compile() in a build without it) or "auto"
// (per-shape choice by measurement, CompileOptions::tune). Throws
// milrt::Error for another name; "" restores MILRT_GEMM (default auto).
void set_gemm_backend(const std::string& name);
std::string gemm_backend();

}  // namespace milrt
