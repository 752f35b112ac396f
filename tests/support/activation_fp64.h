// The activations of kernels/activation.h in plain fp64: the reference the
// kernel tests compare against.
#pragma once
#include <algorithm>
#include <cmath>

#include "kernels/activation.h"

namespace milrt::test {

inline double act64(kernels::Activation a, double x, double lo = 0, double hi = 0) {
  using kernels::Activation;
  switch (a) {
    case Activation::none: return x;
    case Activation::relu: return x > 0 ? x : 0;
    case Activation::sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::silu: return x / (1 + std::exp(-x));
    case Activation::gelu_tanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::clip: return std::min(std::max(x, lo), hi);
    case Activation::tanh: return std::tanh(x);
    case Activation::hard_sigmoid: return std::min(1.0, std::max(0.0, 0.2 * x + 0.5));
  }
  return x;
}

}  // namespace milrt::test
