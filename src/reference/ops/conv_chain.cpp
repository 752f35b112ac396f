// Reference for milrt_conv_chain: each pointwise conv, bias and activation
// in fp64, the intermediates kept in fp64, rounded once to the output dtype
// (as the fused op promises). Written out plainly, sharing nothing with the
// conv references or the kernels.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

double activate(const std::string& act, double v, double alpha, double beta) {
  if (act == "relu") return std::max(v, 0.0);
  if (act == "clip") return std::min(std::max(v, alpha), beta);
  if (act == "sigmoid") return 1.0 / (1.0 + std::exp(-v));
  if (act == "silu") return v / (1.0 + std::exp(-v));
  return v;
}

void ref_conv_chain(RefCtx& c) {
  NdArray x = c.nd("x");
  const std::vector<Tensor>& ws = c.tuple("weights");
  const std::vector<Tensor>& bs = c.tuple("biases");
  std::istringstream words(c.str("activations"));
  std::vector<std::string> acts;
  for (std::string w; words >> w;) acts.push_back(w);
  if (x.rank() < 3 || bs.size() != ws.size() || acts.size() != ws.size())
    c.fail("needs x of rank >= 3 and one bias and activation per weight");
  NdArray alphas, betas;
  if (c.has("alphas")) alphas = c.nd("alphas");
  if (c.has("betas")) betas = c.nd("betas");
  const int64_t batch = x.shape[0];
  int64_t cin = x.shape[1];
  const int64_t npos = shape_numel(Shape(x.shape.begin() + 2, x.shape.end()));
  std::vector<double> cur = x.v;
  for (size_t i = 0; i < ws.size(); ++i) {
    NdArray w = to_nd(ws[i]), b = to_nd(bs[i]);
    const int64_t cout = w.shape[0];
    if (w.numel() != cout * cin || b.numel() != cout) c.fail("weights[" + std::to_string(i) + "] do not fit");
    if (acts[i] == "clip" && (alphas.numel() <= int64_t(i) || betas.numel() <= int64_t(i)))
      c.fail("clip needs alphas and betas");
    const double lo = acts[i] == "clip" ? alphas.v[i] : 0, hi = acts[i] == "clip" ? betas.v[i] : 0;
    std::vector<double> next(size_t(batch * cout * npos));
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t o = 0; o < cout; ++o)
        for (int64_t p = 0; p < npos; ++p) {
          double s = b.v[size_t(o)];
          for (int64_t k = 0; k < cin; ++k) s += w.v[size_t(o * cin + k)] * cur[size_t((n * cin + k) * npos + p)];
          next[size_t((n * cout + o) * npos + p)] = activate(acts[i], s, lo, hi);
        }
    cur = std::move(next);
    cin = cout;
  }
  Shape ys = x.shape;
  ys[1] = cin;
  NdArray y(ys);
  y.v = std::move(cur);
  c.set_nd(0, y);
}

}  // namespace

void register_ref_conv_chain_ops() { register_ref("milrt_conv_chain", ref_conv_chain); }

}  // namespace milrt::ref
