// Weights that change, packed into a kernel's one input: the layout behind
// the dynamic twins of the seed's five weight-bearing kernels
// (seed_dynamic_kernel in seed_kernels.h). The engine fixes a program's
// constant weights at compile time, so the seed rebuilds and recompiles five
// kernels every optimizer step, and the compiler's leak (about 119 compiles
// per process: 6, then 5 per step) forces a restart every 23 steps. With the
// weights in the input, each kernel compiles once and every step only
// rewrites the input.
//
// Where the weights go (the engine notes' "dynamic weights": [1,IC,1,S+OC],
// activations in columns [0,S), W in [S,S+OC)): along the spatial axis,
// beside the activations. Not along channels: the activations already use
// the channel axis for the kernels' concatenated operands (up to D + 2H =
// 4864 channels at the seed's size), a 768x2048 matrix would need 2048 more
// channels or a reshape from a flat layout, and the engine notes document
// only the spatial form. So every channel of the input is one row
// [activation columns 0..S) | weight columns | zero padding to a multiple of
// 32 (the row alignment kept until verified)], and each weight is a
// rectangle of rows x columns in it, sliced out with slice_by_size and
// reshaped to a matrix for matmul (a conv's weight must be constant).
//
// A weight's rectangle holds either the seed's [out, in] matrix as it is or
// its transpose, chosen per kernel to keep the input small (layout in the
// .cpp). At the seed's size (dim 768, hidden 2048, seq 512) every kernel
// fits the engine's documented limits (no axis above 16384):
//
//   kernel         C      S (width)   bytes
//   sdpa_fwd_taps  768    3616        5.6 MB   Wqᵀ Wkᵀ Wvᵀ Woᵀ rms1
//   ffn_fwd_taps   768    6688        10.3 MB  W1ᵀ W3ᵀ W2 rms2
//   ffn_bwd        4864   2048        19.9 MB  W1 W2ᵀ beside h1, W3 beside h3
//   qkv_bwd        2304   1280        5.9 MB   Wq Wk Wv beside dQ dK dV
//   sdpa_bwd1      3072   1280        7.9 MB   Wo beside dx2
//
// so no kernel stays constant-weight (sdpa_bwd2 has no weights).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llm/seed_kernels.h"
#include "milrt/tensor.h"

namespace milrt::llm {

// One weight's rectangle in the packed input: channels [channel, channel +
// rows), columns [column, column + cols) of each row (column >= seq).
struct SeedPackedWeight {
  std::string name;         // SeedLayerWeights field: wq wk wv wo w1 w3 w2 rms1 rms2
  int64_t channel = 0, column = 0;
  int64_t rows = 0, cols = 0;
  bool transposed = false;  // holds the seed's [out, in] matrix transposed, [in, out]; gains are one column
};

struct SeedDynamicLayout {
  SeedWeightKernel kernel{};
  int64_t channels = 0;  // C: the activations' channels, as the constant-weight kernel's input
  int64_t seq = 0;       // activations in columns [0, seq) of every channel
  int64_t width = 0;     // S of the packed input: seq + the weights' columns, rounded up to 32
  std::vector<SeedPackedWeight> weights;
  Shape shape() const { return {1, channels, 1, width}; }
  // The rectangle of weight `name`; throws Error when this kernel has none.
  const SeedPackedWeight& weight(const std::string& name) const;
};

// The layout of kernel k for config c. Throws Error (one line, naming the
// kernel, its packed shape and the limit) when an axis would pass max_dim,
// the engine's 16384.
SeedDynamicLayout seed_dynamic_layout(SeedWeightKernel k, const SeedLayerConfig& c, int64_t max_dim = 16384);

// SeedLayerWeights' field `name` (as SeedPackedWeight::name).
const Tensor& seed_weight(const SeedLayerWeights& w, const std::string& name);

// Writes the fp16 weights (shapes as seed_kernels.h) into their rectangles of
// `packed` (fp16, l.shape()), bits unchanged. The activation columns are left
// as they are: a trainer writes the weights once per step and the
// activations per micro-step.
void seed_write_dynamic_weights(const SeedDynamicLayout& l, const SeedLayerWeights& w, Tensor& packed);
// A new packed input: `activations` (fp16 [1, C, 1, seq], the constant-weight
// kernel's input) in columns [0, seq), the weights beside them, zeros elsewhere.
Tensor seed_pack_dynamic(const SeedDynamicLayout& l, const Tensor& activations, const SeedLayerWeights& w);
// The inverse for the weights: the fields this kernel holds, in the seed's
// shapes; the others stay empty.
SeedLayerWeights seed_unpack_dynamic_weights(const SeedDynamicLayout& l, const Tensor& packed);

}  // namespace milrt::llm
