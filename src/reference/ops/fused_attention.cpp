// Reference milrt_softmax, milrt_attention and milrt_attention_grad: the definitions in
// src/ir/ops/fused_attention.cpp computed directly in fp64 (the full score
// matrix, then the softmax), rounded once to the output dtype.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int64_t> unravel_index(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return idx;
}

// The mask value added at multi-index `idx` of `target` (bool: 0 or -inf).
struct Mask {
  bool present = false, keep = false;
  NdArray a;
  double at(const std::vector<int64_t>& idx, const Shape& target) const {
    if (!present) return 0;
    double m = a.v[size_t(broadcast_index(idx, target, a.shape))];
    return keep ? (m != 0 ? 0.0 : -kInf) : m;
  }
};

Mask read_mask(RefCtx& c, const Shape& target) {
  Mask m;
  if (!c.has("mask")) return m;
  m.present = true;
  m.keep = c.in("mask").dtype() == DType::Bool;
  m.a = c.nd("mask");
  Shape b;
  try {
    b = broadcast(target, m.a.shape);
  } catch (const Error&) {
    c.fail("mask " + shape_str(m.a.shape) + " does not broadcast to " + shape_str(target));
  }
  if (b != target) c.fail("mask " + shape_str(m.a.shape) + " does not broadcast to " + shape_str(target));
  return m;
}

// softmax of one line in place; all -inf gives NaN (0/0), as NumPy's does.
void softmax_line(std::vector<double>& s) {
  double mx = -kInf, den = 0;
  for (double e : s) mx = std::max(mx, e);
  for (double& e : s) den += (e = std::exp(e - mx));
  for (double& e : s) e /= den;
}

void ref_softmax(RefCtx& c) {
  NdArray x = c.nd("x");
  double scale = c.f64("scale", 1.0);
  int64_t axis = 0;
  try {
    axis = norm_axis(c.i64("axis", -1), x.rank());
  } catch (const Error& e) {
    c.fail(e.what());
  }
  Mask mask = read_mask(c, x.shape);
  int64_t n = x.shape[size_t(axis)], inner = strides_of(x.shape)[size_t(axis)];
  int64_t outer = n * inner != 0 ? x.numel() / (n * inner) : 0;
  NdArray y(x.shape);
  std::vector<double> line(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t k = 0; k < n; ++k) {
        int64_t f = (o * n + k) * inner + i;
        line[size_t(k)] = scale * x.v[size_t(f)] + mask.at(unravel_index(f, x.shape), x.shape);
      }
      softmax_line(line);
      for (int64_t k = 0; k < n; ++k) y.v[size_t((o * n + k) * inner + i)] = line[size_t(k)];
    }
  c.set_nd(0, y);
}

// milrt_attention's operands read through broadcasting, and the
// probabilities of one query row.
struct AttentionRef {
  NdArray q, k, v;
  int64_t tq = 0, d = 0, tk = 0, dv = 0;
  Shape batch, scores;
  double scale = 1;
  bool causal = false;
  Mask mask;

  explicit AttentionRef(RefCtx& c) : q(c.nd("q")), k(c.nd("k")), v(c.nd("v")) {
    if (q.rank() < 2 || k.rank() < 2 || v.rank() < 2) c.fail("q, k and v must have rank >= 2");
    tq = back(q, 2), d = back(q, 1), tk = back(k, 2), dv = back(v, 1);
    if (back(k, 1) != d || back(v, 2) != tk) c.fail("k must be [..., Tk, D] and v [..., Tk, Dv] for q [..., Tq, D]");
    try {
      batch = broadcast(broadcast(batch_of(q), batch_of(k)), batch_of(v));
    } catch (const Error&) {
      c.fail("the batch dims of q, k and v do not broadcast");
    }
    scale = c.f64("scale", 1.0);
    causal = c.flag("causal", false);
    scores = batch;
    scores.push_back(tq);
    scores.push_back(tk);
    mask = read_mask(c, scores);
  }
  static int64_t back(const NdArray& a, int i) { return a.shape[a.shape.size() - size_t(i)]; }
  static Shape batch_of(const NdArray& a) { return Shape(a.shape.begin(), a.shape.end() - 2); }
  // Element (b, r, col) of a broadcast operand: its batch index, then row-major.
  size_t index(const NdArray& a, const std::vector<int64_t>& bidx, int64_t r, int64_t col) const {
    Shape ab = batch_of(a);
    int64_t base = ab.empty() ? 0 : broadcast_index(bidx, batch, ab);
    return size_t((base * back(a, 2) + r) * back(a, 1) + col);
  }
  double at(const NdArray& a, const std::vector<int64_t>& bidx, int64_t r, int64_t col) const {
    return a.v[index(a, bidx, r, col)];
  }
  // softmax(scale·q_i·kᵀ + mask [+ causal]) of row i of batch bidx; returns
  // the row's log-sum-exp of the scores (-inf when it sees no key).
  double probs(const std::vector<int64_t>& bidx, int64_t i, std::vector<double>& s) const {
    s.assign(size_t(tk), 0);
    for (int64_t j = 0; j < tk; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += at(q, bidx, i, e) * at(k, bidx, j, e);
      std::vector<int64_t> idx = bidx;
      idx.push_back(i);
      idx.push_back(j);
      s[size_t(j)] = scale * dot + mask.at(idx, scores);
      if (causal && j > i + (tk - tq)) s[size_t(j)] = -kInf;
    }
    double mx = -kInf, den = 0;
    for (double e : s) mx = std::max(mx, e);
    for (double e : s) den += std::exp(e - mx);
    softmax_line(s);
    return mx == -kInf ? -kInf : mx + std::log(den);
  }
};

void ref_attention(RefCtx& c) {
  AttentionRef a(c);
  Shape os = a.batch;
  os.push_back(a.tq);
  os.push_back(a.dv);
  NdArray out(os);
  Shape ls = a.batch;
  ls.push_back(a.tq);
  NdArray lse(ls);
  std::vector<double> s;
  for (int64_t b = 0; b < shape_numel(a.batch); ++b) {
    std::vector<int64_t> bidx = unravel_index(b, a.batch);
    for (int64_t i = 0; i < a.tq; ++i) {
      lse.v[size_t(b * a.tq + i)] = a.probs(bidx, i, s);
      for (int64_t e = 0; e < a.dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < a.tk; ++j) acc += s[size_t(j)] * a.at(a.v, bidx, j, e);
        out.v[size_t((b * a.tq + i) * a.dv + e)] = acc;
      }
    }
  }
  c.set_nd(0, out);
  if (c.num_outputs() == 2) c.set_nd(1, lse);
}

// The chain rule through P = softmax(S) written out: dV = Pᵀ·dO,
// dP = dO·Vᵀ, dS_ij = P_ij (dP_ij − Σ_l P_il dP_il), dQ = scale·dS·K,
// dK = scale·dSᵀ·Q. `o` is not read: the sum over l is formed from P and dP
// directly, and lse is not read either. A row that sees no key (P all NaN)
// contributes nothing.
void ref_attention_grad(RefCtx& c) {
  AttentionRef a(c);
  NdArray g = c.nd("dout");
  auto shaped = [&](int64_t rows, int64_t cols) {
    Shape s = a.batch;
    s.push_back(rows);
    s.push_back(cols);
    return NdArray(s);
  };
  NdArray dq = shaped(a.tq, a.d), dk = shaped(a.tk, a.d), dv = shaped(a.tk, a.dv);
  std::vector<double> p, dp(static_cast<size_t>(a.tk));
  for (int64_t b = 0; b < shape_numel(a.batch); ++b) {
    std::vector<int64_t> bidx = unravel_index(b, a.batch);
    auto go = [&](int64_t i, int64_t e) { return g.v[size_t((b * a.tq + i) * a.dv + e)]; };
    for (int64_t i = 0; i < a.tq; ++i) {
      a.probs(bidx, i, p);
      if (std::isnan(p[0])) continue;
      double pdp = 0;
      for (int64_t j = 0; j < a.tk; ++j) {
        double acc = 0;
        for (int64_t e = 0; e < a.dv; ++e) acc += go(i, e) * a.at(a.v, bidx, j, e);
        dp[size_t(j)] = acc;
        pdp += p[size_t(j)] * acc;
      }
      for (int64_t j = 0; j < a.tk; ++j) {
        const double pj = p[size_t(j)], ds = a.scale * pj * (dp[size_t(j)] - pdp);
        for (int64_t e = 0; e < a.dv; ++e) dv.v[size_t((b * a.tk + j) * a.dv + e)] += pj * go(i, e);
        for (int64_t e = 0; e < a.d; ++e) {
          dq.v[size_t((b * a.tq + i) * a.d + e)] += ds * a.at(a.k, bidx, j, e);
          dk.v[size_t((b * a.tk + j) * a.d + e)] += ds * a.at(a.q, bidx, i, e);
        }
      }
    }
  }
  c.set_nd(0, dq);
  c.set_nd(1, dk);
  c.set_nd(2, dv);
}

}  // namespace

void register_ref_fused_attention_ops() {
  register_ref("milrt_softmax", ref_softmax);
  register_ref("milrt_attention", ref_attention);
  register_ref("milrt_attention_grad", ref_attention_grad);
}

}  // namespace milrt::ref
