// The machine's measured arithmetic peak: register-only multiply-add loops
// with independent accumulator chains, the ceiling any kernel is judged
// against (efficiency reports, `milrt bench`). Measured, never assumed: the
// machines are shared VMs whose clocks and neighbours vary.
#pragma once
#include <cstddef>

namespace milrt::kernels {

enum class PeakKind { fp32_fma, bf16_dot, amx_bf16 };

// GFLOP/s of `threads` threads running the loop at once for about `seconds`
// (the best of three windows). bf16_dot uses vdpbf16ps where the CPU has it,
// else reports the fp32 FMA peak (what bf16 math runs at there); amx_bf16
// uses tdpbf16ps where Isa::amx is usable, else falls back like bf16_dot. Never 0.
double measure_peak_gflops(PeakKind kind, int threads, double seconds = 0.2);
// The ceiling of bf16 matrix products on the kernel path in use
// (current_isa()): amx_bf16 on the AMX path, else bf16_dot.
PeakKind bf16_peak_kind();
const char* peak_kind_name(PeakKind kind);  // "fp32 FMA", "bf16 dot", "AMX bf16"

// The memory ceilings of bandwidth-bound kernels, GB/s (1e9 bytes) of
// `threads` threads streaming `bytes` in all (each thread its own slice,
// first touched by that thread), the best pass of those run in about
// `seconds` (at least three; the best, as STREAM reports, because a shared
// VM's neighbours only ever slow a pass down). Vectorized like the peak loops.
//
// read: the sum of one float array (4 bytes per element), the ceiling of
// kernels that read far more than they write (decode GEMV's weights).
double measure_read_bandwidth_gbs(int threads, size_t bytes = size_t(256) << 20, double seconds = 0.3);

// update: x[i] = x[i]·a + y[i] over two arrays of bytes/2 each, counted as
// 12 bytes per element (two reads, one write). The written line was just read,
// so there is no write-allocate traffic beyond what is counted: the ceiling of
// kernels that read and write streams (AdamW updates in place; a norm writing
// a separate output also pays a write-allocate read, which it cannot beat).
double measure_update_bandwidth_gbs(int threads, size_t bytes = size_t(256) << 20, double seconds = 0.3);

}  // namespace milrt::kernels
