// Gather along one axis (embedding lookups, token selection) on row-major
// arrays viewed as [outer, n, inner]: dst[o, i, :] = src[o, idx[i], :] for
// each of `m` indices; negative indices count from the end (as MIL allows).
#pragma once
#include <cstddef>
#include <cstdint>

namespace milrt::kernels {

// Returns the position of the first index outside [-n, n) (nothing is
// written from there on), or -1 when every index was valid.
int64_t gather_rows(const void* src, int64_t outer, int64_t n, int64_t inner, size_t elem_size,
                    const int32_t* idx, int64_t m, void* dst);

}  // namespace milrt::kernels
