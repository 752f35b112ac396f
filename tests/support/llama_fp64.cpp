#include "support/llama_fp64.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace milrt::test::fp64 {
namespace {

using Vec = std::vector<double>;

const Vec& get(const Weights& w, const std::string& name) {
  auto it = w.find(name);
  if (it == w.end()) throw std::runtime_error("fp64 llama: missing weight " + name);
  return it->second;
}

// y[t, o] = sum_i x[t, i] * W[o, i]   (x [T, in], W [out, in])
Vec matvec_rows(const Vec& x, const Vec& W, int64_t T, int64_t in, int64_t out) {
  if (int64_t(W.size()) != out * in) throw std::runtime_error("fp64 llama: weight size mismatch");
  Vec y(size_t(T * out), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[t * in + i] * W[o * in + i];
      y[t * out + o] = acc;
    }
  return y;
}

Vec rmsnorm(const Vec& x, const Vec& g, int64_t T, int64_t D, double eps) {
  Vec y(x.size());
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += x[t * D + i] * x[t * D + i];
    double r = 1.0 / std::sqrt(ss / double(D) + eps);
    for (int64_t i = 0; i < D; ++i) y[t * D + i] = g[i] * (x[t * D + i] * r);
  }
  return y;
}

// llama2.c's RoPE at position t: pairs (i, i+1), i even, rotated by
// t * theta^(-(i % hd) / hd).
void rope(Vec& v, int64_t T, int64_t width, int64_t hd, double theta) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < width; i += 2) {
      double freq = 1.0 / std::pow(theta, double(i % hd) / double(hd));
      double c = std::cos(double(t) * freq), s = std::sin(double(t) * freq);
      double v0 = v[t * width + i], v1 = v[t * width + i + 1];
      v[t * width + i] = v0 * c - v1 * s;
      v[t * width + i + 1] = v0 * s + v1 * c;
    }
}

struct LayerShape {
  int64_t dim, hidden, heads, kv_heads;
  double eps;
  bool use_rope;
  double theta;
};

// One transformer block on one sequence x [T, dim], in place.
void block(Vec& x, const LayerShape& s, const Weights& w, const std::string& p, int64_t T) {
  const int64_t D = s.dim, hd = D / s.heads, kvd = s.kv_heads * hd, group = s.heads / s.kv_heads;
  Vec xb = rmsnorm(x, get(w, p + "rms_att"), T, D, s.eps);
  Vec q = matvec_rows(xb, get(w, p + "wq"), T, D, D);
  Vec k = matvec_rows(xb, get(w, p + "wk"), T, D, kvd);
  Vec v = matvec_rows(xb, get(w, p + "wv"), T, D, kvd);
  if (s.use_rope) {
    rope(q, T, D, hd, s.theta);
    rope(k, T, kvd, hd, s.theta);
  }
  Vec att_out(size_t(T * D), 0.0);
  const double scale = 1.0 / std::sqrt(double(hd));
  Vec score(static_cast<size_t>(T));
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t kh = h / group;
    for (int64_t t = 0; t < T; ++t) {
      double mx = -INFINITY;
      for (int64_t u = 0; u <= t; ++u) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += q[t * D + h * hd + i] * k[u * kvd + kh * hd + i];
        score[u] = d * scale;
        mx = std::max(mx, score[u]);
      }
      double sum = 0;
      for (int64_t u = 0; u <= t; ++u) sum += (score[u] = std::exp(score[u] - mx));
      for (int64_t u = 0; u <= t; ++u)
        for (int64_t i = 0; i < hd; ++i) att_out[t * D + h * hd + i] += score[u] / sum * v[u * kvd + kh * hd + i];
    }
  }
  Vec o = matvec_rows(att_out, get(w, p + "wo"), T, D, D);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

  xb = rmsnorm(x, get(w, p + "rms_ffn"), T, D, s.eps);
  Vec h1 = matvec_rows(xb, get(w, p + "w1"), T, D, s.hidden);
  Vec h3 = matvec_rows(xb, get(w, p + "w3"), T, D, s.hidden);
  for (size_t i = 0; i < h1.size(); ++i) h1[i] = h1[i] / (1.0 + std::exp(-h1[i])) * h3[i];
  Vec f = matvec_rows(h1, get(w, p + "w2"), T, s.hidden, D);
  for (size_t i = 0; i < x.size(); ++i) x[i] += f[i];
}

void check_tokens(const std::vector<int32_t>& ids, int64_t n, int64_t vocab, const char* what) {
  if (int64_t(ids.size()) != n) throw std::runtime_error(std::string("fp64 llama: wrong number of ") + what);
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) throw std::runtime_error(std::string("fp64 llama: ") + what + " out of range");
}

}  // namespace

std::vector<double> llama_logits(const LlamaShape& s, const Weights& w, const std::vector<int32_t>& tokens,
                                 int64_t batch, int64_t seq) {
  check_tokens(tokens, batch * seq, s.vocab, "tokens");
  const int64_t D = s.dim, V = s.vocab, T = seq;
  const Vec& emb = get(w, "tok_embeddings");
  const Vec& cls = get(w, s.shared_classifier ? "tok_embeddings" : "wcls");
  const LayerShape ls{s.dim, s.hidden, s.heads, s.kv_heads, s.norm_eps, true, s.rope_theta};
  Vec logits;
  logits.reserve(size_t(batch * T * V));
  for (int64_t b = 0; b < batch; ++b) {
    Vec x(size_t(T * D));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D; ++i) x[t * D + i] = emb[tokens[b * T + t] * D + i];
    for (int64_t l = 0; l < s.layers; ++l) block(x, ls, w, std::string("l").append(std::to_string(l)).append("_"), T);
    Vec xf = rmsnorm(x, get(w, "rms_final"), T, D, s.norm_eps);
    Vec lg = matvec_rows(xf, cls, T, D, V);
    logits.insert(logits.end(), lg.begin(), lg.end());
  }
  return logits;
}

double llama_loss(const LlamaShape& s, const Weights& w, const std::vector<int32_t>& tokens,
                  const std::vector<int32_t>& targets, int64_t batch, int64_t seq) {
  check_tokens(targets, batch * seq, s.vocab, "targets");
  Vec lg = llama_logits(s, w, tokens, batch, seq);
  const int64_t V = s.vocab;
  double total = 0;
  for (int64_t r = 0; r < batch * seq; ++r) {
    const double* row = lg.data() + r * V;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, row[j]);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
    total += mx + std::log(sum) - row[targets[r]];
  }
  return total / double(batch * seq);
}

std::vector<double> seed_layer_forward(const SeedShape& s, const Weights& w, const std::vector<double>& x) {
  if (int64_t(x.size()) != s.seq * s.dim) throw std::runtime_error("fp64 seed layer: x must be [seq, dim]");
  Vec y = x;
  block(y, {s.dim, s.hidden, s.heads, s.heads, s.norm_eps, false, 0.0}, w, "", s.seq);
  return y;
}

double seed_layer_loss(const SeedShape& s, const Weights& w, const std::vector<double>& x,
                       const std::vector<double>& target) {
  Vec y = seed_layer_forward(s, w, x);
  if (target.size() != y.size()) throw std::runtime_error("fp64 seed layer: target must be [seq, dim]");
  double sum = 0;
  for (size_t i = 0; i < y.size(); ++i) sum += (y[i] - target[i]) * (y[i] - target[i]);
  return sum / double(y.size());
}

}  // namespace milrt::test::fp64
