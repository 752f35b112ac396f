// Elementwise kernels over fp32 / int32 / bool (uint8) buffers with NumPy
// broadcasting described by strides: they know nothing of MIL.
#pragma once
#include <cstdint>

namespace milrt::kernels {

constexpr int kMaxRank = 8;

// Iteration space of a broadcast op: the output's dims and, per operand, the
// element stride along each dim (0 where the operand is broadcast).
struct Broadcast {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[3][kMaxRank] = {};   // operands a, b, c (c for select)
  int64_t numel() const;
  bool contiguous(int operand) const;   // strides are the output's row-major strides
};

enum class Binary {
  Add, Sub, Mul, Div, Max, Min, Pow, FloorDiv, Mod,
  Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual,   // -> bool
  And, Or, Xor,                                               // bool x bool -> bool
};
bool binary_is_comparison(Binary op);

// out = a op b. Arithmetic: T -> T. Comparisons: T -> uint8. Logical: uint8.
void binary_f32(Binary op, const float* a, const float* b, void* out, const Broadcast& bc);
void binary_i32(Binary op, const int32_t* a, const int32_t* b, void* out, const Broadcast& bc);
void binary_u8(Binary op, const uint8_t* a, const uint8_t* b, uint8_t* out, const Broadcast& bc);

// out = cond ? a : b, elements of `bytes` size.
void select(const uint8_t* cond, const void* a, const void* b, void* out, int bytes, const Broadcast& bc);

enum class Unary {
  Abs, Neg, Exp, Exp2, Log, Sqrt, Rsqrt, Inverse, Sin, Cos, Tan, Asin, Acos, Atan, Atanh, Sinh, Cosh, Tanh,
  Erf, Floor, Ceil, Round, Sign, Square, Relu, Relu6, Sigmoid, Silu, GeluExact, GeluTanh, GeluSigmoid,
  Softplus, Softsign, Clip, LeakyRelu, Elu, Threshold, SigmoidHard, ScaledTanh, LinearActivation,
  ThresholdedRelu, ClampedRelu, SoftplusParametric,
};
// y = f(x; alpha, beta, epsilon) for n elements (x and y may alias).
void unary_f32(Unary op, const float* x, float* y, int64_t n, float alpha = 0, float beta = 0, float epsilon = 0);
// The ops with a vectorized loop (unary_vectorized_f32: exp-based ones on a
// polynomial exp, ~1 ulp, not libm), which fused elementwise programs use. It
// also serves gelu-sigmoid, and unary_f32 routes exp, sigmoid, silu and
// gelu-sigmoid through it; for any other op it writes nothing.
bool unary_vectorized(Unary op);
void unary_vectorized_f32(Unary op, const float* x, float* y, int64_t n, float alpha, float beta);


}  // namespace milrt::kernels
