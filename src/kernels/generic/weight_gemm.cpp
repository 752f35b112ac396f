// weight_gemm (kernels/weight_gemm.h): argument checks, the choice between
// streaming rows (small M) and widened panels fed to gemm (larger M), the
// thread split, the epilogue, and the portable streaming/widening loops. The
// AVX-512 loops live in x86/weight_gemm_avx512.cpp, the AVX2 ones in
// x86/weight_gemm_avx2.cpp.
#include "kernels/weight_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "kernels/gemm_micro.h"
#include "kernels/grow_buffer.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"
#include "milrt/error.h"

namespace milrt::kernels {

// Rows [j0, j1) of W (j1 - j0 <= kStreamBlock) against M <= kStreamMaxM rows
// of A: out[i·ldo + (j - j0)] = Σ_k a[i·lda + k]·W(j, k) in fp32.
void weight_rows_avx512(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda, float* out,
                        int64_t ldo);
// Rows [j0, j1) of W as fp32 into dst [(j1 - j0), w.k] (q8: scale·q per element).
void widen_rows_avx512(const WeightRef& w, int64_t j0, int64_t j1, float* dst);
// The same two for AVX2+FMA+F16C.
void weight_rows_avx2(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda, float* out,
                      int64_t ldo);
void widen_rows_avx2(const WeightRef& w, int64_t j0, int64_t j1, float* dst);

namespace {

// Up to this many rows of A stream W (each weight row is read once for all of
// them); above it, panels go through the fp32 GEMM. The crossing point
// measured with bench/bench_weight_gemm.cpp (rerun it to check it on a new
// CPU: `build/bench_weight_gemm`).
constexpr int64_t kStreamMaxM = 4;
// Weight rows per streaming task: a thread's rows stay contiguous in memory.
constexpr int64_t kStreamBlock = 64;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kMinParallelMacs = 1 << 16;
// fp32 elements of one widened panel: 256 KiB, which with gemm's own packed
// copy of it stays within a Zen/Sapphire Rapids L2.
constexpr int64_t kPanelElems = 64 * 1024;

[[noreturn]] void fail(const std::string& msg) { throw Error("weight_gemm: " + msg); }

void check(int64_t M, const float* a, int64_t lda, const WeightRef& w, const float* c, int64_t ldc,
           const Epilogue& ep, Isa isa) {
  if (M < 0 || w.n < 0 || w.k < 0)
    fail("negative size M=" + std::to_string(M) + " N=" + std::to_string(w.n) + " K=" + std::to_string(w.k));
  if (w.format != WeightFormat::f32 && w.format != WeightFormat::f16 && w.format != WeightFormat::bf16 &&
      w.format != WeightFormat::q8)
    fail("unknown weight format " + std::to_string(int(w.format)));
  if (w.ld < w.k) fail("W has ld " + std::to_string(w.ld) + " < K = " + std::to_string(w.k));
  if (lda < w.k) fail("A has ld " + std::to_string(lda) + " < K = " + std::to_string(w.k));
  if (ldc < w.n) fail("C has ld " + std::to_string(ldc) + " < N = " + std::to_string(w.n));
  if (!gemm_supports(ep.act)) fail(std::string("the epilogue cannot apply ") + activation_name(ep.act));
  if (w.format == WeightFormat::q8) {
    if (w.block <= 0) fail("q8 block " + std::to_string(w.block) + " is not positive");
    if (w.k % w.block != 0)
      fail("q8 block " + std::to_string(w.block) + " does not divide K = " + std::to_string(w.k));
    if (!w.scales && w.n > 0 && w.k > 0) fail("q8 weight without scales");
  }
  if (!w.data && w.n > 0 && w.k > 0) fail(std::string(weight_format_name(w.format)) + " weight data is null");
  if (!a && M > 0 && w.k > 0) fail("A is null");
  if (!c && M > 0 && w.n > 0) fail("C is null");
  if (ep.residual && ep.residual_ld < w.n)
    fail("the residual has ld " + std::to_string(ep.residual_ld) + " < N = " + std::to_string(w.n));
  if (!isa_usable(isa)) fail("the " + std::string(isa_name(isa)) + " kernels cannot run on this CPU");
}

bool wide(Isa isa) { return isa == Isa::avx512 || isa == Isa::amx; }

// The AVX-512 q8 loop works on whole 16-lane vectors of one block.
bool avx512_handles(const WeightRef& w) { return w.format != WeightFormat::q8 || w.block % 16 == 0; }
// The AVX2 one on whole 8-lane vectors.
bool avx2_handles(const WeightRef& w) { return w.format != WeightFormat::q8 || w.block % 8 == 0; }

// Which streaming rows run.
enum class RowsPath : uint8_t { generic, avx2, avx512 };
RowsPath rows_path(Isa isa, const WeightRef& w) {
  if (wide(isa)) return avx512_handles(w) ? RowsPath::avx512 : RowsPath::generic;
  if (isa == Isa::avx2 && avx2_handles(w)) return RowsPath::avx2;
  return RowsPath::generic;
}

// ---- portable loops -----------------------------------------------------------

struct F32 {
  static float at(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
};
struct F16 {
  static float at(const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); }
};
struct BF16 {
  static float at(const void* p, int64_t i) {
    const uint32_t bits = uint32_t(static_cast<const uint16_t*>(p)[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

// Eight partial sums (element t goes to sum t % 8), added pairwise at the end.
template <class L>
float dot8(const float* x, const void* row, int64_t k0, int64_t n) {
  float s[8] = {};
  int64_t t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) s[u] += x[t + u] * L::at(row, k0 + t + u);
  for (int u = 0; t < n; ++t, ++u) s[u] += x[t] * L::at(row, k0 + t);
  return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

struct Q8 {
  static float at(const void* p, int64_t i) { return float(static_cast<const int8_t*>(p)[i]); }
};

void weight_rows_generic(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda, float* out,
                         int64_t ldo) {
  const int64_t K = w.k;
  for (int64_t j = j0; j < j1; ++j)
    for (int i = 0; i < M; ++i) {
      const float* x = a + i * lda;
      float v = 0;
      switch (w.format) {
        case WeightFormat::f32: v = dot8<F32>(x, static_cast<const float*>(w.data) + j * w.ld, 0, K); break;
        case WeightFormat::f16: v = dot8<F16>(x, static_cast<const uint16_t*>(w.data) + j * w.ld, 0, K); break;
        case WeightFormat::bf16: v = dot8<BF16>(x, static_cast<const uint16_t*>(w.data) + j * w.ld, 0, K); break;
        case WeightFormat::q8: {
          // Blocks in order; each block's Σ a·q is scaled once.
          const int8_t* row = static_cast<const int8_t*>(w.data) + j * w.ld;
          const float* s = w.scales + j * (K / w.block);
          for (int64_t b = 0; b < K / w.block; ++b)
            v += s[b] * dot8<Q8>(x + b * w.block, row, b * w.block, w.block);
          break;
        }
      }
      out[i * ldo + (j - j0)] = v;
    }
}

void widen_rows_generic(const WeightRef& w, int64_t j0, int64_t j1, float* dst) {
  const int64_t K = w.k;
  for (int64_t j = j0; j < j1; ++j) {
    float* d = dst + (j - j0) * K;
    switch (w.format) {
      case WeightFormat::f32: std::memcpy(d, static_cast<const float*>(w.data) + j * w.ld, size_t(K) * 4); break;
      case WeightFormat::f16:
        for (int64_t k = 0; k < K; ++k) d[k] = F16::at(w.data, j * w.ld + k);
        break;
      case WeightFormat::bf16:
        for (int64_t k = 0; k < K; ++k) d[k] = BF16::at(w.data, j * w.ld + k);
        break;
      case WeightFormat::q8: {
        const float* s = w.scales + j * (K / w.block);
        for (int64_t k = 0; k < K; ++k) d[k] = s[k / w.block] * Q8::at(w.data, j * w.ld + k);
        break;
      }
    }
  }
}

// ---- epilogue -------------------------------------------------------------------

// C[i, j0..j1) from the dot products dot[i·ldd + (j - j0)].
void finish(const float* dot, int64_t ldd, int M, int64_t row0, int64_t j0, int64_t j1, float* c, int64_t ldc,
            const Epilogue& ep) {
  for (int i = 0; i < M; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      float v = ep.alpha * dot[i * ldd + (j - j0)];
      if (ep.bias) v += ep.bias[j];
      v = activate(ep.act, v);
      if (ep.residual) v += detail::load_elem(ep.residual, ep.residual_type, (row0 + i) * ep.residual_ld + j);
      c[(row0 + i) * ldc + j] = v;
    }
}

// ---- streaming path -------------------------------------------------------------

void stream(int64_t M, const float* a, int64_t lda, const WeightRef& w, float* c, int64_t ldc, const Epilogue& ep,
            Isa isa) {
  const int64_t N = w.n;
  const int64_t blocks = (N + kStreamBlock - 1) / kStreamBlock;
  int threads = 1;
  if (double(M) * double(N) * double(w.k) >= kMinParallelMacs && !omp_in_parallel()) threads = num_threads();
  threads = int(std::min<int64_t>(threads, blocks));
  const RowsPath path = rows_path(isa, w);
  auto block = [&](int64_t b) {
    const int64_t j0 = b * kStreamBlock, j1 = std::min(N, j0 + kStreamBlock);
    // Not C itself: the residual may be C.
    float dot[kStreamMaxM * kStreamBlock];
    if (w.k == 0) std::fill(dot, dot + M * kStreamBlock, 0.0f);
#if defined(__x86_64__)
    else if (path == RowsPath::avx512) weight_rows_avx512(w, j0, j1, int(M), a, lda, dot, kStreamBlock);
    else if (path == RowsPath::avx2) weight_rows_avx2(w, j0, j1, int(M), a, lda, dot, kStreamBlock);
#endif
    else weight_rows_generic(w, j0, j1, int(M), a, lda, dot, kStreamBlock);
    finish(dot, kStreamBlock, int(M), 0, j0, j1, c, ldc, ep);
  };
  (void)path;
  if (threads <= 1) {
    for (int64_t b = 0; b < blocks; ++b) block(b);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) block(b);
}

// ---- panel path -----------------------------------------------------------------

// Per-thread panel buffer: no allocation once the shapes were seen.
thread_local GrowBuffer t_panel;

size_t elem_bytes(ElemType t) { return t == ElemType::f32 ? 4 : 2; }

void panels(int64_t M, const float* a, int64_t lda, const WeightRef& w, float* c, int64_t ldc, const Epilogue& ep,
            Isa isa) {
  const int64_t N = w.n, K = w.k;
  // Rows per panel: a multiple of 16 (whole gemm column panels), 16..256.
  const int64_t rows = std::clamp<int64_t>(kPanelElems / K / 16 * 16, 16, 256);
  const int64_t count = (N + rows - 1) / rows;
  // Widening is exact (q8: one rounding of scale·q on every path), so the
  // panels hold the same bits whichever loop wrote them.
  auto panel = [&](int64_t p) {
    const int64_t j0 = p * rows, j1 = std::min(N, j0 + rows);
    float* buf = t_panel.get_as<float>(size_t(rows * K));
#if defined(__x86_64__)
    if (wide(isa)) widen_rows_avx512(w, j0, j1, buf);
    else if (isa == Isa::avx2) widen_rows_avx2(w, j0, j1, buf);
    else widen_rows_generic(w, j0, j1, buf);
#else
    widen_rows_generic(w, j0, j1, buf);
#endif
    Epilogue e = ep;
    if (e.bias) e.bias += j0;
    if (e.residual) e.residual = static_cast<const std::byte*>(e.residual) + j0 * elem_bytes(e.residual_type);
    gemm(M, j1 - j0, K, MatrixRef{a, ElemType::f32, lda}, MatrixRef{buf, ElemType::f32, K, true},
         OutputRef{c + j0, ElemType::f32, ldc}, e, GemmMath::fp32, isa);
  };
  // gemm's sums do not depend on how N is split or on its threads, so either
  // split gives the same bits: panels over threads when there are enough of
  // them, else one panel at a time with gemm spreading it. Static, not
  // dynamic: every thread then runs a panel on every call, so the first call
  // sizes every thread's scratch (with dynamic, a thread that a busy machine
  // starved of panels allocated on a later call).
  const int threads = omp_in_parallel() ? 1 : num_threads();
  if (threads <= 1 || count < threads) {
    for (int64_t p = 0; p < count; ++p) panel(p);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t p = 0; p < count; ++p) panel(p);
}

}  // namespace

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::f32: return "f32";
    case WeightFormat::f16: return "f16";
    case WeightFormat::bf16: return "bf16";
    case WeightFormat::q8: return "q8";
  }
  return "?";
}

void weight_gemm(int64_t M, const float* a, int64_t lda, const WeightRef& w, float* c, int64_t ldc,
                 const Epilogue& ep, Isa isa) {
  check(M, a, lda, w, c, ldc, ep, isa);
  if (M == 0 || w.n == 0) return;
  if (M <= kStreamMaxM || w.k == 0) {
    for (int64_t i0 = 0; i0 < M; i0 += kStreamMaxM) {
      // (k = 0 with many rows: epilogue(0) in groups of kStreamMaxM rows.)
      const int64_t m = std::min(kStreamMaxM, M - i0);
      Epilogue e = ep;
      if (e.residual)
        e.residual = static_cast<const std::byte*>(e.residual) + i0 * e.residual_ld * elem_bytes(e.residual_type);
      stream(m, a ? a + i0 * lda : a, lda, w, c + i0 * ldc, ldc, e, isa);
    }
    return;
  }
  panels(M, a, lda, w, c, ldc, ep, isa);
}

}  // namespace milrt::kernels
