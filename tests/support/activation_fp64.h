// The GEMM epilogue activations (kernels/gemm.h) in plain fp64: the reference
// the kernel tests compare against.
#pragma once
#include <cmath>

#include "kernels/gemm.h"

namespace milrt::test {

inline double act64(kernels::Activation a, double x) {
  using kernels::Activation;
  switch (a) {
    case Activation::none: return x;
    case Activation::relu: return x > 0 ? x : 0;
    case Activation::sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::silu: return x / (1 + std::exp(-x));
    case Activation::gelu_tanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

}  // namespace milrt::test
