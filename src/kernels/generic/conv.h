// fp32 convolution over up to three spatial dims, with a fused bias and
// activation. Knows nothing of MIL: callers resolve padding, strides and
// dilations beforehand; 1-D and 2-D convolutions pass size-1 leading spatial
// dims (kernel 1, stride 1, no pad).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/gemm.h"

namespace milrt::kernels {

struct ConvGeometry {
  int64_t batch = 1, cin = 1, cout = 1, groups = 1;
  int64_t in[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t pad_before[3] = {0, 0, 0};   // leading zero padding; trailing padding is implied by `out`
};

// y [batch, cout, out...] = bias + conv(x [batch, cin, in...], w [cout, cin / groups, kernel...]);
// `bias` (cout values) may be null. Allocates nothing. The plain loop: any
// geometry, no set-up; the reference point for ConvKernel's fast path.
void conv_f32(const float* x, const float* w, const float* bias, float* y, const ConvGeometry& g);

// A convolution planned once for a geometry: with the weights known up front
// they are packed for kernels::gemm and the input is gathered (im2col) into
// a buffer sized here, so run() allocates nothing. Without weights, or where
// a GEMM per group does not pay (few output channels per group), run() uses
// the plain loop. Not thread-safe: one run at a time (scratch is owned).
class ConvKernel {
 public:
  // `weight` (if not null) is read here only; it is [cout, cin / groups, kernel...].
  // `act` (any; `bounds` for clip) follows the bias, per output element.
  ConvKernel(const ConvGeometry& g, const float* weight, Activation act = Activation::none,
             ActivationBounds bounds = {});
  ConvKernel(ConvKernel&&) noexcept;
  ~ConvKernel();

  // `w` (the weights again) is read by the plain loop, the GEMM path uses its
  // packed copy; `bias` may be null.
  void run(const float* x, const float* w, const float* bias, float* y) const;
  bool uses_gemm() const { return !packed_.empty(); }
  const ConvGeometry& geometry() const { return g_; }

 private:
  ConvGeometry g_;
  Activation act_;
  ActivationBounds bounds_;
  int64_t rows_ = 0, k_ = 0;            // GEMM rows (batch × output positions) and depth (cin/groups × taps)
  // Per output position, its taps as runs of consecutive input offsets
  // (a 1-D conv's whole kernel is one run; padding taps are in none):
  // column tap..tap+len of its im2col row is input offset src..src+len.
  struct TapRun {
    int32_t tap, src, len;
  };
  std::vector<TapRun> runs_;
  std::vector<int64_t> run_begin_;      // per output position p: its runs are runs_[run_begin_[p], run_begin_[p + 1])
  std::vector<uint8_t> full_;           // per output position: 1 when its runs cover every tap (no zero fill)
  std::vector<PackedB> packed_;         // per group: weightᵀ [k_, cout / groups]
  mutable std::vector<float> cols_, acc_;
};

}  // namespace milrt::kernels
