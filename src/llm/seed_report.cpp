#include "llm/seed_report.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <vector>

#include "llm/train_tasks.h"

namespace milrt::llm {
namespace {
double seed_layer_params(const SeedLayerConfig& c) {
  const double d = c.dim, h = c.hidden;
  return 4 * d * d + 3 * d * h + 2 * d;  // the seed's count leaves out the two RMSNorm gains
}

std::string kernel_families(const Plan& p) {
  std::map<std::string, std::pair<int, double>> fam;
  const auto steps = p.steps();
  for (const Plan::StepInfo& s : steps) {
    auto& f = fam[s.kernel.substr(0, s.kernel.find(':'))];
    f.first += 1;
    f.second += s.flops;
  }
  std::vector<std::pair<std::string, std::pair<int, double>>> v(fam.begin(), fam.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::string out = fmt::format("{} kernels", steps.size());
  for (size_t i = 0; i < v.size(); ++i)
    out += fmt::format("{} {} x{} {:.0f}M", i == 0 ? ":" : ",", v[i].first, v[i].second.first, v[i].second.second / 1e6);
  return out;
}
}  // namespace

std::string seed_layer_banner(const SeedLayerConfig& cfg, const TrainOptions& opt, const std::string& precision) {
  const double params = seed_layer_params(cfg);
  const SeedLayerFlops f = seed_layer_flops(cfg);
  const AdamWConfig& a = opt.adamw;
  const bool constant_lr = a.warmup == 0 && a.min_lr_ratio == 1;
  std::string s = fmt::format("=== seed layer (train_large.m): dim {}, hidden {}, heads {}, seq {} ===\n", cfg.dim,
                              cfg.hidden, cfg.heads, cfg.seq);
  s += fmt::format("params: {:.2f}M | weights: {:.1f} MB fp16 | precision {}{}\n", params / 1e6, params * 2 / 1e6,
                   precision, precision == "fp16" ? " (fp16 layer, fp32 master weights, dynamic loss scale)" : "");
  s += fmt::format("Adam lr {:.1e} b1 {:g} b2 {:g} eps {:g} | {} | weight decay {:g} | clip {} | accum {} micro-steps per "
                   "update | {} updates = {} micro-steps\n",
                   a.lr, a.beta1, a.beta2, a.eps, constant_lr ? "constant lr" : fmt::format("warmup {} + cosine", a.warmup),
                   a.weight_decay, a.grad_clip > 0 ? fmt::format("{:g}", a.grad_clip) : std::string("off"), opt.accum,
                   opt.steps, opt.steps * opt.accum);
  s += fmt::format("FLOPs/micro-step: fwd={:.0f}M bwd_dx={:.0f}M bwd_dW={:.0f}M attn_bwd={:.0f}M total={:.0f}M\n",
                   f.forward / 1e6, f.backward_dx / 1e6, f.backward_dw / 1e6, f.attention_backward / 1e6, f.total() / 1e6);
  return s;
}

std::string plan_kernel_summary(const Plan& step, const Plan& eval, double compile_ms) {
  return fmt::format("compiled in {:.0f} ms\n  step plan (loss + gradients): {}\n  eval plan (loss): {}\n", compile_ms,
                     kernel_families(step), kernel_families(eval));
}

std::string seed_layer_final_report(const SeedLayerConfig& cfg, const TrainLog& log, const RunRecord& t) {
  const double flops = seed_layer_flops(cfg).total() * double(t.micro_steps);
  const double params = seed_layer_params(cfg);
  auto share = [&](double ms) { return t.wall_ms > 0 ? 100 * ms / t.wall_ms : 0.0; };
  const double tflops = t.train_ms > 0 ? flops / (t.train_ms * 1e9) : 0;
  std::string s = "=== efficiency report (the whole run) ===\n";
  s += fmt::format("total steps:  {} micro-steps, {} optimizer steps\n", t.micro_steps, t.optimizer_steps);
  s += fmt::format("wall time:    {:.0f} ms ({:.1f} s)\n", t.wall_ms, t.wall_ms / 1000);
  s += fmt::format("compile time: {:.0f} ms ({:.1f}%)\n", t.compile_ms, share(t.compile_ms));
  s += fmt::format("train time:   {:.0f} ms ({:.1f}%)\n", t.train_ms, share(t.train_ms));
  s += fmt::format("avg train:    {:.1f} ms/micro-step\n", t.micro_steps > 0 ? t.train_ms / double(t.micro_steps) : 0.0);
  s += fmt::format("throughput:   {:.3f} TFLOP/s (model FLOPs of forward, both backward halves and attention)\n", tflops);
  if (log.peak_gflops > 0)
    s += fmt::format("utilisation:  {:.1f}% of the measured {} peak ({:.0f} GFLOP/s on {} thread{})\n",
                     100 * tflops * 1e3 / log.peak_gflops, log.peak_kind, log.peak_gflops, log.threads,
                     log.threads == 1 ? "" : "s");
  s += fmt::format("params:       {:.2f}M | weights: {:.1f} MB fp16\n", params / 1e6, params * 2 / 1e6);
  return s;
}

}  // namespace milrt::llm
