// Padding of a row-major array by constant, reflected or replicated values.
// Knows nothing of MIL: callers pass dims and per-dim padding already resolved.
#pragma once
#include <cstdint>

namespace milrt::kernels {

enum class PadMode { Constant, Reflect, Replicate };

// dst (dims in_dims[d] + before[d] + after[d]) = src (dims in_dims) padded per
// dim: Constant writes the `bytes`-sized value at `fill`; Reflect mirrors
// without repeating the edge (before/after <= n - 1); Replicate repeats the
// edge. Rank at most 16; allocates nothing.
void pad(const void* src, void* dst, int rank, const int64_t* in_dims, const int64_t* before, const int64_t* after,
         PadMode mode, const void* fill, int bytes);

}  // namespace milrt::kernels
