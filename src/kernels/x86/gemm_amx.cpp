// AMX bf16 GEMM micro-kernel: 32×32 register tiles as four 16×16 fp32 tiles
// (tmm0-3), fed by two A tiles (tmm4-5: 16 rows × 16 k pairs) and two B tiles
// (tmm6-7). The bf16_pairs B panel with NR = 32 already is two B tiles side by
// side (a pair row is 128 bytes: tile 0 its first 64, tile 1 the rest), and A
// rows of bf16 along k are A tiles as they lie, so nothing is repacked.
//
// AMX takes whole 16-pair k steps of whole 16-row groups. The rest goes to
// the AVX-512 bf16 micro-kernel through the same MicroArgs contract: rows
// past the last full group, the k tail (ksteps % 16, only in the last K block
// since KC is a multiple of 32), and the epilogue, which it applies to the
// AMX sums after adding its own tail products. Reading a partial tile would
// run past A's rows or K (into NaN padding, or out of the buffer), and the
// shared path keeps one epilogue implementation.
//
// Built with -mamx-tile/-mamx-bf16 (CMakeLists.txt) and only run when
// cpu_features() reports AMX usable, which includes Linux's permission for
// tile data (see the rule in gemm_micro.h).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstddef>

#include "kernels/gemm_micro.h"
#include "kernels/x86/amx_bf16_common.h"

namespace milrt::kernels::detail {
namespace {

constexpr int kMr = 32, kNr = 32;
constexpr int kGroup = 16;       // rows of an A or C tile
constexpr int64_t kTileK = 16;   // k pairs of an A or B tile (64 bytes of bf16 per row)

using x86::kTileConfig;

// The AVX-512 kernel on rows [r0, r0 + rows) of p's tile, in slices of at
// most its mr rows. acc/ld_acc/load_acc/ksteps/a/b are given already offset to
// the first k; row offsets are applied here.
void avx512_rows(const MicroArgs& p, int r0, int rows) {
  const KernelSet& ks = kAvx512Bf16;
  for (int r = r0; r < r0 + rows; r += ks.mr) {
    MicroArgs q = p;
    q.m = rows - (r - r0) < ks.mr ? rows - (r - r0) : ks.mr;
    q.a = static_cast<const uint16_t*>(p.a) + r * p.lda;
    q.acc = p.acc ? p.acc + r * p.ld_acc : nullptr;
    TileStore o;
    if (p.out) {
      o = *p.out;
      const int cs = o.c_type == ElemType::f32 ? 4 : 2, rs = o.res_type == ElemType::f32 ? 4 : 2;
      o.c = static_cast<std::byte*>(o.c) + r * o.ldc * cs;
      if (o.res) o.res = static_cast<const std::byte*>(o.res) + r * o.ldr * rs;
      q.out = &o;
    }
    ks.micro(q);
  }
}

// Row group g's C tiles are tmm(2g) (columns 0-15) and tmm(2g+1) (16-31);
// its A tile is tmm(4+g); tmm6/7 hold the B tiles. The intrinsics paste the
// tile number into the instruction text, so every number is a literal.
// The tiles are configured once per driver task (KernelSet::task_begin)
// rather than per call: LDTILECFG costs 52 ns (15% of a 32×32×512 tile), and
// checking the current configuration with STTILECFG waits for every tile
// instruction in flight. Releasing at the task's end leaves the thread as it
// was for other AMX code (oneDNN's), and saves 8 KiB per context switch.
void task_begin() { _tile_loadconfig(&kTileConfig); }
void task_end() { _tile_release(); }

// C tiles (Groups row groups × 32 columns) = init (or zero) + A·B over
// `steps` k steps, stored to out. Takes the operands one by one rather than
// a copy of the driver's MicroArgs: the copy read the struct with 16-byte
// loads across fields just stored 8 bytes at a time, and perf put a fifth of
// a weight gradient's time (M=2048, N=768, K=512, one thread) on that
// forwarding failure. Most of it was waiting for the residual C anyway and
// now shows at the tile loads of `init`: 3 alternating pairs, 2108, 1938,
// 1909 -> 2040, 1886, 1907 µs.
template <int Groups>
void amx_groups(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t steps, const float* init, int64_t ld_init,
                float* out, int64_t ld_out) {
  if (init) {
    const int64_t ld = ld_init * 4;
    _tile_loadd(0, init, ld);
    _tile_loadd(1, init + 16, ld);
    if constexpr (Groups == 2) {
      _tile_loadd(2, init + kGroup * ld_init, ld);
      _tile_loadd(3, init + kGroup * ld_init + 16, ld);
    }
  } else {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (Groups == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
  }
  const int64_t a_stride = lda * 2, b_stride = 2 * kNr * 2;
  for (int64_t s = 0; s < steps; ++s) {
    const uint16_t* bk = b + s * kTileK * 2 * kNr;
    const uint16_t* ak = a + s * kTileK * 2;
    _tile_loadd(6, bk, b_stride);
    _tile_loadd(7, bk + kNr, b_stride);
    _tile_loadd(4, ak, a_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (Groups == 2) {
      _tile_loadd(5, ak + kGroup * lda, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  const int64_t ld = ld_out * 4;
  _tile_stored(0, out, ld);
  _tile_stored(1, out + 16, ld);
  if constexpr (Groups == 2) {
    _tile_stored(2, out + kGroup * ld_out, ld);
    _tile_stored(3, out + kGroup * ld_out + 16, ld);
  }
}

void amx_tiles(int groups, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t steps, const float* init,
               int64_t ld_init, float* out, int64_t ld_out) {
  if (groups == 2) amx_groups<2>(a, lda, b, steps, init, ld_init, out, ld_out);
  else amx_groups<1>(a, lda, b, steps, init, ld_init, out, ld_out);
}

// The epilogue into fp32 C is the identity or adds an fp32 residual: the
// sums can go straight from the tiles to C, with a residual as the tiles'
// starting value (possible only in a product's one K block: a weight
// gradient's C += dYᵀ·X, a residual stream's x + f(x)). The residual is then
// the first term of the fp32 sum rather than the last (the same value to
// within the sum's rounding). The AVX-512 epilogue pass this saves costs
// ~200 ns per 32×32 tile on SPR: a third of the tile's products at K = 768,
// an eighth of a weight-gradient product.
bool tiles_store_to_c(const MicroArgs& p) {
  const TileStore* o = p.out;
  return o && o->c_type == ElemType::f32 && o->alpha == 1 && !o->bias && o->act == Activation::none &&
         (!o->res || (o->res_type == ElemType::f32 && !p.load_acc));
}

void micro_amx(const MicroArgs& p) {
  const int64_t steps = p.ksteps / kTileK;
  const int groups = steps > 0 ? p.m / kGroup : 0;
  const int amx_rows = groups * kGroup;
  if (amx_rows < p.m) avx512_rows(p, amx_rows, p.m - amx_rows);
  if (groups == 0) return;

  const int64_t done = steps * kTileK;
  const auto* a = static_cast<const uint16_t*>(p.a);
  const auto* b = static_cast<const uint16_t*>(p.b);
  if (done == p.ksteps && tiles_store_to_c(p)) {
    const TileStore& o = *p.out;
    const float* init = o.res ? static_cast<const float*>(o.res) : p.load_acc ? p.acc : nullptr;
    amx_tiles(groups, a, p.lda, b, steps, init, o.res ? o.ldr : p.ld_acc, static_cast<float*>(o.c), o.ldc);
    return;
  }
  // Where the AMX sums go: the driver's accumulator when there is one, else
  // (a single K block) a tile of our own that the AVX-512 pass finishes.
  alignas(64) float own[kMr * kNr];
  float* acc = p.acc ? p.acc : own;
  const int64_t ld_acc = p.acc ? p.ld_acc : kNr;
  amx_tiles(groups, a, p.lda, b, steps, p.load_acc ? p.acc : nullptr, p.ld_acc, acc, ld_acc);
  if (done == p.ksteps && !p.out) return;

  MicroArgs rest = p;
  rest.ksteps = p.ksteps - done;
  rest.a = static_cast<const uint16_t*>(p.a) + 2 * done;
  rest.b = static_cast<const uint16_t*>(p.b) + done * 2 * kNr;
  rest.acc = acc;
  rest.ld_acc = ld_acc;
  rest.load_acc = true;
  avx512_rows(rest, 0, amx_rows);
}

}  // namespace

// KC 2048 (a multiple of 32, so only the last K block has a k tail): every
// product with K <= 2048 (all of a Llama layer's but the classifier's
// backward) is one K block, whose sums go from the tiles straight to C with
// no accumulator round trip and no AVX-512 epilogue pass. Its B panel
// (128 KiB) streams from L2 rather than sitting in L1, and MC·KC of A (1 MiB)
// still fits SPR's 2 MiB L2. Measured on one SPR core against KC 512, B
// packed: M=512, N=2048, K=768 638-677 -> 825-893 GFLOP/s; N=768, K=2048
// 790-819 -> 887-947. A rows must be 64-byte aligned (else the driver packs
// A): tile loads of rows that straddle cache lines run at a third of the
// speed.
constinit const KernelSet kAmxBf16 = {"amx-bf16", PackFormat::bf16_pairs, kMr, kNr, 2048, 256, 512, micro_amx, 64, task_begin, task_end};

}  // namespace milrt::kernels::detail
#endif
