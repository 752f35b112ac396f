#include "kernels/generic/conv.h"

#include <algorithm>
#include <cstring>
#include <climits>
#include <cmath>

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

// Below this many output channels per group a GEMM's columns are mostly
// padding (depthwise convs): the plain loop is faster there.
constexpr int64_t kMinGemmChannels = 8;
// The im2col buffer is capped (floats) so huge images fall back to the plain loop
// rather than doubling their memory.
constexpr int64_t kMaxColumnFloats = int64_t(1) << 24;


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


ConvKernel::ConvKernel(const ConvGeometry& g, const float* weight, Activation act, ActivationBounds bounds)
    : g_(g), act_(act), bounds_(bounds) {
  const int64_t cig = g.cin / g.groups, cog = g.cout / g.groups;
  const int64_t nout = g.out[0] * g.out[1] * g.out[2], nk = g.kernel[0] * g.kernel[1] * g.kernel[2];
  rows_ = g.batch * nout;
  k_ = cig * nk;
  const int64_t nin = g.in[0] * g.in[1] * g.in[2];
  if (!weight || cog < kMinGemmChannels || rows_ * k_ > kMaxColumnFloats || nin > INT32_MAX) return;
  // Where each tap of each output position reads, resolved once as runs of
  // consecutive input offsets: im2col then copies runs instead of gathering
  // one element at a time (Silero VAD's 256-tap STFT conv is one run a row).
  run_begin_.push_back(0);
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
        int64_t covered = 0, tap = 0;
        for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
          for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
            for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2, ++tap) {
              const int64_t p0 = o0 * g.stride[0] + k0 * g.dilation[0] - g.pad_before[0];
              const int64_t p1 = o1 * g.stride[1] + k1 * g.dilation[1] - g.pad_before[1];
              const int64_t p2 = o2 * g.stride[2] + k2 * g.dilation[2] - g.pad_before[2];
              if (p0 < 0 || p0 >= g.in[0] || p1 < 0 || p1 >= g.in[1] || p2 < 0 || p2 >= g.in[2]) continue;
              const int32_t src = int32_t((p0 * g.in[1] + p1) * g.in[2] + p2);
              TapRun* last = runs_.size() > size_t(run_begin_.back()) ? &runs_.back() : nullptr;
              if (last && last->tap + last->len == tap && last->src + last->len == src) ++last->len;
              else runs_.push_back({int32_t(tap), src, 1});
              ++covered;
            }
        full_.push_back(covered == nk);
        run_begin_.push_back(int64_t(runs_.size()));
      }
  // Group g's weights [cog, k_] are row-major, so op(B) = their transpose.
  for (int64_t grp = 0; grp < g.groups; ++grp)
    packed_.emplace_back(MatrixRef{weight + grp * cog * k_, ElemType::f32, k_, true}, k_, cog);
  cols_.assign(size_t(rows_ * k_), 0.0f);
  acc_.assign(size_t(rows_ * cog), 0.0f);
}

ConvKernel::ConvKernel(ConvKernel&&) noexcept = default;
ConvKernel::~ConvKernel() = default;

void ConvKernel::run(const float* x, const float* w, const float* bias, float* y) const {
  const ConvGeometry& g = g_;
  const int64_t nout = g.out[0] * g.out[1] * g.out[2];
  if (packed_.empty()) {
    conv_f32(x, w, bias, y, g);
    activate_all(y, g.batch * g.cout * nout, act_, bounds_);
    return;
  }
  const int64_t cig = g.cin / g.groups, cog = g.cout / g.groups;
  const int64_t nin = g.in[0] * g.in[1] * g.in[2], nk = g.kernel[0] * g.kernel[1] * g.kernel[2];
  float* cols = cols_.data();
  float* acc = acc_.data();
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    // cols[(n, p), (icl, tap)]: the input patch of output position p.
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* xg = x + (n * g.cin + grp * cig) * nin;
      for (int64_t p = 0; p < nout; ++p) {
        float* row = cols + (n * nout + p) * k_;
        const TapRun* r0 = runs_.data() + run_begin_[size_t(p)];
        const TapRun* r1 = runs_.data() + run_begin_[size_t(p) + 1];
        if (!full_[size_t(p)]) std::fill(row, row + cig * nk, 0.0f);
        for (int64_t icl = 0; icl < cig; ++icl) {
          const float* xc = xg + icl * nin;
          float* r = row + icl * nk;
          for (const TapRun* t = r0; t < r1; ++t) {
            // A call to memmove costs more than a short run (3 taps) takes.
            if (t->len >= 16) std::memcpy(r + t->tap, xc + t->src, size_t(t->len) * sizeof(float));
            else
              for (int32_t j = 0; j < t->len; ++j) r[t->tap + j] = xc[t->src + j];
          }
        }
      }
    }
    // The bias in the GEMM's epilogue. One output position: the GEMM's rows
    // (n) are y's rows, so it writes y itself; else acc [(n, p), oc], which
    // y wants as [n, oc, p].
    const bool direct = nout == 1;
    float* out = direct ? y + grp * cog : acc;
    const int64_t ldo = direct ? g.cout : cog;
    gemm(rows_, MatrixRef{cols, ElemType::f32, k_}, packed_[size_t(grp)], OutputRef{out, ElemType::f32, ldo},
         Epilogue{.bias = bias ? bias + grp * cog : nullptr});
    if (direct) {
      for (int64_t n = 0; n < g.batch; ++n) activate_all(out + n * ldo, cog, act_, bounds_);
      continue;
    }
    activate_all(acc, rows_ * cog, act_, bounds_);
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t oc = 0; oc < cog; ++oc) {
        float* yr = y + (n * g.cout + grp * cog + oc) * nout;
        const float* ar = acc + n * nout * cog + oc;
        for (int64_t p = 0; p < nout; ++p) yr[p] = ar[p * cog];
      }
  }
}

}  // namespace milrt::kernels
