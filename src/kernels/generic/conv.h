// Direct fp32 convolution over up to three spatial dims. Knows nothing of MIL:
// callers resolve padding, strides and dilations beforehand; 1-D and 2-D
// convolutions pass size-1 leading spatial dims (kernel 1, stride 1, no pad).
#pragma once
#include <cstdint>

namespace milrt::kernels {

struct ConvGeometry {
  int64_t batch = 1, cin = 1, cout = 1, groups = 1;
  int64_t in[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t pad_before[3] = {0, 0, 0};   // leading zero padding; trailing padding is implied by `out`
};

// y [batch, cout, out...] = bias + conv(x [batch, cin, in...], w [cout, cin / groups, kernel...]);
// `bias` (cout values) may be null. Allocates nothing.
void conv_f32(const float* x, const float* w, const float* bias, float* y, const ConvGeometry& g);

}  // namespace milrt::kernels
