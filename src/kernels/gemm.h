// Dense matrix multiply with a fused epilogue, for every kernel path.
//
//   C[M,N] = residual + act(alpha · op(A)[M,K] · op(B)[K,N] + bias)
//
// A and B are row-major with leading dimensions (elements between rows) and
// may each be stored transposed; they hold fp32 or bf16 (as uint16_t bits).
// Products are accumulated in fp32. The epilogue runs in fp32 on the
// accumulator before the single rounding to C's storage type (fp32, fp16 or
// bf16): no intermediate is rounded to C's type.
//
// A weight matrix that is reused (a plan's constant B) is packed once into
// the kernel's blocked layout with PackedB and then multiplied many times.
// Large products run on kernels::num_threads() OpenMP threads (threads.h),
// each computing whole blocks of C; the result is bit-identical for any
// thread count. Called from inside a parallel region, gemm runs serially.
//
//   PackedB w(MatrixRef{wdata, ElemType::bf16, /*ld=*/K, /*trans=*/true}, K, N, GemmMath::bf16);
//   gemm(M, MatrixRef{x, ElemType::f32, K}, w, OutputRef{y, ElemType::f32, N},
//        Epilogue{.bias = b, .act = Activation::gelu_tanh});
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/activation.h"
#include "kernels/cpu_features.h"

namespace milrt::kernels {

// Storage type of a matrix. A and B: f32 or bf16. C and the residual: any.
enum class ElemType : uint8_t { f32, f16, bf16 };
// Bytes per element of a storage type.
size_t elem_bytes(ElemType t);

// The epilogue accepts none, relu, sigmoid, silu and gelu_tanh (see
// gemm_supports); the rest of kernels/activation.h is refused in one line.
bool gemm_supports(Activation a);

// How the products are formed.
//  fp32: every stored value is used exactly (bf16 values widen exactly to fp32).
//  bf16: every operand is first rounded to bf16 (nearest-even; bf16 inputs are
//        unchanged), products are exact and accumulated in fp32 — the fast mode
//        (vdpbf16ps where the CPU has avx512_bf16, emulated exactly in fp32
//        elsewhere). On the vdpbf16ps path bf16 subnormals count as zero.
enum class GemmMath : uint8_t { fp32, bf16 };

// A read-only row-major matrix as op(X) sees it. Element (r, c) of op(X) is
// data[r·ld + c], or data[c·ld + r] when `trans` (X is stored transposed).
struct MatrixRef {
  const void* data = nullptr;
  ElemType type = ElemType::f32;
  int64_t ld = 0;       // elements between stored rows; at least the stored row length
  bool trans = false;
};

// The output C[M,N]: element (i, j) at data[i·ld + j].
struct OutputRef {
  void* data = nullptr;
  ElemType type = ElemType::f32;
  int64_t ld = 0;
};

struct Epilogue {
  float alpha = 1;
  const float* bias = nullptr;             // [N], added to every row; null: none
  Activation act = Activation::none;
  const void* residual = nullptr;          // [M,N] row-major, added after the activation; null: none
  ElemType residual_type = ElemType::f32;
  int64_t residual_ld = 0;                 // may be C itself (same data, type and ld): C += ...
};

// B packed once for one kernel path and math mode; immutable and shareable
// across threads once built. Holds about K·N elements (fp32, or bf16 for the
// vdpbf16ps path).
class PackedB {
 public:
  // Throws milrt::Error for a bad shape, type or ld, or a path this CPU cannot run.
  PackedB(const MatrixRef& b, int64_t K, int64_t N, GemmMath math = GemmMath::fp32, Isa isa = current_isa());
  PackedB(PackedB&&) noexcept;
  PackedB& operator=(PackedB&&) noexcept;
  ~PackedB();

  int64_t k() const;
  int64_t n() const;
  GemmMath math() const;
  Isa isa() const;
  size_t bytes() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// C = epilogue(alpha · op(A)·op(B)) with B packed on the fly (per call).
// M, N, K >= 0 (K = 0 gives epilogue(0)). Throws milrt::Error for bad
// arguments or a path this CPU cannot run.
void gemm(int64_t M, int64_t N, int64_t K, const MatrixRef& a, const MatrixRef& b, const OutputRef& c,
          const Epilogue& ep = {}, GemmMath math = GemmMath::fp32, Isa isa = current_isa());

// Same with a pre-packed B (its K, N, math and path); A[M, b.k()] -> C[M, b.n()].
void gemm(int64_t M, const MatrixRef& a, const PackedB& b, const OutputRef& c, const Epilogue& ep = {});

}  // namespace milrt::kernels
