#include "kernels/bench/openblas.h"

#include <dlfcn.h>

namespace milrt::kernels::bench {
namespace {
// cblas.h's enum values (declared here so no BLAS header is needed to build).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
}  // namespace

const OpenBlas* OpenBlas::get() {
  static const OpenBlas* lib = []() -> const OpenBlas* {
    // RTLD_LOCAL: its symbols must not stand in for anything else in the process. Never closed.
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) return nullptr;
    auto* b = new OpenBlas();
    b->sgemm_ = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
    b->set_threads_ = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
    b->config_ = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_config"));
    if (!b->sgemm_) {
      delete b;
      return nullptr;
    }
    return b;
  }();
  return lib;
}

void OpenBlas::sgemm_nt(int64_t M, int64_t N, int64_t K, const float* a, const float* w, float* c) const {
  sgemm_(kRowMajor, kNoTrans, kTrans, int(M), int(N), int(K), 1.0f, a, int(K), w, int(K), 0.0f, c, int(N));
}

void OpenBlas::set_threads(int n) const {
  if (set_threads_) set_threads_(n);
}

std::string OpenBlas::config() const {
  const char* s = config_ ? config_() : nullptr;
  return s ? std::string(s) : std::string();
}

}  // namespace milrt::kernels::bench
