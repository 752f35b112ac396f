#include "llm/seed_kernels.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llm/seed_dynamic_weights.h"
#include "milrt/builder.h"
#include "milrt/error.h"

namespace milrt::llm {
namespace {

constexpr double kFp16Lowest = -65504.0;

void check_config(const SeedLayerConfig& c) {
  if (c.dim <= 0 || c.hidden <= 0 || c.heads <= 0 || c.seq <= 0 || c.dim % c.heads != 0)
    throw Error("seed kernels: bad layer config dim=" + std::to_string(c.dim) + " hidden=" +
                std::to_string(c.hidden) + " heads=" + std::to_string(c.heads) + " seq=" +
                std::to_string(c.seq) + " (all must be positive, dim divisible by heads)");
}

void check_weight(const Tensor& t, const std::string& name, const Shape& want) {
  if (t.empty() || t.dtype() != DType::FP16 || t.shape() != want)
    throw Error("seed kernels: weight " + name + " must be fp16 " + shape_str(want) + ", got " +
                (t.empty() ? std::string("nothing") :
                             std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape())));
}

// A [rows, cols] matrix as conv weight [rows, cols, 1, 1], or transposed to
// [cols, rows, 1, 1] (the seed's build_blob_t), copying fp16 bits exactly.
Tensor conv_weight(const Tensor& w, const std::string& name, int64_t rows, int64_t cols, bool transpose) {
  check_weight(w, name, {rows, cols});
  if (!transpose) return w.reshaped({rows, cols, 1, 1});
  Tensor t(DType::FP16, {cols, rows, 1, 1});
  const uint16_t* src = w.ptr<uint16_t>();
  uint16_t* dst = t.mutable_ptr<uint16_t>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
  return t;
}

// A FunctionBuilder with the seed's recurring idioms. Every constant is a
// `const` op, as in the seed's text, and values keep the seed's names.
// 1/sqrt(head dim), the attention score scale.
double score_scale(const SeedLayerConfig& c) { return 1.0 / std::sqrt(double(c.dim / c.heads)); }

// Where a kernel's weights come from: constants made from `constant` (the
// seed's kernels), or rectangles of the packed input that `dynamic` describes
// (seed_dynamic_weights.h).
struct WeightSource {
  const SeedLayerWeights* constant = nullptr;
  std::optional<SeedDynamicLayout> dynamic;
};

WeightSource constant_weights(const SeedLayerWeights& w) { return {&w, std::nullopt}; }
WeightSource dynamic_weights(SeedWeightKernel k, const SeedLayerConfig& c) {
  check_config(c);
  return {nullptr, seed_dynamic_layout(k, c)};
}

class Kernel {
 public:
  Kernel(const SeedLayerConfig& c, int64_t in_channels, WeightSource src = {})
      : c_(c), f_("main"), src_(std::move(src)) {
    check_config(c);
    const SeedDynamicLayout* d = src_.dynamic ? &*src_.dynamic : nullptr;
    if (d && d->channels != in_channels) throw Error("seed kernels: dynamic layout and kernel disagree on channels");
    x_ = f_.input("x", Type::tensor(DType::FP16, {1, in_channels, 1, d ? d->width : c.seq}));
  }

  int64_t hd() const { return c_.dim / c_.heads; }
  int64_t score_ch() const { return int64_t(c_.heads) * c_.seq; }

  Value op(const std::string& type, const std::string& out,
           const std::vector<std::pair<std::string, Operand>>& inputs) {
    return f_.op(type, out, inputs);
  }
  Value tensor(const std::string& name, const Tensor& t) { return f_.constant(name, t); }
  Value ints(const std::string& name, const std::vector<int64_t>& v) {
    Tensor t(DType::Int32, {int64_t(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.set(i, double(v[i]));
    return f_.constant(name, t);
  }
  Value i32(const std::string& name, int64_t v) { return f_.constant(name, Tensor::scalar(DType::Int32, double(v))); }
  Value boolean(const std::string& name, bool v) { return f_.constant(name, Tensor::scalar(DType::Bool, v)); }
  Value f16(const std::string& name, double v) { return f_.constant(name, Tensor::scalar(DType::FP16, v)); }

  // The seed's CONV_CONST block: stride 1, no padding, one group (constant
  // weights only: dynamic ones go through matmul).
  void conv_consts() {
    if (src_.dynamic) return;
    pt_ = f_.constant("pt", Tensor::from_strings({}, {"valid"}));
    st_ = ints("st", {1, 1});
    pd_ = ints("pd", {0, 0, 0, 0});
    dl_ = ints("dl", {1, 1});
    gr_ = i32("gr", 1);
  }
  // A weight as `project` applies it: the matrix A of y = A·x, which is the
  // seed's W [out, in] (rows x cols) or, for `backward`, its transpose.
  // Constant: a conv weight [A rows, A cols, 1, 1] named `value`. Dynamic:
  // its rectangle of the input sliced and reshaped to the matrix `value`
  // [1, 1, r, c], which holds A or Aᵀ (`transpose`, matmul's transpose_x).
  struct Weight {
    Value v;
    bool transpose = false;
  };
  Weight weight(const std::string& value, const std::string& name, int64_t rows, int64_t cols, bool backward) {
    if (!src_.dynamic)
      return {tensor(value, conv_weight(seed_weight(*src_.constant, name), name, rows, cols, backward))};
    const SeedPackedWeight& p = src_.dynamic->weight(name);
    const bool transpose = p.transposed != backward;  // the rectangle holds Aᵀ
    const int64_t a_rows = backward ? cols : rows, a_cols = backward ? rows : cols;
    if ((transpose ? Shape{a_cols, a_rows} : Shape{a_rows, a_cols}) != Shape{p.rows, p.cols})
      throw Error("seed kernels: the packed rectangle of " + name + " does not hold its matrix");
    Value r = slice(value + "_p", ints(value + "_b", {0, p.channel, 0, p.column}),
                    ints(value + "_z", {1, p.rows, 1, p.cols}));
    Value m = op("reshape", value, {{"shape", ints(value + "_s", {1, 1, p.rows, p.cols})}, {"x", r}});
    return {m, transpose};
  }
  // y = A·x over channels at every sequence position: a 1x1 conv with a
  // constant weight, else matmul on [1, 1, channels, seq] views. Both sum
  // the products in input-channel order from zero in the reference
  // executor, so the two forms give the same bits.
  Value project(const std::string& out, const Weight& w, const Value& x) {
    if (!src_.dynamic)
      return f_.op("conv", out, {{"dilations", dl_}, {"groups", gr_}, {"pad", pd_}, {"pad_type", pt_},
                                 {"strides", st_}, {"weight", w.v}, {"x", x}});
    const int64_t in = x.type.shape.at(1), rows = w.v.type.shape.at(w.transpose ? 3 : 2);
    Value xm = op("reshape", out + "_x", {{"shape", ints(out + "_xs", {1, 1, in, c_.seq})}, {"x", x}});
    Value tx = boolean(out + "_tx", w.transpose), ty = boolean(out + "_ty", false);
    Value ym = op("matmul", out + "_m", {{"transpose_x", tx}, {"transpose_y", ty}, {"x", w.v}, {"y", xm}});
    return op("reshape", out, {{"shape", ints(out + "_ys", {1, rows, 1, c_.seq})}, {"x", ym}});
  }

  // Channels [begin, begin + size) of the input.
  Value slice(const std::string& out, const Value& begin, const Value& size) {
    return f_.op("slice_by_size", out, {{"x", x_}, {"begin", begin}, {"size", size}});
  }

  // [1, D, 1, S] -> [1, heads, hd, S] -> [1, heads, S, hd].
  Value to_heads(const std::string& reshaped, const std::string& out, const Value& x, const Value& shape,
                 const Value& perm) {
    Value r = f_.op("reshape", reshaped, {{"shape", shape}, {"x", x}});
    return f_.op("transpose", out, {{"perm", perm}, {"x", r}});
  }

  // Causal attention probabilities softmax(Q·Kᵀ·scale + mask), as both the
  // forward kernel and the first backward kernel compute them; `no` and `yes`
  // are the kernel's false/true constants for the transpose flags.
  Value attention_probs(const std::string& out, const Value& q, const Value& k, const Value& no, const Value& yes) {
    Value sc1 = op("matmul", "sc1", {{"transpose_x", no}, {"transpose_y", yes}, {"x", q}, {"y", k}});
    Value scv = f16("scv", score_scale(c_));
    Value sc2 = op("mul", "sc2", {{"x", sc1}, {"y", scv}});
    Value cm = tensor("cm", seed_causal_mask(c_.seq));
    Value ms = op("add", "ms", {{"x", sc2}, {"y", cm}});
    Value sax = i32("sax", -1);
    return op("softmax", out, {{"axis", sax}, {"x", ms}});
  }

  // The seed's in-kernel RMSNorm: x * (mean(x^2) + eps)^-0.5 * w.
  Value rmsnorm(const std::string& w_name) {
    // With packed weights, the activations are the input's columns [0, seq).
    const Value x = src_.dynamic ? slice("xa", ints("xab", {0, 0, 0, 0}), ints("xas", {1, c_.dim, 1, c_.seq})) : x_;
    Value sq = op("mul", "sq", {{"x", x}, {"y", x}});
    Value rax = ints("rax", {1});
    Value kd = boolean("kd", true);
    Value ss = op("reduce_sum", "ss", {{"x", sq}, {"axes", rax}, {"keep_dims", kd}});
    Value invd = f16("invd", 1.0 / c_.dim);
    Value ss2 = op("mul", "ss2", {{"x", ss}, {"y", invd}});
    Value eps = f16("eps", 1e-5);
    Value ss3 = op("add", "ss3", {{"x", ss2}, {"y", eps}});
    Value nhalf = f16("nhalf", -0.5);
    Value rrms = op("pow", "rrms", {{"x", ss3}, {"y", nhalf}});
    Value xr = op("mul", "xr", {{"x", x}, {"y", rrms}});
    Value rw = gain("rw", w_name);
    return op("mul", "xn", {{"x", xr}, {"y", rw}});
  }

  // An RMSNorm gain as [1, dim, 1, 1]: a constant, or its column of the input.
  Value gain(const std::string& value, const std::string& name) {
    if (!src_.dynamic) {
      const Tensor& w = seed_weight(*src_.constant, name);
      check_weight(w, name, {c_.dim});
      return tensor(value, w.reshaped({1, c_.dim, 1, 1}));
    }
    const SeedPackedWeight& p = src_.dynamic->weight(name);
    return slice(value, ints(value + "_b", {0, p.channel, 0, p.column}), ints(value + "_z", {1, p.rows, 1, 1}));
  }

  // concat(values) along channels, as every kernel ends.
  Program finish(const std::vector<Operand>& values) {
    Value cax = i32("cax", 1);
    Value cid = boolean("cid", false);
    Value out = op("concat", "out", {{"axis", cax}, {"interleave", cid}, {"values", tuple(values)}});
    return finish(out);
  }
  Program finish(const Value& out) {
    f_.output(out);
    return make_program({f_.build()});
  }

 private:
  SeedLayerConfig c_;
  FunctionBuilder f_;
  WeightSource src_;
  Value x_, pt_, st_, pd_, dl_, gr_;
};


}  // namespace

Tensor seed_causal_mask(int seq) {
  Tensor m(DType::FP16, {1, 1, seq, seq});
  for (int t = 0; t < seq; ++t)
    for (int t2 = 0; t2 < seq; ++t2) m.set(size_t(t) * seq + t2, t2 <= t ? 0.0 : kFp16Lowest);
  return m;
}

namespace {

// The five weight-bearing kernels, each with constant or packed weights.
Program build_sdpa_fwd_taps(const SeedLayerConfig& c, WeightSource src) {
  Kernel k(c, c.dim, std::move(src));
  Value xn = k.rmsnorm("rms1");
  k.conv_consts();
  auto wq = k.weight("Wq", "wq", c.dim, c.dim, false);
  auto wk = k.weight("Wk", "wk", c.dim, c.dim, false);
  auto wv = k.weight("Wv", "wv", c.dim, c.dim, false);
  auto wo = k.weight("Wo", "wo", c.dim, c.dim, false);
  Value qf = k.project("qf", wq, xn);
  Value kf = k.project("kf", wk, xn);
  Value vf = k.project("vf", wv, xn);
  Value qsh = k.ints("qsh", {1, c.heads, k.hd(), c.seq});
  Value pm = k.ints("pm", {0, 1, 3, 2});
  Value q = k.to_heads("q4", "q", qf, qsh, pm);
  Value kk = k.to_heads("k4", "k", kf, qsh, pm);
  Value v = k.to_heads("v4", "v", vf, qsh, pm);
  Value tx = k.boolean("tx", false);
  Value ty = k.boolean("ty", true);
  Value aw = k.attention_probs("aw", q, kk, tx, ty);
  Value a4 = k.op("matmul", "a4", {{"transpose_x", tx}, {"transpose_y", tx}, {"x", aw}, {"y", v}});
  Value at = k.op("transpose", "at", {{"perm", pm}, {"x", a4}});
  Value os = k.ints("os", {1, c.dim, 1, c.seq});
  Value af = k.op("reshape", "af", {{"shape", os}, {"x", at}});
  Value oo = k.project("oo", wo, af);
  return k.finish({oo, qf, kf, vf, af, xn});
}

Program build_ffn_fwd_taps(const SeedLayerConfig& c, WeightSource src) {
  Kernel k(c, c.dim, std::move(src));
  Value xn = k.rmsnorm("rms2");
  k.conv_consts();
  auto w1 = k.weight("W1", "w1", c.hidden, c.dim, false);
  auto w3 = k.weight("W3", "w3", c.hidden, c.dim, false);
  auto w2 = k.weight("W2", "w2", c.dim, c.hidden, false);
  Value h1 = k.project("h1", w1, xn);
  Value h3 = k.project("h3", w3, xn);
  Value sig = k.op("sigmoid", "sig", {{"x", h1}});
  Value silu = k.op("mul", "silu", {{"x", h1}, {"y", sig}});
  Value gate = k.op("mul", "gate", {{"x", silu}, {"y", h3}});
  Value y = k.project("y", w2, gate);
  return k.finish({y, h1, h3, gate, xn});
}

Program build_ffn_bwd(const SeedLayerConfig& c, WeightSource src) {
  Kernel k(c, int64_t(c.dim) + 2 * int64_t(c.hidden), std::move(src));
  k.conv_consts();
  Value bd = k.ints("bd", {0, 0, 0, 0});
  Value sd = k.ints("sd", {1, c.dim, 1, c.seq});
  Value dffn = k.slice("dffn", bd, sd);
  Value b1 = k.ints("b1", {0, c.dim, 0, 0});
  Value s1 = k.ints("s1", {1, c.hidden, 1, c.seq});
  Value h1 = k.slice("h1", b1, s1);
  Value b3 = k.ints("b3", {0, int64_t(c.dim) + c.hidden, 0, 0});
  Value h3 = k.slice("h3", b3, s1);
  auto w2t = k.weight("W2t", "w2", c.dim, c.hidden, true);
  Value dsilu = k.project("dsilu", w2t, dffn);
  // silu'(h1) = sig * (1 + h1 * (1 - sig))
  Value sig = k.op("sigmoid", "sig", {{"x", h1}});
  Value one = k.f16("one", 1.0);
  Value oms = k.op("sub", "oms", {{"x", one}, {"y", sig}});
  Value homs = k.op("mul", "homs", {{"x", h1}, {"y", oms}});
  Value brk = k.op("add", "brk", {{"x", one}, {"y", homs}});
  Value dsd = k.op("mul", "dsd", {{"x", sig}, {"y", brk}});
  Value t1 = k.op("mul", "t1", {{"x", dsilu}, {"y", h3}});
  Value dh1 = k.op("mul", "dh1", {{"x", t1}, {"y", dsd}});
  Value slh = k.op("mul", "slh", {{"x", h1}, {"y", sig}});
  Value dh3 = k.op("mul", "dh3", {{"x", dsilu}, {"y", slh}});
  auto w1t = k.weight("W1t", "w1", c.hidden, c.dim, true);
  auto w3t = k.weight("W3t", "w3", c.hidden, c.dim, true);
  Value dx1 = k.project("dx1", w1t, dh1);
  Value dx3 = k.project("dx3", w3t, dh3);
  Value dx = k.op("add", "dx", {{"x", dx1}, {"y", dx3}});
  return k.finish({dx, dh1, dh3});
}

Program build_qkv_bwd(const SeedLayerConfig& c, WeightSource src) {
  Kernel k(c, 3 * int64_t(c.dim), std::move(src));
  k.conv_consts();
  Value sz = k.ints("sz", {1, c.dim, 1, c.seq});
  Value b0 = k.ints("b0", {0, 0, 0, 0});
  Value dq = k.slice("dq", b0, sz);
  Value b1 = k.ints("b1", {0, c.dim, 0, 0});
  Value dk = k.slice("dk", b1, sz);
  Value b2 = k.ints("b2", {0, 2 * int64_t(c.dim), 0, 0});
  Value dv = k.slice("dv", b2, sz);
  auto wqt = k.weight("Wqt", "wq", c.dim, c.dim, true);
  auto wkt = k.weight("Wkt", "wk", c.dim, c.dim, true);
  auto wvt = k.weight("Wvt", "wv", c.dim, c.dim, true);
  Value dxq = k.project("dxq", wqt, dq);
  Value dxk = k.project("dxk", wkt, dk);
  Value dxv = k.project("dxv", wvt, dv);
  Value dxqk = k.op("add", "dxqk", {{"x", dxq}, {"y", dxk}});
  return k.finish(k.op("add", "out", {{"x", dxqk}, {"y", dxv}}));
}

Program build_sdpa_bwd1(const SeedLayerConfig& c, WeightSource src) {
  Kernel k(c, 4 * int64_t(c.dim), std::move(src));
  k.conv_consts();
  Value sz = k.ints("sz", {1, c.dim, 1, c.seq});
  Value b0 = k.ints("b0", {0, 0, 0, 0});
  Value qf = k.slice("qf", b0, sz);
  Value b1 = k.ints("b1", {0, c.dim, 0, 0});
  Value kf = k.slice("kf", b1, sz);
  Value b2 = k.ints("b2", {0, 2 * int64_t(c.dim), 0, 0});
  Value vf = k.slice("vf", b2, sz);
  Value b3 = k.ints("b3", {0, 3 * int64_t(c.dim), 0, 0});
  Value dx2f = k.slice("dx2f", b3, sz);
  // Through Wo: the gradient of the attention output.
  auto wot = k.weight("Wot", "wo", c.dim, c.dim, true);
  Value df = k.project("df", wot, dx2f);
  Value rsh = k.ints("rsh", {1, c.heads, k.hd(), c.seq});
  Value pm = k.ints("pm", {0, 1, 3, 2});
  Value q = k.to_heads("qr", "q", qf, rsh, pm);
  Value kk = k.to_heads("kr", "k", kf, rsh, pm);
  Value v = k.to_heads("vr", "v", vf, rsh, pm);
  Value da = k.to_heads("dr", "da", df, rsh, pm);
  Value bf = k.boolean("bF", false);
  Value bt = k.boolean("bT", true);
  // The forward's probabilities, recomputed.
  Value probs = k.attention_probs("probs", q, kk, bf, bt);
  Value dv4 = k.op("matmul", "dv4", {{"transpose_x", bt}, {"transpose_y", bf}, {"x", probs}, {"y", da}});
  Value dp4 = k.op("matmul", "dp4", {{"transpose_x", bf}, {"transpose_y", bt}, {"x", da}, {"y", v}});
  Value dvt = k.op("transpose", "dvt", {{"perm", pm}, {"x", dv4}});
  Value dvs = k.ints("dvs", {1, c.dim, 1, c.seq});
  Value dvf = k.op("reshape", "dvf", {{"shape", dvs}, {"x", dvt}});
  Value scs = k.ints("scs", {1, k.score_ch(), 1, c.seq});
  Value pf = k.op("reshape", "pf", {{"shape", scs}, {"x", probs}});
  Value dpf = k.op("reshape", "dpf", {{"shape", scs}, {"x", dp4}});
  return k.finish({dvf, pf, dpf});
}

}  // namespace

Program seed_sdpa_fwd_taps(const SeedLayerConfig& c, const SeedLayerWeights& w) {
  return build_sdpa_fwd_taps(c, constant_weights(w));
}
Program seed_ffn_fwd_taps(const SeedLayerConfig& c, const SeedLayerWeights& w) {
  return build_ffn_fwd_taps(c, constant_weights(w));
}
Program seed_ffn_bwd(const SeedLayerConfig& c, const SeedLayerWeights& w) { return build_ffn_bwd(c, constant_weights(w)); }
Program seed_qkv_bwd(const SeedLayerConfig& c, const SeedLayerWeights& w) { return build_qkv_bwd(c, constant_weights(w)); }
Program seed_sdpa_bwd1(const SeedLayerConfig& c, const SeedLayerWeights& w) {
  return build_sdpa_bwd1(c, constant_weights(w));
}

Program seed_dynamic_kernel(SeedWeightKernel k, const SeedLayerConfig& c) {
  switch (k) {
    case SeedWeightKernel::SdpaFwdTaps: return build_sdpa_fwd_taps(c, dynamic_weights(k, c));
    case SeedWeightKernel::FfnFwdTaps: return build_ffn_fwd_taps(c, dynamic_weights(k, c));
    case SeedWeightKernel::FfnBwd: return build_ffn_bwd(c, dynamic_weights(k, c));
    case SeedWeightKernel::QkvBwd: return build_qkv_bwd(c, dynamic_weights(k, c));
    case SeedWeightKernel::SdpaBwd1: return build_sdpa_bwd1(c, dynamic_weights(k, c));
  }
  throw Error("seed kernels: unknown kernel");
}

const char* seed_kernel_name(SeedWeightKernel k) {
  switch (k) {
    case SeedWeightKernel::SdpaFwdTaps: return "sdpa_fwd_taps";
    case SeedWeightKernel::FfnFwdTaps: return "ffn_fwd_taps";
    case SeedWeightKernel::FfnBwd: return "ffn_bwd";
    case SeedWeightKernel::QkvBwd: return "qkv_bwd";
    case SeedWeightKernel::SdpaBwd1: return "sdpa_bwd1";
  }
  return "?";
}

Program seed_kernel(SeedWeightKernel k, const SeedLayerConfig& c, const SeedLayerWeights& w) {
  switch (k) {
    case SeedWeightKernel::SdpaFwdTaps: return seed_sdpa_fwd_taps(c, w);
    case SeedWeightKernel::FfnFwdTaps: return seed_ffn_fwd_taps(c, w);
    case SeedWeightKernel::FfnBwd: return seed_ffn_bwd(c, w);
    case SeedWeightKernel::QkvBwd: return seed_qkv_bwd(c, w);
    case SeedWeightKernel::SdpaBwd1: return seed_sdpa_bwd1(c, w);
  }
  throw Error("seed kernels: unknown kernel");
}

Program seed_sdpa_bwd2(const SeedLayerConfig& c) {
  check_config(c);
  const int64_t score_ch = int64_t(c.heads) * c.seq;
  Kernel k(c, 2 * score_ch + 2 * int64_t(c.dim));
  Value sz_sc = k.ints("sz_sc", {1, score_ch, 1, c.seq});
  Value b0 = k.ints("b0", {0, 0, 0, 0});
  Value pf = k.slice("pf", b0, sz_sc);
  Value b1 = k.ints("b1", {0, score_ch, 0, 0});
  Value dpf = k.slice("dpf", b1, sz_sc);
  Value sz_d = k.ints("sz_d", {1, c.dim, 1, c.seq});
  Value b2 = k.ints("b2", {0, 2 * score_ch, 0, 0});
  Value qf = k.slice("qf", b2, sz_d);
  Value b3 = k.ints("b3", {0, 2 * score_ch + c.dim, 0, 0});
  Value kf = k.slice("kf", b3, sz_d);
  Value ssh = k.ints("ssh", {1, c.heads, c.seq, c.seq});
  Value probs = k.op("reshape", "probs", {{"shape", ssh}, {"x", pf}});
  Value dp = k.op("reshape", "dp", {{"shape", ssh}, {"x", dpf}});
  Value rsh = k.ints("rsh", {1, c.heads, k.hd(), c.seq});
  Value pm = k.ints("pm", {0, 1, 3, 2});
  Value q = k.to_heads("qr", "q", qf, rsh, pm);
  Value kk = k.to_heads("kr", "k", kf, rsh, pm);
  // Softmax backward: ds = probs * (dp - sum(probs * dp)) * scale.
  Value pdp = k.op("mul", "pdp", {{"x", probs}, {"y", dp}});
  Value rax = k.ints("rax", {-1});
  Value kd = k.boolean("kd", true);
  Value spdp = k.op("reduce_sum", "spdp", {{"x", pdp}, {"axes", rax}, {"keep_dims", kd}});
  Value dps = k.op("sub", "dps", {{"x", dp}, {"y", spdp}});
  Value ds0 = k.op("mul", "ds0", {{"x", probs}, {"y", dps}});
  Value scv = k.f16("scv", score_scale(c));
  Value ds = k.op("mul", "ds", {{"x", ds0}, {"y", scv}});
  Value bf = k.boolean("bF", false);
  Value bt = k.boolean("bT", true);
  Value dq4 = k.op("matmul", "dq4", {{"transpose_x", bf}, {"transpose_y", bf}, {"x", ds}, {"y", kk}});
  Value dk4 = k.op("matmul", "dk4", {{"transpose_x", bt}, {"transpose_y", bf}, {"x", ds}, {"y", q}});
  Value dqt = k.op("transpose", "dqt", {{"perm", pm}, {"x", dq4}});
  Value dkt = k.op("transpose", "dkt", {{"perm", pm}, {"x", dk4}});
  Value fs = k.ints("fs", {1, c.dim, 1, c.seq});
  Value dqf = k.op("reshape", "dqf", {{"shape", fs}, {"x", dqt}});
  Value dkf = k.op("reshape", "dkf", {{"shape", fs}, {"x", dkt}});
  return k.finish({dqf, dkf});
}

}  // namespace milrt::llm
