// The GEMM driver shared by every kernel path (argument checks, packing,
// cache blocking, edge tiles) and the portable C++ micro-kernel.
//
// Loop nest (BLIS-like; the (jc, ic) blocks are the tasks threads share):
//   pack A once (only when it is not already rows of fp32/bf16 along k; a
//     transposed A goes into MR-row panels where the kernel reads those)
//   pack B once unless pre-packed
//   for jc in N by NC:            (threads: NC shrinks so every thread gets blocks)
//     for ic in M by MC:
//       for pc in K by KC:        partial sums of the MC×NC block in fp32 scratch
//         for jr in NC by NR:     a KC×NR B panel stays in L1 ...
//           for ir in MC by MR:   ... while the MR-row A tiles stream from L2
//             micro-kernel; on the last pc it applies the epilogue and stores C
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>


#include "kernels/bf16_bits.h"
#include "kernels/convert_rows.h"
#include "kernels/gemm.h"
#include "kernels/gemm_micro.h"
#include "kernels/gemv.h"
#include "kernels/grow_buffer.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"
#include "milrt/error.h"

namespace milrt::kernels {

size_t elem_bytes(ElemType t) { return t == ElemType::f32 ? 4 : 2; }

namespace detail {


float load_elem(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::f32: return static_cast<const float*>(p)[i];
    case ElemType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case ElemType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

namespace {

// ---- the portable micro-kernel -------------------------------------------

constexpr int kGenericMr = 6, kGenericNr = 8;

void store_elem(void* p, ElemType t, int64_t i, float v) {
  switch (t) {
    case ElemType::f32: static_cast<float*>(p)[i] = v; return;
    case ElemType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); return;
    case ElemType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); return;
  }
}

// A tile of M rows (a compile-time count, so the accumulators stay in
// registers). 6×8 fp32 accumulators fit the 16 registers of baseline SSE2.
// `unroll 1` keeps the j loop innermost until it is vectorized: unrolled
// first, g++ -O3 vectorizes the k loop instead, with shuffles, at 1/4 speed.
template <int M>
void generic_tile(const MicroArgs& p) {
  constexpr int NR = kGenericNr;
  float acc[M][NR] = {};
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  for (int64_t k = 0; k < p.ksteps; ++k) {
    const float* bk = b + k * NR;
    for (int i = 0; i < M; ++i) {
      const float ai = a[i * p.lda + k];
#pragma GCC unroll 1
      for (int j = 0; j < NR; ++j) acc[i][j] += ai * bk[j];
    }
  }
  if (p.load_acc)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += p.acc[i * p.ld_acc + j];
  if (!p.out) {
    for (int i = 0; i < M; ++i) std::memcpy(p.acc + i * p.ld_acc, acc[i], sizeof(acc[i]));
    return;
  }
  const TileStore& o = *p.out;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < NR; ++j) {
      float v = o.alpha * acc[i][j];
      if (o.bias) v += o.bias[j];
      v = activate(o.act, v);
      if (o.res) v += load_elem(o.res, o.res_type, i * o.ldr + j);
      store_elem(o.c, o.c_type, i * o.ldc + j, v);
    }
}

void generic_micro(const MicroArgs& p) {
  static constexpr MicroKernel kTiles[kGenericMr] = {generic_tile<1>, generic_tile<2>, generic_tile<3>,
                                                     generic_tile<4>, generic_tile<5>, generic_tile<6>};
  kTiles[p.m - 1](p);
}

}  // namespace

constinit const KernelSet kGenericF32 = {"generic-f32", PackFormat::f32, kGenericMr, kGenericNr, 256, 96, 256,
                                         generic_micro};

}  // namespace detail

namespace {

using detail::KernelSet;
using detail::PackFormat;

// ---- small helpers --------------------------------------------------------

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

size_t format_bytes(PackFormat f) { return f == PackFormat::f32 ? 4 : 2; }

// K as stored in packed operands: pairs need an even count.
int64_t packed_k(PackFormat f, int64_t K) { return f == PackFormat::f32 ? K : round_up(K, 2); }

float round_to_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

struct AlignedFree {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using AlignedBytes = std::unique_ptr<std::byte[], AlignedFree>;

AlignedBytes aligned_alloc_bytes(size_t n) {
  return AlignedBytes(static_cast<std::byte*>(::operator new[](std::max<size_t>(n, 64), std::align_val_t(64))));
}

struct ThreadScratch {
  GrowBuffer a, b, acc;
};
thread_local ThreadScratch t_scratch;

constexpr int kMaxMr = 32, kMaxNr = 64;  // bounds on every KernelSet's mr and nr (staging buffers)

// ---- packing ----------------------------------------------------------------

// Element (r, c) of op(X) as stored.
template <class T>
const T& at(const MatrixRef& x, int64_t r, int64_t c) {
  const T* p = static_cast<const T*>(x.data);
  return x.trans ? p[c * x.ld + r] : p[r * x.ld + c];
}

template <class Src>
float widen(Src v) {
  if constexpr (sizeof(Src) == 4) return v;
  else return bf16_bits_to_f32(v);
}

// Destination element from a source element: fp32 (optionally rounded to a
// bf16 value) or bf16 bits.
template <class Dst, class Src>
Dst convert(Src v, bool round) {
  if constexpr (sizeof(Dst) == 4) {
    const float f = widen(v);
    return round ? round_to_bf16(f) : f;
  } else if constexpr (sizeof(Src) == 2) {
    return v;
  } else {
    return f32_to_bf16_bits(v);
  }
}

// Two stored rows of bf16 bits to the words of their pairs: dst[j] = r0[j] |
// r1[j] << 16 (r1 null: zeros). The interleave the compiler vectorizes.
void bf16_row_pair_to_words(const uint16_t* r0, const uint16_t* r1, uint32_t* dst, int64_t n) {
  if (!r1) {
    for (int64_t j = 0; j < n; ++j) dst[j] = r0[j];
    return;
  }
  for (int64_t j = 0; j < n; ++j) dst[j] = uint32_t(r0[j]) | uint32_t(r1[j]) << 16;
}

// A stored [K, M] (a weight gradient's dYᵀ), fp32 or bf16 -> bf16 rows along
// k. A row's k pair (2p, 2p+1) is one 32-bit word, and a stored row pair
// gives the words of all M rows at once (converted, or interleaved from
// bf16), so the transpose moves words, not halves: per block, kPairs stored
// row pairs × kCols columns, then each column's words are copied out
// contiguously. (The 16-bit tile transpose it replaces cost a quarter of the
// AMX weight-gradient product's time on the seed layer.)
template <class Src>
void pack_a_rows_from_pair_words(const MatrixRef& a, int64_t M, int64_t K, int64_t Kp, uint16_t* dst,
                                 int64_t lda_p, int threads) {
  constexpr int64_t kPairs = 16, kCols = 64;
  const int64_t pairs = Kp / 2;
  const Src* src = static_cast<const Src*>(a.data);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t i0 = 0; i0 < M; i0 += kCols) {
    const int64_t ib = std::min(kCols, M - i0);
    alignas(64) uint32_t words[kPairs][kCols];
    for (int64_t p0 = 0; p0 < pairs; p0 += kPairs) {
      const int64_t pb = std::min(kPairs, pairs - p0);
      for (int64_t p = 0; p < pb; ++p) {
        const int64_t k = 2 * (p0 + p);
        const Src* r0 = src + k * a.ld + i0;
        const Src* r1 = k + 1 < K ? r0 + a.ld : nullptr;
        if constexpr (std::is_same_v<Src, float>) f32_row_pair_to_bf16_words(r0, r1, words[p], ib);
        else bf16_row_pair_to_words(r0, r1, words[p], ib);
      }
      for (int64_t ii = 0; ii < ib; ++ii) {
        uint16_t* d = dst + (i0 + ii) * lda_p + 2 * p0;
        for (int64_t p = 0; p < pb; ++p) std::memcpy(d + 2 * p, &words[p][ii], sizeof(uint32_t));
      }
    }
  }
}

// A[M,K] -> rows along k (ld = lda_p), zero-padded to packed_k.
template <class Dst, class Src>
void pack_a_rows(const MatrixRef& a, int64_t M, int64_t K, int64_t Kp, bool round, Dst* dst, int64_t lda_p) {
  // On the GEMM's threads once large: with the AMX kernel a training step's
  // per-call A conversion (e.g. dYᵀ [2048, 512] for a weight gradient) took
  // as long as the product when done on one thread. A copy: no effect on the bits.
  const int threads = pass_threads(M * K);
  if (!a.trans) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t i = 0; i < M; ++i) {
      const Src* src = static_cast<const Src*>(a.data) + i * a.ld;
      Dst* d = dst + i * lda_p;
      if constexpr (std::is_same_v<Dst, uint16_t> && std::is_same_v<Src, float>) f32_to_bf16_row(src, d, K);
      else
        for (int64_t k = 0; k < K; ++k) d[k] = convert<Dst>(src[k], round);
      for (int64_t k = K; k < Kp; ++k) d[k] = 0;
    }
    return;
  }
  if constexpr (std::is_same_v<Dst, uint16_t>) {
    pack_a_rows_from_pair_words<Src>(a, M, K, Kp, dst, lda_p, threads);
    return;
  }
  // Stored as [K, M]: transpose in tiles so reads and writes both stay in cache.
  // Element (i, k) is data[k·ld + i]. Per 32×32 tile: convert 32 stored
  // rows (contiguous, so it vectorizes) into a local tile, then write it out
  // transposed from L1.
  constexpr int64_t T = 32;
  const Src* src = static_cast<const Src*>(a.data);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t i0 = 0; i0 < M; i0 += T) {
    const int64_t ib = std::min(T, M - i0);
    Dst tile[T][T];  // [k - k0][i - i0]
    for (int64_t k0 = 0; k0 < K; k0 += T) {
      const int64_t kb = std::min(T, K - k0);
      for (int64_t kk = 0; kk < kb; ++kk) {
        const Src* row = src + (k0 + kk) * a.ld + i0;
        if constexpr (std::is_same_v<Dst, uint16_t> && std::is_same_v<Src, float>) f32_to_bf16_row(row, tile[kk], ib);
        else
          for (int64_t ii = 0; ii < ib; ++ii) tile[kk][ii] = convert<Dst>(row[ii], round);
      }
      for (int64_t ii = 0; ii < ib; ++ii) {
        Dst* d = dst + (i0 + ii) * lda_p + k0;
        for (int64_t kk = 0; kk < kb; ++kk) d[kk] = tile[kk][ii];
      }
    }
    for (int64_t i = i0; i < i0 + ib; ++i)
      for (int64_t k = K; k < Kp; ++k) dst[i * lda_p + k] = 0;
  }
}

// A matrix stored [K, cols] (rows along its columns: a weight gradient's dY
// read transposed as A, or X as B) -> panels of bf16 pairs `width` columns
// wide: panel r holds, for each pair p, width 32-bit words, word j =
// (stored[2p][r·width + j], stored[2p+1][r·width + j]), zero past cols and K.
// That is the B panel layout (gemm_micro.h) and, with width = mr, the A
// panels of KernelSet::micro_panel_a. A panel's pair row is a contiguous
// slice of two stored rows, so a stretch of panels is converted at once: no
// transpose. (dYᵀ transposed into rows along k cost a tenth of a weight
// gradient's time; B converted 32 words per call, a few percent.)
template <class Src>
void pack_pair_panels(const MatrixRef& x, int64_t cols, int64_t K, int64_t Kp, int width, uint32_t* dst) {
  const int64_t pairs = Kp / 2, panels = (cols + width - 1) / width, panel_words = pairs * width;
  constexpr int64_t kStretch = 16;  // panels converted per call
  const Src* src = static_cast<const Src*>(x.data);
  const int threads = pass_threads(cols * K, pairs);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t p = 0; p < pairs; ++p) {
    alignas(64) uint32_t words[kStretch * std::max(kMaxMr, kMaxNr)];
    const Src* r0 = src + 2 * p * x.ld;
    const Src* r1 = 2 * p + 1 < K ? r0 + x.ld : nullptr;
    for (int64_t q0 = 0; q0 < panels; q0 += kStretch) {
      const int64_t nq = std::min(kStretch, panels - q0), j0 = q0 * width;
      const int64_t n = std::min(nq * width, cols - j0);
      if constexpr (std::is_same_v<Src, float>) {
        f32_row_pair_to_bf16_words(r0 + j0, r1 ? r1 + j0 : nullptr, words, n);
      } else {
        for (int64_t j = 0; j < n; ++j) words[j] = uint32_t(r0[j0 + j]) | (r1 ? uint32_t(r1[j0 + j]) << 16 : 0u);
      }
      std::fill(words + n, words + nq * width, 0u);
      for (int64_t q = 0; q < nq; ++q)
        std::memcpy(dst + (q0 + q) * panel_words + p * width, words + q * width, size_t(width) * sizeof(uint32_t));
    }
  }
}

// One bf16 pair panel from fp32 B stored transposed ([N, K]) on the vector
// path (convert_rows.h): the columns [jbase, jbase + width) of op(B)[K, N],
// zero past width and K. (B stored [K, N] goes through pack_pair_panels.)
void pack_bf16_pair_panel(const MatrixRef& b, int64_t K, int64_t Kp, int64_t jbase, int64_t width, int nr,
                          uint32_t* words) {
  const auto* src = static_cast<const float*>(b.data);
  const int64_t pairs = Kp / 2;
  // Stored [N, K]: column j's pairs are adjacent in its stored row, so the
  // row converted to bf16 is already its words; they go to every nr-th word.
  constexpr int64_t kChunk = 256;  // k values per conversion, even
  alignas(64) uint16_t row[kChunk];
  for (int64_t j = 0; j < width; ++j) {
    const float* r = src + (jbase + j) * b.ld;
    for (int64_t k0 = 0; k0 < Kp; k0 += kChunk) {
      const int64_t kb = std::min(kChunk, Kp - k0), real = std::max<int64_t>(0, std::min(kb, K - k0));
      f32_to_bf16_row(r + k0, row, real);
      std::fill(row + real, row + kb, uint16_t(0));
      for (int64_t q = 0; q < kb / 2; ++q) {
        uint32_t w;
        std::memcpy(&w, row + 2 * q, 4);
        words[(k0 / 2 + q) * nr + j] = w;
      }
    }
  }
  for (int64_t q = 0; q < pairs && width < nr; ++q) std::fill(words + q * nr + width, words + (q + 1) * nr, 0u);
}

// Columns [j0, j0 + ncols) of op(B)[K, N] -> NR-wide panels (layout in gemm_micro.h).
template <class Dst, class Src>
void pack_b_panels(const MatrixRef& b, int64_t K, int64_t Kp, int64_t j0, int64_t ncols, int nr, PackFormat fmt,
                   bool round, Dst* dst) {
  const int64_t panels = (ncols + nr - 1) / nr;
  // Panels are independent: on the GEMM's threads once large (the driver
  // packs per-call B before its parallel region).
  const int threads = pass_threads(K * ncols, panels);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t p = 0; p < panels; ++p) {
    Dst* panel = dst + p * Kp * nr;
    const int64_t jbase = j0 + p * nr;
    const int64_t width = std::min<int64_t>(nr, j0 + ncols - jbase);
    if constexpr (std::is_same_v<Dst, uint16_t>) {
      if (fmt == PackFormat::bf16_pairs && b.trans) {
        auto* words = reinterpret_cast<uint32_t*>(panel);
        if constexpr (std::is_same_v<Src, float>) pack_bf16_pair_panel(b, K, Kp, jbase, width, nr, words);
        else  // stored [N, K]: each column's pairs are its stored row's words (convert_rows.h)
          bf16_rows_to_pair_panel(static_cast<const uint16_t*>(b.data) + jbase * b.ld, b.ld, width, K, nr, words);
        continue;
      }
    }
    // Index of element (k, j) inside the panel.
    auto idx = [&](int64_t k, int64_t j) {
      return fmt == PackFormat::f32 ? k * nr + j : (k / 2) * 2 * nr + 2 * j + (k & 1);
    };
    if (Kp > 0) std::memset(static_cast<void*>(panel), 0, size_t(Kp) * nr * sizeof(Dst));
    if (!b.trans) {
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < width; ++j) panel[idx(k, j)] = convert<Dst>(at<Src>(b, k, jbase + j), round);
    } else {
      for (int64_t j = 0; j < width; ++j)
        for (int64_t k = 0; k < K; ++k) panel[idx(k, j)] = convert<Dst>(at<Src>(b, k, jbase + j), round);
    }
  }
}

template <class Dst>
void pack_b_dispatch(const MatrixRef& b, int64_t K, int64_t Kp, int64_t j0, int64_t ncols, const KernelSet& ks,
                     bool round, void* dst) {
  if (b.type == ElemType::f32)
    pack_b_panels<Dst, float>(b, K, Kp, j0, ncols, ks.nr, ks.format, round, static_cast<Dst*>(dst));
  else
    pack_b_panels<Dst, uint16_t>(b, K, Kp, j0, ncols, ks.nr, ks.format, round, static_cast<Dst*>(dst));
}

void pack_b(const MatrixRef& b, int64_t K, int64_t j0, int64_t ncols, const KernelSet& ks, bool round, void* dst) {
  const int64_t Kp = packed_k(ks.format, K);
  if (ks.format == PackFormat::bf16_pairs && !b.trans && K > 0) {
    // Stored [K, N]: pair rows are slices of stored row pairs (a weight gradient's X, packed per call).
    MatrixRef cols = b;
    cols.data = static_cast<const std::byte*>(b.data) + size_t(j0) * elem_bytes(b.type);
    if (b.type == ElemType::f32) pack_pair_panels<float>(cols, ncols, K, Kp, ks.nr, static_cast<uint32_t*>(dst));
    else pack_pair_panels<uint16_t>(cols, ncols, K, Kp, ks.nr, static_cast<uint32_t*>(dst));
    return;
  }
  if (ks.format == PackFormat::f32) pack_b_dispatch<float>(b, K, Kp, j0, ncols, ks, round, dst);
  else pack_b_dispatch<uint16_t>(b, K, Kp, j0, ncols, ks, round, dst);
}

size_t packed_b_bytes(const KernelSet& ks, int64_t K, int64_t ncols) {
  return size_t(packed_k(ks.format, K)) * size_t(round_up(ncols, ks.nr)) * format_bytes(ks.format);
}

// A in the micro-kernel's form: used in place when it already is (fp32 or
// bf16 rows along k that need no rounding or padding), else packed: into
// rows along k (ld elements apart), or into MR-row panels (`panels`; ld
// unused) where the kernel has a panel variant and A is stored transposed.
struct PreparedA {
  const void* data;
  int64_t ld;
  bool panels = false;
};

PreparedA prepare_a(const MatrixRef& a, int64_t M, int64_t K, const KernelSet& ks, bool round) {
  const bool f32 = ks.format == PackFormat::f32;
  const ElemType want = f32 ? ElemType::f32 : ElemType::bf16;
  const int64_t row_bytes = a.ld * int64_t(elem_bytes(a.type));
  // Rows 4 KiB apart share L1 sets: an MR-row tile would evict itself.
  const bool aliasing = M > 1 && row_bytes % 4096 == 0;
  const bool aligned = ks.a_align == 0 || (reinterpret_cast<uintptr_t>(a.data) % ks.a_align == 0 &&
                                           (M == 1 || row_bytes % ks.a_align == 0));
  const bool usable = a.type == want && !a.trans && !(f32 && round) && (f32 || K % 2 == 0) && !aliasing && aligned;
  if (usable || M == 0) return {a.data, a.ld};
  const int64_t Kp = packed_k(ks.format, K);
  if (a.trans && ks.micro_panel_a && ks.format == PackFormat::bf16_pairs) {
    const size_t words = size_t(round_up(M, ks.mr)) * size_t(Kp / 2);
    auto* dst = static_cast<uint32_t*>(t_scratch.a.get(std::max<size_t>(words, 1) * sizeof(uint32_t)));
    if (a.type == ElemType::f32) pack_pair_panels<float>(a, M, K, Kp, ks.mr, dst);
    else pack_pair_panels<uint16_t>(a, M, K, Kp, ks.mr, dst);
    return {dst, 0, true};
  }
  const int64_t ld = round_up(std::max<int64_t>(Kp, 1), 32) + 64 / int64_t(format_bytes(ks.format));
  void* dst = t_scratch.a.get(size_t(M) * ld * format_bytes(ks.format));
  if (f32) {
    if (a.type == ElemType::f32) pack_a_rows<float, float>(a, M, K, Kp, round, static_cast<float*>(dst), ld);
    else pack_a_rows<float, uint16_t>(a, M, K, Kp, round, static_cast<float*>(dst), ld);
  } else {
    if (a.type == ElemType::f32) pack_a_rows<uint16_t, float>(a, M, K, Kp, round, static_cast<uint16_t*>(dst), ld);
    else pack_a_rows<uint16_t, uint16_t>(a, M, K, Kp, round, static_cast<uint16_t*>(dst), ld);
  }
  return {dst, ld};
}

// ---- the blocked loop -----------------------------------------------------

struct Operands {
  int64_t M, N, K;
  PreparedA a;
  const std::byte* packed_b;  // whole B in panels, or null: pack each N block from b
  MatrixRef b;
  bool round;                 // bf16 math emulated in fp32: round B while packing
  OutputRef c;
  Epilogue ep;
};

// Stores one finished tile; edge tiles narrower than NR go through a
// full-width staging buffer so micro-kernels only ever store whole vectors.
void finish_tile(const KernelSet& ks, detail::MicroKernel micro, detail::MicroArgs& args, const Operands& op,
                 int64_t row, int64_t col, int n) {
  const Epilogue& ep = op.ep;
  const size_t cb = elem_bytes(op.c.type), rb = elem_bytes(ep.residual_type);
  detail::TileStore ts{static_cast<std::byte*>(op.c.data) + (row * op.c.ld + col) * cb,
                       op.c.ld,
                       op.c.type,
                       ep.alpha,
                       ep.bias ? ep.bias + col : nullptr,
                       ep.act,
                       ep.residual ? static_cast<const std::byte*>(ep.residual) + (row * ep.residual_ld + col) * rb
                                   : nullptr,
                       ep.residual_ld,
                       ep.residual_type};
  args.out = &ts;
  if (n == ks.nr) {
    micro(args);
    return;
  }
  alignas(64) float c_stage[kMaxMr * kMaxNr];
  alignas(64) float r_stage[kMaxMr * kMaxNr] = {};
  alignas(64) float bias_stage[kMaxNr] = {};
  std::byte* c_dst = static_cast<std::byte*>(ts.c);
  if (ts.bias) {
    std::memcpy(bias_stage, ts.bias, n * sizeof(float));
    ts.bias = bias_stage;
  }
  if (ts.res) {
    for (int i = 0; i < args.m; ++i)
      std::memcpy(reinterpret_cast<std::byte*>(r_stage) + i * ks.nr * rb,
                  static_cast<const std::byte*>(ts.res) + i * ts.ldr * rb, n * rb);
    ts.res = r_stage;
    ts.ldr = ks.nr;
  }
  ts.c = c_stage;
  ts.ldc = ks.nr;
  micro(args);
  for (int i = 0; i < args.m; ++i)
    std::memcpy(c_dst + i * op.c.ld * cb, reinterpret_cast<const std::byte*>(c_stage) + i * ks.nr * cb, n * cb);
}

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kMinParallelMacs = 1 << 20;

// Tasks are (N chunk, M block) pairs of C, each computed by one thread from
// start to end. Bit-identical results for any thread count: the sum of an
// element depends on the K blocking and on its tile's row count (tiles of 1-3
// rows split k over extra accumulators), so the M blocking below depends on M
// and the kernel only; the N chunk width, which does not enter the sums (edge
// tiles are staged at full width), is what adapts to the threads.
void run_blocked(const KernelSet& ks, const Operands& op) {
  const int64_t M = op.M, N = op.N, K = op.K;
  if (M == 0 || N == 0) return;
  const size_t fb = format_bytes(ks.format);
  const int64_t Kp = packed_k(ks.format, K);
  const int64_t k_blocks = K == 0 ? 1 : (K + ks.kc - 1) / ks.kc;
  // M blocks of whole register tiles, as even as tiles allow (block b holds
  // tiles [b·tiles_m/tasks_m, (b+1)·tiles_m/tasks_m)): every tile starts at a
  // multiple of mr whatever the blocks, and M = 2048 gives 13 blocks of 11-12
  // tiles rather than 12 of 12 and one of 3.
  const int64_t tiles_m = (M + ks.mr - 1) / ks.mr, block_tiles = std::max(1, ks.mc / ks.mr);
  const int64_t tasks_m = (tiles_m + block_tiles - 1) / block_tiles;
  const int64_t mc = (tiles_m + tasks_m - 1) / tasks_m * ks.mr;  // the largest block, <= ks.mc
  auto block_row = [&](int64_t b) { return std::min(M, b * tiles_m / tasks_m * ks.mr); };

  int threads = 1;
  if (double(M) * double(N) * double(K) >= kMinParallelMacs && !in_parallel()) threads = num_threads();
  // N chunks of whole panels, as even as panels allow; with threads, at least
  // two tasks per thread so that uneven ones even out.
  int64_t tasks_n = (N + ks.nc - 1) / ks.nc;
  if (threads > 1) tasks_n = std::max(tasks_n, (2 * threads + tasks_m - 1) / tasks_m);
  int64_t nc = round_up((N + tasks_n - 1) / tasks_n, ks.nr);
  if (threads > 1) nc = std::min<int64_t>(ks.nc, std::max<int64_t>(nc, 2 * ks.nr));
  tasks_n = (N + nc - 1) / nc;
  const int64_t tasks = tasks_m * tasks_n;
  threads = int(std::min<int64_t>(threads, tasks));

  // B in panels, whole: pre-packed, or packed here once for every task.
  const std::byte* bdata = op.packed_b;
  if (!bdata) {
    void* dst = t_scratch.b.get(packed_b_bytes(ks, K, N));
    pack_b(op.b, K, 0, N, ks, op.round, dst);
    bdata = static_cast<const std::byte*>(dst);
  }
  const int64_t ld_acc = round_up(std::min<int64_t>(nc, N), ks.nr);
  const auto* a = static_cast<const std::byte*>(op.a.data);
  const detail::MicroKernel micro = op.a.panels ? ks.micro_panel_a : ks.micro;
  // Where the A tile of rows [row, row + mr) starts at k = pc.
  auto a_tile = [&](int64_t row, int64_t pc) {
    if (op.a.panels) return a + (size_t(row / ks.mr) * size_t(Kp / 2) + size_t(pc / 2)) * size_t(ks.mr) * 4;
    return a + size_t(row * op.a.ld + pc) * fb;
  };

  auto task = [&](int64_t t) {
    const int64_t jc = (t / tasks_m) * nc, ic = block_row(t % tasks_m);
    const int64_t ncb = std::min<int64_t>(nc, N - jc), mcb = block_row(t % tasks_m + 1) - ic;
    float* acc = k_blocks > 1 ? static_cast<float*>(t_scratch.acc.get(size_t(mc) * ld_acc * sizeof(float)))
                              : nullptr;
    const std::byte* bblk = bdata + size_t(jc) * Kp * fb;  // jc is a multiple of nr: whole panels
    if (ks.task_begin) ks.task_begin();
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const int64_t pc = kb * ks.kc;
      const int64_t kcb = std::min<int64_t>(ks.kc, K - pc);
      const bool last = kb == k_blocks - 1;
      for (int64_t jr = 0; jr < ncb; jr += ks.nr) {
        const int n = int(std::min<int64_t>(ks.nr, ncb - jr));
        const std::byte* bpanel = bblk + size_t(jr * Kp + pc * ks.nr) * fb;
        for (int64_t ir = 0; ir < mcb; ir += ks.mr) {
          detail::MicroArgs args{ks.format == PackFormat::f32 ? kcb : (kcb + 1) / 2,
                                 a_tile(ic + ir, pc),
                                 op.a.ld,
                                 bpanel,
                                 int(std::min<int64_t>(ks.mr, mcb - ir)),
                                 acc ? acc + ir * ld_acc + jr : nullptr,
                                 ld_acc,
                                 kb > 0,
                                 nullptr};
          if (last) finish_tile(ks, micro, args, op, ic + ir, jc + jr, n);
          else micro(args);
        }
      }
    }
    if (ks.task_end) ks.task_end();
  };
  if (threads <= 1) {
    for (int64_t t = 0; t < tasks; ++t) task(t);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < tasks; ++t) task(t);
}

// ---- argument checks and path selection --------------------------------------

[[noreturn]] void fail(const std::string& msg) { throw Error("gemm: " + msg); }

void check_matrix(const char* name, const MatrixRef& x, int64_t rows, int64_t cols) {
  if (x.type == ElemType::f16) fail(std::string(name) + " is fp16; inputs must be fp32 or bf16");
  const int64_t row_len = x.trans ? rows : cols;
  if (x.ld < row_len)
    fail(std::string(name) + " has ld " + std::to_string(x.ld) + " < its stored row length " +
         std::to_string(row_len));
  if (!x.data && rows > 0 && cols > 0) fail(std::string(name) + " is null");
}

void check_output(const OutputRef& c, const Epilogue& ep, int64_t M, int64_t N) {
  if (c.ld < N) fail("C has ld " + std::to_string(c.ld) + " < N = " + std::to_string(N));
  if (M > 0 && N > 0 && !c.data) fail("C is null");
  if (!gemm_supports(ep.act)) fail(std::string("the epilogue cannot apply ") + activation_name(ep.act));
  if (ep.residual && ep.residual_ld < N)
    fail("the residual has ld " + std::to_string(ep.residual_ld) + " < N = " + std::to_string(N));
}

void check_dims(int64_t M, int64_t N, int64_t K) {
  if (M < 0 || N < 0 || K < 0)
    fail("negative size M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
}

const KernelSet& kernel_set(Isa isa, GemmMath math) {
  if (!isa_usable(isa)) fail("the " + std::string(isa_name(isa)) + " kernels cannot run on this CPU");
#if defined(__x86_64__)
  switch (isa) {
    case Isa::amx:
      // AMX multiplies bf16 only: fp32 math stays on the AVX-512 kernels.
      if (math == GemmMath::bf16 && cpu_features().amx_bf16) return detail::kAmxBf16;
      [[fallthrough]];
    case Isa::avx512:
      return math == GemmMath::bf16 && cpu_features().avx512_bf16 ? detail::kAvx512Bf16 : detail::kAvx512F32;
    case Isa::avx2: return detail::kAvx2F32;
    case Isa::generic: break;
  }
#endif
  return detail::kGenericF32;
}

// bf16 math on an fp32 kernel: operands are rounded to bf16 values while packed.
bool emulate_bf16(const KernelSet& ks, GemmMath math) {
  return math == GemmMath::bf16 && ks.format == PackFormat::f32;
}

}  // namespace

// ---- PackedB ----------------------------------------------------------------

struct PackedB::Impl {
  const KernelSet* ks;
  Isa isa;
  GemmMath math;
  int64_t K, N;
  size_t bytes;
  AlignedBytes data;
};

PackedB::PackedB(const MatrixRef& b, int64_t K, int64_t N, GemmMath math, Isa isa) {
  check_dims(0, N, K);
  check_matrix("B", b, K, N);
  const KernelSet& ks = kernel_set(isa, math);
  const size_t bytes = packed_b_bytes(ks, K, N);
  impl_.reset(new Impl{&ks, isa, math, K, N, bytes, aligned_alloc_bytes(bytes)});
  if (K > 0 && N > 0) pack_b(b, K, 0, N, ks, emulate_bf16(ks, math), impl_->data.get());
}

PackedB::PackedB(PackedB&&) noexcept = default;
PackedB& PackedB::operator=(PackedB&&) noexcept = default;
PackedB::~PackedB() = default;

int64_t PackedB::k() const { return impl_->K; }
int64_t PackedB::n() const { return impl_->N; }
GemmMath PackedB::math() const { return impl_->math; }
Isa PackedB::isa() const { return impl_->isa; }
size_t PackedB::bytes() const { return impl_->bytes; }

// ---- entry points -------------------------------------------------------------

bool gemm_supports(Activation a) {
  switch (a) {
    case Activation::none:
    case Activation::relu:
    case Activation::sigmoid:
    case Activation::silu:
    case Activation::gelu_tanh: return true;
    default: return false;
  }
}

void gemm(int64_t M, int64_t N, int64_t K, const MatrixRef& a, const MatrixRef& b, const OutputRef& c,
          const Epilogue& ep, GemmMath math, Isa isa) {
  check_dims(M, N, K);
  check_matrix("A", a, M, K);
  check_matrix("B", b, K, N);
  check_output(c, ep, M, N);
  const KernelSet& ks = kernel_set(isa, math);
  if (M == 1 && K > 0 && math == GemmMath::fp32 && a.type == ElemType::f32 && !a.trans && b.type == ElemType::f32 &&
      c.type == ElemType::f32 && (!ep.residual || ep.residual_type == ElemType::f32)) {
    // One row (decoding) needs no packing (kernels/gemv.h): against a weight
    // stored [N, K], or against B stored [K, N] (attention's P·V).
    const auto* x = static_cast<const float*>(a.data);
    const auto* w = static_cast<const float*>(b.data);
    auto* y = static_cast<float*>(c.data);
    if (b.trans) gemv_rows_f32(N, K, x, w, b.ld, y, ep, isa);
    else gemv_cols_f32(N, K, x, w, b.ld, y, ep);
    return;
  }
  const bool round = emulate_bf16(ks, math);
  run_blocked(ks, Operands{M, N, K, prepare_a(a, M, K, ks, round), nullptr, b, round, c, ep});
}

void gemm(int64_t M, const MatrixRef& a, const PackedB& b, const OutputRef& c, const Epilogue& ep) {
  const PackedB::Impl& pb = b.impl();
  check_dims(M, pb.N, pb.K);
  check_matrix("A", a, M, pb.K);
  check_output(c, ep, M, pb.N);
  const KernelSet& ks = *pb.ks;
  const bool round = emulate_bf16(ks, pb.math);
  run_blocked(ks, Operands{M, pb.N, pb.K, prepare_a(a, M, pb.K, ks, round), pb.data.get(), MatrixRef{}, round, c, ep});
}

}  // namespace milrt::kernels
