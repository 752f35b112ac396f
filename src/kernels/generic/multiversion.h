// Function multiversioning for the generic kernels: a function marked
// MILRT_CLONES is compiled for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA)
// and the baseline, and the loader picks the best the CPU runs (an ifunc
// resolved once), since the build targets no particular x86 generation. The
// one scheme every generic kernel file uses.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MILRT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MILRT_CLONES
#endif
