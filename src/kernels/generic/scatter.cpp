#include "kernels/generic/scatter.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

namespace milrt::kernels {
namespace {

inline bool bad(int32_t v, int64_t n, bool allow_negative) { return v >= n || v < (allow_negative ? -n : 0); }
inline int64_t wrap(int32_t v, int64_t n) { return v < 0 ? v + n : v; }

int64_t first_bad(const int32_t* idx, int64_t count, int64_t n, bool allow_negative) {
  for (int64_t i = 0; i < count; ++i)
    if (bad(idx[i], n, allow_negative)) return i;
  return -1;
}

// One combine per mode, hoisted out of the loops: `apply` runs the whole
// scatter with `op` inlined.
// Integers combine in int64 and saturate (as a cast to int32 does), so no
// overflow is undefined; their division is the caller's to refuse.
template <class T>
T narrow(int64_t v) {
  return T(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX));
}
template <class T, class Apply>
void with_mode(ScatterMode mode, Apply apply) {
  constexpr bool is_int = std::is_integral_v<T>;
  switch (mode) {
    case ScatterMode::Update: return apply([](T, T u) { return u; });
    case ScatterMode::Add:
      if constexpr (is_int) return apply([](T d, T u) { return narrow<T>(int64_t(d) + u); });
      else return apply([](T d, T u) { return T(d + u); });
    case ScatterMode::Sub:
      if constexpr (is_int) return apply([](T d, T u) { return narrow<T>(int64_t(d) - u); });
      else return apply([](T d, T u) { return T(d - u); });
    case ScatterMode::Mul:
      if constexpr (is_int) return apply([](T d, T u) { return narrow<T>(int64_t(d) * u); });
      else return apply([](T d, T u) { return T(d * u); });
    case ScatterMode::Div:
      if constexpr (is_int) return;
      else return apply([](T d, T u) { return T(d / u); });
    case ScatterMode::Max: return apply([](T d, T u) { return std::max(d, u); });
    case ScatterMode::Min: return apply([](T d, T u) { return std::min(d, u); });
  }
}

// Row (flat index over dims[0..k)) of index row r of `idx`, or -1 when an
// entry is bad (its position is then stored in `at`).
int64_t nd_row(const int32_t* idx, int64_t r, const int64_t* dims, int64_t k, bool allow_negative, int64_t& at) {
  int64_t row = 0;
  for (int64_t j = 0; j < k; ++j) {
    int32_t v = idx[r * k + j];
    if (bad(v, dims[j], allow_negative)) {
      at = r * k + j;
      return -1;
    }
    row = row * dims[j] + wrap(v, dims[j]);
  }
  return row;
}

}  // namespace

int64_t gather_along_axis(const void* src, int64_t outer, int64_t n, int64_t inner, size_t elem_size,
                          const int32_t* idx, int64_t m, bool allow_negative, void* dst) {
  if (int64_t b = first_bad(idx, outer * m * inner, n, allow_negative); b >= 0) return b;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < m; ++j) {
      const int32_t* ix = idx + (o * m + j) * inner;
      uint8_t* out = d + size_t((o * m + j) * inner) * elem_size;
      const uint8_t* base = s + size_t(o * n * inner) * elem_size;
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(out + size_t(i) * elem_size, base + size_t(wrap(ix[i], n) * inner + i) * elem_size, elem_size);
    }
  return -1;
}

template <class T>
int64_t scatter_along_axis(T* data, int64_t outer, int64_t n, int64_t inner, const int32_t* idx, const T* upd,
                           int64_t m, ScatterMode mode, bool allow_negative) {
  if (int64_t b = first_bad(idx, outer * m * inner, n, allow_negative); b >= 0) return b;
  with_mode<T>(mode, [&](auto op) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < m; ++j) {
        const int64_t at = (o * m + j) * inner;
        T* base = data + o * n * inner;
        for (int64_t i = 0; i < inner; ++i) {
          T& t = base[wrap(idx[at + i], n) * inner + i];
          t = op(t, upd[at + i]);
        }
      }
  });
  return -1;
}

template <class T>
int64_t scatter_rows(T* data, int64_t outer, int64_t n, int64_t inner, const int32_t* idx, const T* upd, int64_t m,
                     ScatterMode mode, bool allow_negative) {
  if (int64_t b = first_bad(idx, m, n, allow_negative); b >= 0) return b;
  with_mode<T>(mode, [&](auto op) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < m; ++j) {
        T* t = data + (o * n + wrap(idx[j], n)) * inner;
        const T* u = upd + (o * m + j) * inner;
        for (int64_t i = 0; i < inner; ++i) t[i] = op(t[i], u[i]);
      }
  });
  return -1;
}

int64_t gather_nd(const void* src, int64_t batch, const int64_t* dims, int64_t k, int64_t inner, size_t elem_size,
                  const int32_t* idx, int64_t m, bool allow_negative, void* dst) {
  int64_t rows = 1;
  for (int64_t j = 0; j < k; ++j) rows *= dims[j];
  const size_t row_bytes = size_t(inner) * elem_size;
  int64_t at = -1;
  for (int64_t r = 0; r < batch * m; ++r)
    if (nd_row(idx, r, dims, k, allow_negative, at) < 0) return at;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < m; ++r) {
      int64_t row = nd_row(idx, b * m + r, dims, k, allow_negative, at);
      std::memcpy(d + size_t(b * m + r) * row_bytes, s + size_t(b * rows + row) * row_bytes, row_bytes);
    }
  return -1;
}

template <class T>
int64_t scatter_nd(T* data, const int64_t* dims, int64_t k, int64_t inner, const int32_t* idx, const T* upd,
                   int64_t m, ScatterMode mode, bool allow_negative) {
  int64_t at = -1;
  for (int64_t r = 0; r < m; ++r)
    if (nd_row(idx, r, dims, k, allow_negative, at) < 0) return at;
  with_mode<T>(mode, [&](auto op) {
    for (int64_t r = 0; r < m; ++r) {
      T* t = data + nd_row(idx, r, dims, k, allow_negative, at) * inner;
      const T* u = upd + r * inner;
      for (int64_t i = 0; i < inner; ++i) t[i] = op(t[i], u[i]);
    }
  });
  return -1;
}

template int64_t scatter_along_axis<float>(float*, int64_t, int64_t, int64_t, const int32_t*, const float*, int64_t,
                                           ScatterMode, bool);
template int64_t scatter_along_axis<int32_t>(int32_t*, int64_t, int64_t, int64_t, const int32_t*, const int32_t*,
                                             int64_t, ScatterMode, bool);
template int64_t scatter_rows<float>(float*, int64_t, int64_t, int64_t, const int32_t*, const float*, int64_t,
                                     ScatterMode, bool);
template int64_t scatter_rows<int32_t>(int32_t*, int64_t, int64_t, int64_t, const int32_t*, const int32_t*, int64_t,
                                       ScatterMode, bool);
template int64_t scatter_nd<float>(float*, const int64_t*, int64_t, int64_t, const int32_t*, const float*, int64_t,
                                   ScatterMode, bool);
template int64_t scatter_nd<int32_t>(int32_t*, const int64_t*, int64_t, int64_t, const int32_t*, const int32_t*,
                                     int64_t, ScatterMode, bool);

}  // namespace milrt::kernels
