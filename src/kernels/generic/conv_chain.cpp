#include "kernels/generic/conv_chain.h"

#include <algorithm>

#include "kernels/grow_buffer.h"
#include "kernels/threads.h"
#include "milrt/error.h"

namespace milrt::kernels {
namespace {

// One step's input and output tiles stay within this many floats (512 KB):
// half of a 1 MB L2, leaving room for the packed weights streaming through
// and the GEMM's own panels (on the AVX2 VM, 64->256->64->64 at 56x56 ran
// faster with this than with 256 KB).
constexpr int64_t kTileBudgetFloats = 128 * 1024;
// Tiles are a multiple of this many positions when split: whole 4x4
// transpose blocks and whole 6-row GEMM micro-tiles (AVX2's).
constexpr int64_t kTileStep = 48;
// Tiles narrower than this make the GEMMs mostly edge tiles; a chain wide
// enough to need them is left unfused.
constexpr int64_t kMinTile = kTileStep;
// Tiles wider than this gain nothing and leave fewer tasks to share.
constexpr int64_t kMaxTile = 512;
// Every tile reads all the chain's weights: past this many floats (1 MB, an
// L2) they come from L3 for every tile, and on the AVX2 VM 1024->1024->1024
// at 32x32 ran slower fused (59 ms) than as separate GEMMs (57 ms) while
// 256->512->256 (this many) still ran faster.
constexpr double kMaxWeightFloats = 256 * 1024;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kMinParallelMacs = 1 << 20;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Rows of 4 KB share L1 sets (see the GEMM's A operand): such tiles get a
// padded row stride.
int64_t row_stride(int64_t c) { return c % 1024 == 0 ? c + 16 : c; }

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: 4x4 blocks
// through a local tile (the compiler keeps it in registers and shuffles),
// the ragged edges one by one.
void transpose(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  const int64_t r4 = rows - rows % 4, c4 = cols - cols % 4;
  for (int64_t r = 0; r < r4; r += 4)
    for (int64_t c = 0; c < c4; c += 4) {
      float t[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) t[j][i] = src[(r + i) * lds + c + j];
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) dst[(c + j) * ldd + r + i] = t[j][i];
    }
  // What remains: the columns past c4 of rows < r4, then the rows past r4.
  for (int64_t r = 0; r < r4; ++r)
    for (int64_t c = c4; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  for (int64_t r = r4; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// The part of a link's activation the GEMM's epilogue applies; the rest
// (clip, tanh, hard_sigmoid) runs over the tile afterwards.
Activation gemm_act(Activation a) { return gemm_supports(a) ? a : Activation::none; }

thread_local GrowBuffer t_tiles;

}  // namespace

int64_t conv_chain_tile(const std::vector<int64_t>& channels, int64_t positions) {
  if (channels.size() < 2 || positions < 1) return 0;
  int64_t widest = 0;
  double weights = 0;
  for (size_t i = 0; i + 1 < channels.size(); ++i) {
    if (channels[i] < 1 || channels[i + 1] < 1) return 0;
    widest = std::max(widest, row_stride(channels[i]) + row_stride(channels[i + 1]));
    weights += double(channels[i]) * double(channels[i + 1]);
  }
  int64_t fits = std::min(kTileBudgetFloats / widest, kMaxTile);
  if (positions <= fits) return positions;
  if (fits < kMinTile || weights > kMaxWeightFloats) return 0;
  // Tiles of about equal size in an even count let two (or four) threads
  // share them evenly.
  fits -= fits % kTileStep;
  int64_t count = (positions + fits - 1) / fits;
  count += count % 2;
  return std::min(fits, round_up((positions + count - 1) / count, kTileStep));
}

ConvChainKernel::ConvChainKernel(int64_t batch, int64_t positions, std::vector<int64_t> channels,
                                 const std::vector<ConvChainLink>& links)
    : batch_(batch), positions_(positions), channels_(std::move(channels)) {
  if (links.empty() || channels_.size() != links.size() + 1) throw Error("conv chain: one link per channel step");
  tile_ = conv_chain_tile(channels_, positions_);
  if (tile_ == 0 || batch_ < 1)
    throw Error("conv chain: its intermediates do not fit in cache for a tile of " + std::to_string(kMinTile) +
                " positions");
  tiles_ = (positions_ + tile_ - 1) / tile_;
  for (int64_t c : channels_) ld_.push_back(row_stride(c));
  for (size_t i = 0; i < links.size(); ++i) {
    const ConvChainLink& l = links[i];
    const int64_t cin = channels_[i], cout = channels_[i + 1];
    if (!l.weight) throw Error("conv chain: link " + std::to_string(i) + " has no weight");
    // W [cout, cin] row-major is Wᵀ [cin, cout] stored transposed.
    Step s{PackedB(MatrixRef{l.weight, ElemType::f32, cin, true}, cin, cout), {}, l.act, l.bounds};
    if (l.bias) s.bias.assign(l.bias, l.bias + cout);
    steps_.push_back(std::move(s));
    macs_ += double(batch_) * double(positions_) * double(cin) * double(cout);
  }
}

ConvChainKernel::ConvChainKernel(ConvChainKernel&&) noexcept = default;
ConvChainKernel::~ConvChainKernel() = default;

void ConvChainKernel::run_tile(const float* x, float* y, int64_t task) const {
  const int64_t n = task / tiles_, p0 = (task % tiles_) * tile_, m = std::min(tile_, positions_ - p0);
  const int64_t c0 = channels_.front(), ck = channels_.back();
  int64_t widest = 0;
  for (size_t i = 1; i < ld_.size(); ++i) widest = std::max(widest, ld_[i]);
  float* in = t_tiles.get_as<float>(size_t(tile_ * (ld_[0] + 2 * widest)));
  float* bufs[2] = {in + tile_ * ld_[0], in + tile_ * (ld_[0] + widest)};
  transpose(x + n * c0 * positions_ + p0, positions_, c0, m, in, ld_[0]);
  const float* cur = in;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    float* out = bufs[i % 2];
    const int64_t cout = channels_[i + 1];
    gemm(m, MatrixRef{cur, ElemType::f32, ld_[i]}, s.w, OutputRef{out, ElemType::f32, ld_[i + 1]},
         Epilogue{1.0f, s.bias.empty() ? nullptr : s.bias.data(), gemm_act(s.act)});
    if (!gemm_supports(s.act))
      for (int64_t r = 0; r < m; ++r) activate_all(out + r * ld_[i + 1], cout, s.act, s.bounds);
    cur = out;
  }
  transpose(cur, ld_.back(), m, ck, y + n * ck * positions_ + p0, positions_);
}

void ConvChainKernel::run(const float* x, float* y) const {
  const int64_t tasks = batch_ * tiles_;
  int threads = 1;
  // A single tile runs alone, and its GEMMs may use the threads themselves.
  if (tasks > 1 && macs_ >= kMinParallelMacs && !in_parallel())
    threads = int(std::min<int64_t>(num_threads(), tasks));
  if (threads <= 1) {
    for (int64_t t = 0; t < tasks; ++t) run_tile(x, y, t);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < tasks; ++t) run_tile(x, y, t);
}

}  // namespace milrt::kernels
