// The vector loops of kernels/peak.cpp (the machine's measured FMA, bf16
// and AMX peaks and its read and update bandwidth), each compiled for its
// instruction set through the target attribute; peak.cpp calls one only
// where cpu_features() reports it. Register-only compute loops: kChains
// independent accumulators, kRepeats iterations between clock reads; each
// returns the FLOPs it did.
#pragma once
#include <cstddef>

namespace milrt::kernels::x86 {

constexpr int kChains = 16;     // independent accumulators: hides the FMA latency
constexpr int kRepeats = 4096;  // iterations between clock reads

#if defined(__x86_64__)
double loop_avx512_fma(long calls);
double loop_avx512_bf16(long calls);
double loop_amx_bf16(long calls);
double loop_avx2_fma(long calls);
// Sum of n floats (n a multiple of 64), and x = x·0.5 + y over n.
float sum_avx512(const float* x, size_t n);
float sum_avx2(const float* x, size_t n);
void update_avx512(float* x, const float* y, size_t n);
void update_avx2(float* x, const float* y, size_t n);
#endif

}  // namespace milrt::kernels::x86
