// Gathers and scatters driven by run-time index arrays, on row-major arrays
// viewed as [outer, n, inner] around the indexed axis (or as [rows, inner]
// for the nd forms). They know nothing of MIL: callers pass resolved shapes.
//
// Every index is checked against its dim before anything is read or
// written: an index i of a dim of size n is valid in [lo, n), where lo is -n
// when negative indices count from the end (MIL's default) and 0 when they
// are rejected (validate_indices). Each kernel returns the flat position of
// the first bad index in the index array, or -1 when all are valid.
//
// Scatters apply updates in the row-major order of `updates`, one thread,
// so repeated indices combine in a fixed order (the last "update" wins,
// "add" sums in index order) and results never depend on the thread count.
#pragma once
#include <cstddef>
#include <cstdint>

namespace milrt::kernels {

enum class ScatterMode { Update, Add, Sub, Mul, Div, Max, Min };

// dst[o, j, i] = src[o, idx[o, j, i], i]; idx and dst are [outer, m, inner].
int64_t gather_along_axis(const void* src, int64_t outer, int64_t n, int64_t inner, size_t elem_size,
                          const int32_t* idx, int64_t m, bool allow_negative, void* dst);

// data[o, idx[o, j, i], i] (mode)= upd[o, j, i]; idx and upd are [outer, m, inner].
// T is float or int32_t (which saturates, as a cast does; Div is float only).
template <class T>
int64_t scatter_along_axis(T* data, int64_t outer, int64_t n, int64_t inner, const int32_t* idx, const T* upd,
                           int64_t m, ScatterMode mode, bool allow_negative);

// data[o, idx[j], :] (mode)= upd[o, j, :]; idx has m entries, upd is [outer, m, inner].
template <class T>
int64_t scatter_rows(T* data, int64_t outer, int64_t n, int64_t inner, const int32_t* idx, const T* upd, int64_t m,
                     ScatterMode mode, bool allow_negative);

// The nd forms address the first k dims `dims` of an array through rows of
// k indices. With `batch` > 1 the array is [batch, prod(dims), inner] and the
// index rows [batch, m, k]; each batch uses its own slab.
// dst[b, r, :] = src[b, row(idx[b, r, :]), :]
int64_t gather_nd(const void* src, int64_t batch, const int64_t* dims, int64_t k, int64_t inner, size_t elem_size,
                  const int32_t* idx, int64_t m, bool allow_negative, void* dst);

// data[row(idx[r, :]), :] (mode)= upd[r, :] for r < m.
template <class T>
int64_t scatter_nd(T* data, const int64_t* dims, int64_t k, int64_t inner, const int32_t* idx, const T* upd,
                   int64_t m, ScatterMode mode, bool allow_negative);

}  // namespace milrt::kernels
