// OpenBLAS's sgemm as a peer in benchmarks, loaded at run time: milrt never
// links BLAS, so a machine without libopenblas.so.0 just has no figure.
#pragma once
#include <cstdint>
#include <string>

namespace milrt::kernels::bench {

class OpenBlas {
 public:
  // The library, loaded on the first call (thread-safe); null when
  // libopenblas.so.0 or its cblas_sgemm cannot be loaded.
  static const OpenBlas* get();

  // C[M,N] = A[M,K] · Wᵀ with W [N,K] row-major (a linear layer's weight): all fp32, row-major.
  void sgemm_nt(int64_t M, int64_t N, int64_t K, const float* a, const float* w, float* c) const;
  // The threads OpenBLAS's own pool uses (no-op where the library has no setter).
  void set_threads(int n) const;
  // openblas_get_config() ("OpenBLAS 0.3.21 ... Haswell MAX_THREADS=64"), or "".
  std::string config() const;

 private:
  OpenBlas() = default;
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  Sgemm sgemm_ = nullptr;
  void (*set_threads_)(int) = nullptr;
  char* (*config_)() = nullptr;
};

}  // namespace milrt::kernels::bench
