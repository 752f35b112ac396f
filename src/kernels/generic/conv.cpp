#include "kernels/generic/conv.h"

#include <algorithm>

namespace milrt::kernels {
namespace {

// The range [lo, hi) of output positions o whose input position
// o * stride + offset lies in [0, n).
void valid_range(int64_t offset, int64_t stride, int64_t n, int64_t out, int64_t& lo, int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  hi = offset >= n ? 0 : (n - 1 - offset) / stride + 1;
  lo = std::min(lo, out);
  hi = std::max(lo, std::min(hi, out));
}

}  // namespace

void conv_f32(const float* x, const float* w, const float* bias, float* y, const ConvGeometry& g) {
  const int64_t cig = g.cin / g.groups, cog = g.cout / g.groups;
  const int64_t nin = g.in[0] * g.in[1] * g.in[2], nout = g.out[0] * g.out[1] * g.out[2];
  const int64_t nk = g.kernel[0] * g.kernel[1] * g.kernel[2];
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t oc = 0; oc < g.cout; ++oc) {
      float* yp = y + (n * g.cout + oc) * nout;
      std::fill(yp, yp + nout, bias ? bias[oc] : 0.0f);
      const int64_t grp = oc / cog;
      for (int64_t icl = 0; icl < cig; ++icl) {
        const float* xp = x + (n * g.cin + grp * cig + icl) * nin;
        const float* wp = w + (oc * cig + icl) * nk;
        for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
          for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
            for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
              const float wv = wp[(k0 * g.kernel[1] + k1) * g.kernel[2] + k2];
              int64_t lo0, hi0, lo1, hi1, lo2, hi2;
              const int64_t off0 = k0 * g.dilation[0] - g.pad_before[0];
              const int64_t off1 = k1 * g.dilation[1] - g.pad_before[1];
              const int64_t off2 = k2 * g.dilation[2] - g.pad_before[2];
              valid_range(off0, g.stride[0], g.in[0], g.out[0], lo0, hi0);
              valid_range(off1, g.stride[1], g.in[1], g.out[1], lo1, hi1);
              valid_range(off2, g.stride[2], g.in[2], g.out[2], lo2, hi2);
              for (int64_t o0 = lo0; o0 < hi0; ++o0)
                for (int64_t o1 = lo1; o1 < hi1; ++o1) {
                  const float* xr = xp + ((o0 * g.stride[0] + off0) * g.in[1] + o1 * g.stride[1] + off1) * g.in[2] + off2;
                  float* yr = yp + (o0 * g.out[1] + o1) * g.out[2];
                  for (int64_t o2 = lo2; o2 < hi2; ++o2) yr[o2] += wv * xr[o2 * g.stride[2]];
                }
            }
      }
    }
}

}  // namespace milrt::kernels
