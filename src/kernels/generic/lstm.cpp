#include "kernels/generic/vec_math.h"
#include "kernels/generic/multiversion.h"
#include "kernels/generic/lstm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace milrt::kernels {
namespace {


// act over n values in place. Sigmoid and tanh, the common gates, run as
// vectorized loops (one clone per ISA, MILRT_CLONES); tanh is
// 1 - 2 / (1 + e^2x), within 1e-7 absolute.
MILRT_CLONES(void, sigmoid_all, (float* v, int64_t n), (v, n)) {
  for (int64_t i = 0; i < n; ++i) v[i] = 1.0f / (1.0f + exp_poly(-v[i]));
}
MILRT_CLONES(void, tanh_all, (float* v, int64_t n), (v, n)) {
  for (int64_t i = 0; i < n; ++i) v[i] = 1.0f - 2.0f / (1.0f + exp_poly(2.0f * v[i]));
}

void activate_gates(Activation a, float* v, int64_t n) {
  switch (a) {
    case Activation::sigmoid: return sigmoid_all(v, n);
    case Activation::tanh: return tanh_all(v, n);
    default: return activate_all(v, n, a);
  }
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

LstmKernel::LstmKernel(const LstmConfig& cfg, const LstmDirection* dirs) : cfg_(cfg) {
  const int64_t H = cfg.hidden, I = cfg.input;
  for (int d = 0; d < cfg.directions; ++d) {
    backward_[d] = dirs[d].backward;
    // W_ih [4H, I] and W_hh [4H, H] are row-major: op(B) is their transpose.
    w_ih_.emplace_back(MatrixRef{dirs[d].w_ih, ElemType::f32, I, true}, I, 4 * H);
    w_hh_.emplace_back(MatrixRef{dirs[d].w_hh, ElemType::f32, H, true}, H, 4 * H);
  }
  xproj_.assign(size_t(cfg.seq * cfg.batch * 4 * H), 0.0f);
  gates_.assign(size_t(cfg.batch * 4 * H), 0.0f);
}

LstmKernel::LstmKernel(LstmKernel&&) noexcept = default;
LstmKernel::~LstmKernel() = default;

void LstmKernel::run(const float* x, const float* h0, const float* c0, const float* const* bias,
                     const float* const* peephole, float* y, float* h_n, float* c_n) const {
  const LstmConfig& cfg = cfg_;
  const int64_t H = cfg.hidden, I = cfg.input, B = cfg.batch, T = cfg.seq, hd = cfg.directions * H;
  const int64_t G = 4 * H;
  if (h_n != h0) std::memmove(h_n, h0, size_t(B * hd) * sizeof(float));
  if (c_n != c0) std::memmove(c_n, c0, size_t(B * hd) * sizeof(float));
  float* xp = xproj_.data();
  float* z = gates_.data();
  for (int d = 0; d < cfg.directions; ++d) {
    // Input projection of every step at once: xp[(t, b), :] = x[t, b] · W_ihᵀ + bias.
    Epilogue ep;
    ep.bias = bias[d];
    gemm(T * B, MatrixRef{x, ElemType::f32, I}, w_ih_[size_t(d)], OutputRef{xp, ElemType::f32, G}, ep);
    const float* pp = peephole[d];
    for (int64_t step = 0; step < T; ++step) {
      const int64_t t = backward_[d] ? T - 1 - step : step;
      // z[b, :] = xp[t, b, :] + h[b] · W_hhᵀ
      Epilogue rec;
      rec.residual = xp + t * B * G;
      rec.residual_ld = G;
      gemm(B, MatrixRef{h_n + d * H, ElemType::f32, hd}, w_hh_[size_t(d)], OutputRef{z, ElemType::f32, G}, rec);
      for (int64_t b = 0; b < B; ++b) {
        float* zb = z + b * G;
        float* hs = h_n + b * hd + d * H;
        float* cs = c_n + b * hd + d * H;
        float *zi = zb, *zf = zb + H, *zo = zb + 2 * H, *zg = zb + 3 * H;
        if (pp)
          for (int64_t j = 0; j < H; ++j) {
            zi[j] += pp[j] * cs[j];
            zf[j] += pp[H + j] * cs[j];
          }
        activate_gates(cfg.recurrent, zi, 2 * H);   // i and f are adjacent
        activate_gates(cfg.cell, zg, H);
        for (int64_t j = 0; j < H; ++j) {
          float cnew = zf[j] * cs[j] + zi[j] * zg[j];
          if (cfg.clip) cnew = std::min(cfg.clip_value, std::max(-cfg.clip_value, cnew));
          cs[j] = cnew;
        }
        // the output gate's peephole sees the new cell state
        if (pp)
          for (int64_t j = 0; j < H; ++j) zo[j] += pp[2 * H + j] * cs[j];
        activate_gates(cfg.recurrent, zo, H);
        // zg is free again: it takes act(c).
        for (int64_t j = 0; j < H; ++j) zg[j] = cs[j];
        activate_gates(cfg.output, zg, H);
        for (int64_t j = 0; j < H; ++j) hs[j] = zo[j] * zg[j];
        if (cfg.output_sequence) {
          const int64_t pos = backward_[d] && cfg.backward_in_processing_order ? step : t;
          std::memcpy(y + (pos * B + b) * hd + d * H, hs, size_t(H) * sizeof(float));
        }
      }
    }
    if (!cfg.output_sequence)
      for (int64_t b = 0; b < B; ++b) std::memcpy(y + b * hd + d * H, h_n + b * hd + d * H, size_t(H) * sizeof(float));
  }
}

}  // namespace milrt::kernels
