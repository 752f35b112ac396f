#include "kernels/generic/lstm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace milrt::kernels {
namespace {

float activate(Activation a, float v) {
  switch (a) {
    case Activation::Sigmoid: return 1.0f / (1.0f + std::exp(-v));
    case Activation::Tanh: return std::tanh(v);
    case Activation::Relu: return std::max(0.0f, v);
    case Activation::Linear: return v;
    case Activation::HardSigmoid: return std::min(1.0f, std::max(0.0f, 0.2f * v + 0.5f));
  }
  return v;
}

}  // namespace

void lstm_f32(const float* x, const float* h0, const float* c0, const LstmDirection* dirs, const LstmConfig& cfg,
              float* y, float* h_n, float* c_n, float* z) {
  const int64_t H = cfg.hidden, I = cfg.input, B = cfg.batch, T = cfg.seq, hd = cfg.directions * H;
  if (h_n != h0) std::memmove(h_n, h0, size_t(B * hd) * sizeof(float));
  if (c_n != c0) std::memmove(c_n, c0, size_t(B * hd) * sizeof(float));
  for (int d = 0; d < cfg.directions; ++d) {
    const LstmDirection& w = dirs[d];
    for (int64_t b = 0; b < B; ++b) {
      float* hs = h_n + b * hd + d * H;
      float* cs = c_n + b * hd + d * H;
      for (int64_t step = 0; step < T; ++step) {
        const int64_t t = w.backward ? T - 1 - step : step;
        const float* xt = x + (t * B + b) * I;
        for (int64_t r = 0; r < 4 * H; ++r) {
          float s = w.bias ? w.bias[r] : 0.0f;
          const float* wi = w.w_ih + r * I;
          for (int64_t k = 0; k < I; ++k) s += wi[k] * xt[k];
          const float* wh = w.w_hh + r * H;
          for (int64_t k = 0; k < H; ++k) s += wh[k] * hs[k];
          z[r] = s;
        }
        for (int64_t j = 0; j < H; ++j) {
          const float pi = w.peephole ? w.peephole[j] : 0.0f, pf = w.peephole ? w.peephole[H + j] : 0.0f,
                      po = w.peephole ? w.peephole[2 * H + j] : 0.0f;
          const float ig = activate(cfg.recurrent, z[j] + pi * cs[j]);
          const float fg = activate(cfg.recurrent, z[H + j] + pf * cs[j]);
          const float gg = activate(cfg.cell, z[3 * H + j]);
          float cnew = fg * cs[j] + ig * gg;
          if (cfg.clip) cnew = std::min(cfg.clip_value, std::max(-cfg.clip_value, cnew));
          // the output gate's peephole sees the new cell state
          const float og = activate(cfg.recurrent, z[2 * H + j] + po * cnew);
          cs[j] = cnew;
          hs[j] = og * activate(cfg.output, cnew);
        }
        if (cfg.output_sequence) {
          const int64_t pos = w.backward && cfg.backward_in_processing_order ? step : t;
          std::memcpy(y + (pos * B + b) * hd + d * H, hs, size_t(H) * sizeof(float));
        }
      }
      if (!cfg.output_sequence) std::memcpy(y + b * hd + d * H, hs, size_t(H) * sizeof(float));
    }
  }
}

}  // namespace milrt::kernels
