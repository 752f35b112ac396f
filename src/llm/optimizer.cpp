#include "llm/optimizer.h"

#include <cmath>

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
  for (const auto& [name, m] : m_) {
    auto it = t.find(name);
    if (it == t.end()) throw Error(fmt::format("AdamW: {} lack '{}'", what, name));
    if (it->second.dtype() != DType::FP32 || it->second.shape() != m.shape())
      throw Error(fmt::format("AdamW: {} '{}' is {} {}, expected fp32 {}", what, name,
                              dtype_name(it->second.dtype()), shape_str(it->second.shape()), shape_str(m.shape())));
  }
  if (t.size() != m_.size())
    for (const auto& [name, x] : t)
      if (!m_.count(name)) throw Error(fmt::format("AdamW: {} have unknown tensor '{}'", what, name));
}

double AdamW::step(TensorMap& params, const TensorMap& grads) {
  check_same(params, "parameters");
  check_same(grads, "gradients");
  // A read-only (mapped) parameter must fail here, not after others were updated.
  for (auto& [name, p] : params) p.mutable_data();
  double sq = 0;
  for (const auto& [name, g] : grads) sq += kernels::sum_squares_f32(g.ptr<float>(), g.numel());
  double norm = std::sqrt(sq);
  if (!std::isfinite(norm))
    throw Error(fmt::format("AdamW: gradient norm is {} at step {}; parameters left unchanged", norm, step_));
  // PyTorch's clip_grad_norm_: the 1e-6 keeps the factor finite and just below 1 at the bound.
  double scale = cfg_.grad_clip > 0 && norm > cfg_.grad_clip ? cfg_.grad_clip / (norm + 1e-6) : 1.0;
  double lr = learning_rate(cfg_, step_);
  double t = double(step_ + 1);
  double bc1 = 1.0 - std::pow(cfg_.beta1, t), bc2 = 1.0 - std::pow(cfg_.beta2, t);
  kernels::AdamWStep s;
  s.beta1 = float(cfg_.beta1);
  s.beta2 = float(cfg_.beta2);
  s.eps = float(cfg_.eps);
  s.grad_scale = float(scale);
  s.step_size = float(lr / bc1);
  s.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
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

}  // namespace milrt::llm
