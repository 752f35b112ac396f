// Writes the example that `make run` executes: a SwiGLU feed-forward block
// (RMSNorm, int8 block-quantized up-projection, SiLU gate, down-projection,
// residual) as a Core ML bundle, DIR/ffn.mlmodelc, built with milrt's IR
// builder, plus an input DIR/x.npy and, for comparison, DIR/expected.npy
// computed by plain C++ loops below (not by milrt).
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "milrt/builder.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"

using namespace milrt;

namespace {
constexpr int kTokens = 8, kDim = 64, kHidden = 128, kBlock = 32;

float half(float v) { return f16_to_f32(f32_to_f16(v)); }

// Deterministic weights in [-0.5, 0.5): a small LCG, so the example needs no data.
struct Lcg {
  uint32_t s = 12345;
  float next() { s = s * 1664525u + 1013904223u; return float(s >> 8) / float(1 << 24) - 0.5f; }
};
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) { std::fprintf(stderr, "usage: make_example DIR\n"); return 2; }
  std::string dir = argv[1];
  try {
    Lcg rng;
    Tensor gamma(DType::FP16, {kDim}), wq(DType::Int8, {kHidden, kDim}), ws(DType::FP16, {kHidden, kDim / kBlock});
    Tensor wg(DType::FP16, {kHidden, kDim}), wd(DType::FP16, {kDim, kHidden}), x(DType::FP16, {1, kTokens, kDim});
    for (int i = 0; i < kDim; ++i) gamma.set(i, 0.8 + 0.05 * (i % 7));
    for (int i = 0; i < kHidden * kDim; ++i) wq.set(i, std::round(rng.next() * 200));
    for (int i = 0; i < kHidden * kDim / kBlock; ++i) ws.set(i, 0.001 + 0.0005 * (i % 5));
    for (int i = 0; i < kHidden * kDim; ++i) wg.set(i, rng.next() * 0.25);
    for (int i = 0; i < kDim * kHidden; ++i) wd.set(i, rng.next() * 0.25);
    for (int i = 0; i < kTokens * kDim; ++i) x.set(i, rng.next() * 2);

    FunctionBuilder f("main");
    Value xin = f.input("x", Type::tensor(DType::FP16, {1, kTokens, kDim}));
    Value g = f.constant("gamma", gamma);
    Value q = f.constant("w_up_q", wq);
    Value s = f.constant("w_up_scale", ws);
    Value up = f.op("constexpr_blockwise_shift_scale", "w_up", {{"data", q}, {"scale", s}});
    Value gate_w = f.constant("w_gate", wg);
    Value down_w = f.constant("w_down", wd);
    Value xn = f.op("rms_norm", "xn", {{"x", xin}, {"w", g}, {"eps", lit_f16(1e-5)}});
    Value u = f.op("linear", "u", {{"x", xn}, {"weight", up}});
    Value gt = f.op("linear", "g", {{"x", xn}, {"weight", gate_w}});
    Value act = f.op("silu", "g_act", {{"x", gt}});
    Value h = f.op("mul", "h", {{"x", u}, {"y", act}});
    Value dn = f.op("linear", "down", {{"x", h}, {"weight", down_w}});
    Value y = f.op("add", "y", {{"x", xin}, {"y", dn}});
    f.output(y);
    std::filesystem::create_directories(dir);
    save_model(make_program({f.build()}), dir + "/ffn.mlmodelc");
    write_npy(dir + "/x.npy", x);

    // The same math in plain loops, rounding to fp16 where the program does.
    Tensor expected(DType::FP16, {1, kTokens, kDim});
    for (int t = 0; t < kTokens; ++t) {
      const int base = t * kDim;
      double ss = 0;
      for (int i = 0; i < kDim; ++i) ss += x.at(base + i) * x.at(base + i);
      double r = 1.0 / std::sqrt(ss / kDim + half(1e-5f));
      float xnv[kDim], hv[kHidden];
      for (int i = 0; i < kDim; ++i) xnv[i] = half(float(x.at(base + i) * r * gamma.at(i)));
      for (int j = 0; j < kHidden; ++j) {
        double uu = 0, gg = 0;
        for (int i = 0; i < kDim; ++i) {
          uu += xnv[i] * half(float(ws.at(j * (kDim / kBlock) + i / kBlock) * wq.at(j * kDim + i)));
          gg += xnv[i] * wg.at(j * kDim + i);
        }
        float gh = half(float(gg));
        hv[j] = half(half(float(uu)) * half(float(gh / (1 + std::exp(-double(gh))))));
      }
      for (int i = 0; i < kDim; ++i) {
        double d = 0;
        for (int j = 0; j < kHidden; ++j) d += hv[j] * wd.at(i * kHidden + j);
        expected.set(base + i, x.at(base + i) + half(float(d)));
      }
    }
    write_npy(dir + "/expected.npy", expected);
    std::printf("wrote %s/ffn.mlmodelc (model.mil + weights/weight.bin), x.npy, expected.npy\n", dir.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
