#include "kernels/cpu_features.h"

#include <atomic>
#include <cstdlib>

#include "kernels/generic/multiversion.h"
#include "milrt/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MILRT_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace milrt::kernels {

namespace {

#ifdef MILRT_X86
struct Regs { unsigned a = 0, b = 0, c = 0, d = 0; };

Regs cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return Regs{};
  return r;
}

// xgetbv without -mxsave: only executed after CPUID reported OSXSAVE.
uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool bit(unsigned v, int i) { return (v >> i) & 1u; }

// Linux keeps AMX tile data off until a process asks for it (kernel >= 5.16).
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  f.os_avx = (xcr0 & 0x6) == 0x6;                  // SSE + AVX state
  f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  f.os_amx = (xcr0 & 0x60000) == 0x60000;           // XTILECFG + XTILEDATA

  const bool avx = bit(l1.c, 28) && f.os_avx;
  f.fma = avx && bit(l1.c, 12);
  f.f16c = avx && bit(l1.c, 29);
  if (max_leaf < 7) return f;
  const Regs l7 = cpuid(7, 0);
  const Regs l7s1 = l7.a >= 1 ? cpuid(7, 1) : Regs{};
  f.avx2 = avx && bit(l7.b, 5);
  f.avx512f = f.os_avx512 && bit(l7.b, 16);
  f.avx512dq = f.avx512f && bit(l7.b, 17);
  f.avx512bw = f.avx512f && bit(l7.b, 30);
  f.avx512vl = f.avx512f && bit(l7.b, 31);
  f.avx512_vnni = f.avx512f && bit(l7.c, 11);
  f.avx512_fp16 = f.avx512f && bit(l7.d, 23);
  f.avx512_bf16 = f.avx512f && bit(l7s1.a, 5);
  const bool amx_hw = bit(l7.d, 24);
  if (amx_hw && f.os_amx) f.amx_permitted = request_amx_permission();
  const bool amx_ok = amx_hw && f.os_amx && f.amx_permitted;
  f.amx_tile = amx_ok;
  f.amx_bf16 = amx_ok && bit(l7.d, 22);
  f.amx_int8 = amx_ok && bit(l7.d, 25);
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

constexpr Isa kAllIsas[] = {Isa::generic, Isa::avx2, Isa::avx512, Isa::amx};

// What each path's kernels are compiled for (see CMakeLists.txt).
bool isa_requirements_met(Isa isa, const CpuFeatures& f) {
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  switch (isa) {
    case Isa::generic: return true;
    case Isa::avx2: return avx2;
    case Isa::avx512: return avx512;
    case Isa::amx: return avx512 && f.avx512_bf16 && f.amx_tile && f.amx_bf16;
  }
  return false;
}

// Throws for a path this CPU cannot run; `what` names who asked ("MILRT_ISA=amx: ").
void require_usable(Isa isa, const std::string& what) {
  if (!isa_usable(isa))
    throw Error(what + "this CPU cannot run the " + std::string(isa_name(isa)) + " kernels (it has: " +
                cpu_features_string() + "; best path: " + std::string(isa_name(best_isa())) + ")");
}

Isa read_isa_env() {
  const char* env = std::getenv("MILRT_ISA");
  if (!env || !*env) return best_isa();
  const auto isa = isa_from_name(env);
  if (!isa)
    throw Error(std::string("MILRT_ISA=") + env + ": unknown kernel path (expected generic, avx2, avx512 or amx)");
  require_usable(*isa, std::string("MILRT_ISA=") + env + ": ");
  return *isa;
}

std::atomic<int> g_current_isa{-1};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  const std::pair<bool, const char*> flags[] = {
      {f.avx2, "avx2"},           {f.fma, "fma"},           {f.f16c, "f16c"},
      {f.avx512f, "avx512f"},     {f.avx512bw, "avx512bw"}, {f.avx512vl, "avx512vl"},
      {f.avx512dq, "avx512dq"},   {f.avx512_bf16, "avx512_bf16"}, {f.avx512_vnni, "avx512_vnni"},
      {f.avx512_fp16, "avx512_fp16"}, {f.amx_tile, "amx_tile"}, {f.amx_bf16, "amx_bf16"},
      {f.amx_int8, "amx_int8"},
  };
  std::string s;
  for (const auto& [on, name] : flags) {
    if (!on) continue;
    if (!s.empty()) s += ' ';
    s += name;
  }
  return s.empty() ? "baseline x86-64 only" : s;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::amx: return "amx";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : kAllIsas)
    if (isa_name(isa) == name) return isa;
  return std::nullopt;
}

bool isa_usable(Isa isa) { return isa_requirements_met(isa, cpu_features()); }

Isa best_isa() {
  Isa best = Isa::generic;
  for (Isa isa : kAllIsas)
    if (isa_usable(isa)) best = isa;
  return best;
}

std::vector<Isa> usable_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas)
    if (isa_usable(isa)) out.push_back(isa);
  return out;
}

Isa current_isa() {
  const int cached = g_current_isa.load(std::memory_order_acquire);
  if (cached >= 0) return Isa(cached);
  return reload_isa();
}

Isa reload_isa() {
  g_current_isa.store(-1, std::memory_order_release);  // a bad value keeps failing, never goes stale
  const Isa isa = read_isa_env();
  g_current_isa.store(int(isa), std::memory_order_release);
  return isa;
}

void set_isa(std::optional<Isa> isa) {
  if (!isa) {
    reload_isa();
    return;
  }
  require_usable(*isa, "");
  g_current_isa.store(int(*isa), std::memory_order_release);
}

namespace detail {

int clone_level() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  // The levels the clones target, as the CPU supports them (GCC's own test:
  // x86-64-v3 also needs BMI2, LZCNT and MOVBE, which isa_usable() does not
  // check).
  static const int cpu = __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3 : 1;
  const Isa isa = current_isa();
  const int want = isa == Isa::avx512 || isa == Isa::amx ? 4 : isa == Isa::avx2 ? 3 : 1;
  return want < cpu ? want : cpu;
#else
  return 1;
#endif
}

}  // namespace detail

}  // namespace milrt::kernels
