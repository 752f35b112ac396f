// milrt/runtime.h: each setting takes effect where the kernels read it, is
// refused with a clear error when it cannot apply, and goes back to its
// environment default.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kernels/cpu_features.h"
#include "kernels/gemm_backend.h"
#include "kernels/threads.h"
#include "milrt/error.h"
#include "milrt/runtime.h"

namespace milrt {
namespace {

TEST(RuntimeSettings, ThreadsSetAndRestored) {
  const int before = threads();
  set_threads(3);
  EXPECT_EQ(threads(), 3);
  EXPECT_EQ(kernels::num_threads(), 3);
  set_threads(0);
  EXPECT_EQ(threads(), before);
}

TEST(RuntimeSettings, IsaReachesTheKernelsAndIsCheckedAgainstTheCpu) {
  const std::string before = isa();
  const std::vector<std::string> usable = usable_isas();
  ASSERT_FALSE(usable.empty());
  EXPECT_EQ(usable.front(), "generic");
  EXPECT_NE(std::find(usable.begin(), usable.end(), before), usable.end());
  set_isa("generic");
  EXPECT_EQ(isa(), "generic");
  EXPECT_EQ(kernels::current_isa(), kernels::Isa::generic);
  try {
    set_isa("sse9");
    FAIL() << "an unknown path was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown kernel path 'sse9'"), std::string::npos) << e.what();
  }
  for (const char* name : {"avx2", "avx512", "amx"}) {
    const bool can = std::find(usable.begin(), usable.end(), name) != usable.end();
    if (can) {
      set_isa(name);
      EXPECT_EQ(isa(), name);
    } else {
      EXPECT_THROW(set_isa(name), Error) << name << " is not usable here and must be refused";
    }
  }
  set_isa("");
  EXPECT_EQ(isa(), before);
}

TEST(RuntimeSettings, GemmBackendSetAndRestored) {
  const std::string before = gemm_backend();
  set_gemm_backend("own");
  EXPECT_EQ(gemm_backend(), "own");
  EXPECT_EQ(kernels::gemm_backend_mode(), kernels::GemmBackendMode::own);
  set_gemm_backend("auto");
  EXPECT_EQ(gemm_backend(), "auto");
  EXPECT_THROW(set_gemm_backend("blas"), Error);
  set_gemm_backend("");
  EXPECT_EQ(gemm_backend(), before);
}

}  // namespace
}  // namespace milrt
