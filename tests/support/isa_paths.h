// The weight_gemm paths this CPU runs, for the kernel tests that loop over
// them: usable_isas(), after naming on stdout (once) each path it cannot run,
// which the tests therefore skip, and which loops the avx512 path takes for
// int8 activations (vpdpbusd needs avx512_vnni; without it the AVX2 loops run).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"

namespace milrt::test {

inline std::vector<kernels::Isa> tested_paths() {
  using kernels::Isa;
  static bool said = false;
  if (!said) {
    said = true;
    for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::amx})
      if (!kernels::isa_usable(isa))
        std::printf("[ skip ] the %s path: this CPU cannot run it\n", std::string(kernels::isa_name(isa)).c_str());
    if (kernels::isa_usable(Isa::avx512))
      std::printf(kernels::cpu_features().avx512_vnni
                      ? "[ info ] avx512 int8 activations: vpdpbusd (avx512_vnni)\n"
                      : "[ skip ] avx512 int8 activations by vpdpbusd: no avx512_vnni (the AVX2 loops run instead)\n");
  }
  return kernels::usable_isas();
}

}  // namespace milrt::test
