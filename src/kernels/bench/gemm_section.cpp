// GEMM section of `milrt bench kernels`: own fp32 and bf16-math kernels with
// a pre-packed constant B (as a plan runs them) against oneDNN's matmul with a
// constant (reordered) B and OpenBLAS sgemm, all on the same A, W and C.
// Rows also carry "own_bf16_isa" (the path own_bf16 ran) and, where that is
// amx, "own_bf16_avx512": the AVX-512 bf16 kernel on the same operands.
// Then the weight-gradient rows ("kind": "weight_gradient"): a training
// step's dW += dYᵀ·X, C[M,N] += Aᵀ·B with A = dY stored [K, M] (read
// transposed), B = X [K, N] fp32 packed per call (not a constant), the
// residual C itself; no OpenBLAS figure (its peer here is sgemm A·Wᵀ only).
// Not in --quick runs.
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "kernels/bench/kernel_bench.h"
#include "kernels/bench/openblas.h"
#include "kernels/bench/report_util.h"
#include "kernels/bench/timing.h"
#include "kernels/gemm.h"
#include "kernels/onednn/onednn_gemm.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"

namespace milrt::kernels::bench {
namespace {

struct WeightShape {
  int64_t n, k;
  const char* what;
};

// Stories110M (dim 768, hidden 2048, vocab 32000) and the seed layer (dim 768, hidden 2048, seq 512).
constexpr WeightShape kShapes[] = {
    {768, 768, "attention projection"},
    {2048, 768, "FFN up/gate"},
    {768, 2048, "FFN down"},
    {32000, 768, "classifier"},
    {768, 32000, "classifier backward (dX)"},
};

// oneDNN's matmul for a descriptor, or nothing (why in `impl`): no oneDNN in
// this build, no implementation, or only the reference one (far too slow to
// time on these shapes: it would dominate the run).
std::unique_ptr<OnednnGemm> try_onednn(const OnednnGemmDesc& desc, std::string& impl) {
  if (!onednn_available()) {
    impl = "not in this build";
    return nullptr;
  }
  try {
    auto g = std::make_unique<OnednnGemm>(desc);
    impl = g->impl_name();
    if (impl.rfind("ref", 0) == 0) {
      impl += " (reference implementation: not timed)";
      return nullptr;
    }
    return g;
  } catch (const std::exception& e) {
    impl = std::string("unavailable: ") + e.what();
    return nullptr;
  }
}

// A weight-shaped product: W [N, K] constant, read transposed.
std::unique_ptr<OnednnGemm> make_onednn(int64_t m, int64_t n, int64_t k, const void* w, ElemType wt, GemmMath math,
                                        std::string& impl) {
  return try_onednn(OnednnGemmDesc{.m = m,
                                   .n = n,
                                   .k = k,
                                   .a = {nullptr, ElemType::f32, k},
                                   .b = {w, wt, k, /*trans=*/true},
                                   .b_const = true,
                                   .math = math},
                    impl);
}

// Stories110M's weight gradients over one sequence of 256 tokens: dW[M, N] += dYᵀ·X.
struct GradShape {
  int64_t m, n, k;
  const char* what;
};
constexpr GradShape kGradShapes[] = {
    {768, 768, 256, "weight gradient C += A^T*B: attention projections (wq, wk, wv, wo)"},
    {2048, 768, 256, "weight gradient C += A^T*B: FFN up/gate (w1, w3)"},
    {768, 2048, 256, "weight gradient C += A^T*B: FFN down (w2)"},
};

// A weight-gradient product: A transposed, B per call, C += in place.
std::unique_ptr<OnednnGemm> make_onednn_grad(const GradShape& g, GemmMath math, std::string& impl) {
  return try_onednn(OnednnGemmDesc{.m = g.m,
                                   .n = g.n,
                                   .k = g.k,
                                   .a = {nullptr, ElemType::f32, g.m, /*trans=*/true},
                                   .b = {nullptr, ElemType::f32, g.n},
                                   .b_const = false,
                                   .has_residual = true,
                                   .residual_ld = g.n,
                                   .math = math},
                    impl);
}

double ratio(const nlohmann::json& a, const nlohmann::json& b) {
  return a.at("gflops").get<double>() / b.at("gflops").get<double>();
}

// The figures of every row, per thread count.
constexpr const char* kColumns[] = {"own_fp32", "own_bf16", "own_bf16_avx512", "onednn_fp32", "onednn_bf16", "openblas"};

// One thread count's comparisons: own against oneDNN and OpenBLAS (null
// where the other side has no figure).
void add_ratios(nlohmann::json& e) {
  auto vs = [&](const char* x, const char* y) {
    return e[y].is_null() ? nlohmann::json(nullptr) : nlohmann::json(ratio(e[x], e[y]));
  };
  e["own_vs_onednn"] = vs("own_fp32", "onednn_fp32");
  e["own_vs_openblas"] = vs("own_fp32", "openblas");
  e["own_bf16_vs_onednn_bf16"] = vs("own_bf16", "onednn_bf16");
}

// A shape's row with its figures per thread count and their scaling, handed
// to the sink and kept.
void finish_row(nlohmann::json& row, const nlohmann::json& by_threads, const Options& o, const RowSink& sink,
                nlohmann::json& rows) {
  set_num_threads(0);
  row["threads"] = by_threads;
  nlohmann::json sc = nlohmann::json::object();
  for (const char* col : kColumns) sc[col] = scaling(by_threads, o, col, "gflops");
  row["scaling"] = sc;
  sink(row);
  rows.push_back(row);
}

// The weight-gradient rows, appended to `rows` (see the top of the file).
void bench_gemm_grad(const Options& o, const nlohmann::json& ceilings, const RowSink& sink, nlohmann::json& rows) {
  for (size_t s = 0; s < std::size(kGradShapes); ++s) {
    const GradShape& g = kGradShapes[s];
    const int64_t m = g.m, n = g.n, k = g.k;
    // Gradient-sized values; C grows slowly over the repetitions (each adds a K-term sum), never near overflow.
    std::vector<float> a(size_t(k * m)), b(size_t(k * n)), c(size_t(m * n));
    fill_uniform(a.data(), a.size(), uint32_t(11 + s));
    fill_uniform(b.data(), b.size(), uint32_t(21 + s));
    fill_uniform(c.data(), c.size(), uint32_t(31 + s));
    nlohmann::json row = {{"m", m},
                          {"n", n},
                          {"k", k},
                          {"what", g.what},
                          {"kind", "weight_gradient"},
                          {"own_bf16_isa", std::string(isa_name(current_isa()))}};
    std::string impl32, impl16;
    auto dnn32 = make_onednn_grad(g, GemmMath::fp32, impl32);
    auto dnn16 = make_onednn_grad(g, GemmMath::bf16, impl16);
    row["onednn_impl"] = {{"fp32", impl32}, {"bf16", impl16}};
    const MatrixRef ar{a.data(), ElemType::f32, m, /*trans=*/true};
    const MatrixRef br{b.data(), ElemType::f32, n};
    const OutputRef out{c.data(), ElemType::f32, n};
    const Epilogue acc{.residual = c.data(), .residual_type = ElemType::f32, .residual_ld = n};
    const double flops = 2.0 * double(m) * double(n) * double(k);
    nlohmann::json by_threads = nlohmann::json::object();
    for (int t : o.threads) {
      set_num_threads(t);
      const double p32 = ceiling_at(ceilings, t, "fp32_gflops"), p16 = ceiling_at(ceilings, t, "bf16_gflops");
      const double pamx = current_isa() == Isa::amx ? ceiling_at(ceilings, t, "amx_bf16_gflops") : p16;
      auto gflops = [&](auto f) { return flops / median_seconds(o.reps, target_seconds(o), f) * 1e-9; };
      nlohmann::json e;
      e["own_fp32"] = figure("gflops", gflops([&] { gemm(m, n, k, ar, br, out, acc, GemmMath::fp32); }), p32);
      e["own_bf16"] = figure("gflops", gflops([&] { gemm(m, n, k, ar, br, out, acc, GemmMath::bf16); }), pamx);
      e["own_bf16_avx512"] =
          current_isa() == Isa::amx
              ? figure("gflops", gflops([&] { gemm(m, n, k, ar, br, out, acc, GemmMath::bf16, Isa::avx512); }), p16)
              : nlohmann::json(nullptr);
      e["onednn_fp32"] =
          dnn32 ? figure("gflops", gflops([&] { dnn32->run(a.data(), b.data(), out, nullptr, c.data()); }), p32)
                : nlohmann::json(nullptr);
      e["onednn_bf16"] =
          dnn16 ? figure("gflops", gflops([&] { dnn16->run(a.data(), b.data(), out, nullptr, c.data()); }), pamx)
                : nlohmann::json(nullptr);
      e["openblas"] = nullptr;
      add_ratios(e);
      by_threads[std::to_string(t)] = e;
    }
    finish_row(row, by_threads, o, sink, rows);
  }
}

}  // namespace

nlohmann::json bench_gemm(const Options& o, const nlohmann::json& ceilings, const RowSink& sink) {
  const std::vector<int64_t> ms = o.quick ? std::vector<int64_t>{256} : std::vector<int64_t>{256, 512};
  const size_t shapes = o.quick ? 2 : std::size(kShapes);
  const OpenBlas* blas = OpenBlas::get();
  nlohmann::json rows = nlohmann::json::array();
  for (size_t s = 0; s < shapes; ++s) {
    const auto [n, k, what] = kShapes[s];
    std::vector<float> w(size_t(n * k));
    fill_uniform(w.data(), w.size(), uint32_t(s + 1));
    std::vector<uint16_t> wb(w.size());
    for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
    // B = Wᵀ: W [N,K] row-major read transposed, the layout of a linear layer's weight.
    const PackedB own32(MatrixRef{w.data(), ElemType::f32, k, true}, k, n, GemmMath::fp32);
    const PackedB own16(MatrixRef{wb.data(), ElemType::bf16, k, true}, k, n, GemmMath::bf16);
    // On AMX machines own_bf16 runs the AMX kernel; the AVX-512 one it replaced is timed beside it.
    std::optional<PackedB> own16_avx512;
    if (current_isa() == Isa::amx)
      own16_avx512.emplace(MatrixRef{wb.data(), ElemType::bf16, k, true}, k, n, GemmMath::bf16, Isa::avx512);
    for (int64_t m : ms) {
      std::vector<float> a(size_t(m * k)), c(size_t(m * n));
      fill_uniform(a.data(), a.size(), 7);
      nlohmann::json row = {{"m", m}, {"n", n}, {"k", k}, {"what", what}, {"own_bf16_isa", std::string(isa_name(current_isa()))}};
      std::string impl32, impl16;
      auto dnn32 = make_onednn(m, n, k, w.data(), ElemType::f32, GemmMath::fp32, impl32);
      auto dnn16 = make_onednn(m, n, k, wb.data(), ElemType::bf16, GemmMath::bf16, impl16);
      row["onednn_impl"] = {{"fp32", impl32}, {"bf16", impl16}};
      const OutputRef out{c.data(), ElemType::f32, n};
      const MatrixRef ar{a.data(), ElemType::f32, k};
      const double flops = 2.0 * double(m) * double(n) * double(k);
      nlohmann::json by_threads = nlohmann::json::object();
      for (int t : o.threads) {
        set_num_threads(t);
        const double p32 = ceiling_at(ceilings, t, "fp32_gflops"), p16 = ceiling_at(ceilings, t, "bf16_gflops");
        // On an AMX machine bf16 products (own and oneDNN's) run on the tiles: judge them by the tile peak.
        const double pamx = current_isa() == Isa::amx ? ceiling_at(ceilings, t, "amx_bf16_gflops") : p16;
        auto gflops = [&](auto f) { return flops / median_seconds(o.reps, target_seconds(o), f) * 1e-9; };
        nlohmann::json e;
        e["own_fp32"] = figure("gflops", gflops([&] { gemm(m, ar, own32, out); }), p32);
        e["own_bf16"] = figure("gflops", gflops([&] { gemm(m, ar, own16, out); }), pamx);
        e["own_bf16_avx512"] = own16_avx512 ? figure("gflops", gflops([&] { gemm(m, ar, *own16_avx512, out); }), p16)
                                             : nlohmann::json(nullptr);
        e["onednn_fp32"] =
            dnn32 ? figure("gflops", gflops([&] { dnn32->run(a.data(), nullptr, out, nullptr, nullptr); }), p32)
                  : nlohmann::json(nullptr);
        e["onednn_bf16"] =
            dnn16 ? figure("gflops", gflops([&] { dnn16->run(a.data(), nullptr, out, nullptr, nullptr); }), pamx)
                  : nlohmann::json(nullptr);
        e["openblas"] = nullptr;
        if (blas) {
          blas->set_threads(t);
          e["openblas"] = figure("gflops", gflops([&] { blas->sgemm_nt(m, n, k, a.data(), w.data(), c.data()); }), p32);
          // OpenBLAS's workers spin for a while after a call: let them sleep before OpenMP kernels run again.
          if (t > 1) std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
        add_ratios(e);
        by_threads[std::to_string(t)] = e;
      }
      finish_row(row, by_threads, o, sink, rows);
    }
  }
  if (!o.quick) bench_gemm_grad(o, ceilings, sink, rows);  // --quick keeps its two forward shapes
  return rows;
}

}  // namespace milrt::kernels::bench
