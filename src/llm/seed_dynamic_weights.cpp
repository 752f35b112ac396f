// The packed-input layouts of the seed's weight-bearing kernels and their
// packing; see seed_dynamic_weights.h.
#include "llm/seed_dynamic_weights.h"

#include <algorithm>

#include <fmt/format.h>

#include "milrt/error.h"

namespace milrt::llm {
namespace {

int64_t round_up32(int64_t n) { return (n + 31) / 32 * 32; }

// SeedLayerWeights' field `name`, const or not.
template <class Weights>
auto& field(Weights& w, const std::string& name) {
  if (name == "rms1") return w.rms1;
  if (name == "rms2") return w.rms2;
  if (name == "wq") return w.wq;
  if (name == "wk") return w.wk;
  if (name == "wv") return w.wv;
  if (name == "wo") return w.wo;
  if (name == "w1") return w.w1;
  if (name == "w3") return w.w3;
  if (name == "w2") return w.w2;
  throw Error("seed kernels: no weight '" + name + "'");
}

// The seed's [out, in] shape of weight `name` ([dim] for the gains).
Shape seed_shape(const SeedLayerConfig& c, const std::string& name) {
  if (name == "rms1" || name == "rms2") return {c.dim};
  if (name == "w1" || name == "w3") return {c.hidden, c.dim};
  if (name == "w2") return {c.dim, c.hidden};
  return {c.dim, c.dim};
}

// A rectangle at (channel, column) holding weight `name`, transposed or not.
SeedPackedWeight place(const SeedLayerConfig& c, const std::string& name, int64_t channel, int64_t column,
                       bool transposed) {
  const Shape s = seed_shape(c, name);
  if (s.size() == 1) return {name, channel, column, s[0], 1, false};
  return {name, channel, column, transposed ? s[1] : s[0], transposed ? s[0] : s[1], transposed};
}

// Element (r, col) of weight p's rectangle, in the seed's row-major layout.
int64_t source_index(const SeedPackedWeight& p, int64_t r, int64_t col) {
  return p.transposed ? col * p.rows + r : r * p.cols + col;
}

void check_packed(const SeedDynamicLayout& l, const Tensor& packed) {
  if (packed.dtype() != DType::FP16 || packed.shape() != l.shape())
    throw Error(fmt::format("seed kernels: {}'s packed input must be fp16 {}, got {} {}", seed_kernel_name(l.kernel),
                            shape_str(l.shape()), dtype_name(packed.dtype()), shape_str(packed.shape())));
}

}  // namespace

const SeedPackedWeight& SeedDynamicLayout::weight(const std::string& name) const {
  for (const SeedPackedWeight& p : weights)
    if (p.name == name) return p;
  throw Error(fmt::format("seed kernels: {} packs no weight '{}'", seed_kernel_name(kernel), name));
}

// The placements. Forward kernels hold one activation block, so each matrix
// lies as the engine notes' [IC, OC] (its transpose, contracted dim along
// channels) where its input dim fits the channels; W2's input dim (hidden)
// does not fit ffn_fwd's dim channels, so it lies as [out, in] and the
// matmul does not transpose it. Backward kernels multiply by Wᵀ: the seed's
// W [out, in] as it is has the contracted dim (out) along channels, so each
// lies in the rows of the gradient it multiplies; in ffn_bwd W2ᵀ [hidden,
// dim] joins W1 beside h1 instead of W2 [dim, hidden] beside dffn, which
// keeps the width at seq + 2·dim (2048) rather than seq + hidden (2560).
SeedDynamicLayout seed_dynamic_layout(SeedWeightKernel k, const SeedLayerConfig& c, int64_t max_dim) {
  const int64_t D = c.dim, H = c.hidden, S = c.seq;
  SeedDynamicLayout l;
  l.kernel = k;
  l.seq = S;
  auto& w = l.weights;
  switch (k) {
    case SeedWeightKernel::SdpaFwdTaps:
      l.channels = D;
      w = {place(c, "wq", 0, S, true), place(c, "wk", 0, S + D, true), place(c, "wv", 0, S + 2 * D, true),
           place(c, "wo", 0, S + 3 * D, true), place(c, "rms1", 0, S + 4 * D, false)};
      break;
    case SeedWeightKernel::FfnFwdTaps:
      l.channels = D;
      w = {place(c, "w1", 0, S, true), place(c, "w3", 0, S + H, true), place(c, "w2", 0, S + 2 * H, false),
           place(c, "rms2", 0, S + 3 * H, false)};
      break;
    case SeedWeightKernel::FfnBwd:
      l.channels = D + 2 * H;
      w = {place(c, "w1", D, S, false), place(c, "w2", D, S + D, true), place(c, "w3", D + H, S, false)};
      break;
    case SeedWeightKernel::QkvBwd:
      l.channels = 3 * D;
      w = {place(c, "wq", 0, S, false), place(c, "wk", D, S, false), place(c, "wv", 2 * D, S, false)};
      break;
    case SeedWeightKernel::SdpaBwd1:
      l.channels = 4 * D;
      w = {place(c, "wo", 3 * D, S, false)};
      break;
  }
  int64_t end = S;
  for (const SeedPackedWeight& p : w) end = std::max(end, p.column + p.cols);
  l.width = round_up32(end);
  if (l.width > max_dim || l.channels > max_dim)
    throw Error(fmt::format("seed kernels: {}'s packed input {} (seq {} + {} weight columns) has an axis above the "
                            "engine's {}: keep its weights constant or shrink the layer",
                            seed_kernel_name(k), shape_str(l.shape()), S, end - S, max_dim));
  return l;
}

const Tensor& seed_weight(const SeedLayerWeights& w, const std::string& name) { return field(w, name); }

void seed_write_dynamic_weights(const SeedDynamicLayout& l, const SeedLayerWeights& w, Tensor& packed) {
  check_packed(l, packed);
  uint16_t* dst = packed.mutable_ptr<uint16_t>();
  for (const SeedPackedWeight& p : l.weights) {
    const Tensor& t = seed_weight(w, p.name);
    if (t.dtype() != DType::FP16 || t.numel() != p.rows * p.cols)
      throw Error(fmt::format("seed kernels: weight {} must be fp16 with {} elements, got {} {}", p.name,
                              p.rows * p.cols, dtype_name(t.dtype()), shape_str(t.shape())));
    const uint16_t* src = t.ptr<uint16_t>();
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t col = 0; col < p.cols; ++col)
        dst[(p.channel + r) * l.width + p.column + col] = src[source_index(p, r, col)];
  }
}

Tensor seed_pack_dynamic(const SeedDynamicLayout& l, const Tensor& activations, const SeedLayerWeights& w) {
  if (activations.dtype() != DType::FP16 || activations.shape() != Shape{1, l.channels, 1, l.seq})
    throw Error(fmt::format("seed kernels: {}'s activations must be fp16 [1, {}, 1, {}], got {} {}",
                            seed_kernel_name(l.kernel), l.channels, l.seq, dtype_name(activations.dtype()),
                            shape_str(activations.shape())));
  Tensor packed(DType::FP16, l.shape());
  uint16_t* dst = packed.mutable_ptr<uint16_t>();
  const uint16_t* src = activations.ptr<uint16_t>();
  for (int64_t ch = 0; ch < l.channels; ++ch)
    std::copy_n(src + ch * l.seq, l.seq, dst + ch * l.width);
  seed_write_dynamic_weights(l, w, packed);
  return packed;
}

SeedLayerWeights seed_unpack_dynamic_weights(const SeedDynamicLayout& l, const Tensor& packed) {
  check_packed(l, packed);
  const uint16_t* src = packed.ptr<uint16_t>();
  SeedLayerWeights w;
  for (const SeedPackedWeight& p : l.weights) {
    Tensor t(DType::FP16, p.cols == 1 ? Shape{p.rows} : p.transposed ? Shape{p.cols, p.rows} : Shape{p.rows, p.cols});
    uint16_t* dst = t.mutable_ptr<uint16_t>();
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t col = 0; col < p.cols; ++col)
        dst[source_index(p, r, col)] = src[(p.channel + r) * l.width + p.column + col];
    field(w, p.name) = std::move(t);
  }
  return w;
}

}  // namespace milrt::llm
