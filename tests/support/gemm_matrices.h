// Operands and outputs for the GEMM kernel tests (test_gemm, test_gemm_amx, test_onednn_gemm): logical
// matrices of exact values, checked against plain fp64 products, and their
// stored forms (f32 or bf16, maybe transposed, NaN in the padding after every
// stored row, so a kernel that reads outside a matrix fails every check).
#pragma once
#include <algorithm>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"

namespace milrt::test {

constexpr double kU32 = 1.0 / (1 << 24);  // fp32 unit roundoff

// Relative rounding bound of a storage type (half an ulp).
inline double unit_roundoff(kernels::ElemType t) {
  switch (t) {
    case kernels::ElemType::f32: return kU32;
    case kernels::ElemType::f16: return 1.0 / (1 << 11);
    case kernels::ElemType::bf16: return 1.0 / (1 << 8);
  }
  return 0;
}

inline const char* type_name(kernels::ElemType t) {
  switch (t) {
    case kernels::ElemType::f32: return "f32";
    case kernels::ElemType::f16: return "f16";
    case kernels::ElemType::bf16: return "bf16";
  }
  return "?";
}

inline double round_to(kernels::ElemType t, double v) {
  switch (t) {
    case kernels::ElemType::f32: return float(v);
    case kernels::ElemType::f16: return f16_to_f32(f32_to_f16(float(v)));
    case kernels::ElemType::bf16: return bf16_to_f32(f32_to_bf16(float(v)));
  }
  return v;
}

// A logical rows×cols matrix of the exact values a kernel should see.
struct Logical {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double at(int64_t r, int64_t c) const { return v[size_t(r * cols + c)]; }
};

// Uniform values in [-1, 1], exactly representable in `t`.
inline Logical random_logical(int64_t rows, int64_t cols, uint32_t seed,
                              kernels::ElemType t = kernels::ElemType::f32) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Logical x{rows, cols, std::vector<double>(size_t(rows * cols))};
  for (double& e : x.v) e = round_to(t, dist(rng));
  return x;
}

inline Logical rounded(const Logical& x, kernels::ElemType t) {
  Logical r = x;
  for (double& e : r.v) e = round_to(t, e);
  return r;
}

// A matrix in memory: f32 or bf16, optionally stored transposed, with `pad`
// NaN elements after every stored row.
class Stored {
 public:
  Stored(const Logical& x, kernels::ElemType type, bool trans, int64_t pad) : type_(type), trans_(trans) {
    const int64_t srows = trans ? x.cols : x.rows, slen = trans ? x.rows : x.cols;
    ld_ = slen + pad;
    const size_t n = size_t(std::max<int64_t>(srows * ld_, 1));
    if (type == kernels::ElemType::f32) f_.assign(n, std::numeric_limits<float>::quiet_NaN());
    else h_.assign(n, 0x7fc0);
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t c = 0; c < x.cols; ++c) {
        const size_t i = size_t(trans ? c * ld_ + r : r * ld_ + c);
        if (type == kernels::ElemType::f32) f_[i] = float(x.at(r, c));
        else h_[i] = f32_to_bf16(float(x.at(r, c)));
      }
  }
  const void* data() const {
    return type_ == kernels::ElemType::f32 ? static_cast<const void*>(f_.data()) : h_.data();
  }
  // The kernel's view; without data for descriptions that take it later.
  kernels::MatrixRef ref(bool with_data = true) const { return {with_data ? data() : nullptr, type_, ld_, trans_}; }

 private:
  kernels::ElemType type_;
  bool trans_;
  int64_t ld_ = 0;
  std::vector<float> f_;
  std::vector<uint16_t> h_;
};

// An M×N output (or residual) buffer of any type with `pad` sentinel
// elements after every row.
class Buffer {
 public:
  static constexpr uint8_t kSentinel = 0xa5;
  Buffer(int64_t M, int64_t N, kernels::ElemType type, int64_t pad)
      : M_(M), N_(N), ld_(N + pad), type_(type), bytes_(size_t(std::max<int64_t>(M * ld_, 1)) * esize(), kSentinel) {}

  void set(int64_t i, int64_t j, double v) {
    uint8_t* p = bytes_.data() + (i * ld_ + j) * esize();
    if (type_ == kernels::ElemType::f32) {
      const float f = float(v);
      std::memcpy(p, &f, 4);
    } else {
      const uint16_t h = type_ == kernels::ElemType::f16 ? milrt::f32_to_f16(float(v)) : milrt::f32_to_bf16(float(v));
      std::memcpy(p, &h, 2);
    }
  }
  uint16_t bits16(int64_t i, int64_t j) const {
    uint16_t h;
    std::memcpy(&h, bytes_.data() + (i * ld_ + j) * 2, 2);
    return h;
  }
  double get(int64_t i, int64_t j) const {
    const uint8_t* p = bytes_.data() + (i * ld_ + j) * esize();
    if (type_ == kernels::ElemType::f32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    const uint16_t h = bits16(i, j);
    return type_ == kernels::ElemType::f16 ? milrt::f16_to_f32(h) : milrt::bf16_to_f32(h);
  }
  bool padding_intact() const {
    for (int64_t i = 0; i < M_; ++i)
      for (size_t b = size_t(N_ * esize()); b < size_t(ld_ * esize()); ++b)
        if (bytes_[i * ld_ * esize() + b] != kSentinel) return false;
    return true;
  }
  kernels::OutputRef out() { return {bytes_.data(), type_, ld_}; }
  const void* data() const { return bytes_.data(); }
  void* data() { return bytes_.data(); }
  const std::vector<uint8_t>& raw() const { return bytes_; }
  int64_t ld() const { return ld_; }
  int64_t rows() const { return M_; }
  int64_t cols() const { return N_; }
  kernels::ElemType type() const { return type_; }

 private:
  int64_t esize() const { return type_ == kernels::ElemType::f32 ? 4 : 2; }
  int64_t M_, N_, ld_;
  kernels::ElemType type_;
  std::vector<uint8_t> bytes_;
};

// Sets kernels::num_threads() for a scope, then restores the default.
struct ThreadCount {
  explicit ThreadCount(int n) { kernels::set_num_threads(n); }
  ~ThreadCount() { kernels::set_num_threads(0); }
};

}  // namespace milrt::test
