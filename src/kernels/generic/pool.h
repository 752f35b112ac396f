// Pooling and upsampling over channel-first planes. Knows nothing of MIL:
// callers pass the geometry already resolved (output sizes, padding before
// each spatial dim, the padded extent).
#pragma once
#include <cstdint>

namespace milrt::kernels {

enum class PoolKind { Max, Avg, L2 };

// `planes` independent row-major planes of nsp (1 to 3) spatial dims. Output
// position o along dim d reads inputs [o·stride - before, o·stride - before +
// kernel) that lie in [0, in); positions outside are padding and hold no
// value. Max: the largest input (-inf for a window of padding only). L2:
// sqrt of the sum of squares. Avg: the sum divided by the number of inputs
// read when exclude_padding, else by the window's size clipped to the
// padded extent [-before, in + after) (0 when the divisor is 0).
struct PoolGeometry {
  int64_t planes = 1;
  int nsp = 2;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1};
  int64_t before[3] = {0, 0, 0}, after[3] = {0, 0, 0};
};
void pool_f32(const float* x, float* y, const PoolGeometry& g, PoolKind kind, bool exclude_padding);

// How upsampling maps output coordinate i of `out` to the input axis of `in`.
enum class UpsampleMode {
  Nearest,      // floor(i · in / out)
  AlignCorners, // bilinear at i · (in - 1) / (out - 1) (0 when out == 1)
  HalfPixel,    // bilinear at (i + 0.5) · in / out - 0.5, clamped to [0, in - 1]
  Asymmetric,   // bilinear at i · in / out, clamped to [0, in - 1]
};
// y [planes, ho, wo] from x [planes, h, w]. Allocates a small index table.
void upsample_f32(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int64_t ho, int64_t wo,
                  UpsampleMode mode);

}  // namespace milrt::kernels
