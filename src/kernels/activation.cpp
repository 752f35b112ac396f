#include "kernels/activation.h"

namespace milrt::kernels {

namespace {
constexpr Activation kAll[] = {Activation::none,    Activation::relu,      Activation::clip, Activation::sigmoid,
                               Activation::silu,    Activation::gelu_tanh, Activation::tanh, Activation::hard_sigmoid};
}  // namespace

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::none: return "none";
    case Activation::relu: return "relu";
    case Activation::clip: return "clip";
    case Activation::sigmoid: return "sigmoid";
    case Activation::silu: return "silu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::tanh: return "tanh";
    case Activation::hard_sigmoid: return "hard_sigmoid";
  }
  return "?";
}

std::optional<Activation> activation_from_name(std::string_view name) {
  for (Activation a : kAll)
    if (name == activation_name(a)) return a;
  return std::nullopt;
}

}  // namespace milrt::kernels
