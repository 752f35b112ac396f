#include "llm/llama_decoder.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>

#include "llm/quantize.h"
#include "llm/transformer_block.h"
#include "milrt/builder.h"
#include "milrt/error.h"

namespace milrt::llm {
namespace {

// Masked scores: -inf, which the attention kernels recognise as "never seen"
// and skip, so a decode step reads only the cache rows filled so far
// (kernels::attention_visible_keys). No row is all -inf (query i at pos + i
// always sees key 0), so no inf - inf arises.
constexpr double kMaskValue = -std::numeric_limits<double>::infinity();

Tensor int_range(int64_t n, int64_t start = 0) {
  Tensor t(DType::Int32, {n});
  for (int64_t i = 0; i < n; ++i) t.set(size_t(i), double(start + i));
  return t;
}

Tensor ints(const std::vector<int64_t>& v) {
  Tensor t(DType::Int32, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set(i, double(v[i]));
  return t;
}

class DecoderBuilder {
 public:
  // `weights` null: the weights are fp32 inputs; else consts stored as opt says.
  DecoderBuilder(FunctionBuilder& f, const LlamaConfig& c, int64_t T, const LlamaWeights* weights = nullptr,
                 DecoderOptions opt = {})
      : f_(f), c_(c), T_(T), weights_(weights), opt_(opt), hd_(c.head_dim()), group_(c.heads / c.kv_heads),
        tb_(f, BlockShape{c.dim, c.hidden, c.heads, c.kv_heads, T, c.norm_eps, true, c.rope_theta}) {}

  Value build();

 private:
  // [seq, width] table as TransformerBuilder's RoPE uses: cos of each pair's
  // angle, and the sine signed for the swapped pair (-sin at even i, +sin at
  // odd i), so rope(x) = x * cos + swap_pairs(x) * sin_signed.
  Tensor rope_table(int64_t width, bool sine) const;
  Value rope(const std::string& name, const Value& x, int64_t width);
  Value positions();
  Value mask();
  Value mask_rows();
  Value attention(const std::string& p, const Value& q, const Value& k, const Value& v);
  Value cache_write(const std::string& name, const Value& x);
  void define_weights();
  Value matrix_const(const std::string& name, const Tensor& w);

  FunctionBuilder& f_;
  const LlamaConfig& c_;
  int64_t T_;
  const LlamaWeights* weights_;
  DecoderOptions opt_;
  int64_t hd_, group_;
  TransformerBuilder tb_;
  std::map<std::string, Value> w_;
  Value pos_, qpos_;
  std::map<int64_t, std::pair<Value, Value>> rope_rows_;  // width -> gathered cos, sin [T, width]
  Value mask_, mask_rows_, begin_, end_;
  bool have_mask_ = false, have_mask_rows_ = false, have_range_ = false;
};

Tensor DecoderBuilder::rope_table(int64_t width, bool sine) const {
  Tensor t(DType::FP32, {c_.seq, width});
  for (int64_t p = 0; p < c_.seq; ++p)
    for (int64_t i = 0; i < width; ++i) {
      const int64_t pair = (i % hd_) - (i % hd_) % 2;
      const double angle = double(p) * std::pow(c_.rope_theta, -double(pair) / double(hd_));
      t.set(size_t(p * width + i), sine ? (i % 2 == 0 ? -std::sin(angle) : std::sin(angle)) : std::cos(angle));
    }
  return t;
}

// The positions of this run's tokens, pos + [0, T): int32 [T].
Value DecoderBuilder::positions() {
  if (qpos_.name.empty()) qpos_ = f_.op("add", "qpos", {{"x", pos_}, {"y", f_.constant("token_offsets", int_range(T_))}});
  return qpos_;
}

Value DecoderBuilder::rope(const std::string& name, const Value& x, int64_t width) {
  auto it = rope_rows_.find(width);
  if (it == rope_rows_.end()) {
    const std::string w = std::to_string(width);
    Value cos_t = f_.constant("rope_cos_" + w, rope_table(width, false));
    Value sin_t = f_.constant("rope_sin_" + w, rope_table(width, true));
    Value cos = f_.op("gather", "rope_cos_rows_" + w, {{"x", cos_t}, {"indices", positions()}, {"axis", lit_i32(0)}});
    Value sin = f_.op("gather", "rope_sin_rows_" + w, {{"x", sin_t}, {"indices", positions()}, {"axis", lit_i32(0)}});
    it = rope_rows_.emplace(width, std::make_pair(cos, sin)).first;
  }
  // One pass over x (kernels/generic/rope.h) with this call's rows of the tables.
  return f_.op("milrt_rope", name + "_rope", {{"x", x}, {"cos", it->second.first}, {"sin", it->second.second}});
}

// [T, seq] additive mask: 0 where key position j <= pos + i, else kMaskValue.
Value DecoderBuilder::mask() {
  if (have_mask_) return mask_;
  Value kpos = f_.constant("key_positions", int_range(c_.seq));
  Value qcol = f_.op("reshape", "qpos_col", {{"x", positions()}, {"shape", lit_i32s({T_, 1})}});
  Value visible = f_.op("less_equal", "visible", {{"x", kpos}, {"y", qcol}});
  Value zero = f_.constant("mask_open", Tensor::scalar(DType::FP32, 0.0));
  Value shut = f_.constant("mask_shut", Tensor::scalar(DType::FP32, kMaskValue));
  mask_ = f_.op("select", "att_mask", {{"cond", visible}, {"a", zero}, {"b", shut}});
  have_mask_ = true;
  return mask_;
}

// The mask for the query rows of one kv head, [G·T, seq]: row g·T + i is
// query i of the group's g-th head (the [T, seq] mask repeated G times), so
// scores stay one 4-D product and fuse-attention makes the whole chain one
// milrt_attention.
Value DecoderBuilder::mask_rows() {
  if (group_ == 1) return mask();
  if (!have_mask_rows_)
    mask_rows_ = f_.op("tile", "att_mask_rows", {{"x", mask()}, {"reps", lit_i32s({group_, 1})}}), have_mask_rows_ = true;
  return mask_rows_;
}

// x [1, T, kv_dim] written into the cache at rows [pos, pos+T) of every kv
// head; returns the updated cache [1, kv_heads, seq, head_dim].
Value DecoderBuilder::cache_write(const std::string& name, const Value& x) {
  if (!have_range_) {
    Value end_pos = f_.op("add", "cache_end_pos", {{"x", pos_}, {"y", f_.constant("prefill_len", ints({T_}))}});
    begin_ = f_.op("concat", "cache_begin",
                   {{"values", tuple({f_.constant("cache_begin_head", ints({0, 0})), pos_,
                                      f_.constant("cache_begin_tail", ints({0}))})},
                    {"axis", lit_i32(0)}, {"interleave", lit_bool(false)}});
    end_ = f_.op("concat", "cache_end",
                 {{"values", tuple({f_.constant("cache_end_head", ints({1, c_.kv_heads})), end_pos,
                                    f_.constant("cache_end_tail", ints({hd_}))})},
                  {"axis", lit_i32(0)}, {"interleave", lit_bool(false)}});
    have_range_ = true;
  }
  Value heads = f_.op("reshape", name + "_heads", {{"x", x}, {"shape", lit_i32s({1, T_, c_.kv_heads, hd_})}});
  Value rows = f_.op("transpose", name + "_rows", {{"x", heads}, {"perm", lit_i32s({0, 2, 1, 3})}});
  const bool fp16 = opt_.cache == DType::FP16;
  if (fp16) rows = f_.op("cast", name + "_rows_fp16", {{"x", rows}, {"dtype", lit_str("fp16")}});
  Value state = f_.value(name + "cache");
  Value old = f_.op("read_state", name + "cache_old", {{"input", state}});
  Value upd = f_.op("slice_update", name + "cache_new",
                    {{"x", old}, {"update", rows}, {"begin", begin_}, {"end", end_}});
  Value now = f_.op("coreml_update_state", name + "cache_now", {{"state", state}, {"value", upd}});
  return fp16 ? f_.op("cast", name + "cache_fp32", {{"x", now}, {"dtype", lit_str("fp32")}}) : now;
}

// q [1, T, dim], k and v [1, T, kv_dim] -> [1, T, dim].
Value DecoderBuilder::attention(const std::string& p, const Value& q, const Value& k, const Value& v) {
  const int64_t kvh = c_.kv_heads, G = group_;
  Value kc = cache_write(p + "k", k);
  Value vc = cache_write(p + "v", v);
  // Query head h = kvh_index * G + g reads kv head h / G.
  Value q5 = f_.op("reshape", p + "q_heads", {{"x", q}, {"shape", lit_i32s({1, T_, kvh, G, hd_})}});
  Value qt = f_.op("transpose", p + "q_t", {{"x", q5}, {"perm", lit_i32s({0, 2, 3, 1, 4})}});
  Value q4 = f_.op("reshape", p + "q_rows", {{"x", qt}, {"shape", lit_i32s({1, kvh, G * T_, hd_})}});
  Value scores = f_.op("matmul", p + "scores",
                       {{"x", q4}, {"y", kc}, {"transpose_x", lit_bool(false)}, {"transpose_y", lit_bool(true)}});
  if (!f_.has_value("att_scale")) f_.constant("att_scale", Tensor::scalar(DType::FP32, 1.0 / std::sqrt(double(hd_))));
  Value scaled = f_.op("mul", p + "scores_scaled", {{"x", scores}, {"y", f_.value("att_scale")}});
  Value masked = f_.op("add", p + "scores_masked", {{"x", scaled}, {"y", mask_rows()}});
  Value att = f_.op("softmax", p + "att", {{"x", masked}, {"axis", lit_i32(-1)}});
  Value ctx = f_.op("matmul", p + "att_v",
                    {{"x", att}, {"y", vc}, {"transpose_x", lit_bool(false)}, {"transpose_y", lit_bool(false)}});
  Value c5 = f_.op("reshape", p + "att_v_5d", {{"x", ctx}, {"shape", lit_i32s({1, kvh, G, T_, hd_})}});
  Value ct = f_.op("transpose", p + "att_out_t", {{"x", c5}, {"perm", lit_i32s({0, 3, 1, 2, 4})}});
  return f_.op("reshape", p + "att_out", {{"x", ct}, {"shape", lit_i32s({1, T_, c_.dim})}});
}

// A weight matrix [out, in] as a const in the chosen storage; int8 and int4
// are the block-quantized data and scales expanded by
// constexpr_blockwise_shift_scale, which the compiler keeps compressed for the
// matmul that reads it. The op's output has the scales' dtype, so with fp16
// scales it is an fp16 weight, cast to fp32 for the fp32 matmul (coremltools'
// matmul mixes dtypes only with a const operand, which a constexpr output is
// not); the compiler fuses the cast away with the constexpr op.
Value DecoderBuilder::matrix_const(const std::string& name, const Tensor& w) {
  switch (opt_.weights) {
    case WeightStorage::fp32: return f_.constant(name, w);
    case WeightStorage::fp16: return f_.constant(name, w.cast(DType::FP16));
    case WeightStorage::bf16: return f_.constant(name, w.cast(DType::BF16));
    case WeightStorage::int8:
    case WeightStorage::int4: {
      const bool int4 = opt_.weights == WeightStorage::int4;
      const BlockQuantized q = int4 ? quantize_int4_blockwise(w, opt_.block, opt_.scales)
                                    : quantize_int8_blockwise(w, opt_.block, opt_.scales);
      const bool fp16 = opt_.scales == DType::FP16;
      Value d = f_.op("constexpr_blockwise_shift_scale", fp16 ? name + "_fp16" : name,
                      {{"data", f_.constant(name + (int4 ? "_q4" : "_q8"), q.data)},
                       {"scale", f_.constant(name + "_scale", q.scale)}});
      return fp16 ? f_.op("cast", name, {{"x", d}, {"dtype", lit_str("fp32")}}) : d;
    }
    case WeightStorage::inputs: break;
  }
  throw Error("llama decoder: internal: no const storage");
}

void DecoderBuilder::define_weights() {
  if (!weights_) {
    for (const WeightSpec& s : llama_weight_specs(c_)) w_[s.name] = f_.input(s.name, Type::tensor(DType::FP32, s.shape));
    return;
  }
  for (const WeightSpec& s : llama_weight_specs(c_)) {
    const Tensor& t = weights_->tensors.at(s.name);
    const bool matrix = s.name != "tok_embeddings" && s.shape.size() == 2;
    w_[s.name] = matrix ? matrix_const(s.name, t) : f_.constant(s.name, t);
  }
  // The embedding table stays fp32 for the gather; a shared classifier gets
  // its own copy in the matrices' storage (the same const when that is fp32).
  if (c_.shared_classifier)
    w_["wcls"] = opt_.weights == WeightStorage::fp32 ? w_.at("tok_embeddings")
                                                    : matrix_const("wcls", weights_->tensors.at("tok_embeddings"));
}

Value DecoderBuilder::build() {
  Value tokens = f_.input("tokens", Type::tensor(DType::Int32, {1, T_}));
  pos_ = f_.input("pos", Type::tensor(DType::Int32, {1}));
  define_weights();
  Type cache;
  cache.kind = Type::Kind::State;
  cache.elems = {Type::tensor(opt_.cache, {1, c_.kv_heads, c_.seq, hd_})};
  for (const std::string& n : llama_cache_names(c_)) f_.input(n, cache);

  Value x = f_.op("gather", "embed", {{"x", w_.at("tok_embeddings")}, {"indices", tokens}, {"axis", lit_i32(0)}});
  for (int64_t i = 0; i < c_.layers; ++i) {
    const std::string p = fmt::format("l{}_", i);
    Value xb = tb_.rmsnorm(p + "att_norm", x, w_.at(p + "rms_att"));
    Value q = rope(p + "q", tb_.linear(p + "q", xb, w_.at(p + "wq")), c_.dim);
    Value k = rope(p + "k", tb_.linear(p + "k", xb, w_.at(p + "wk")), c_.kv_dim());
    Value v = tb_.linear(p + "v", xb, w_.at(p + "wv"));
    Value o = tb_.linear(p + "att_proj", attention(p, q, k, v), w_.at(p + "wo"));
    Value x1 = f_.op("add", p + "x_att", {{"x", x}, {"y", o}});
    Value xb2 = tb_.rmsnorm(p + "ffn_norm", x1, w_.at(p + "rms_ffn"));
    Value h1 = tb_.linear(p + "h1", xb2, w_.at(p + "w1"));
    Value h3 = tb_.linear(p + "h3", xb2, w_.at(p + "w3"));
    Value act = f_.op("silu", p + "h1_silu", {{"x", h1}});
    Value gate = f_.op("mul", p + "gate", {{"x", act}, {"y", h3}});
    x = f_.op("add", p + "x", {{"x", x1}, {"y", tb_.linear(p + "ffn_out", gate, w_.at(p + "w2"))}});
  }
  // Only the last position's logits are wanted: the classifier runs on one row.
  if (T_ > 1)
    x = f_.op("slice_by_index", "x_last", {{"x", x}, {"begin", lit_i32s({0, T_ - 1, 0})}, {"end", lit_i32s({1, T_, c_.dim})}});
  Value row = f_.op("reshape", "x_row", {{"x", x}, {"shape", lit_i32s({1, c_.dim})}});
  Value xf = tb_.rmsnorm("final_norm", row, w_.at("rms_final"));
  return tb_.linear("logits", xf, w_.at(c_.shared_classifier && !weights_ ? "tok_embeddings" : "wcls"));
}

}  // namespace

std::vector<std::string> llama_cache_names(const LlamaConfig& cfg) {
  std::vector<std::string> r;
  for (int64_t i = 0; i < cfg.layers; ++i) {
    r.push_back(fmt::format("l{}_kcache", i));
    r.push_back(fmt::format("l{}_vcache", i));
  }
  return r;
}

namespace {

Program build(const LlamaConfig& cfg, int64_t tokens, const LlamaWeights* w, const DecoderOptions& opt) {
  cfg.validate();
  if (tokens <= 0 || tokens > cfg.seq)
    throw Error("llama decoder: tokens per run must be in 1.." + std::to_string(cfg.seq) +
                " (the model's context), got " + std::to_string(tokens));
  const bool int4 = opt.weights == WeightStorage::int4;
  if (w && (opt.weights == WeightStorage::int8 || int4) &&
      (opt.block <= 0 || cfg.dim % opt.block != 0 || cfg.hidden % opt.block != 0))
    throw Error(std::string("llama decoder: the ") + weight_storage_name(opt.weights) + " block size " +
                std::to_string(opt.block) + " must divide dim " + std::to_string(cfg.dim) + " and hidden_dim " +
                std::to_string(cfg.hidden));
  if (w && int4 && opt.block % 2 != 0)
    throw Error("llama decoder: the int4 block size " + std::to_string(opt.block) + " must be even");
  FunctionBuilder f("main");
  DecoderBuilder b(f, cfg, tokens, w, opt);
  f.output(b.build());
  return make_program({f.build()});
}

}  // namespace

Program build_llama_decoder(const LlamaConfig& cfg, int64_t tokens) { return build(cfg, tokens, nullptr, {}); }

Program build_llama_decoder(const LlamaWeights& w, int64_t tokens, const DecoderOptions& opt) {
  if (opt.cache != DType::FP32 && opt.cache != DType::FP16)
    throw Error("llama decoder: the KV cache must be fp32 or fp16, not " + std::string(dtype_name(opt.cache)));
  if (opt.scales != DType::FP32 && opt.scales != DType::FP16)
    throw Error("llama decoder: block scales must be fp32 or fp16, not " + std::string(dtype_name(opt.scales)));
  if (opt.weights == WeightStorage::inputs) return build(w.cfg, tokens, nullptr, opt);
  check_llama_weights(w);
  return build(w.cfg, tokens, &w, opt);
}

DType parse_scale_dtype(const std::string& s) {
  if (s == "fp16") return DType::FP16;
  if (s == "fp32") return DType::FP32;
  throw Error("unknown scale dtype '" + s + "' (fp16, fp32)");
}

WeightStorage parse_weight_storage(const std::string& s) {
  for (WeightStorage w :
       {WeightStorage::fp32, WeightStorage::fp16, WeightStorage::bf16, WeightStorage::int8, WeightStorage::int4})
    if (s == weight_storage_name(w)) return w;
  throw Error("unknown weight storage '" + s + "' (fp32, fp16, bf16, int8, int4)");
}

const char* weight_storage_name(WeightStorage s) {
  switch (s) {
    case WeightStorage::inputs: return "inputs";
    case WeightStorage::fp32: return "fp32";
    case WeightStorage::fp16: return "fp16";
    case WeightStorage::bf16: return "bf16";
    case WeightStorage::int8: return "int8";
    case WeightStorage::int4: return "int4";
  }
  return "?";
}

}  // namespace milrt::llm
