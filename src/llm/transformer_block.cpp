#include "llm/transformer_block.h"

#include <cmath>
#include <vector>

namespace milrt::llm {
namespace {

Shape leading(const Value& x) { return Shape(x.type.shape.begin(), x.type.shape.end() - 2); }

Shape cat(Shape a, std::initializer_list<int64_t> b) {
  a.insert(a.end(), b);
  return a;
}

// 0, 1, ..., n-1 followed by `tail` shifted by n.
std::vector<int64_t> perm_after(size_t n, std::initializer_list<int64_t> tail) {
  std::vector<int64_t> p;
  for (size_t i = 0; i < n; ++i) p.push_back(int64_t(i));
  for (int64_t t : tail) p.push_back(int64_t(n) + t);
  return p;
}

}  // namespace

Value TransformerBuilder::scalar(const std::string& name, double v) {
  if (f_.has_value(name)) return f_.value(name);
  return f_.constant(name, Tensor::scalar(dtype_, v));
}

// fp32: one rms_norm op over the last dim, one kernel pass forward and one
// fused backward pass (milrt_rms_norm_grad) where the primitives take seven
// passes over memory. fp16 (the Neural Engine's programs): the primitives,
// each rounded to fp16 as the chip rounds them.
Value TransformerBuilder::rmsnorm(const std::string& name, const Value& x, const Value& gamma) {
  if (dtype_ != DType::FP16)
    return f_.op("rms_norm", name, {{"x", x}, {"w", gamma}, {"eps", lit_f32(s_.norm_eps)}});
  Value sq = f_.op("mul", name + "_sq", {{"x", x}, {"y", x}});
  Value ms = f_.op("reduce_mean", name + "_ms", {{"x", sq}, {"axes", lit_i32s({-1})}, {"keep_dims", lit_bool(true)}});
  Value var = f_.op("add", name + "_var", {{"x", ms}, {"y", scalar("norm_eps", s_.norm_eps)}});
  Value rrms = f_.op("rsqrt", name + "_rrms", {{"x", var}});
  Value xn = f_.op("mul", name + "_xn", {{"x", x}, {"y", rrms}});
  return f_.op("mul", name, {{"x", xn}, {"y", gamma}});
}

Value TransformerBuilder::linear(const std::string& name, const Value& x, const Value& w) {
  return f_.op("matmul", name, {{"x", x}, {"y", w}, {"transpose_x", lit_bool(false)}, {"transpose_y", lit_bool(true)}});
}

// [T, width] tables for positions 0..T-1: cos of each pair's angle, and the
// sine signed for the swapped pair (-sin at even i, +sin at odd i), so that
// rope(x) = x * cos + swap_pairs(x) * sin_signed is llama2.c's rotation
// (x0 c - x1 s, x0 s + x1 c).
Value TransformerBuilder::rope_table(const std::string& name, int64_t width, bool sine) {
  if (f_.has_value(name)) return f_.value(name);
  const int64_t hd = s_.dim / s_.heads;
  Tensor t(dtype_, {s_.seq, width});
  for (int64_t pos = 0; pos < s_.seq; ++pos)
    for (int64_t i = 0; i < width; ++i) {
      const int64_t pair = (i % hd) - (i % hd) % 2;  // the pair's even index within its head
      const double angle = double(pos) * std::pow(s_.rope_theta, -double(pair) / double(hd));
      const double v = sine ? (i % 2 == 0 ? -std::sin(angle) : std::sin(angle)) : std::cos(angle);
      t.set(size_t(pos * width + i), v);
    }
  return f_.constant(name, t);
}

// fp32: one milrt_rope op (a pass over x, its gradient another). fp16 (the
// Neural Engine's programs): the slices, concat and products it stands for.
Value TransformerBuilder::rope(const std::string& name, const Value& x, int64_t width) {
  const std::string w = std::to_string(width);
  if (dtype_ != DType::FP16)
    return f_.op("milrt_rope", name + "_rope",
                 {{"x", x}, {"cos", rope_table("rope_cos_" + w, width, false)},
                  {"sin", rope_table("rope_sin_" + w, width, true)}});
  const Shape lead = leading(x);
  const int64_t T = s_.seq, half = width / 2;
  Shape zeros(lead.size() + 3, 0), odd_begin = zeros;
  odd_begin.back() = 1;
  Value pairs = f_.op("reshape", name + "_pairs", {{"x", x}, {"shape", lit_i32s(cat(lead, {T, half, 2}))}});
  Value even = f_.op("slice_by_index", name + "_even",
                     {{"x", pairs}, {"begin", lit_i32s(zeros)}, {"end", lit_i32s(cat(lead, {T, half, 1}))}});
  Value odd = f_.op("slice_by_index", name + "_odd",
                    {{"x", pairs}, {"begin", lit_i32s(odd_begin)}, {"end", lit_i32s(cat(lead, {T, half, 2}))}});
  Value swapped = f_.op("concat", name + "_swapped_pairs",
                        {{"values", tuple({odd, even})}, {"axis", lit_i32(-1)}, {"interleave", lit_bool(false)}});
  Value swap = f_.op("reshape", name + "_swapped", {{"x", swapped}, {"shape", lit_i32s(cat(lead, {T, width}))}});
  Value xc = f_.op("mul", name + "_cos", {{"x", x}, {"y", rope_table("rope_cos_" + w, width, false)}});
  Value xs = f_.op("mul", name + "_sin", {{"x", swap}, {"y", rope_table("rope_sin_" + w, width, true)}});
  return f_.op("add", name + "_rope", {{"x", xc}, {"y", xs}});
}

// [..., T, n * hd] -> [..., H, T, hd] (multi-head), or for grouped queries
// [..., KVH, n, T, hd] where n is the heads sharing one kv head for queries
// and 1 for keys and values, so matmul broadcasts K and V over the group.
Value TransformerBuilder::split_heads(const std::string& name, const Value& x, int64_t group) {
  const Shape lead = leading(x);
  const int64_t T = s_.seq, hd = s_.dim / s_.heads;
  if (s_.heads == s_.kv_heads) {
    Value r = f_.op("reshape", name + "_heads", {{"x", x}, {"shape", lit_i32s(cat(lead, {T, s_.heads, hd}))}});
    return f_.op("transpose", name + "_t", {{"x", r}, {"perm", lit_i32s(perm_after(lead.size(), {1, 0, 2}))}});
  }
  Value r = f_.op("reshape", name + "_heads",
                  {{"x", x}, {"shape", lit_i32s(cat(lead, {T, s_.kv_heads, group, hd}))}});
  return f_.op("transpose", name + "_t", {{"x", r}, {"perm", lit_i32s(perm_after(lead.size(), {1, 2, 0, 3}))}});
}

Value TransformerBuilder::merge_heads(const std::string& name, const Value& x) {
  const bool grouped = s_.heads != s_.kv_heads;
  const size_t nlead = x.type.shape.size() - (grouped ? 4 : 3);
  const Shape lead(x.type.shape.begin(), x.type.shape.begin() + nlead);
  Value t = f_.op("transpose", name + "_t",
                  {{"x", x}, {"perm", lit_i32s(grouped ? perm_after(nlead, {2, 0, 1, 3}) : perm_after(nlead, {1, 0, 2}))}});
  return f_.op("reshape", name, {{"x", t}, {"shape", lit_i32s(cat(lead, {s_.seq, s_.dim}))}});
}

Value TransformerBuilder::block(const std::string& p, const Value& x, const BlockWeights& w) {
  const int64_t hd = s_.dim / s_.heads, kv_dim = s_.kv_heads * hd, group = s_.heads / s_.kv_heads;
  Value xb = rmsnorm(p + "att_norm", x, w.rms_att);
  Value q = linear(p + "q", xb, w.wq);
  Value k = linear(p + "k", xb, w.wk);
  Value v = linear(p + "v", xb, w.wv);
  if (s_.rope) {
    q = rope(p + "q", q, s_.dim);
    k = rope(p + "k", k, kv_dim);
  }
  Value qh = split_heads(p + "q", q, group);
  Value kh = split_heads(p + "k", k, 1);
  Value vh = split_heads(p + "v", v, 1);

  // One fused op rather than matmul, scale, mask, softmax, matmul: its
  // gradient rule emits the fused backward (milrt_attention_grad), so
  // training keeps no [T, T] probabilities and skips the causal half. The
  // second output, each row's log-sum-exp, saves the backward recomputing it
  // (seed layer: about a quarter of its time).
  Value ctx = f_.op_n("milrt_attention", {p + "att", p + "att_lse"},
                      {{"q", qh}, {"k", kh}, {"v", vh}, {"scale", lit_f32(1.0 / std::sqrt(double(hd)))},
                       {"causal", lit_bool(true)}})[0];
  Value merged = merge_heads(p + "att_out", ctx);
  Value o = linear(p + "att_proj", merged, w.wo);
  Value x1 = f_.op("add", p + "x_att", {{"x", x}, {"y", o}});

  Value xb2 = rmsnorm(p + "ffn_norm", x1, w.rms_ffn);
  Value h1 = linear(p + "h1", xb2, w.w1);
  Value h3 = linear(p + "h3", xb2, w.w3);
  // fp32: silu(h1)·h3 as one op, one pass each way (milrt_silu_mul_grad).
  Value gate = dtype_ == DType::FP16 ? f_.op("mul", p + "gate", {{"x", f_.op("silu", p + "h1_silu", {{"x", h1}})}, {"y", h3}})
                                     : f_.op("milrt_silu_mul", p + "gate", {{"a", h1}, {"b", h3}});
  Value ffn = linear(p + "ffn_out", gate, w.w2);
  return f_.op("add", p + "x", {{"x", x1}, {"y", ffn}});
}

}  // namespace milrt::llm
