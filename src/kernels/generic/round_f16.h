// Rounding fp32 values to fp16 and back (round to nearest even, overflow to
// inf, NaN kept), as an fp16 store rounds: what CompileOptions::numerics fp16
// does after every step that produces an fp16 value.
#pragma once
#include <cstdint>

namespace milrt::kernels {

// d[i] = fp16(s[i]) held in fp32; s == d is allowed. F16C 8 at a time where
// the CPU has it.
void round_to_f16(const float* s, float* d, int64_t n);
inline void round_to_f16(float* x, int64_t n) { round_to_f16(x, x, n); }

}  // namespace milrt::kernels
