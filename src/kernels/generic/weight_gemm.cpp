// weight_gemm (kernels/weight_gemm.h): argument checks, the choice between
// streaming rows (small M) and widened panels fed to gemm (larger M), the
// thread split, the epilogue, the quantization of A for int8 activations, and
// the portable streaming/widening loops. The AVX-512 loops live in
// x86/weight_gemm_avx512.cpp, the AVX2 ones in x86/weight_gemm_avx2.cpp.
#include "kernels/weight_gemm.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "kernels/convert_rows.h"
#include "kernels/gemm_micro.h"
#include "kernels/generic/multiversion.h"
#include "kernels/grow_buffer.h"
#include "kernels/thread_pool.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"
#include "milrt/error.h"

namespace milrt::kernels {

// Rows [j0, j1) of W (j1 - j0 <= kStreamBlock) against M <= kWeightStreamMaxRows rows
// of A: out[i·ldo + (j - j0)] = Σ_k a[i·lda + k]·W(j, k) in fp32.
void weight_rows_avx512(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda, float* out,
                        int64_t ldo);
// Rows [j0, j1) of W as fp32 into dst [(j1 - j0), w.k] (q8: scale·q per element).
void widen_rows_avx512(const WeightRef& w, int64_t j0, int64_t j1, float* dst);
// The same two for AVX2+FMA+F16C.
void weight_rows_avx2(const WeightRef& w, int64_t j0, int64_t j1, int M, const float* a, int64_t lda, float* out,
                      int64_t ldo);
void widen_rows_avx2(const WeightRef& w, int64_t j0, int64_t j1, float* dst);
// q8 rows [j0, j1) against M <= kWeightStreamMaxRows rows of A quantized to int8
// (ActivationQuant::int8): row i's int8 values at qa + i·ldq (ldq a multiple
// of 64, zero from k on), its block scales at sa + i·lds (lds a multiple of
// 16, zero from k / block on); out[i·ldo + (j - j0)] = Σ_b (Σ qa·q) · scale·sa.
// vpdpbusd on 64-byte chunks (needs avx512_vnni; a block of 4, 8, 16, 32 or a
// multiple of 64; also reads 128 · Σ qa per block, int32 at sq + i·lds), and
// vpmaddubsw + vpmaddwd on 32-byte chunks (a block of 4, 8, 16 or a multiple
// of 32). Both also take q4 rows themselves, in chunks of 128 (VNNI: a block
// of 8, 16, 32, 64 or a multiple of 128) or 64 values (AVX2: a block of 8,
// 16, 32 or a multiple of 64, in whole groups of 8 blocks), with A in the
// layout split_even_odd gives for that chunk (ldq a multiple of it) and
// 8 · Σ qa per block at sq.
void int8_rows_avx512_vnni(const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa, int64_t ldq,
                           const float* sa, const int32_t* sq, int64_t lds, float* out, int64_t ldo);
void int8_rows_avx2(const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa, int64_t ldq,
                    const float* sa, const int32_t* sq, int64_t lds, float* out, int64_t ldo);
// k q4 values (k even) from src into dst as int8.
void unpack_q4_avx512(const uint8_t* src, int64_t k, int8_t* dst);
void unpack_q4_avx2(const uint8_t* src, int64_t k, int8_t* dst);

namespace {

// Weight rows per streaming task: a thread's rows stay contiguous in memory.
constexpr int64_t kStreamBlock = 64;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kMinParallelMacs = 1 << 16;
// fp32 elements of one widened panel: 256 KiB, which with gemm's own packed
// copy of it stays within a Zen/Sapphire Rapids L2.
constexpr int64_t kPanelElems = 64 * 1024;
// q4 rows unpacked to int8 at a time: a multiple of every row group the q8
// loops take (8, 4, 2), and 16 KiB at K = 2048, so the q8 loops read them
// from L1.
constexpr int64_t kUnpackRows = 8;

[[noreturn]] void fail(const std::string& msg) { throw Error("weight_gemm: " + msg); }

void check(int64_t M, const float* a, int64_t lda, const WeightRef& w, const float* c, int64_t ldc,
           const Epilogue& ep, Isa isa) {
  if (M < 0 || w.n < 0 || w.k < 0)
    fail("negative size M=" + std::to_string(M) + " N=" + std::to_string(w.n) + " K=" + std::to_string(w.k));
  if (w.format != WeightFormat::f32 && w.format != WeightFormat::f16 && w.format != WeightFormat::bf16 &&
      w.format != WeightFormat::q8 && w.format != WeightFormat::q4)
    fail("unknown weight format " + std::to_string(int(w.format)));
  if (w.ld < w.k) fail("W has ld " + std::to_string(w.ld) + " < K = " + std::to_string(w.k));
  if (lda < w.k) fail("A has ld " + std::to_string(lda) + " < K = " + std::to_string(w.k));
  if (ldc < w.n) fail("C has ld " + std::to_string(ldc) + " < N = " + std::to_string(w.n));
  if (!gemm_supports(ep.act)) fail(std::string("the epilogue cannot apply ") + activation_name(ep.act));
  if (w.format == WeightFormat::q8 || w.format == WeightFormat::q4) {
    const std::string f = weight_format_name(w.format);
    if (w.block <= 0) fail(f + " block " + std::to_string(w.block) + " is not positive");
    if (w.k % w.block != 0)
      fail(f + " block " + std::to_string(w.block) + " does not divide K = " + std::to_string(w.k));
    if (!w.scales && w.n > 0 && w.k > 0) fail(f + " weight without scales");
    if (w.scale_type != ElemType::f32 && w.scale_type != ElemType::f16)
      fail(f + " scales must be f32 or f16, got " + (w.scale_type == ElemType::bf16 ? "bf16" : "element type " +
                                                      std::to_string(int(w.scale_type))));
  }
  if (w.format == WeightFormat::q4) {
    // Two values a byte: a block or row that ends mid-byte has no address.
    if (w.block % 2 != 0) fail("q4 block " + std::to_string(w.block) + " is odd");
    if (w.ld % 2 != 0) fail("q4 ld " + std::to_string(w.ld) + " is odd");
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

bool int8_activations(const WeightRef& w) {
  return (w.format == WeightFormat::q8 || w.format == WeightFormat::q4) && w.activations == ActivationQuant::int8;
}
// The int8 loops reduce each `chunk`-byte vector of products to per-block
// sums, so a block must fill whole int32 lanes (4 bytes) and either divide the
// chunk or be made of whole chunks.
bool int8_fits(const WeightRef& w, int64_t chunk) {
  return w.block % 4 == 0 && (chunk % w.block == 0 || w.block % chunk == 0);
}
// The VNNI loops take q8 in 64-value chunks, 4 values a lane, and q4 in
// 128-value chunks, 8 values a lane.
bool vnni_fits(const WeightRef& w) {
  return w.format == WeightFormat::q4 ? w.block % 8 == 0 && int8_fits(w, 128) : int8_fits(w, 64);
}
// The AVX2 loops take q4 in 64-value chunks, 8 values a lane, and only whole
// groups of 8 blocks: their last, partial group keeps partial sums whose
// split depends on the chunk, so q4 would no longer give q8's bits there.
bool avx2_q4_fits(const WeightRef& w) {
  return w.format == WeightFormat::q4 && w.block % 8 == 0 && int8_fits(w, 64) && (w.k / w.block) % 8 == 0;
}
// Which int8 rows run: AVX-512 needs VNNI for vpdpbusd; without it (and for
// multiples of 32 that 64 does not divide) the AVX2 loops run, which every
// AVX-512 CPU can.
RowsPath int8_path(Isa isa, const WeightRef& w) {
  if (wide(isa) && cpu_features().avx512_vnni && int8_fits(w, 64)) return RowsPath::avx512;
  if ((wide(isa) || isa == Isa::avx2) && int8_fits(w, 32)) return RowsPath::avx2;
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

// Scale b of a row's scales (weight_scale_row), widened exactly.
inline float scale_at(const void* row, bool f16, int64_t b) {
  return f16 ? F16::at(row, b) : F32::at(row, b);
}

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
        case WeightFormat::q4: break;  // unpacked to q8 by the caller
        case WeightFormat::q8: {
          // Blocks in order; each block's Σ a·q is scaled once.
          const int8_t* row = static_cast<const int8_t*>(w.data) + j * w.ld;
          const void* s = weight_scale_row(w, j);
          for (int64_t b = 0; b < K / w.block; ++b)
            v += scale_at(s, w.scale_type == ElemType::f16, b) * dot8<Q8>(x + b * w.block, row, b * w.block, w.block);
          break;
        }
      }
      out[i * ldo + (j - j0)] = v;
    }
}

// ---- int8 activations ------------------------------------------------------------

// Rows of A quantized per block (weight_gemm.h, ActivationQuant::int8). The
// same on every path and clone: the block maximum is taken on the bit
// patterns of |a| (an integer max, which vectorizes; finite floats order like
// their bits), a / s is one correctly rounded division, and rounding to
// nearest even goes through 1.5·2^23 (exact below 2^22; the quotient is
// clamped to ±127 first). Zero padding past k and past the block count lets
// the SIMD rows load whole vectors of A and of its scales. sq (when not
// null): bias · Σ q per block, which the VNNI rows take off their sums.
MILRT_CLONES(void, quantize_rows,
             (int64_t M, const float* a, int64_t lda, int64_t K, int64_t block, int8_t* q, int64_t ldq, float* s,
              int32_t* sq, int32_t bias, int64_t lds),
             (M, a, lda, K, block, q, ldq, s, sq, bias, lds)) {
  const int64_t nb = K / block;
  constexpr float kMagic = 12582912.0f;  // 1.5·2^23
  for (int64_t i = 0; i < M; ++i) {
    const float* x = a + i * lda;
    int8_t* qi = q + i * ldq;
    float* si = s + i * lds;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + b * block;
      int8_t* qb = qi + b * block;
      uint32_t top = 0;
      for (int64_t t = 0; t < block; ++t) {
        uint32_t bits;
        std::memcpy(&bits, xb + t, 4);
        top = std::max(top, bits & 0x7FFFFFFFu);
      }
      float amax;
      std::memcpy(&amax, &top, 4);
      const float sc = amax / 127.0f;
      if (top >= 0x7F800000u || sc == 0.0f) {
        // inf or NaN: a NaN scale makes the block's results NaN. Zero (or so
        // small that the scale underflows): the block adds nothing.
        si[b] = top >= 0x7F800000u ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
        std::fill(qb, qb + block, int8_t(0));
        if (sq) sq[i * lds + b] = 0;
        continue;
      }
      si[b] = sc;
      int32_t sum = 0;
      for (int64_t t = 0; t < block; ++t) {
        const float r = std::clamp(xb[t] / sc, -127.0f, 127.0f);
        const int v = int((r + kMagic) - kMagic);
        qb[t] = int8_t(v);
        sum += v;
      }
      if (sq) sq[i * lds + b] = bias * sum;
    }
    std::fill(qi + K, qi + ldq, int8_t(0));
    std::fill(si + nb, si + lds, 0.0f);
    if (sq) std::fill(sq + i * lds + nb, sq + (i + 1) * lds, 0);
  }
}

// Each `chunk`-byte piece (64 or 128) of the M quantized rows of A (ldq
// apart, ldq a multiple of chunk) rewritten as its even elements, then its
// odd ones: the order in which the q4 loops split a load of nibbles.
void split_even_odd(int64_t M, int8_t* q, int64_t ldq, int64_t chunk) {
  int8_t part[128];
  const int64_t half = chunk / 2;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t c = 0; c < ldq; c += chunk) {
      int8_t* p = q + i * ldq + c;
      for (int64_t t = 0; t < half; ++t) part[t] = p[2 * t], part[half + t] = p[2 * t + 1];
      std::memcpy(p, part, size_t(chunk));
    }
}

// Per A row, per block: the exact int32 Σ qa·q, times scale · activation
// scale, added in block order.
MILRT_CLONES(void, int8_rows_generic,
             (const WeightRef& w, int64_t j0, int64_t j1, int M, const int8_t* qa, int64_t ldq, const float* sa,
              int64_t lds, float* out, int64_t ldo),
             (w, j0, j1, M, qa, ldq, sa, lds, out, ldo)) {
  const int64_t block = w.block, nb = w.k / block;
  for (int64_t j = j0; j < j1; ++j) {
    const int8_t* row = static_cast<const int8_t*>(w.data) + j * w.ld;
    const void* sc = weight_scale_row(w, j);
    for (int i = 0; i < M; ++i) {
      const int8_t* x = qa + i * ldq;
      float v = 0;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t sum = 0;
        for (int64_t t = b * block; t < (b + 1) * block; ++t) sum += int32_t(row[t]) * int32_t(x[t]);
        v += float(sum) * (scale_at(sc, w.scale_type == ElemType::f16, b) * sa[i * lds + b]);
      }
      out[i * ldo + (j - j0)] = v;
    }
  }
}

// Per-thread quantized A (scales, block sums, int8 rows): allocated once per shape.
thread_local GrowBuffer t_quantized;

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
        const void* s = weight_scale_row(w, j);
        for (int64_t b = 0; b < K / w.block; ++b) {
          const float sb = scale_at(s, w.scale_type == ElemType::f16, b);  // decoded once a block
          for (int64_t k = b * w.block; k < (b + 1) * w.block; ++k) d[k] = sb * Q8::at(w.data, j * w.ld + k);
        }
        break;
      }
      case WeightFormat::q4: break;  // unpacked to q8 by the caller
    }
  }
}

// ---- q4 -------------------------------------------------------------------------

// The low nibble is element 2i; (v ^ 8) - 8 sign-extends a nibble.
MILRT_CLONES(void, unpack_q4_generic, (const uint8_t* src, int64_t k, int8_t* dst), (src, k, dst)) {
  for (int64_t i = 0; i < k / 2; ++i) {
    dst[2 * i] = int8_t(((src[i] & 15) ^ 8) - 8);
    dst[2 * i + 1] = int8_t(((src[i] >> 4) ^ 8) - 8);
  }
}

void unpack_q4(const uint8_t* src, int64_t k, int8_t* dst, Isa isa) {
#if defined(__x86_64__)
  if (wide(isa)) return unpack_q4_avx512(src, k, dst);
  if (isa == Isa::avx2) return unpack_q4_avx2(src, k, dst);
#endif
  (void)isa;
  unpack_q4_generic(src, k, dst);
}

// Per-thread int8 copy of kUnpackRows q4 rows.
thread_local GrowBuffer t_unpacked;

// The q8 view of a q4 weight's rows as unpacked into buf (row 0 = row j0 of w).
WeightRef as_q8(const WeightRef& w, int64_t j0, int64_t rows, const int8_t* buf) {
  WeightRef u = w;
  u.format = WeightFormat::q8;
  u.data = buf;
  u.n = rows;
  u.ld = w.k;
  u.scales = weight_scale_row(w, j0);
  return u;
}

// Rows [j0, j1) of a q4 weight, kUnpackRows at a time: each group unpacked to
// int8 and handed to f(q8 view of the group, its first row). q8 rows' sums do
// not depend on which rows share a call, so neither do these.
template <class F>
void for_unpacked(const WeightRef& w, int64_t j0, int64_t j1, Isa isa, F&& f) {
  int8_t* buf = t_unpacked.get_as<int8_t>(size_t(kUnpackRows * w.k));
  for (int64_t j = j0; j < j1; j += kUnpackRows) {
    const int64_t rows = std::min(kUnpackRows, j1 - j);
    for (int64_t r = 0; r < rows; ++r)
      unpack_q4(static_cast<const uint8_t*>(w.data) + (j + r) * (w.ld / 2), w.k, buf + r * w.k, isa);
    f(as_q8(w, j, rows, buf), j);
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

// Weights one thread streams per second, roughly (Zen 4, W from DRAM,
// bench_weight_gemm): enough to tell a product worth a parallel region from
// one that is not. q4 runs at about q8's values per second (unpacking costs
// what the halved reads save).
double stream_values_per_second(const WeightRef& w, bool int8) {
  if (int8) return 20e9;
  switch (w.format) {
    case WeightFormat::q8:
    case WeightFormat::q4: return 8e9;
    case WeightFormat::f16:
    case WeightFormat::bf16: return 7e9;
    case WeightFormat::f32: return 3.5e9;
  }
  return 3.5e9;
}

// Threads for streaming W against M rows: num_threads() split over the
// blocks of rows, but one when the product is small (kMinParallelMacs) or
// would take less than two pool regions on one thread: with t threads it
// takes T / t + region, so a second thread pays only from T > 2 · region.
// The streaming products run on the thread pool (thread_pool.h), not OpenMP:
// with OMP_WAIT_POLICY=passive each OpenMP region wakes the sleeping workers
// through the hypervisor, 40-45 us on the Zen 4 VM, as long as a 768 x 768
// int8 product takes on one thread; the pool's workers are still spinning.
int stream_threads(int64_t M, const WeightRef& w, int64_t blocks, bool int8) {
  if (double(M) * double(w.n) * double(w.k) < kMinParallelMacs || in_parallel()) return 1;
  const int threads = int(std::min<int64_t>(num_threads(), blocks));
  if (threads <= 1) return 1;
  const double seconds = double(w.n) * double(w.k) / stream_values_per_second(w, int8);
  return seconds < 2 * pool_region_seconds(threads) ? 1 : threads;
}

void stream(int64_t M, const float* a, int64_t lda, const WeightRef& w, float* c, int64_t ldc, const Epilogue& ep,
            Isa isa) {
  const int64_t N = w.n;
  const int64_t blocks = (N + kStreamBlock - 1) / kStreamBlock;
  // Int8 activations: A quantized once here, before the threads split W.
  const bool int8 = int8_activations(w) && w.k > 0;
  const int threads = stream_threads(M, w, blocks, int8);
  // q4 runs the q8 loops, the VNNI ones on its nibbles (measured faster),
  // the others on unpacked rows (faster than widening nibbles in registers:
  // 65 vs 107 us for 768 x 768 on one thread): the path is q8's for the
  // same block.
  const WeightRef q8view = w.format == WeightFormat::q4 ? as_q8(w, 0, w.n, nullptr) : w;
  const RowsPath path = int8 ? int8_path(isa, q8view) : rows_path(isa, q8view);
  int64_t ldq = 0, lds = 0;
  const int8_t* qa = nullptr;
  const float* sa = nullptr;
  const int32_t* sq = nullptr;
  // q4 on the VNNI or AVX2 loops: 128 or 64 values a chunk, A's chunks split
  // into even and odd elements, and the nibbles biased by 8 (q8's: 128). The
  // q4 weights those loops cannot take run on them unpacked.
  const bool q4_chunks = int8 && w.format == WeightFormat::q4 &&
                         ((path == RowsPath::avx512 && vnni_fits(w)) || (path == RowsPath::avx2 && avx2_q4_fits(w)));
  if (int8) {
    const int64_t chunk = q4_chunks && path == RowsPath::avx512 ? 128 : 64;
    ldq = (w.k + chunk - 1) / chunk * chunk;
    lds = (w.k / w.block + 15) / 16 * 16;
    auto* buf = static_cast<std::byte*>(t_quantized.get(size_t(M * (lds * 8 + ldq))));
    float* s = reinterpret_cast<float*>(buf);
    int32_t* sums = reinterpret_cast<int32_t*>(buf + M * lds * 4);
    int8_t* q = reinterpret_cast<int8_t*>(buf + M * lds * 8);
    quantize_rows(M, a, lda, w.k, w.block, q, ldq, s, path == RowsPath::avx512 || q4_chunks ? sums : nullptr,
                  q4_chunks ? 8 : 128, lds);
    if (q4_chunks) split_even_odd(M, q, ldq, chunk);
    qa = q, sa = s, sq = sums;
  }
  // Dot products of rows [j0, j1) of v (q8 or a format the plain loops take) into out.
  auto rows = [&](const WeightRef& v, int64_t j0, int64_t j1, float* out) {
#if defined(__x86_64__)
    if (int8 && path == RowsPath::avx512) int8_rows_avx512_vnni(v, j0, j1, int(M), qa, ldq, sa, sq, lds, out, kStreamBlock);
    else if (int8 && path == RowsPath::avx2) int8_rows_avx2(v, j0, j1, int(M), qa, ldq, sa, sq, lds, out, kStreamBlock);
    else if (int8) int8_rows_generic(v, j0, j1, int(M), qa, ldq, sa, lds, out, kStreamBlock);
    else if (path == RowsPath::avx512) weight_rows_avx512(v, j0, j1, int(M), a, lda, out, kStreamBlock);
    else if (path == RowsPath::avx2) weight_rows_avx2(v, j0, j1, int(M), a, lda, out, kStreamBlock);
#else
    (void)sq;  // the block sums only the VNNI loops take
    if (int8) int8_rows_generic(v, j0, j1, int(M), qa, ldq, sa, lds, out, kStreamBlock);
#endif
    else weight_rows_generic(v, j0, j1, int(M), a, lda, out, kStreamBlock);
  };
  auto block = [&](int64_t b) {
    const int64_t j0 = b * kStreamBlock, j1 = std::min(N, j0 + kStreamBlock);
    // Not C itself: the residual may be C.
    float dot[kWeightStreamMaxRows * kStreamBlock];
    if (w.k == 0) std::fill(dot, dot + M * kStreamBlock, 0.0f);
    else if (w.format == WeightFormat::q4 && !q4_chunks)
      for_unpacked(w, j0, j1, isa, [&](const WeightRef& v, int64_t j) { rows(v, 0, v.n, dot + (j - j0)); });
    else rows(w, j0, j1, dot);
    finish(dot, kStreamBlock, int(M), 0, j0, j1, c, ldc, ep);
  };
  if (threads <= 1) {
    for (int64_t b = 0; b < blocks; ++b) block(b);
    return;
  }
  pool_for(threads, blocks, block);
}

// ---- panel path -----------------------------------------------------------------

// Per-thread panel buffers: no allocation once the shapes were seen.
thread_local GrowBuffer t_panel, t_widened, t_a_bf16;
// W rows widened to fp32 at a time on the way to a bf16 panel (K = 768: 12 KiB).
constexpr int64_t kWidenRows = 4;

// Rows [j0, j1) of W (not q4) as fp32 into dst.
void widen(const WeightRef& w, int64_t j0, int64_t j1, float* dst, Isa isa) {
#if defined(__x86_64__)
  if (wide(isa)) return widen_rows_avx512(w, j0, j1, dst);
  if (isa == Isa::avx2) return widen_rows_avx2(w, j0, j1, dst);
#endif
  (void)isa;
  widen_rows_generic(w, j0, j1, dst);
}

void panels(int64_t M, const float* a, int64_t lda, const WeightRef& w, float* c, int64_t ldc, const Epilogue& ep,
            Isa isa) {
  const int64_t N = w.n, K = w.k;
  // Rows per panel: a multiple of 16 (whole gemm column panels), 16..256.
  const int64_t rows = std::clamp<int64_t>(kPanelElems / K / 16 * 16, 16, 256);
  const int64_t count = (N + rows - 1) / rows;
  // bf16 math: A rounded to bf16 once here, not by gemm in every panel (a
  // prefill's A was converted N / rows times: a fifth of the product's time).
  // The same rounding gemm applies, so the same bits.
  MatrixRef a_ref{a, ElemType::f32, lda};
  if (w.math == GemmMath::bf16 && K > 0) {
    uint16_t* a16 = t_a_bf16.get_as<uint16_t>(size_t(M * K));
    for (int64_t i = 0; i < M; ++i) f32_to_bf16_row(a + i * lda, a16 + i * K, K);
    a_ref = MatrixRef{a16, ElemType::bf16, K};
  }
  // Widening is exact (q8: one rounding of scale·q on every path), so the
  // panels hold the same bits whichever loop wrote them.
  auto panel = [&](int64_t p) {
    const int64_t j0 = p * rows, j1 = std::min(N, j0 + rows);
    MatrixRef b;
    if (w.math == GemmMath::bf16 && w.format == WeightFormat::bf16) {
      // gemm packs bf16 B as stored: nothing to widen.
      b = MatrixRef{static_cast<const uint16_t*>(w.data) + j0 * w.ld, ElemType::bf16, w.ld, true};
    } else if (w.math == GemmMath::bf16) {
      // Straight to bf16, a few rows at a time through fp32 scratch that stays in L1: the rounding gemm
      // applies to an fp32 B (the same bits), and the panel gemm packs is half the bytes, copied as words.
      uint16_t* buf = t_panel.get_as<uint16_t>(size_t(rows * K));
      float* tmp = t_widened.get_as<float>(size_t(kWidenRows * K));
      auto to_bf16 = [&](const WeightRef& v, int64_t v0, int64_t v1, uint16_t* dst) {  // v's rows [v0, v1)
        for (int64_t r0 = v0; r0 < v1; r0 += kWidenRows) {
          const int64_t r1 = std::min(v1, r0 + kWidenRows);
          widen(v, r0, r1, tmp, isa);
          f32_to_bf16_row(tmp, dst + (r0 - v0) * K, (r1 - r0) * K);
        }
      };
      if (w.format == WeightFormat::q4)
        for_unpacked(w, j0, j1, isa, [&](const WeightRef& v, int64_t j) { to_bf16(v, 0, v.n, buf + (j - j0) * K); });
      else to_bf16(w, j0, j1, buf);
      b = MatrixRef{buf, ElemType::bf16, K, true};
    } else {
      float* buf = t_panel.get_as<float>(size_t(rows * K));
      if (w.format == WeightFormat::q4)
        for_unpacked(w, j0, j1, isa, [&](const WeightRef& v, int64_t j) { widen(v, 0, v.n, buf + (j - j0) * K, isa); });
      else widen(w, j0, j1, buf, isa);
      b = MatrixRef{buf, ElemType::f32, K, true};
    }
    Epilogue e = ep;
    if (e.bias) e.bias += j0;
    if (e.residual) e.residual = static_cast<const std::byte*>(e.residual) + j0 * elem_bytes(e.residual_type);
    gemm(M, j1 - j0, K, a_ref, b, OutputRef{c + j0, ElemType::f32, ldc}, e, w.math, isa);
  };
  // gemm's sums do not depend on how N is split or on its threads, so either
  // split gives the same bits: panels over threads when there are enough of
  // them, else one panel at a time with gemm spreading it. Static, not
  // dynamic: every thread then runs a panel on every call, so the first call
  // sizes every thread's scratch (with dynamic, a thread that a busy machine
  // starved of panels allocated on a later call).
  const int threads = in_parallel() ? 1 : num_threads();
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
    case WeightFormat::q4: return "q4";
  }
  return "?";
}

void weight_gemm(int64_t M, const float* a, int64_t lda, const WeightRef& w, float* c, int64_t ldc,
                 const Epilogue& ep, Isa isa) {
  check(M, a, lda, w, c, ldc, ep, isa);
  if (M == 0 || w.n == 0) return;
  if (M <= kWeightStreamMaxRows || w.k == 0) {
    for (int64_t i0 = 0; i0 < M; i0 += kWeightStreamMaxRows) {
      // (k = 0 with many rows: epilogue(0) in groups of kWeightStreamMaxRows rows.)
      const int64_t m = std::min(kWeightStreamMaxRows, M - i0);
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
