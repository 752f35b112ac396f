// fp32 LSTM with the Core ML (iOS15) gate layout: gate rows in i, f, o, g
// order, optional peepholes (i, f, o) and cell clipping. Knows nothing of MIL.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/gemm.h"

namespace milrt::kernels {

struct LstmDirection {
  const float* w_ih = nullptr;       // [4H, input]
  const float* w_hh = nullptr;       // [4H, H]
  const float* bias = nullptr;       // [4H] or null
  const float* peephole = nullptr;   // [3H] or null
  bool backward = false;             // processes time steps last to first
};

struct LstmConfig {
  int64_t seq = 1, batch = 1, input = 1, hidden = 1;
  int directions = 1;                // 1 or 2; direction d writes columns [d * H, (d + 1) * H)
  bool output_sequence = false;
  // Where step `s` of a backward direction is written in the output sequence:
  // at its processing position s (Core ML "reverse") or its time index (bidirectional).
  bool backward_in_processing_order = false;
  Activation recurrent = Activation::sigmoid, cell = Activation::tanh, output = Activation::tanh;
  bool clip = false;
  float clip_value = 0;
};

// x [seq, batch, input]; h0, c0 [batch, directions * H]. Writes y ([seq or 1,
// batch, directions * H]), h_n and c_n ([batch, directions * H]), using
// `gates` (4H floats) as scratch. h_n and c_n hold the running state, so they
// must not alias x, h0 or c0 unless equal to them. Allocates nothing.
void lstm_f32(const float* x, const float* h0, const float* c0, const LstmDirection* dirs, const LstmConfig& cfg,
              float* y, float* h_n, float* c_n, float* gates);

// The same LSTM planned once with constant weights: weight_ih and weight_hh
// are packed for kernels::gemm, the input projection of all time steps is one
// GEMM (bias in its epilogue), each step adds h·W_hhᵀ with a second GEMM and
// runs the gate math over the whole 4H row. Scratch is sized here, so run()
// allocates nothing. Not thread-safe: one run at a time.
class LstmKernel {
 public:
  // dirs[d].w_ih / w_hh are read here only; bias and peephole are taken at run().
  LstmKernel(const LstmConfig& cfg, const LstmDirection* dirs);
  LstmKernel(LstmKernel&&) noexcept;
  ~LstmKernel();
  // `bias[d]` and `peephole[d]` per direction, each may be null. Same outputs and aliasing rules as lstm_f32.
  void run(const float* x, const float* h0, const float* c0, const float* const* bias,
           const float* const* peephole, float* y, float* h_n, float* c_n) const;

 private:
  LstmConfig cfg_;
  bool backward_[2] = {false, false};
  std::vector<PackedB> w_ih_, w_hh_;   // per direction: [input, 4H] and [H, 4H] as op(B)
  mutable std::vector<float> xproj_, gates_;
};

}  // namespace milrt::kernels
