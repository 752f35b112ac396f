// Reference for milrt_conv: conv + bias + activation in fp64, rounded once
// to the output dtype. Written out plainly (not by calling the conv
// reference), so the fused op is checked against an independent conv too.
#include <algorithm>
#include <cmath>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

double activate(const std::string& act, double v, double alpha, double beta) {
  if (act == "relu") return std::max(v, 0.0);
  if (act == "clip") return std::min(std::max(v, alpha), beta);
  if (act == "sigmoid") return 1.0 / (1.0 + std::exp(-v));
  if (act == "silu") return v / (1.0 + std::exp(-v));
  return v;
}

void ref_fused_conv(RefCtx& c) {
  NdArray x = c.nd("x"), w = c.nd("weight");
  if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank()) c.fail("x and weight must have the same rank, 3 to 5");
  const size_t nsp = size_t(x.rank() - 2);
  const auto strides = c.ints("strides", std::vector<int64_t>(nsp, 1));
  const auto dil = c.ints("dilations", std::vector<int64_t>(nsp, 1));
  const int64_t groups = c.i64("groups", 1);
  const std::string pad_type = c.str("pad_type", "valid");
  const auto pad = pad_type == "custom" ? c.ints("pad", std::vector<int64_t>(2 * nsp, 0))
                                        : std::vector<int64_t>(2 * nsp, 0);
  const std::string act = c.str("activation", "none");
  const double alpha = c.has("alpha") ? c.f64("alpha") : 0.0, beta = c.has("beta") ? c.f64("beta") : 0.0;
  if (strides.size() != nsp || dil.size() != nsp || pad.size() != 2 * nsp)
    c.fail("strides, dilations and pad must have one (pad: two) value per spatial dim");
  const int64_t batch = x.shape[0], cin = x.shape[1], cout = w.shape[0];
  if (groups < 1 || cin % groups != 0 || w.shape[1] != cin / groups || cout % groups != 0)
    c.fail("channels do not fit groups = " + std::to_string(groups));
  std::vector<double> bias(size_t(cout), 0.0);
  if (c.has("bias")) {
    NdArray b = c.nd("bias");
    if (b.numel() != cout) c.fail("bias must have one value per output channel");
    bias = b.v;
  }
  Shape in(x.shape.begin() + 2, x.shape.end()), ks(w.shape.begin() + 2, w.shape.end()), out;
  std::vector<int64_t> before;
  for (size_t i = 0; i < nsp; ++i) {
    if (strides[i] < 1 || dil[i] < 1) c.fail("strides and dilations must be >= 1");
    const int64_t ek = (ks[i] - 1) * dil[i] + 1, s = strides[i];
    int64_t total = 0, b = 0;
    if (pad_type == "same" || pad_type == "same_lower") {
      total = std::max<int64_t>(0, s * ((in[i] + s - 1) / s) - in[i] + ek - s);
      b = pad_type == "same" ? total / 2 : total - total / 2;
    } else if (pad_type == "custom") {
      total = pad[2 * i] + pad[2 * i + 1];
      b = pad[2 * i];
    } else if (pad_type != "valid") {
      c.fail("unknown pad_type '" + pad_type + "'");
    }
    const int64_t o = floor_div(in[i] + total - ek, s) + 1;
    if (o <= 0) c.fail("spatial dim " + std::to_string(i) + " gets no output");
    out.push_back(o);
    before.push_back(b);
  }
  Shape ys = {batch, cout};
  ys.insert(ys.end(), out.begin(), out.end());
  NdArray y(ys);
  const int64_t cig = cin / groups, cog = cout / groups;
  const int64_t nin = shape_numel(in), nk = shape_numel(ks), nout = shape_numel(out);
  std::vector<int64_t> oi(nsp), ki(nsp);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t oc = 0; oc < cout; ++oc)
      for (int64_t op = 0; op < nout; ++op) {
        for (size_t i = nsp, r = size_t(op); i-- > 0;) { oi[i] = int64_t(r) % out[i]; r /= size_t(out[i]); }
        double s = bias[size_t(oc)];
        for (int64_t icl = 0; icl < cig; ++icl)
          for (int64_t kp = 0; kp < nk; ++kp) {
            for (size_t i = nsp, r = size_t(kp); i-- > 0;) { ki[i] = int64_t(r) % ks[i]; r /= size_t(ks[i]); }
            int64_t flat = 0;
            bool inside = true;
            for (size_t i = 0; i < nsp; ++i) {
              const int64_t p = oi[i] * strides[i] + ki[i] * dil[i] - before[i];
              inside = inside && p >= 0 && p < in[i];
              flat = flat * in[i] + p;
            }
            if (inside)
              s += x.v[size_t((n * cin + (oc / cog) * cig + icl) * nin + flat)] * w.v[size_t((oc * cig + icl) * nk + kp)];
          }
        y.v[size_t((n * cout + oc) * nout + op)] = activate(act, s, alpha, beta);
      }
  c.set_nd(0, y);
}

}  // namespace

void register_ref_fused_conv_ops() { register_ref("milrt_conv", ref_fused_conv); }

}  // namespace milrt::ref
