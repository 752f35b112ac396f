// What this CPU (and its OS) can run, and which kernel path milrt uses.
//
// Kernels are compiled for several instruction sets and chosen at run time:
// the same binary runs on any x86-64 (generic C++ path), uses AVX2/FMA or
// AVX-512 where present, and AMX on Sapphire Rapids class CPUs.
// MILRT_ISA=generic|avx2|avx512|amx forces a path; forcing one the machine
// cannot run is an error, not a silent fallback.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace milrt::kernels {

// CPUID feature bits, each already combined with the OS support it needs
// (XCR0 state components), so `true` means "instructions can be executed".
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false, avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // Raw facts behind the flags above, for diagnostics.
  bool os_avx = false;        // XCR0 enables xmm/ymm state
  bool os_avx512 = false;     // XCR0 enables opmask/zmm state
  bool os_amx = false;        // XCR0 enables tile state
  bool amx_permitted = false; // arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) granted
};

// Detected once per process (thread-safe). On a CPU with AMX this also asks
// Linux for permission to use tile data; without AMX it makes no syscall.
const CpuFeatures& cpu_features();
// "avx2 fma f16c avx512f ..." (the usable flags), for logs and benchmark context.
std::string cpu_features_string();

// Kernel paths, in increasing order of capability.
enum class Isa : uint8_t { generic, avx2, avx512, amx };

std::string_view isa_name(Isa isa);                       // "generic", "avx2", "avx512", "amx"
std::optional<Isa> isa_from_name(std::string_view name);
bool isa_usable(Isa isa);           // this CPU and OS can run the path
Isa best_isa();                     // the most capable usable path
std::vector<Isa> usable_isas();     // every usable path, ascending (always starts with generic)

// The path kernels use: MILRT_ISA if set and non-empty, else best_isa().
// Read once and cached; throws milrt::Error naming the variable when it is
// not a known path or names one this machine cannot run.
Isa current_isa();
// Re-reads MILRT_ISA (for tests and tools that change the environment) and
// returns the new current path; throws like current_isa().
Isa reload_isa();
// Makes `isa` the current path (throws milrt::Error when this CPU cannot
// run it); nullopt goes back to MILRT_ISA / best_isa() as reload_isa() does.
void set_isa(std::optional<Isa> isa);

}  // namespace milrt::kernels
