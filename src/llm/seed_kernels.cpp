#include "llm/seed_kernels.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

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

class Kernel {
 public:
  Kernel(const SeedLayerConfig& c, int64_t in_channels) : c_(c), f_("main") {
    check_config(c);
    x_ = f_.input("x", Type::tensor(DType::FP16, {1, in_channels, 1, c.seq}));
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

  // The seed's CONV_CONST block: stride 1, no padding, one group.
  void conv_consts() {
    pt_ = f_.constant("pt", Tensor::from_strings({}, {"valid"}));
    st_ = ints("st", {1, 1});
    pd_ = ints("pd", {0, 0, 0, 0});
    dl_ = ints("dl", {1, 1});
    gr_ = i32("gr", 1);
  }
  // A 1x1 conv: a matrix product over channels at every sequence position.
  Value conv(const std::string& out, const Value& weight, const Value& x) {
    return f_.op("conv", out, {{"dilations", dl_}, {"groups", gr_}, {"pad", pd_}, {"pad_type", pt_},
                               {"strides", st_}, {"weight", weight}, {"x", x}});
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
  Value rmsnorm(const Tensor& w, const std::string& w_name) {
    check_weight(w, w_name, {c_.dim});
    Value sq = op("mul", "sq", {{"x", x_}, {"y", x_}});
    Value rax = ints("rax", {1});
    Value kd = boolean("kd", true);
    Value ss = op("reduce_sum", "ss", {{"x", sq}, {"axes", rax}, {"keep_dims", kd}});
    Value invd = f16("invd", 1.0 / c_.dim);
    Value ss2 = op("mul", "ss2", {{"x", ss}, {"y", invd}});
    Value eps = f16("eps", 1e-5);
    Value ss3 = op("add", "ss3", {{"x", ss2}, {"y", eps}});
    Value nhalf = f16("nhalf", -0.5);
    Value rrms = op("pow", "rrms", {{"x", ss3}, {"y", nhalf}});
    Value xr = op("mul", "xr", {{"x", x_}, {"y", rrms}});
    Value rw = tensor("rw", w.reshaped({1, c_.dim, 1, 1}));
    return op("mul", "xn", {{"x", xr}, {"y", rw}});
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
  Value x_, pt_, st_, pd_, dl_, gr_;
};


}  // namespace

Tensor seed_causal_mask(int seq) {
  Tensor m(DType::FP16, {1, 1, seq, seq});
  for (int t = 0; t < seq; ++t)
    for (int t2 = 0; t2 < seq; ++t2) m.set(size_t(t) * seq + t2, t2 <= t ? 0.0 : kFp16Lowest);
  return m;
}

Program seed_sdpa_fwd_taps(const SeedLayerConfig& c, const SeedLayerWeights& w) {
  Kernel k(c, c.dim);
  Value xn = k.rmsnorm(w.rms1, "rms1");
  k.conv_consts();
  Value wq = k.tensor("Wq", conv_weight(w.wq, "wq", c.dim, c.dim, false));
  Value wk = k.tensor("Wk", conv_weight(w.wk, "wk", c.dim, c.dim, false));
  Value wv = k.tensor("Wv", conv_weight(w.wv, "wv", c.dim, c.dim, false));
  Value wo = k.tensor("Wo", conv_weight(w.wo, "wo", c.dim, c.dim, false));
  Value qf = k.conv("qf", wq, xn);
  Value kf = k.conv("kf", wk, xn);
  Value vf = k.conv("vf", wv, xn);
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
  Value oo = k.conv("oo", wo, af);
  return k.finish({oo, qf, kf, vf, af, xn});
}

Program seed_ffn_fwd_taps(const SeedLayerConfig& c, const SeedLayerWeights& w) {
  Kernel k(c, c.dim);
  Value xn = k.rmsnorm(w.rms2, "rms2");
  k.conv_consts();
  Value w1 = k.tensor("W1", conv_weight(w.w1, "w1", c.hidden, c.dim, false));
  Value w3 = k.tensor("W3", conv_weight(w.w3, "w3", c.hidden, c.dim, false));
  Value w2 = k.tensor("W2", conv_weight(w.w2, "w2", c.dim, c.hidden, false));
  Value h1 = k.conv("h1", w1, xn);
  Value h3 = k.conv("h3", w3, xn);
  Value sig = k.op("sigmoid", "sig", {{"x", h1}});
  Value silu = k.op("mul", "silu", {{"x", h1}, {"y", sig}});
  Value gate = k.op("mul", "gate", {{"x", silu}, {"y", h3}});
  Value y = k.conv("y", w2, gate);
  return k.finish({y, h1, h3, gate, xn});
}

Program seed_ffn_bwd(const SeedLayerConfig& c, const SeedLayerWeights& w) {
  Kernel k(c, int64_t(c.dim) + 2 * int64_t(c.hidden));
  k.conv_consts();
  Value bd = k.ints("bd", {0, 0, 0, 0});
  Value sd = k.ints("sd", {1, c.dim, 1, c.seq});
  Value dffn = k.slice("dffn", bd, sd);
  Value b1 = k.ints("b1", {0, c.dim, 0, 0});
  Value s1 = k.ints("s1", {1, c.hidden, 1, c.seq});
  Value h1 = k.slice("h1", b1, s1);
  Value b3 = k.ints("b3", {0, int64_t(c.dim) + c.hidden, 0, 0});
  Value h3 = k.slice("h3", b3, s1);
  Value w2t = k.tensor("W2t", conv_weight(w.w2, "w2", c.dim, c.hidden, true));
  Value dsilu = k.conv("dsilu", w2t, dffn);
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
  Value w1t = k.tensor("W1t", conv_weight(w.w1, "w1", c.hidden, c.dim, true));
  Value w3t = k.tensor("W3t", conv_weight(w.w3, "w3", c.hidden, c.dim, true));
  Value dx1 = k.conv("dx1", w1t, dh1);
  Value dx3 = k.conv("dx3", w3t, dh3);
  Value dx = k.op("add", "dx", {{"x", dx1}, {"y", dx3}});
  return k.finish({dx, dh1, dh3});
}

Program seed_qkv_bwd(const SeedLayerConfig& c, const SeedLayerWeights& w) {
  Kernel k(c, 3 * int64_t(c.dim));
  k.conv_consts();
  Value sz = k.ints("sz", {1, c.dim, 1, c.seq});
  Value b0 = k.ints("b0", {0, 0, 0, 0});
  Value dq = k.slice("dq", b0, sz);
  Value b1 = k.ints("b1", {0, c.dim, 0, 0});
  Value dk = k.slice("dk", b1, sz);
  Value b2 = k.ints("b2", {0, 2 * int64_t(c.dim), 0, 0});
  Value dv = k.slice("dv", b2, sz);
  Value wqt = k.tensor("Wqt", conv_weight(w.wq, "wq", c.dim, c.dim, true));
  Value wkt = k.tensor("Wkt", conv_weight(w.wk, "wk", c.dim, c.dim, true));
  Value wvt = k.tensor("Wvt", conv_weight(w.wv, "wv", c.dim, c.dim, true));
  Value dxq = k.conv("dxq", wqt, dq);
  Value dxk = k.conv("dxk", wkt, dk);
  Value dxv = k.conv("dxv", wvt, dv);
  Value dxqk = k.op("add", "dxqk", {{"x", dxq}, {"y", dxk}});
  return k.finish(k.op("add", "out", {{"x", dxqk}, {"y", dxv}}));
}

Program seed_sdpa_bwd1(const SeedLayerConfig& c, const SeedLayerWeights& w) {
  Kernel k(c, 4 * int64_t(c.dim));
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
  Value wot = k.tensor("Wot", conv_weight(w.wo, "wo", c.dim, c.dim, true));
  Value df = k.conv("df", wot, dx2f);
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
