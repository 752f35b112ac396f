// The contract between the GEMM driver (kernels/generic/gemm.cpp: argument
// checks, packing, cache blocking, edge tiles) and the per-ISA micro-kernels
// (kernels/x86/gemm_*.cpp, compiled with their own -m flags).
//
// Rule for the ISA files: they define only intrinsics code in anonymous
// namespaces and the KernelSet constants below, and call no inline function
// or template from a shared header. An inline function emitted in a TU built
// with -mavx512f could be the copy the linker keeps for every caller, and
// then the generic path would execute AVX-512 instructions.
#pragma once
#include <cstdint>

#include "kernels/gemm.h"

namespace milrt::kernels::detail {

// Element i of an array of type t, widened to fp32 (residuals of any ElemType).
float load_elem(const void* p, ElemType t, int64_t i);

// Element layout of packed operands.
//  f32: A rows hold fp32 along k. A B panel of NR columns holds, for each k,
//       NR consecutive fp32 (zero-padded past N).
//  bf16_pairs: k is grouped in pairs (K padded to even with zeros). A rows hold
//       bf16 along k, so the 32-bit word at row + 2p is the pair (2p, 2p+1).
//       A B panel holds, for each pair p, NR consecutive 32-bit words, word j
//       = (B[2p][j], B[2p+1][j]): the operand order of vdpbf16ps.
enum class PackFormat : uint8_t { f32, bf16_pairs };

// Where and how a finished tile of m rows × NR columns is stored. The driver
// guarantees that all NR columns exist (it stages edge tiles in a full-width
// buffer), so micro-kernels store whole vectors.
struct TileStore {
  void* c;               // tile origin in C
  int64_t ldc;           // elements
  ElemType c_type;
  float alpha;
  const float* bias;     // NR values at the tile's first column, or null
  Activation act;
  const void* res;       // tile origin in the residual, or null
  int64_t ldr;
  ElemType res_type;
};

struct MicroArgs {
  int64_t ksteps;        // k values (f32) or k pairs (bf16_pairs) to accumulate
  const void* a;         // row 0 of the A tile at the block's first k
  int64_t lda;           // elements (fp32 or bf16) between A rows
  const void* b;         // the B panel at the block's first k
  int m;                 // rows in this tile, 1..mr
  float* acc;            // m × NR fp32 partial sums (blocks of K before this one)
  int64_t ld_acc;
  bool load_acc;         // add acc to the products (not the first K block)
  const TileStore* out;  // null: write the sums to acc (not the last K block); else finish the tile
};

using MicroKernel = void (*)(const MicroArgs&);

// One micro-kernel with its register and cache blocking.
struct KernelSet {
  const char* name;
  PackFormat format;
  int mr, nr;   // register tile; nr is also the B panel width
  int kc;       // K block: a KC×NR B panel stays in L1 (even for bf16_pairs)
  int mc;       // M block (multiple of mr): an MC×KC slice of A stays in L2
  int nc;       // N block (multiple of nr): the unit a thread will take
  MicroKernel micro;
  int a_align = 0;  // bytes: A is used in place only if its start and row stride are multiples (0: any)
  // Run by the driver on the thread around each task (a block of C and its
  // micro-kernel calls, with no other code in between): per-thread state such
  // as an AMX tile configuration is set up once here, not in every call.
  void (*task_begin)() = nullptr;
  void (*task_end)() = nullptr;
  // Optional (bf16_pairs only): the same micro-kernel, bit for bit, reading A
  // from MR-row panels instead of rows: the 32-bit word (pair p) of tile row i
  // is at a + 2·(p·mr + i) bf16 elements; lda is unused. The driver packs a
  // transposed A (a weight gradient's dYᵀ, stored [K, M]) this way: each
  // panel row is a contiguous slice of two stored rows, so packing needs no
  // transpose, and the tile reads A as one contiguous stream.
  MicroKernel micro_panel_a = nullptr;
};

extern const KernelSet kGenericF32;
#if defined(__x86_64__)
extern const KernelSet kAvx2F32;
extern const KernelSet kAvx512F32;
extern const KernelSet kAvx512Bf16;
extern const KernelSet kAmxBf16;
#endif

}  // namespace milrt::kernels::detail
