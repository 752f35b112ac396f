#include "llm/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "kernels/generic/adamw.h"
#include "milrt/error.h"

namespace milrt::llm {

void AdamWConfig::validate() const {
  auto bad = [](const char* field, double v, const char* want) {
    throw Error(fmt::format("AdamW config: {} = {} ({})", field, v, want));
  };
  if (!(lr >= 0) || !std::isfinite(lr)) bad("lr", lr, "must be finite and >= 0");
  if (!(beta1 >= 0 && beta1 < 1)) bad("beta1", beta1, "must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) bad("beta2", beta2, "must be in [0, 1)");
  if (!(eps > 0) || !std::isfinite(eps)) bad("eps", eps, "must be finite and > 0");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) bad("weight_decay", weight_decay, "must be finite and >= 0");
  if (!(grad_clip >= 0) || !std::isfinite(grad_clip)) bad("grad_clip", grad_clip, "must be finite and >= 0");
  if (warmup < 0) bad("warmup", double(warmup), "must be >= 0");
  if (total_steps < 0) bad("total_steps", double(total_steps), "must be >= 0");
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1)) bad("min_lr_ratio", min_lr_ratio, "must be in [0, 1]");
}

double learning_rate(const AdamWConfig& c, int64_t step) {
  if (step < 0) throw Error(fmt::format("learning rate: step {} is negative", step));
  if (step < c.warmup) return c.lr * double(step + 1) / double(c.warmup);
  double min_lr = c.min_lr_ratio * c.lr;
  if (step >= c.total_steps) return min_lr;
  double ratio = double(step - c.warmup) / double(c.total_steps - c.warmup);
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (c.lr - min_lr);
}

namespace {
// `t` holds exactly the tensors of `want`, each fp32 of its shape: what an
// optimizer is given or restores (one-line Error naming the first misfit).
void check_fp32_tensors(const TensorMap& t, const std::map<std::string, Shape>& want, const char* what) {
  for (const auto& [name, shape] : want) {
    auto it = t.find(name);
    if (it == t.end()) throw Error(fmt::format("AdamW: {} lack '{}'", what, name));
    if (it->second.dtype() != DType::FP32 || it->second.shape() != shape)
      throw Error(fmt::format("AdamW: {} '{}' is {} {}, expected fp32 {}", what, name,
                              dtype_name(it->second.dtype()), shape_str(it->second.shape()), shape_str(shape)));
  }
  if (t.size() != want.size())
    for (const auto& [name, x] : t)
      if (!want.count(name)) throw Error(fmt::format("AdamW: {} have unknown tensor '{}'", what, name));
}

// The update's constants for optimizer step `step` (0-based) at gradient norm
// `norm`, shared by AdamW and ShardedAdamW so they compute the same numbers.
kernels::AdamWStep step_constants(const AdamWConfig& c, int64_t step, double norm, double* lr_out) {
  if (!std::isfinite(norm))
    throw Error(fmt::format("AdamW: gradient norm is {} at step {}; parameters left unchanged", norm, step));
  // PyTorch's clip_grad_norm_: the 1e-6 keeps the factor finite and just below 1 at the bound.
  double scale = c.grad_clip > 0 && norm > c.grad_clip ? c.grad_clip / (norm + 1e-6) : 1.0;
  double lr = learning_rate(c, step);
  double t = double(step + 1);
  double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
  kernels::AdamWStep s;
  s.beta1 = float(c.beta1);
  s.beta2 = float(c.beta2);
  s.eps = float(c.eps);
  s.grad_scale = float(scale);
  s.step_size = float(lr / bc1);
  s.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  *lr_out = lr;
  return s;
}
}  // namespace

AdamW::AdamW(const AdamWConfig& cfg, const TensorMap& params) : cfg_(cfg) {
  cfg_.validate();
  for (const auto& [name, p] : params) {
    if (p.dtype() != DType::FP32)
      throw Error(fmt::format("AdamW: parameter '{}' is {}, expected fp32", name, dtype_name(p.dtype())));
    m_.emplace(name, Tensor(DType::FP32, p.shape()));
    v_.emplace(name, Tensor(DType::FP32, p.shape()));
  }
}

void AdamW::check_same(const TensorMap& t, const char* what) const {
  std::map<std::string, Shape> want;
  for (const auto& [name, m] : m_) want.emplace(name, m.shape());
  check_fp32_tensors(t, want, what);
}

double AdamW::step(TensorMap& params, const TensorMap& grads) {
  check_same(params, "parameters");
  check_same(grads, "gradients");
  // A read-only (mapped) parameter must fail here, not after others were updated.
  for (auto& [name, p] : params) p.mutable_data();
  double sq = 0;
  for (const auto& [name, g] : grads) sq += kernels::sum_squares_f32(g.ptr<float>(), g.numel());
  double norm = std::sqrt(sq);
  double lr = 0;
  kernels::AdamWStep s = step_constants(cfg_, step_, norm, &lr);
  for (auto& [name, p] : params) {
    // Weight decay on matrices (embeddings, projections), not on gains, as train.py.
    s.decay = p.rank() >= 2 ? float(1.0 - lr * cfg_.weight_decay) : 1.0f;
    kernels::adamw_update_f32(p.mutable_ptr<float>(), grads.at(name).ptr<float>(), m_.at(name).mutable_ptr<float>(),
                              v_.at(name).mutable_ptr<float>(), p.numel(), s);
  }
  ++step_;
  return norm;
}

TrainState AdamW::state() const {
  TrainState s;
  s.step = step_;
  for (const auto& [name, m] : m_) s.m.emplace(name, m.clone());
  for (const auto& [name, v] : v_) s.v.emplace(name, v.clone());
  return s;
}

void AdamW::restore(const TrainState& s) {
  if (s.step < 0) throw Error(fmt::format("AdamW: cannot restore step {}", s.step));
  check_same(s.m, "restored m");
  check_same(s.v, "restored v");
  for (auto& [name, m] : m_) m = s.m.at(name).clone();
  for (auto& [name, v] : v_) v = s.v.at(name).clone();
  step_ = s.step;
}

FlatLayout FlatLayout::make(const std::vector<std::pair<std::string, Shape>>& tensors, int world) {
  if (world < 1) throw Error("flat layout: world size must be >= 1");
  constexpr int64_t kAlign = 16;  // floats: 64 bytes
  auto round_up = [](int64_t x, int64_t a) { return (x + a - 1) / a * a; };
  FlatLayout l;
  l.world = world;
  int64_t off = 0;
  for (const auto& [name, shape] : tensors) {
    off = round_up(off, kAlign);
    Entry e{name, shape, off, shape_numel(shape)};
    off += e.numel;
    l.entries.push_back(std::move(e));
  }
  l.used = off;
  l.shard = std::max<int64_t>(kAlign, round_up((off + world - 1) / world, kAlign));
  return l;
}

ShardedAdamW::ShardedAdamW(const AdamWConfig& cfg, const FlatLayout& layout, int rank)
    : cfg_(cfg), layout_(layout), rank_(rank) {
  cfg_.validate();
  if (rank < 0 || rank >= layout.world) throw Error(fmt::format("sharded AdamW: rank {} of {}", rank, layout.world));
  const int64_t lo = int64_t(rank) * layout.shard, hi = lo + layout.shard;
  for (const FlatLayout::Entry& e : layout.entries) {
    const int64_t b = std::max(lo, e.offset), end = std::min(hi, e.offset + e.numel);
    // Weight decay on matrices (embeddings, projections), not on gains, as AdamW.
    if (b < end) segments_.push_back({b - lo, end - b, e.shape.size() >= 2});
  }
  m_.assign(size_t(layout.shard), 0.0f);
  v_.assign(size_t(layout.shard), 0.0f);
}

double ShardedAdamW::sum_squares(const float* g) const {
  double sq = 0;
  for (const Segment& s : segments_) sq += kernels::sum_squares_f32(g + s.begin, s.count);
  return sq;
}

void ShardedAdamW::step(float* w, const float* g, double norm) {
  double lr = 0;
  kernels::AdamWStep s = step_constants(cfg_, step_, norm, &lr);
  for (const Segment& seg : segments_) {
    s.decay = seg.decay ? float(1.0 - lr * cfg_.weight_decay) : 1.0f;
    kernels::adamw_update_f32(w + seg.begin, g + seg.begin, m_.data() + seg.begin, v_.data() + seg.begin, seg.count, s);
  }
  ++step_;
}

void ShardedAdamW::restore(const TrainState& s) {
  if (s.step < 0) throw Error(fmt::format("AdamW: cannot restore step {}", s.step));
  std::map<std::string, Shape> want;
  for (const FlatLayout::Entry& e : layout_.entries) want.emplace(e.name, e.shape);
  check_fp32_tensors(s.m, want, "restored m");
  check_fp32_tensors(s.v, want, "restored v");
  const int64_t lo = int64_t(rank_) * layout_.shard, hi = lo + layout_.shard;
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(v_.begin(), v_.end(), 0.0f);
  for (const FlatLayout::Entry& e : layout_.entries) {
    const int64_t b = std::max(lo, e.offset), end = std::min(hi, e.offset + e.numel);
    if (b >= end) continue;
    const float* sm = s.m.at(e.name).ptr<float>() + (b - e.offset);
    const float* sv = s.v.at(e.name).ptr<float>() + (b - e.offset);
    std::copy(sm, sm + (end - b), m_.begin() + (b - lo));
    std::copy(sv, sv + (end - b), v_.begin() + (b - lo));
  }
  step_ = s.step;
}

TensorMap ShardedAdamW::unflatten(const FlatLayout& layout, const float* all) {
  TensorMap t;
  for (const FlatLayout::Entry& e : layout.entries) {
    Tensor x(DType::FP32, e.shape);
    std::copy(all + e.offset, all + e.offset + e.numel, x.mutable_ptr<float>());
    t.emplace(e.name, std::move(x));
  }
  return t;
}

}  // namespace milrt::llm
