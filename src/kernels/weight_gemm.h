// Products with a weight matrix kept in its compact storage (fp16, bf16 or
// block-quantized int8), widened only as far as each step needs: token-by-token
// decoding is bound by how many weight bytes are read, so a weight stored in
// 1 or 2 bytes per element must not be converted to 4 first.
//
//   WeightRef w{WeightFormat::q8, q.data(), N, K, K, scales.data(), 32};
//   weight_gemm(1, x, K, w, y, N, Epilogue{.residual = y, .residual_ld = N});   // y += x·Wᵀ
//
// Two paths, chosen by M (the rows of A):
//  - streaming (M <= a few rows, decode): every weight row is read once and
//    dotted with all M rows of A; rows of W are split over num_threads()
//    threads of the persistent pool (thread_pool.h) in blocks of 64, unless
//    one thread would stream them in less time than two pool regions cost
//    (measured once per thread count; about 1 us while the workers spin).
//    Each output is summed in one fixed order, so the bits do not depend on
//    the thread count.
//  - panels (larger M, prefill): a panel of W rows (sized to stay in L2) is
//    widened into a per-thread fp32 buffer that only grows (a bf16 weight
//    under bf16 math is read as stored), and multiplied by kernels::gemm in
//    WeightRef::math; panels are spread over threads (or, when there are fewer
//    panels than threads, gemm spreads each one). gemm's bits do not depend on
//    the thread count or the N split, so neither do these.
// Called inside in_parallel() (an OpenMP region or a pool task), weight_gemm
// runs serially.
//
// Paths (isa): avx512 and amx run the AVX-512 streaming rows and panel
// widening (vcvtph2ps for fp16, a 16-bit shift for bf16, vpmovsxbd +
// vcvtdq2ps for q8 with block % 16 == 0); avx2 runs the same structure in
// 8-lane AVX2+FMA+F16C loops (q8 with block % 8 == 0); generic runs portable
// C++, as does streaming q8 with a block the path's vector width does not
// divide. Paths sum in different orders (and AVX paths fuse multiply-adds),
// so they agree to within the rounding of a K-term fp32 sum, not bit for bit;
// widened panels are exact on every path, so only gemm's own path differs.
// Up to 4 rows stream: measured on Zen 5 (bench_weight_gemm), 2-4 streamed
// rows cost 1-2x one row, while the panel path at 5-8 rows costs 5-8x.
//
// Int8 activations (WeightRef::activations = ActivationQuant::int8, q8 only):
// llama.cpp's Q8_0 x Q8_0 dot products, an approximation chosen by name. The
// streaming path first quantizes each row of A per block of the weight's
// block size, once per call into a per-thread buffer that only grows
// (symmetric: scale s = max|a| / 127 in fp32, q = a / s in fp32 clamped to
// ±127 and rounded to nearest even; a block of zeros, or one whose s
// underflows to 0, has s = 0 and q = 0; a block holding inf or NaN gets
// s = NaN, so its results are NaN as the exact product's would be), then per
// weight row and block sums the int8 products exactly in int32 and adds
// sum · (weight scale · s) into an fp32 accumulator. Paths: avx512 and amx on
// a CPU with avx512_vnni run vpdpbusd on 64-byte chunks (w + 128 as the
// unsigned operand, 128 · Σ q of the block taken off) for blocks of 4, 8, 16,
// 32 or a multiple of 64; avx2, and avx512 for other multiples of 32 or
// without VNNI, run vpmaddubsw + vpmaddwd on 32-byte chunks (|w| as the
// unsigned operand, q negated where w < 0) for blocks of 4, 8, 16 or a
// multiple of 32; other blocks and generic run portable C++. Block sums are
// exact integers on every path (the same quantized A everywhere), so paths
// differ only in the order the fp32 block terms are added. Panels (larger M,
// prefill) ignore the option: their products are exact as with
// ActivationQuant::none.
//
// Scales (WeightRef::scale_type): fp32 or fp16. fp16 scales are widened where
// they are read (vcvtph2ps on the AVX paths, 16 of them a group in the VNNI
// rows, 8 in the AVX2 int8 rows; one at a time where a block takes one); the
// widening is exact, so only the bytes read change, never the results.
//
// q4 (signed 4-bit values, two a byte, one scale per block of a row)
// halves q8's bytes again and runs q8's loops on the same values, so a q4
// weight gives the same bits as the q8 weight holding them, on every path,
// mode and thread count. With int8 activations on avx512_vnni the vpdpbusd
// rows read the nibbles themselves for blocks of 8, 16, 32, 64 or a multiple
// of 128: each 64-byte load holds 128 values, xor 0x88 makes each nibble
// w + 8, a mask and a 16-bit shift split it into the even and the odd
// elements, and each half meets 64 bytes of A, which is stored for this path
// with each 128 values' even elements first (measured 1.06-1.65 times the
// speed of widening each 32 bytes to w + 128 in element order, which took
// about 1.7 times the instructions per value: about 20 GB/s of q4 on one
// Zen 4 thread, as fast per byte as q8). The AVX2 int8 rows do the same with
// 32-byte loads (64 values, w + 8 as vpmaddubsw's unsigned operand) for
// blocks of 8, 16, 32 or a multiple of 64 when a row's blocks come in whole
// groups of 8 (their last, partial group would keep partial sums split
// differently from q8's). Everything else (fp32 activations, the other
// blocks, the portable rows, panels) first unpacks 8 weight rows at a time
// to int8 (16 KiB at K = 2048: they stay in L1; AVX-512, AVX2 or portable
// unpacking, exact on all) and runs the q8 loops on them: unpacking costs
// about what the halved reads save, so there q4 runs at about q8's speed per
// weight.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"

namespace milrt::kernels {

// How a weight matrix W [N, K] (B = Wᵀ: the layout of linear's weight and llama2.c's matrices) is stored.
//  f32: float; f16: IEEE half bits (uint16_t); bf16: bfloat16 bits (uint16_t);
//  q8: int8 with one fp32 scale per block of a row (symmetric, no offset);
//  q4: signed 4-bit values (-8..7), two a byte along a row (element 2i in the low nibble, 2i + 1 in the
//      high one), with one fp32 scale per block of a row as q8; ld counts elements and is even.
enum class WeightFormat : uint8_t { f32, f16, bf16, q8, q4 };
const char* weight_format_name(WeightFormat f);  // "f32", "f16", "bf16", "q8", "q4"

// How the streaming path multiplies A by a q8 or q4 weight.
//  none: fp32 A times the int8 values exactly (the default);
//  int8: A quantized per block to int8 first, integer dot products (see above).
enum class ActivationQuant : uint8_t { none, int8 };

struct WeightRef {
  WeightFormat format = WeightFormat::f32;
  const void* data = nullptr;     // row-major [n, ld] (q4: ld / 2 bytes a row)
  int64_t n = 0, k = 0, ld = 0;   // ld >= k: elements between rows
  const void* scales = nullptr;   // q8, q4 only: [n, k / block] of scale_type, row-major
  int64_t block = 0;              // q8, q4 only: elements of a row sharing one scale; divides k (q4: even)
  // q8, q4 only: f32, or f16 (IEEE half bits, as llama.cpp's Q8_0/Q4_0 and Core ML's fp16 scales): 2 bytes a
  // block instead of 4, which decode reads with every weight. Widened exactly to fp32 where read, so a weight
  // with f16 scales gives the same bits as one with the same scales held in fp32, on every path.
  ElemType scale_type = ElemType::f32;
  ActivationQuant activations = ActivationQuant::none;  // q8, q4 only; the other formats ignore it
  // The panels' product (M > 4, prefill); the streaming rows ignore it. bf16: A and the widened weight
  // values rounded to bf16 (a bf16 weight as stored; q8/q4's scale·q and f16 rounded once more), sums in
  // fp32, on gemm's bf16 kernels (AMX or vdpbf16ps where the CPU has them): the matrix units, not fp32 FMAs.
  GemmMath math = GemmMath::fp32;
};

// The scales of row j of a q8/q4 weight: k / block of w.scale_type.
inline const void* weight_scale_row(const WeightRef& w, int64_t j) {
  const size_t bytes = w.scale_type == ElemType::f16 ? 2 : 4;
  return static_cast<const std::byte*>(w.scales) + size_t(j * (w.k / w.block)) * bytes;
}

// Up to this many rows of A, weight_gemm streams W's rows as stored (each read once for all rows: decode is
// bound by weight bytes) and ignores WeightRef::math; above it, panels of W go through gemm. The crossing point
// was measured with bench/bench_weight_gemm.cpp (rerun `build/bench_weight_gemm` to check it on a new CPU).
// Lowering uses it to decide when a compact weight is worth packing for the GEMM instead.
inline constexpr int64_t kWeightStreamMaxRows = 4;
inline constexpr bool weight_gemm_streams(int64_t M) { return M <= kWeightStreamMaxRows; }

// C[M,N] = epilogue(alpha · A[M,K] · Wᵀ) with W's values as stored (f16/bf16 widened exactly; q8 element
// (j, i) = scales[j·(k/block) + i/block] · q[j·ld + i], an f16 scale widened exactly); fp32 math: products of
// fp32 A and the widened weights, accumulated in fp32; for q8 each block's dot product Σ a·q is scaled once
// (mathematically the same value).
// q4 is q8 with q = the signed nibble of element i (byte i / 2 of the row; low nibble for even i).
// With w.activations int8 and M <= 4, q8 and q4 rows instead give Σ_blocks (Σ qa·q) · (scale · activation scale),
// where qa is A quantized as described above (not the exact product: A is rounded to 8 bits per block).
// The result does not depend on the thread count. Never converts the whole W: small M streams W's rows once
// (decode: memory bound), larger M widens panels of rows into a thread-local fp32 buffer and runs gemm on them
// in w.math (fp32: the exact products above; bf16: see WeightRef::math).
//
// A is fp32 row-major [M, lda >= k]; C is fp32 row-major [M, ldc >= n]. The
// epilogue is gemm.h's: C = residual + act(alpha·A·Wᵀ + bias); the residual
// may be C itself (C += ...). M = 0 or n = 0 does nothing; k = 0 gives
// epilogue(0). Throws milrt::Error for negative sizes, ld < k, ldc < n, null
// pointers where elements exist, a q8/q4 block that is not positive or does not
// divide k, q8/q4 without scales or with scales neither f32 nor f16, a q4 block
// or ld that is odd, or a path this CPU cannot run.
void weight_gemm(int64_t M, const float* a, int64_t lda, const WeightRef& w, float* c, int64_t ldc,
                 const Epilogue& ep = {}, Isa isa = current_isa());

}  // namespace milrt::kernels
