// A chain of 1x1 convolutions, each with its bias and activation, computed
// tile by tile over the spatial positions so that the intermediates never
// leave the cache: for a tile of T positions every convolution of the chain
// runs on the previous one's [T, C] result in per-thread scratch, and only
// the last one is written to memory. Knows nothing of MIL.
//
// A 1x1 convolution over [batch, C, positions] is, per batch element, the
// product W [Cout, Cin] · x [Cin, positions]. Tiles hold positions along
// rows ([T, C], the GEMM's A operand), so each step is gemm with the
// weight packed once as B and the bias and activation in its epilogue; the
// input tile is transposed in on the way in and the output tile out on the
// way out.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/generic/conv.h"

namespace milrt::kernels {

// Positions per tile for a chain over `channels` (C0, C1, ..., Ck) and
// `positions` spatial positions per batch element: as many as keep one
// step's input and output tiles within the budget, at most `positions`.
// 0 when the image needs several tiles and either even a small tile does not
// fit or the chain's weights (read again for every tile) overflow an L2: such
// a chain gains nothing from staying in cache and is left unfused.
// Depends on the shapes only (not on threads), so results are the same for
// any thread count.
int64_t conv_chain_tile(const std::vector<int64_t>& channels, int64_t positions);

struct ConvChainLink {
  const float* weight = nullptr;   // [cout, cin] row-major (read at construction only)
  const float* bias = nullptr;     // [cout] or null (copied at construction)
  Activation act = Activation::none;
  ActivationBounds bounds;         // for clip
};

// y [batch, Ck, positions] = link_k(... link_1(x [batch, C0, positions])),
// link_i(v) = act_i(W_i · v + b_i). Weights are packed and biases copied at
// construction; run() allocates nothing once each thread's scratch has grown.
// Throws Error when the chain does not fit (conv_chain_tile is 0) or a link
// has no weight. Runs on kernels::num_threads() threads.
class ConvChainKernel {
 public:
  ConvChainKernel(int64_t batch, int64_t positions, std::vector<int64_t> channels,
                  const std::vector<ConvChainLink>& links);
  ConvChainKernel(ConvChainKernel&&) noexcept;
  ~ConvChainKernel();

  void run(const float* x, float* y) const;
  int64_t tile() const { return tile_; }

 private:
  struct Step {
    PackedB w;                     // Wᵀ [cin, cout]
    std::vector<float> bias;       // empty: none
    Activation act;
    ActivationBounds bounds;
  };
  void run_tile(const float* x, float* y, int64_t task) const;

  int64_t batch_, positions_, tile_ = 0, tiles_ = 0;
  std::vector<int64_t> channels_, ld_;   // ld_: row stride of each [T, C] tile
  std::vector<Step> steps_;
  double macs_ = 0;
};

}  // namespace milrt::kernels
