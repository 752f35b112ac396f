// kernels::gemm's contract served by oneDNN (Debian libdnnl-dev 2.6.3): one
// matmul primitive per shape, created once (a plan creates it at compile
// time), the epilogue as post-ops, a constant B reordered once into oneDNN's
// preferred blocked layout. Plans use it where gemm_backend.h's rule or
// MILRT_GEMM=onednn says so (today only the latter: see the rule); `milrt
// bench kernels` measures it beside the own kernels.
//
//   OnednnGemm g(OnednnGemmDesc{.m = 256, .n = 2048, .k = 768, .a = {nullptr, f32, 768},
//                               .b = {w, f32, 768, /*trans=*/true}, .b_const = true, .has_bias = true});
//   g.run(x, nullptr, OutputRef{y, ElemType::f32, 2048}, bias, nullptr);
//
// Same math as gemm(): C = residual + act(alpha · op(A)·op(B) + bias), fp32
// accumulation; GemmMath::bf16 rounds A and B to bf16 (nearest-even) before
// the products. The order of the fp32 sums is oneDNN's, so results agree with
// gemm() to within the rounding of a K-term fp32 sum, not bit for bit. For a
// given thread count the bits are the same from run to run.
// Threads: the calling thread's OpenMP pool limited to num_threads() (the
// pool milrt's kernels use; oneDNN is built on libgomp too); from inside a
// parallel region it runs serially.
//
// What oneDNN 2.6 accepts differs by CPU: on AVX2 it has an f32 matmul
// ("gemm:jit") but no bf16 one and no f16/bf16 output, and some epilogues
// with a C or residual ld > N only on its reference kernel; the constructor
// throws for all of those (for anything that would run a "ref" kernel), so a
// caller can always fall back to gemm().
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/gemm.h"

namespace milrt::kernels {

// Whether this build has oneDNN (CMake found libdnnl-dev).
bool onednn_available();

struct OnednnGemmDesc {
  int64_t m = 0, n = 0, k = 0;
  MatrixRef a;           // type, ld, trans; data ignored (given to run)
  MatrixRef b;           // type, ld, trans; data used only when b_const
  bool b_const = false;  // B is read (and reordered) once, now; run() ignores its b argument
  ElemType c_type = ElemType::f32;
  int64_t c_ld = 0;      // run()'s C must have this ld; 0: N
  float alpha = 1;
  bool has_bias = false;                 // run() gets a bias [N] fp32
  Activation act = Activation::none;
  bool has_residual = false;             // run() gets a residual [M, N] (residual_type, residual_ld)
  ElemType residual_type = ElemType::f32;
  int64_t residual_ld = 0;
  GemmMath math = GemmMath::fp32;
};

class OnednnGemm {
 public:
  // Creates the primitive (and reorders a constant B). Throws milrt::Error
  // when oneDNN is absent, the description is invalid, or oneDNN has no
  // implementation for it (the caller then uses gemm()).
  explicit OnednnGemm(const OnednnGemmDesc& d);
  OnednnGemm(OnednnGemm&&) noexcept;
  OnednnGemm& operator=(OnednnGemm&&) noexcept;
  ~OnednnGemm();

  const OnednnGemmDesc& desc() const;
  // oneDNN's name of the implementation it chose (e.g. "brg:avx512_core_amx"), for plan dumps and benchmarks.
  const char* impl_name() const;
  // Whether run() adds a residual that is C itself in place (a sum post-op)
  // rather than copying C aside first: f32 C and residual, one ld, no other
  // post-op.
  bool sums_residual_in_place() const;
  // Bytes held: the reordered B, plus the scratchpad each calling thread holds.
  size_t bytes() const;

  // One product. a: op(A)'s storage as described; b: ignored when b_const;
  // c: the output (c.type must be desc().c_type); bias / residual as
  // described (null when not described); the residual may be C itself.
  // Scratch memory (oneDNN's scratchpad, an A or variable B converted to the
  // compute type, a copy of a residual that overlaps C) lives in per-thread
  // buffers that only grow, so run() may be called from several threads at
  // once. Unlike gemm(), a call is not free of heap allocations: oneDNN 2.6.3
  // makes about 16 small ones per execution (memory handles, argument maps;
  // 9 of them inside its execute even with handles kept across calls).
  void run(const void* a, const void* b, const OutputRef& c, const float* bias, const void* residual) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace milrt::kernels
