// Function multiversioning for the generic kernels. A function defined as
//
//   MILRT_CLONES(float, dot, (const float* a, const float* b, int64_t n), (a, b, n)) {
//     ... plain C++ the compiler vectorizes ...
//   }
//
// is compiled three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA)
// and the baseline, since the build targets no particular x86 generation;
// each call runs the clone of clone_level(): the kernel path of
// current_isa() (MILRT_ISA, set_isa), never above what the CPU supports.
// (GCC's target_clones chose by the CPU alone, once per process, so
// MILRT_ISA=avx2 still ran the AVX-512 clones on an AVX-512 machine.) The
// clones may differ in their last bits (FMA contraction), as the ISA paths
// of every other kernel family may.
//
// The body is an always_inline function that each clone inlines, so it is
// compiled with that clone's target. Non-x86 builds (and clang) define the
// function once.
#pragma once

namespace milrt::kernels::detail {

// 4 (x86-64-v4), 3 (x86-64-v3) or 1 (the baseline): the clone that
// MILRT_CLONES functions run now. Cheap enough to ask per call.
int clone_level();

}  // namespace milrt::kernels::detail

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MILRT_CLONES(ret, name, params, args)                                                            \
  [[gnu::always_inline]] static inline ret name##_body params;                                          \
  [[gnu::target("arch=x86-64-v4")]] static ret name##_v4 params { return name##_body args; }            \
  [[gnu::target("arch=x86-64-v3")]] static ret name##_v3 params { return name##_body args; }            \
  static ret name##_v1 params { return name##_body args; }                                              \
  ret name params {                                                                                     \
    switch (::milrt::kernels::detail::clone_level()) {                                                  \
      case 4: return name##_v4 args;                                                                    \
      case 3: return name##_v3 args;                                                                    \
      default: return name##_v1 args;                                                                   \
    }                                                                                                   \
  }                                                                                                     \
  [[gnu::always_inline]] static inline ret name##_body params
#else
#define MILRT_CLONES(ret, name, params, args) ret name params
#endif
