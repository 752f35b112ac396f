#include "llm/seed_layer_builder.h"

#include <cmath>
#include <map>
#include <string>

#include "llm/transformer_block.h"
#include "milrt/builder.h"
#include "milrt/error.h"

namespace milrt::llm {
namespace {

void check(const SeedLayerConfig& c) {
  if (c.dim <= 0 || c.hidden <= 0 || c.heads <= 0 || c.seq <= 0 || c.dim % c.heads != 0)
    throw Error("seed layer: bad config dim=" + std::to_string(c.dim) + " hidden=" + std::to_string(c.hidden) +
                " heads=" + std::to_string(c.heads) + " seq=" + std::to_string(c.seq) +
                " (all must be positive, dim divisible by heads)");
}

// POSIX drand48/srand48: X' = (0x5DEECE66D X + 0xB) mod 2^48, value X' / 2^48.
class Drand48 {
 public:
  explicit Drand48(uint32_t seed) : x_((uint64_t(seed) << 16) | 0x330E) {}
  double next() {
    x_ = (0x5DEECE66DULL * x_ + 0xB) & ((uint64_t(1) << 48) - 1);
    return std::ldexp(double(x_), -48);
  }

 private:
  uint64_t x_;
};

}  // namespace

std::vector<WeightSpec> seed_layer_weight_specs(const SeedLayerConfig& c) {
  const int64_t d = c.dim, h = c.hidden;
  return {{"rms_att", {d}},    {"wq", {d, d}}, {"wk", {d, d}}, {"wv", {d, d}}, {"wo", {d, d}},
          {"rms_ffn", {d}},    {"w1", {h, d}}, {"w2", {d, h}}, {"w3", {h, d}}};
}

Program build_seed_layer_loss(const SeedLayerConfig& c, DType compute) {
  check(c);
  if (compute != DType::FP32 && compute != DType::FP16)
    throw Error(std::string("seed layer: compute dtype must be fp32 or fp16, got ") + std::string(dtype_name(compute)));
  const bool fp16 = compute == DType::FP16;
  FunctionBuilder f("main");
  Value x = f.input("x", Type::tensor(DType::FP32, {c.seq, c.dim}));
  Value target = f.input("target", Type::tensor(DType::FP32, {c.seq, c.dim}));
  if (fp16) f.input("loss_scale", Type::tensor(DType::FP32, {}));
  // With fp16 compute, each fp32 input is cast once, where the layer reads it.
  auto in_compute = [&](const Value& v, const std::string& name) {
    return fp16 ? f.op("cast", name + "_fp16", {{"x", v}, {"dtype", lit_str("fp16")}}) : v;
  };
  std::map<std::string, Value> w;
  for (const WeightSpec& s : seed_layer_weight_specs(c))
    w[s.name] = in_compute(f.input(s.name, Type::tensor(DType::FP32, s.shape)), s.name);

  TransformerBuilder tb(f, BlockShape{c.dim, c.hidden, c.heads, c.heads, c.seq, 1e-5, false, 0.0}, compute);
  Value y = tb.block("l0_", in_compute(x, "x"), {w.at("rms_att"), w.at("wq"), w.at("wk"), w.at("wv"), w.at("wo"),
                                                 w.at("rms_ffn"), w.at("w1"), w.at("w2"), w.at("w3")});
  if (fp16) y = f.op("cast", "y", {{"x", y}, {"dtype", lit_str("fp32")}});
  // The loss in fp32: the squared errors of a fitted layer underflow fp16.
  Value diff = f.op("sub", "diff", {{"x", y}, {"y", target}});
  Value sq = f.op("mul", "diff_sq", {{"x", diff}, {"y", diff}});
  Value loss = f.op("reduce_mean", fp16 ? "mse" : "loss",
                    {{"x", sq}, {"axes", lit_i32s({0, 1})}, {"keep_dims", lit_bool(false)}});
  if (fp16) loss = f.op("mul", "loss", {{"x", loss}, {"y", f.value("loss_scale")}});
  f.output(loss);
  return make_program({f.build()});
}

TensorMap seed_layer_synthetic_inputs(const SeedLayerConfig& c, uint32_t seed) {
  check(c);
  TensorMap in;
  for (const WeightSpec& s : seed_layer_weight_specs(c)) in[s.name] = Tensor(DType::FP32, s.shape);
  // The seed's float scales times a double draw, rounded to float on store.
  const float scale_d = 1.0f / std::sqrt(float(c.dim)), scale_h = 1.0f / std::sqrt(float(c.hidden));
  Drand48 r(seed);
  auto draw = [&](float scale) { return float(double(scale) * (2 * r.next() - 1)); };
  float* wq = in["wq"].mutable_ptr<float>();
  float* wk = in["wk"].mutable_ptr<float>();
  float* wv = in["wv"].mutable_ptr<float>();
  float* wo = in["wo"].mutable_ptr<float>();
  const int64_t dd = int64_t(c.dim) * c.dim, hd = int64_t(c.hidden) * c.dim;
  for (int64_t i = 0; i < dd; ++i) { wq[i] = draw(scale_d); wk[i] = draw(scale_d); }
  for (int64_t i = 0; i < dd; ++i) { wv[i] = draw(scale_d); wo[i] = draw(scale_d); }
  for (auto [name, scale] : {std::pair{"w1", scale_h}, std::pair{"w2", scale_d}, std::pair{"w3", scale_h}}) {
    float* p = in[name].mutable_ptr<float>();
    for (int64_t i = 0; i < hd; ++i) p[i] = draw(scale);
  }
  for (const char* name : {"rms_att", "rms_ffn"}) {
    float* p = in[name].mutable_ptr<float>();
    for (int64_t i = 0; i < c.dim; ++i) p[i] = 1.0f;
  }

  Tensor x(DType::FP32, {c.seq, c.dim}), target(DType::FP32, {c.seq, c.dim});
  float* xp = x.mutable_ptr<float>();
  float* tp = target.mutable_ptr<float>();
  Drand48 data(seed);
  for (int64_t ch = 0; ch < c.dim; ++ch)
    for (int64_t t = 0; t < c.seq; ++t) {
      const int64_t idx = ch * c.seq + t;
      xp[t * c.dim + ch] = float(double(0.1f) * (2 * data.next() - 1));
      tp[t * c.dim + ch] = 0.1f * std::sin(float(idx) * 0.03f + 1.0f);
    }
  in["x"] = x;
  in["target"] = target;
  return in;
}

}  // namespace milrt::llm
