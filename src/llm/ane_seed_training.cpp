// The seed's training step through the Neural Engine backend; see
// ane_seed_training.h for the schedule. CPU buffers are channel-first
// [C, S] fp32, as the seed's, so a kernel's [1, C, 1, S] fp16 surface is
// the same rows rounded to fp16.
#include "llm/ane_seed_training.h"

#include <array>
#include <chrono>
#include <cmath>
#include <future>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "ane/executor.h"
#include "ane/partition.h"
#include "kernels/gemm.h"
#include "kernels/generic/copy.h"
#include "kernels/generic/norm.h"
#include "llm/seed_dynamic_weights.h"
#include "llm/seed_layer_builder.h"
#include "milrt/dtype.h"
#include "milrt/error.h"

namespace milrt::llm {
namespace {

using Clock = std::chrono::steady_clock;
using Rows = std::vector<float>;  // [C, S] channel-first

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The six kernels in the order a micro-step runs them; the last one has no
// weights and is compiled once per device.
enum Kernel { kFwdAttn, kFwdFfn, kFfnBwd, kSdpaBwd1, kSdpaBwd2, kQkvBwd, kKernels };
constexpr int kWeightKernels = 5;
const char* const kKernelNames[kKernels] = {"sdpa_fwd_taps", "ffn_fwd_taps", "ffn_bwd", "sdpa_bwd1", "sdpa_bwd2", "qkv_bwd"};

// The weight-bearing kernels: the trainer's index and the builders' name.
constexpr std::array<std::pair<int, SeedWeightKernel>, kWeightKernels> kWeighted = {{
    {kFwdAttn, SeedWeightKernel::SdpaFwdTaps},
    {kFwdFfn, SeedWeightKernel::FfnFwdTaps},
    {kFfnBwd, SeedWeightKernel::FfnBwd},
    {kSdpaBwd1, SeedWeightKernel::SdpaBwd1},
    {kQkvBwd, SeedWeightKernel::QkvBwd},
}};

// Blocks of rows, each [channels, S], concatenated on C into columns [0, S)
// of the fp16 [1, C, 1, W] input `t` (the seed's io_write_multi_fp16; W > S
// when weights are packed beside them).
void write_rows(Tensor& t, const std::vector<const Rows*>& blocks, int64_t S) {
  const int64_t W = t.shape()[3];
  uint16_t* dst = t.mutable_ptr<uint16_t>();
  for (const Rows* b : blocks)
    for (size_t i = 0; i < b->size(); i += size_t(S), dst += W)
      for (int64_t s = 0; s < S; ++s) dst[s] = f32_to_f16((*b)[i + size_t(s)]);
}

// Channels [ch, ch + n) of a kernel's fp16 output as fp32 rows (io_read_fp16).
Rows read_rows(const Tensor& out, int64_t ch, int64_t n, int64_t S) {
  Rows r(size_t(n * S));
  const uint16_t* src = out.ptr<uint16_t>() + ch * S;
  for (size_t i = 0; i < r.size(); ++i) r[i] = f16_to_f32(src[i]);
  return r;
}

// [a, b] row-major -> [b, a]: the task's position-major x and target to
// channel-first rows, and back.
Rows transposed(const float* p, int64_t a, int64_t b) {
  Rows r(size_t(a * b));
  kernels::permute(p, Shape{a, b}, {1, 0}, sizeof(float), r.data());
  return r;
}

// g[out, in] += dy[out, S] · x[in, S]ᵀ: a weight's gradient (the seed's cblas_sgemm).
void add_weight_grad(Tensor& g, const Rows& dy, const Rows& x, int64_t S) {
  const int64_t out = int64_t(dy.size()) / S, in = int64_t(x.size()) / S;
  float* c = g.mutable_ptr<float>();
  kernels::gemm(out, in, S, kernels::MatrixRef{dy.data(), kernels::ElemType::f32, S, false},
                kernels::MatrixRef{x.data(), kernels::ElemType::f32, S, true},
                kernels::OutputRef{c, kernels::ElemType::f32, in}, kernels::Epilogue{.residual = c, .residual_ld = in});
}

// RMSNorm's backward on channel-first rows [d, S]: the CPU trainer's kernel
// (kernels::rms_norm_backward_f32, eps 1e-5 as the seed's) on the rows
// transposed to positions; dw += the step's sum. (train_large.m's
// rmsnorm_bwd multiplies the second term by w too, which equals the
// derivative only while the gains are 1.) `dx` may be null (x is data).
void rmsnorm_backward(float* dx, Tensor& dw, const Rows& dy, const Rows& x, const Tensor& w, int64_t d, int64_t S) {
  Rows xt = transposed(x.data(), d, S), dyt = transposed(dy.data(), d, S), dwt(static_cast<size_t>(d));
  kernels::rms_norm_backward_f32(xt.data(), w.ptr<float>(), dyt.data(), dyt.data(), dwt.data(), S, d, 1e-5f);
  if (dx) kernels::permute(dyt.data(), Shape{S, d}, {1, 0}, sizeof(float), dx);  // dyt now holds dx
  float* dwp = dw.mutable_ptr<float>();
  for (int64_t i = 0; i < d; ++i) dwp[i] += dwt[size_t(i)];
}

// The seed's serial dispatch queue: tasks run one after another on a worker
// thread, in the order posted, so each gradient sum has one writer.
class SerialWorker {
 public:
  void post(std::function<void()> task) {
    last_ = std::async(std::launch::async, [prev = std::move(last_), task = std::move(task)]() mutable {
      if (prev.valid()) prev.get();
      task();
    });
  }
  void wait() {
    if (last_.valid()) last_.get();
  }
  ~SerialWorker() {
    if (last_.valid()) last_.wait();
  }

 private:
  std::future<void> last_;
};

// The kernels on one device: each an ane::Partition (one engine program)
// and, while resident, an Executor holding its compiled program. At most
// max_resident are loaded; the least recently used is unloaded first.
class DeviceKernels {
 public:
  DeviceKernels(const AneTrainOptions& o, const AneDeviceFactory& open, AneTrainStats& stats)
      : opt_(o), open_(open), stats_(stats) {
    device_ = open_();
    if (!device_) throw Error("ane: no device");
  }
  ~DeviceKernels() { unload_all(); }

  // Compiles one optimizer step needs at most: with fewer than six resident
  // slots every kernel at every micro-step (their cyclic use defeats an
  // LRU); else the kernels not loaded, and with constant weights the five
  // weight-bearing ones in any case.
  size_t compiles_needed(int64_t accum) const {
    if (opt_.max_resident < kKernels) return size_t(kKernels) * size_t(accum);
    if (!opt_.dynamic_weights) return kWeightKernels + (slots_[kSdpaBwd2].exec ? 0 : 1);
    return kKernels - resident();
  }
  size_t compiles_used() const { return device_->compile_count(device_->context); }

  // The seed's checkpoint-and-restart, in process: every program unloaded,
  // a fresh device with its whole budget. On the simulator that is a new
  // SimDevice. On macOS the budget belongs to the process (ane_private.h:
  // opening again yields the same count), so the factory's device is spent
  // too and this throws; the remedy there is the seed's: save a checkpoint
  // and exec() the process with --resume (not done by this version).
  void restart_device(int64_t accum) {
    unload_all();
    stats_.compiles += int64_t(compiles_used());
    device_.reset();
    device_ = open_();
    if (!device_) throw Error("ane: no device");
    ++stats_.restarts;
    const size_t needed = compiles_needed(accum);
    if (compiles_used() + needed > opt_.compile_budget)
      throw Error(fmt::format("ane: a fresh {} device has used {} of its {} compiles, a step needs {}: on macOS the "
                              "budget is per process; restart it from a checkpoint (exec, as the seed does)",
                              device_->name, compiles_used(), opt_.compile_budget, needed));
  }

  // Replaces kernel k's program (new constant weights): its old one is unloaded.
  void set(int k, const Program& p) {
    Slot& s = slots_[size_t(k)];
    s.exec.reset();
    s.part = std::make_unique<ane::Partition>(ane::partition(p));
    if (s.part->engine_programs() != 1 || s.part->host_steps() != 0)
      throw Error(fmt::format("ane: kernel {} partitions into {} engine programs and {} host steps, not one program",
                              kKernelNames[k], s.part->engine_programs(), s.part->host_steps()));
  }

  // Runs kernel k on its one input, compiling it first when it is not loaded.
  Tensor run(int k, const Tensor& x) {
    Slot& s = slots_[size_t(k)];
    s.last_used = ++clock_;
    if (!s.exec) {
      while (resident() >= opt_.max_resident) evict_lru();
      ane::ExecutorOptions eo;
      eo.max_resident = 1;
      eo.max_compiles = opt_.compile_budget;
      s.exec = std::make_unique<ane::Executor>(*s.part, device_.get(), eo);
    }
    TensorMap out = s.exec->run({{"x", x}});
    return out.begin()->second;
  }

  // Compiles over the run: every finished device's plus this one's.
  int64_t total_compiles() const { return stats_.compiles + int64_t(compiles_used()); }

 private:
  struct Slot {
    std::unique_ptr<ane::Partition> part;
    std::unique_ptr<ane::Executor> exec;  // declared after part: destroyed first
    uint64_t last_used = 0;
  };
  size_t resident() const {
    size_t n = 0;
    for (const Slot& s : slots_) n += s.exec != nullptr;
    return n;
  }
  void evict_lru() {
    Slot* lru = nullptr;
    for (Slot& s : slots_)
      if (s.exec && (!lru || s.last_used < lru->last_used)) lru = &s;
    lru->exec.reset();
    ++stats_.evictions;
  }
  void unload_all() {
    for (Slot& s : slots_) s.exec.reset();
  }

  const AneTrainOptions& opt_;
  const AneDeviceFactory& open_;
  AneTrainStats& stats_;
  std::shared_ptr<milrt_ane_device> device_;
  std::array<Slot, kKernels> slots_;
  uint64_t clock_ = 0;
};

// The activations and gradients a micro-step's weight-gradient tasks read.
struct Acts {
  Rows attn, xnorm, gate, x2norm, dy, dh1, dh3, dx2, dQ, dK, dV;
};

SeedLayerWeights fp16_weights(const TensorMap& w) {
  auto h = [&](const char* name) { return w.at(name).cast(DType::FP16); };
  return {h("rms_att"), h("rms_ffn"), h("wq"), h("wk"), h("wv"), h("wo"), h("w1"), h("w3"), h("w2")};
}

void check_arguments(const SeedLayerConfig& c, const Tensor& x, const Tensor& target, const TensorMap& weights,
                     const AneTrainOptions& o) {
  if (c.seq % 32 != 0)
    throw Error(fmt::format("ane: seq {} is not a multiple of 32 (the engine's row alignment)", c.seq));
  for (const auto* t : {&x, &target})
    if (t->dtype() != DType::FP32 || t->shape() != Shape{c.seq, c.dim})
      throw Error(fmt::format("ane: x and target must be fp32 [{}, {}]", c.seq, c.dim));
  for (const WeightSpec& s : seed_layer_weight_specs(c)) {
    auto it = weights.find(s.name);
    if (it == weights.end() || it->second.dtype() != DType::FP32 || it->second.shape() != s.shape)
      throw Error(fmt::format("ane: weight '{}' must be fp32 {}", s.name, shape_str(s.shape)));
  }
  if (weights.size() != seed_layer_weight_specs(c).size()) throw Error("ane: the weights hold tensors the layer does not have");
  if (o.steps < 0 || o.accum < 1) throw Error("ane: steps must be >= 0 and accum >= 1");
  if (o.max_resident < 1) throw Error("ane: max_resident must be at least 1");
  if (!(o.loss_scale > 0) || !std::isfinite(o.loss_scale)) throw Error("ane: the loss scale must be positive and finite");
}

}  // namespace

AdamWConfig seed_adamw(int64_t steps) {
  AdamWConfig a;
  a.lr = 1e-3, a.beta1 = 0.9, a.beta2 = 0.999, a.eps = 1e-8;
  a.weight_decay = 0, a.grad_clip = 0, a.warmup = 0, a.min_lr_ratio = 1;
  a.total_steps = steps;
  return a;
}

AneTrainLog train_seed_layer_ane(const SeedLayerConfig& cfg, const Tensor& x, const Tensor& target, TensorMap& weights,
                                 const AneTrainOptions& opt, const AneDeviceFactory& open_device) {
  check_arguments(cfg, x, target, weights, opt);
  const auto wall0 = Clock::now();
  const int64_t D = cfg.dim, H = cfg.hidden, S = cfg.seq, SC = int64_t(cfg.heads) * S;
  const Rows x_in = transposed(x.ptr<float>(), S, D), y_tgt = transposed(target.ptr<float>(), S, D);

  AneTrainLog log;
  DeviceKernels dev(opt, open_device, log.totals);
  if (dev.compiles_needed(opt.accum) > opt.compile_budget)
    throw Error(fmt::format("ane: an optimizer step needs {} compiles, a device allows {}{}", dev.compiles_needed(opt.accum),
                            opt.compile_budget, opt.max_resident < kKernels ? ": keep all six kernels resident" : ""));
  dev.set(kSdpaBwd2, seed_sdpa_bwd2(cfg));
  // With dynamic weights: each weight-bearing kernel's packed input, the
  // weights rewritten once per step, the activations per micro-step.
  std::array<std::optional<SeedDynamicLayout>, kKernels> layout;
  std::array<Tensor, kKernels> packed;
  auto input = [&](int k, const std::vector<const Rows*>& blocks) {
    Tensor& t = packed[size_t(k)];
    if (!layout[size_t(k)]) {  // constant weights (or none): the activations alone
      int64_t C = 0;
      for (const Rows* b : blocks) C += int64_t(b->size()) / S;
      t = Tensor(DType::FP16, {1, C, 1, S});
    }
    write_rows(t, blocks, S);
    return t;
  };
  AdamW adam(opt.adamw, weights);
  TensorMap grads;
  for (auto& [name, w] : weights) grads[name] = Tensor(DType::FP32, w.shape());

  for (int64_t step = 0; step < opt.steps; ++step) {
    const auto t_step = Clock::now();
    AneTrainRow row;
    row.step = step + 1;
    // The seed's budget check before each batch's compiles.
    if (dev.compiles_used() + dev.compiles_needed(opt.accum) > opt.compile_budget)
      dev.restart_device(opt.accum);
    auto t0 = Clock::now();
    const SeedLayerWeights w16 = fp16_weights(weights);
    for (auto [k, sk] : kWeighted) {
      if (!opt.dynamic_weights) {
        dev.set(k, seed_kernel(sk, cfg, w16));
        continue;
      }
      if (!layout[size_t(k)]) {  // first step: the kernel and its input, once
        dev.set(k, seed_dynamic_kernel(sk, cfg));
        layout[size_t(k)] = seed_dynamic_layout(sk, cfg);
        packed[size_t(k)] = Tensor(DType::FP16, layout[size_t(k)]->shape());
      }
      seed_write_dynamic_weights(*layout[size_t(k)], w16, packed[size_t(k)]);
    }
    row.lower_ms = ms_since(t0);
    for (auto& [name, g] : grads) std::fill_n(g.mutable_ptr<float>(), g.numel(), 0.0f);

    double loss_sum = 0;
    auto on_device = [&](int k, const Tensor& in) {
      const auto t = Clock::now();
      Tensor out = dev.run(k, in);
      row.device_ms += ms_since(t);
      return out;
    };
    for (int64_t a = 0; a < opt.accum; ++a) {
      Acts b;               // what the worker's tasks read
      SerialWorker worker;  // declared after b: finishes before b goes, also on an exception
      // Forward.
      const Tensor fa = on_device(kFwdAttn, input(kFwdAttn, {&x_in}));
      const Rows o = read_rows(fa, 0, D, S);
      b.attn = read_rows(fa, 4 * D, D, S), b.xnorm = read_rows(fa, 5 * D, D, S);
      const Rows Q = read_rows(fa, D, D, S), K = read_rows(fa, 2 * D, D, S), V = read_rows(fa, 3 * D, D, S);
      Rows x2(x_in.size());
      for (size_t i = 0; i < x2.size(); ++i) x2[i] = x_in[i] + o[i];
      const Tensor ff = on_device(kFwdFfn, input(kFwdFfn, {&x2}));
      const Rows ffn = read_rows(ff, 0, D, S), h1 = read_rows(ff, D, H, S), h3 = read_rows(ff, D + H, H, S);
      b.gate = read_rows(ff, D + 2 * H, H, S), b.x2norm = read_rows(ff, D + 3 * H, D, S);
      // Residual, loss and its gradient.
      b.dy.resize(x2.size());
      double loss = 0;
      const double n = double(x2.size());
      for (size_t i = 0; i < x2.size(); ++i) {
        const double e = double(x2[i] + ffn[i]) - double(y_tgt[i]);
        loss += e * e;
        b.dy[i] = float(2.0 * e / n * opt.loss_scale);
      }
      loss_sum += loss / n;

      // Backward.
      const Tensor fb = on_device(kFfnBwd, input(kFfnBwd, {&b.dy, &h1, &h3}));
      const Rows dx_ffn = read_rows(fb, 0, D, S);
      b.dh1 = read_rows(fb, D, H, S), b.dh3 = read_rows(fb, D + H, H, S);
      worker.post([&] {
        add_weight_grad(grads.at("w2"), b.dy, b.gate, S);
        add_weight_grad(grads.at("w1"), b.dh1, b.x2norm, S);
        add_weight_grad(grads.at("w3"), b.dh3, b.x2norm, S);
      });
      t0 = Clock::now();
      b.dx2.resize(x2.size());
      rmsnorm_backward(b.dx2.data(), grads.at("rms_ffn"), dx_ffn, x2, weights.at("rms_ffn"), D, S);
      for (size_t i = 0; i < x2.size(); ++i) b.dx2[i] += b.dy[i];
      row.cpu_ms += ms_since(t0);
      worker.post([&] { add_weight_grad(grads.at("wo"), b.dx2, b.attn, S); });

      const Tensor b1 = on_device(kSdpaBwd1, input(kSdpaBwd1, {&Q, &K, &V, &b.dx2}));
      b.dV = read_rows(b1, 0, D, S);
      const Rows probs = read_rows(b1, D, SC, S), dp = read_rows(b1, D + SC, SC, S);
      const Tensor b2 = on_device(kSdpaBwd2, input(kSdpaBwd2, {&probs, &dp, &Q, &K}));
      b.dQ = read_rows(b2, 0, D, S), b.dK = read_rows(b2, D, D, S);
      worker.post([&] {
        add_weight_grad(grads.at("wq"), b.dQ, b.xnorm, S);
        add_weight_grad(grads.at("wk"), b.dK, b.xnorm, S);
        add_weight_grad(grads.at("wv"), b.dV, b.xnorm, S);
      });
      const Tensor qb = on_device(kQkvBwd, input(kQkvBwd, {&b.dQ, &b.dK, &b.dV}));
      const Rows dx_attn = read_rows(qb, 0, D, S);
      t0 = Clock::now();
      rmsnorm_backward(nullptr, grads.at("rms_att"), dx_attn, x_in, weights.at("rms_att"), D, S);
      worker.wait();
      row.cpu_ms += ms_since(t0);
    }

    t0 = Clock::now();
    const double unscale = double(opt.accum) * opt.loss_scale;
    for (auto& [name, g] : grads) {
      float* p = g.mutable_ptr<float>();
      for (int64_t i = 0; i < g.numel(); ++i) {
        if (!std::isfinite(p[i]))
          throw Error(fmt::format("ane: the gradient of {} is not finite at step {} (loss scale {:g}): lower the loss "
                                  "scale or the learning rate", name, row.step, opt.loss_scale));
        if (unscale != 1) p[i] = float(double(p[i]) / unscale);
      }
    }
    row.grad_norm = adam.step(weights, grads);
    row.cpu_ms += ms_since(t0);
    row.loss = loss_sum / double(opt.accum);
    if (!std::isfinite(row.loss)) throw Error(fmt::format("ane: the loss is {} at step {}", row.loss, row.step));
    row.ms = ms_since(t_step);
    row.totals = log.totals;
    row.totals.compiles = dev.total_compiles();
    log.rows.push_back(row);
    if (opt.on_step) opt.on_step(row);
    if (opt.stop && opt.stop->load() && step + 1 < opt.steps) {
      log.interrupted = true;
      break;
    }
  }
  log.totals.compiles = dev.total_compiles();
  log.wall_ms = ms_since(wall0);
  return log;
}

}  // namespace milrt::llm
