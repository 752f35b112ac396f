// Machine, ceilings, attention and memory-bound sections of `milrt bench
// kernels` (the GEMM section is gemm_section.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/bench/kernel_bench.h"
#include "kernels/bench/openblas.h"
#include "kernels/bench/report_util.h"
#include "kernels/attention_amx.h"
#include "kernels/attention_avx512_bf16.h"
#include "kernels/bench/timing.h"
#include "kernels/cpu_features.h"
#include "kernels/generic/adamw.h"
#include "kernels/generic/attention.h"
#include "kernels/generic/attention_backward.h"
#include "kernels/generic/norm.h"
#include "kernels/onednn/onednn_gemm.h"
#include "kernels/peak.h"
#include "kernels/threads.h"
#include "kernels/weight_gemm.h"
#include "milrt/dtype.h"

namespace milrt::kernels::bench {
namespace {

// A row of a section: one figure per thread count from measure(t) (seconds)
// as `unit` = amount / seconds · 1e-9 against the ceiling `key`.
template <class Measure>
nlohmann::json per_thread(const Options& o, const nlohmann::json& ceilings, const char* unit, const char* key,
                          double amount, Measure measure) {
  nlohmann::json by = nlohmann::json::object();
  for (int t : o.threads) {
    set_num_threads(t);
    by[std::to_string(t)] = figure(unit, amount / measure(t) * 1e-9, ceiling_at(ceilings, t, key));
  }
  set_num_threads(0);
  return {{"threads", by}, {"scaling", scaling(by, o, "", unit)}};
}

}  // namespace

nlohmann::json machine_info(const Options& o) {
  set_num_threads(0);
  const OpenBlas* blas = OpenBlas::get();
  return {{"cpu_features", cpu_features_string()},
          {"isa", std::string(isa_name(current_isa()))},
          {"threads_available", num_threads()},
          {"amx", isa_usable(Isa::amx)},
          {"threads", o.threads},
          {"quick", o.quick},
          {"reps", o.reps > 0 ? nlohmann::json(o.reps) : nlohmann::json("auto")},
          {"openblas", blas ? nlohmann::json(blas->config()) : nlohmann::json(nullptr)},
          {"onednn", onednn_available()}};
}

nlohmann::json measure_ceilings(const Options& o) {
  const double peak_s = o.quick ? 0.03 : 0.2, bw_s = o.quick ? 0.03 : 0.3;
  // Well above any L3 (a quick run's 128 MiB too), so the passes stream from DRAM.
  const size_t bw_bytes = size_t(o.quick ? 128 : 256) << 20;
  nlohmann::json r = nlohmann::json::object();
  for (int t : o.threads) {
    const bool native = cpu_features().avx512_bf16;
    const double fp32 = measure_peak_gflops(PeakKind::fp32_fma, t, peak_s);
    r[std::to_string(t)] = {
        {"fp32_gflops", fp32},
        // Without vdpbf16ps, bf16 math runs on the fp32 FMAs: the same ceiling, not a second noisy measurement of it.
        {"bf16_gflops", native ? measure_peak_gflops(PeakKind::bf16_dot, t, peak_s) : fp32},
        {"bf16_native", native},
        {"amx_bf16_gflops", isa_usable(Isa::amx) ? nlohmann::json(measure_peak_gflops(PeakKind::amx_bf16, t, peak_s))
                                                 : nlohmann::json(nullptr)},
        {"read_gbs", measure_read_bandwidth_gbs(t, bw_bytes, bw_s)},
        {"update_gbs", measure_update_bandwidth_gbs(t, bw_bytes, bw_s)},
    };
  }
  return r;
}

// Useful FLOPs of causal attention: query i sees keys 0..i, T(T+1)/2 (query,
// key) pairs per head, each costing 2·D for the score and 2·Dv to accumulate
// its value row: heads · T(T+1) · (D + Dv). Softmax exponentials not counted.
// The backward's useful FLOPs are twice that (Pᵀ·dO, dO·Vᵀ, dS·K, dSᵀ·Q; the
// recomputed scores are not counted), as the plan profile counts them.
nlohmann::json bench_attention(const Options& o, const nlohmann::json& ceilings, const RowSink& sink) {
  constexpr int64_t kHeads = 12, kDim = 64;
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t T : o.quick ? std::vector<int64_t>{256} : std::vector<int64_t>{256, 512}) {
    const size_t slice = size_t(T * kDim);
    std::vector<float> q(kHeads * slice), k(q.size()), v(q.size()), out(q.size()), dout(q.size());
    std::vector<float> dq(q.size()), dk(q.size()), dv(q.size()), lse(size_t(kHeads * T));
    fill_uniform(q.data(), q.size(), 11);
    fill_uniform(k.data(), k.size(), 12);
    fill_uniform(v.data(), v.size(), 13);
    fill_uniform(dout.data(), dout.size(), 14);
    const double forward_flops = double(kHeads) * double(T) * double(T + 1) * double(2 * kDim);
    for (GemmMath math : {GemmMath::fp32, GemmMath::bf16}) {
      const AttentionShape sh{.tq = T, .tk = T, .d = kDim, .dv = kDim, .scale = 0.125f, .causal = true, .math = math};
      const bool bf16 = math == GemmMath::bf16;
      // The kernels a bf16 plan's attention steps run here (the choice of
      // runtime/lower/fused_attention.cpp): AMX on the AMX path, vdpbf16ps on
      // the AVX-512 path of a CPU with avx512_bf16, else the vector kernels.
      const Isa isa = current_isa();
      const bool amx = bf16 && isa == Isa::amx && attention_amx_usable() && attention_amx_supports(sh, {});
      const bool vb16 = bf16 && !amx && (isa == Isa::avx512 || isa == Isa::amx) && attention_avx512_bf16_usable() &&
                        attention_avx512_bf16_supports(sh, {});
      const size_t scratch_floats = amx    ? attention_amx_scratch_floats(sh)
                                    : vb16 ? attention_avx512_bf16_scratch_floats(sh)
                                           : attention_scratch_floats(sh);
      const auto forward_kernel = amx ? attention_bf16_amx : vb16 ? attention_bf16_avx512 : attention_f32;
      const auto backward_kernel =
          amx ? attention_backward_bf16_amx : vb16 ? attention_backward_bf16_avx512 : attention_backward_f32;
      // Heads in parallel, as a plan's attention steps run them; the kernels' own GEMMs then run serially.
      auto forward = [&](int t, float* scratch) {
#pragma omp parallel for num_threads(t) schedule(static)
        for (int64_t h = 0; h < kHeads; ++h)
          forward_kernel(q.data() + h * slice, k.data() + h * slice, v.data() + h * slice, out.data() + h * slice, sh,
                         AttentionMask{}, scratch + size_t(omp_get_thread_num()) * scratch_floats, lse.data() + h * T);
      };
      for (const char* pass : {"forward", "backward"}) {
        const bool backward = pass[0] == 'b';
        const double flops = backward ? 2 * forward_flops : forward_flops;
        nlohmann::json row = per_thread(o, ceilings, "gflops", bf16 ? "bf16_gflops" : "fp32_gflops", flops, [&](int t) {
          std::vector<float> scratch(size_t(t) * scratch_floats);
          if (backward) forward(t, scratch.data());  // O and lse for the backward
          return median_seconds(o.reps, target_seconds(o), [&] {
            if (!backward) return forward(t, scratch.data());
#pragma omp parallel for num_threads(t) schedule(static)
            for (int64_t h = 0; h < kHeads; ++h)
              backward_kernel(q.data() + h * slice, k.data() + h * slice, v.data() + h * slice,
                              out.data() + h * slice, dout.data() + h * slice, lse.data() + h * T,
                              dq.data() + h * slice, dk.data() + h * slice, dv.data() + h * slice, sh,
                              AttentionMask{});
          });
        });
        row.update({{"pass", pass},
                    {"math", bf16 ? "bf16" : "fp32"},
                    {"kernel", amx ? "amx" : vb16 ? "avx512_bf16" : "vector"},
                    {"heads", kHeads},
                    {"t", T},
                    {"d", kDim},
                    {"flops", flops},
                    {"formula", backward ? "2 * heads * T * (T + 1) * (D + Dv): the four products of the causal half"
                                         : "heads * T * (T + 1) * (D + Dv): the causal half's products"}});
        sink(row);
        rows.push_back(row);
      }
    }
  }
  return rows;
}

namespace {

// One weight [n, k] in a weight_gemm format; bytes counts what a call reads of it (elements and q8 scales).
struct StoredWeight {
  std::vector<float> f32, scales;
  std::vector<uint16_t> u16;
  std::vector<int8_t> q8;
  WeightRef ref;
  double bytes = 0;
};

StoredWeight store_weight(WeightFormat f, int64_t n, int64_t k) {
  constexpr int64_t kBlock = 32;
  StoredWeight s;
  std::vector<float> w(size_t(n * k));
  fill_uniform(w.data(), w.size(), 21);
  s.ref = WeightRef{f, nullptr, n, k, k};
  if (f == WeightFormat::f32) {
    s.f32 = std::move(w);
    s.ref.data = s.f32.data();
    s.bytes = 4.0 * double(n * k);
  } else if (f == WeightFormat::bf16) {
    s.u16.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) s.u16[i] = f32_to_bf16(w[i]);
    s.ref.data = s.u16.data();
    s.bytes = 2.0 * double(n * k);
  } else {
    // Symmetric blocks: the value range of fill_uniform is [-1, 1), so one scale fits every block.
    s.q8.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) s.q8[i] = int8_t(std::lrint(w[i] * 127));
    s.scales.assign(size_t(n * k / kBlock), 1.0f / 127);
    s.ref.data = s.q8.data();
    s.ref.scales = s.scales.data();
    s.ref.block = kBlock;
    s.bytes = double(n * k) + 4.0 * double(s.scales.size());
  }
  return s;
}

}  // namespace

nlohmann::json bench_memory(const Options& o, const nlohmann::json& ceilings, const RowSink& sink) {
  nlohmann::json rows = nlohmann::json::array();
  CacheFlush flush;
  auto emit = [&](nlohmann::json row, const char* kernel, std::vector<int64_t> shape, double bytes,
                  const char* ceiling) {
    row.update({{"kernel", kernel}, {"shape", shape}, {"bytes", bytes}, {"ceiling", ceiling}});
    sink(row);
    rows.push_back(row);
  };
  {
    // rms_norm_f32 is serial: rows are split over the threads here, each
    // thread normalizing its own block (the rows are independent).
    const int64_t rows_n = o.quick ? 2048 : 8192, dim = 768;
    std::vector<float> x(size_t(rows_n * dim)), y(x.size()), gamma(static_cast<size_t>(dim));
    fill_uniform(x.data(), x.size(), 31);
    fill_uniform(gamma.data(), gamma.size(), 32);
    const double bytes = 8.0 * double(rows_n * dim) + 4.0 * dim;  // x read, y written, gamma
    nlohmann::json row = per_thread(o, ceilings, "gbs", "update_gbs", bytes, [&](int t) {
      return median_seconds(
          o.reps, target_seconds(o),
          [&] {
#pragma omp parallel num_threads(t)
            {
              const int64_t per = (rows_n + t - 1) / t, b = std::min(rows_n, per * omp_get_thread_num());
              const int64_t e = std::min(rows_n, b + per);
              if (e > b) rms_norm_f32(x.data() + b * dim, gamma.data(), y.data() + b * dim, e - b, dim, 1, 1e-5f);
            }
          },
          flush);
    });
    emit(row, "rms_norm_f32", {rows_n, dim}, bytes, "update_gbs");
  }
  {
    const int64_t n = o.quick ? (int64_t(4) << 20) : (int64_t(32) << 20);
    std::vector<float> p(static_cast<size_t>(n)), g(p.size()), m(p.size(), 0.0f), v(p.size(), 0.0f);
    fill_uniform(p.data(), p.size(), 41);
    fill_uniform(g.data(), g.size(), 42);
    const AdamWStep st{.beta1 = 0.9f,
                       .beta2 = 0.999f,
                       .eps = 1e-8f,
                       .grad_scale = 1,
                       .step_size = 1e-4f,
                       .inv_sqrt_bc2 = 1,
                       .decay = 1 - 1e-6f};
    const double bytes = 28.0 * double(n);  // p, g, m, v read (16); p, m, v written (12)
    nlohmann::json row = per_thread(o, ceilings, "gbs", "update_gbs", bytes, [&](int) {
      return median_seconds(o.reps, target_seconds(o),
                            [&] { adamw_update_f32(p.data(), g.data(), m.data(), v.data(), n, st); });
    });
    emit(row, "adamw_update_f32", {n}, bytes, "update_gbs");
  }
  const std::vector<std::pair<int64_t, int64_t>> shapes =
      o.quick ? std::vector<std::pair<int64_t, int64_t>>{{2048, 768}}
              : std::vector<std::pair<int64_t, int64_t>>{{32000, 768}, {2048, 768}};
  for (auto [n, k] : shapes)
    for (WeightFormat f : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::q8}) {
      const StoredWeight w = store_weight(f, n, k);
      std::vector<float> x(static_cast<size_t>(k)), y(static_cast<size_t>(n));
      fill_uniform(x.data(), x.size(), 51);
      nlohmann::json row = per_thread(o, ceilings, "gbs", "read_gbs", w.bytes, [&](int) {
        return median_seconds(
            o.reps, target_seconds(o), [&] { weight_gemm(1, x.data(), k, w.ref, y.data(), n); }, flush);
      });
      row["format"] = weight_format_name(f);
      emit(row,
           f == WeightFormat::f32    ? "weight_gemm M=1 f32"
           : f == WeightFormat::bf16 ? "weight_gemm M=1 bf16"
                                     : "weight_gemm M=1 q8/32",
           {n, k}, w.bytes, "read_gbs");
    }
  return rows;
}

}  // namespace milrt::kernels::bench
