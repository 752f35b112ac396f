// The one vocabulary of elementwise activations that kernels apply after a
// product: GEMM and convolution epilogues and the gates of recurrent cells.
// Each kernel family documents the subset it accepts (see supports_*).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

namespace milrt::kernels {

enum class Activation : uint8_t {
  none,          // x (MIL's "linear" in recurrent cells)
  relu,          // max(x, 0)
  clip,          // min(max(x, lo), hi)
  sigmoid,       // 1 / (1 + e^-x)
  silu,          // x·sigmoid(x)
  gelu_tanh,     // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  tanh,          // tanh(x)
  hard_sigmoid,  // min(max(0.2·x + 0.5, 0), 1): Core ML's recurrent default
};

// Bounds for Activation::clip; ignored by the others.
struct ActivationBounds {
  float lo = 0, hi = 0;
};

// "none", "relu", "clip", "sigmoid", "silu", "gelu_tanh", "tanh", "hard_sigmoid".
const char* activation_name(Activation a);
// The inverse of activation_name; nullopt for any other string.
std::optional<Activation> activation_from_name(std::string_view name);

// The scalar definition, in fp32 with libm: what the portable loops compute.
// Vector paths approximate exp with a polynomial and agree to a few ulps.
inline float activate(Activation a, float x, ActivationBounds b = {}) {
  switch (a) {
    case Activation::none: return x;
    case Activation::relu: return x > 0.0f ? x : 0.0f;
    case Activation::clip: return std::min(std::max(x, b.lo), b.hi);
    case Activation::sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case Activation::silu: return x / (1.0f + std::exp(-x));
    case Activation::gelu_tanh: {
      // 0.5·(1 + tanh(u)) = sigmoid(2u): no cancellation for negative x.
      const float u2 = 1.5957691216f * (x + 0.044715f * x * x * x);
      return x / (1.0f + std::exp(-u2));
    }
    case Activation::tanh: return std::tanh(x);
    case Activation::hard_sigmoid: return std::min(1.0f, std::max(0.0f, 0.2f * x + 0.5f));
  }
  return x;
}

// act in place over n values, with the scalar definition.
inline void activate_all(float* v, int64_t n, Activation a, ActivationBounds b = {}) {
  if (a == Activation::none) return;
  for (int64_t i = 0; i < n; ++i) v[i] = activate(a, v[i], b);
}

}  // namespace milrt::kernels
