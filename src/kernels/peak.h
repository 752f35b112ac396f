// The machine's measured arithmetic peak: register-only multiply-add loops
// with independent accumulator chains, the ceiling any kernel is judged
// against (efficiency reports, `milrt bench`). Measured, never assumed: the
// machines are shared VMs whose clocks and neighbours vary.
#pragma once

namespace milrt::kernels {

enum class PeakKind { fp32_fma, bf16_dot };

// GFLOP/s of `threads` threads running the loop at once for about `seconds`
// (the best of three windows). bf16_dot uses vdpbf16ps where the CPU has it,
// else reports the fp32 FMA peak (what bf16 math runs at there). Never 0.
double measure_peak_gflops(PeakKind kind, int threads, double seconds = 0.2);

}  // namespace milrt::kernels
