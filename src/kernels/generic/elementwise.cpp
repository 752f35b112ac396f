#include "kernels/generic/elementwise.h"
#include "kernels/generic/multiversion.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/generic/vec_math.h"
#include "kernels/threads.h"

namespace milrt::kernels {

int64_t Broadcast::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Broadcast::contiguous(int k) const {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (dims[i] != 1 && stride[k][i] != s) return false;
    s *= dims[i];
  }
  return true;
}

bool binary_is_comparison(Binary op) { return op >= Binary::Equal && op <= Binary::GreaterEqual; }

namespace {

// Walks rows [row0, row1) of the broadcast iteration space (a row: the
// innermost dim), calling f(out_index, ia, ib, ic). The innermost dim runs as
// a tight loop so the compiler can vectorize it.
template <class F>
void for_each_rows(const Broadcast& bc, int64_t row0, int64_t row1, F f) {
  if (bc.rank == 0) { f(0, 0, 0, 0); return; }
  const int r = bc.rank;
  const int64_t inner = bc.dims[r - 1];
  if (inner == 0 || row0 >= row1) return;
  int64_t idx[kMaxRank] = {};
  int64_t off[3] = {0, 0, 0};
  for (int64_t rest = row0, d = r - 2; d >= 0; --d) {
    idx[d] = rest % bc.dims[d];
    rest /= bc.dims[d];
    for (int k = 0; k < 3; ++k) off[k] += idx[d] * bc.stride[k][d];
  }
  const int64_t sa = bc.stride[0][r - 1], sb = bc.stride[1][r - 1], sc = bc.stride[2][r - 1];
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t o = row * inner;
    for (int64_t i = 0; i < inner; ++i) f(o + i, off[0] + i * sa, off[1] + i * sb, off[2] + i * sc);
    for (int d = r - 2; d >= 0; --d) {
      for (int k = 0; k < 3; ++k) off[k] += bc.stride[k][d];
      if (++idx[d] < bc.dims[d]) break;
      for (int k = 0; k < 3; ++k) off[k] -= bc.stride[k][d] * bc.dims[d];
      idx[d] = 0;
    }
  }
}

template <class F>
void for_each(const Broadcast& bc, F f) {
  const int64_t rows = bc.rank == 0 || bc.dims[bc.rank - 1] == 0 ? 1 : bc.numel() / bc.dims[bc.rank - 1];
  for_each_rows(bc, 0, rows, f);
}

// for_each on num_threads() threads, rows split evenly, once the output is
// large enough to pay for the fork: these passes are memory-bound, and a
// second core nearly doubles the bandwidth. Each element is computed alone,
// so the bits do not depend on the split.
template <class F>
void parallel_for_each(const Broadcast& bc, F f) {
  const int64_t n = bc.numel();
  const int64_t rows = bc.rank == 0 || bc.dims[bc.rank - 1] == 0 ? 1 : n / bc.dims[bc.rank - 1];
  const int threads = pass_threads(n, rows);
  if (threads <= 1) return for_each_rows(bc, 0, rows, f);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    for_each_rows(bc, rows * t / nt, rows * (t + 1) / nt, f);
  }
}

template <class T>
T arith(Binary op, T a, T b) {
  switch (op) {
    case Binary::Add: return a + b;
    case Binary::Sub: return a - b;
    case Binary::Mul: return a * b;
    case Binary::Max: return a > b || std::isnan(double(a)) ? a : b;
    case Binary::Min: return a < b || std::isnan(double(a)) ? a : b;
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Binary::Div: return a / b;
      case Binary::Pow: return std::pow(a, b);
      case Binary::FloorDiv: return std::floor(a / b);
      case Binary::Mod: { T m = std::fmod(a, b); return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }
      default: return 0;
    }
  } else {
    // Integer division and modulo follow NumPy: floor, remainder takes the divisor's sign, 0 on /0.
    switch (op) {
      case Binary::Div: return b == 0 ? 0 : T(a / b);
      case Binary::Pow: return T(std::pow(double(a), double(b)));
      case Binary::FloorDiv: {
        if (b == 0) return 0;
        T q = a / b;
        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
      }
      case Binary::Mod: {
        if (b == 0) return 0;
        T m = a % b;
        return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
      }
      default: return 0;
    }
  }
}

template <class T>
uint8_t compare(Binary op, T a, T b) {
  switch (op) {
    case Binary::Equal: return a == b;
    case Binary::NotEqual: return a != b;
    case Binary::Less: return a < b;
    case Binary::LessEqual: return a <= b;
    case Binary::Greater: return a > b;
    case Binary::GreaterEqual: return a >= b;
    default: return 0;
  }
}

template <class T>
void binary(Binary op, const T* a, const T* b, void* out, const Broadcast& bc) {
  if (binary_is_comparison(op)) {
    auto* o = static_cast<uint8_t*>(out);
    for_each(bc, [&](int64_t i, int64_t ia, int64_t ib, int64_t) { o[i] = compare(op, a[ia], b[ib]); });
    return;
  }
  auto* o = static_cast<T*>(out);
  // The common cases get loops the compiler vectorizes: same shape, or a scalar operand.
  int64_t n = bc.numel();
  bool ca = bc.contiguous(0), cb = bc.contiguous(1);
  auto run = [&](auto fn) {
    if (ca && cb) {
      const int threads = pass_threads(n);
#pragma omp parallel for simd num_threads(threads) schedule(static) if (threads > 1)
      for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i], b[i]);
      return;
    }
    parallel_for_each(bc, [&](int64_t i, int64_t ia, int64_t ib, int64_t) { o[i] = fn(a[ia], b[ib]); });
  };
  switch (op) {
    case Binary::Add: run([](T x, T y) { return T(x + y); }); return;
    case Binary::Sub: run([](T x, T y) { return T(x - y); }); return;
    case Binary::Mul: run([](T x, T y) { return T(x * y); }); return;
    default: run([op](T x, T y) { return arith(op, x, y); }); return;
  }
}

float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
}  // namespace

void binary_f32(Binary op, const float* a, const float* b, void* out, const Broadcast& bc) { binary(op, a, b, out, bc); }
void binary_i32(Binary op, const int32_t* a, const int32_t* b, void* out, const Broadcast& bc) { binary(op, a, b, out, bc); }

void binary_u8(Binary op, const uint8_t* a, const uint8_t* b, uint8_t* out, const Broadcast& bc) {
  for_each(bc, [&](int64_t i, int64_t ia, int64_t ib, int64_t) {
    bool x = a[ia] != 0, y = b[ib] != 0;
    switch (op) {
      case Binary::And: out[i] = x && y; break;
      case Binary::Or: out[i] = x || y; break;
      case Binary::Xor: out[i] = x != y; break;
      default: out[i] = compare(op, a[ia], b[ib]); break;
    }
  });
}

void select(const uint8_t* cond, const void* a, const void* b, void* out, int bytes, const Broadcast& bc) {
  auto* pa = static_cast<const uint8_t*>(a);
  auto* pb = static_cast<const uint8_t*>(b);
  auto* po = static_cast<uint8_t*>(out);
  // Operand order in the Broadcast: 0 = cond, 1 = a, 2 = b.
  for_each(bc, [&](int64_t i, int64_t ic, int64_t ia, int64_t ib) {
    std::memcpy(po + i * bytes, cond[ic] ? pa + ia * bytes : pb + ib * bytes, size_t(bytes));
  });
}

namespace {

// tanh(|x|) = 1 - 2 / (e^{2|x|} + 1), sign restored; near 0, where that
// cancels, its Taylor series (error < 1e-12 relative for |x| < 0.0625).
inline float tanh_poly(float x) {
  float a = std::fabs(x);
  float t = 1.0f - 2.0f / (exp_poly(2.0f * a) + 1.0f);
  float x2 = x * x;
  float small = x * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  float r = a < 0.0625f ? small : std::copysign(t, x);
  return x != x ? x : r;
}

// Large arrays in one chunk per thread (each element is independent, so the
// results do not depend on the split).
void exp_activation_threaded(Unary op, const float* x, float* y, int64_t n) {
  for_each_chunk(n, [&](int64_t b, int64_t e) { unary_vectorized_f32(op, x + b, y + b, e - b, 0, 0); });
}

}  // namespace

// The arithmetic loops are cloned per ISA (MILRT_CLONES: the current path's clone) so the
// same source runs 16 lanes wide on AVX-512 machines and still runs anywhere;
// exp-based ones on exp_poly (vec_math.h): libm's expf is a call per element.
MILRT_CLONES(void, unary_vectorized_f32,
             (Unary op, const float* x, float* y, int64_t n, float alpha, float beta),
             (op, x, y, n, alpha, beta)) {
  switch (op) {
    case Unary::Abs: for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]); return;
    case Unary::Square: for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i]; return;
    // NaN stays NaN (the comparisons are false for it), as in the generic kernel.
    case Unary::Relu: for (int64_t i = 0; i < n; ++i) { float v = x[i]; y[i] = v < 0 ? 0.0f : v; } return;
    case Unary::Clip:
      for (int64_t i = 0; i < n; ++i) { float v = x[i]; v = v < alpha ? alpha : v; y[i] = v > beta ? beta : v; }
      return;
    case Unary::Exp: for (int64_t i = 0; i < n; ++i) y[i] = exp_poly(x[i]); return;
    case Unary::Sigmoid: for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + exp_poly(-x[i])); return;
    case Unary::Silu: for (int64_t i = 0; i < n; ++i) { float v = x[i]; y[i] = v / (1.0f + exp_poly(-v)); } return;
    case Unary::GeluSigmoid: for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + exp_poly(-1.702f * x[i])); return;
    case Unary::Tanh: for (int64_t i = 0; i < n; ++i) y[i] = tanh_poly(x[i]); return;
    default: return;
  }
}

bool unary_vectorized(Unary op) {
  return op == Unary::Exp || op == Unary::Sigmoid || op == Unary::Silu || op == Unary::Tanh || op == Unary::Abs ||
         op == Unary::Square || op == Unary::Relu || op == Unary::Clip;
}

void unary_f32(Unary op, const float* x, float* y, int64_t n, float alpha, float beta, float eps) {
  auto run = [&](auto f) { for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]); };
  switch (op) {
    case Unary::Exp:
    case Unary::Sigmoid:
    case Unary::Silu:
    case Unary::GeluSigmoid: return exp_activation_threaded(op, x, y, n);
    case Unary::Abs: run([](float v) { return std::fabs(v); }); return;
    case Unary::Neg: run([](float v) { return -v; }); return;
    case Unary::Exp2: run([](float v) { return std::exp2(v); }); return;
    case Unary::Log: run([eps](float v) { return std::log(v + eps); }); return;
    case Unary::Sqrt: run([](float v) { return std::sqrt(v); }); return;
    case Unary::Rsqrt: run([eps](float v) { return 1.0f / std::sqrt(v + eps); }); return;
    case Unary::Inverse: run([eps](float v) { return 1.0f / (v + eps); }); return;
    case Unary::Sin: run([](float v) { return std::sin(v); }); return;
    case Unary::Cos: run([](float v) { return std::cos(v); }); return;
    case Unary::Tan: run([](float v) { return std::tan(v); }); return;
    case Unary::Asin: run([](float v) { return std::asin(v); }); return;
    case Unary::Acos: run([](float v) { return std::acos(v); }); return;
    case Unary::Atan: run([](float v) { return std::atan(v); }); return;
    case Unary::Atanh: run([](float v) { return std::atanh(v); }); return;
    case Unary::Sinh: run([](float v) { return std::sinh(v); }); return;
    case Unary::Cosh: run([](float v) { return std::cosh(v); }); return;
    case Unary::Tanh: run([](float v) { return std::tanh(v); }); return;
    case Unary::Erf: run([](float v) { return std::erf(v); }); return;
    case Unary::Floor: run([](float v) { return std::floor(v); }); return;
    case Unary::Ceil: run([](float v) { return std::ceil(v); }); return;
    case Unary::Round: run([](float v) { return std::nearbyint(v); }); return;  // ties to even
    case Unary::Sign: run([](float v) { return float((v > 0) - (v < 0)); }); return;
    case Unary::Square: run([](float v) { return v * v; }); return;
    case Unary::Relu: run([](float v) { return v > 0 ? v : (std::isnan(v) ? v : 0.0f); }); return;
    case Unary::Relu6: run([](float v) { return std::isnan(v) ? v : std::fmin(std::fmax(v, 0.0f), 6.0f); }); return;
    case Unary::GeluExact: run([](float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }); return;
    case Unary::GeluTanh: run(gelu_tanh); return;
    case Unary::Softplus: run([](float v) { return std::fmax(v, 0.0f) + std::log1p(std::exp(-std::fabs(v))); }); return;
    case Unary::Softsign: run([](float v) { return v / (1.0f + std::fabs(v)); }); return;
    case Unary::Clip: run([=](float v) { return std::isnan(v) ? v : std::fmin(std::fmax(v, alpha), beta); }); return;
    case Unary::LeakyRelu: run([=](float v) { return v >= 0 ? v : alpha * v; }); return;
    case Unary::Elu: run([=](float v) { return v > 0 ? v : alpha * (std::exp(v) - 1.0f); }); return;
    case Unary::Threshold: run([=](float v) { return std::fmax(v, alpha); }); return;
    case Unary::SigmoidHard: run([=](float v) { return std::fmin(std::fmax(alpha * v + beta, 0.0f), 1.0f); }); return;
    case Unary::ScaledTanh: run([=](float v) { return alpha * std::tanh(beta * v); }); return;
    case Unary::LinearActivation: run([=](float v) { return alpha * v + beta; }); return;
    case Unary::ThresholdedRelu: run([=](float v) { return v >= alpha ? v : 0.0f; }); return;
    case Unary::ClampedRelu: run([=](float v) { return std::fmin(beta, v >= 0 ? v : alpha * v); }); return;
    case Unary::SoftplusParametric: run([=](float v) { return alpha * std::log1p(std::exp(beta * v)); }); return;
  }
}

}  // namespace milrt::kernels
