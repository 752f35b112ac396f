// Embedding milrt: build a small MIL program with the IR builder (a linear
// layer, ReLU, a residual add and a row sum), compile it into a plan, run it,
// and compare with the same math written in plain C++. Exits 1 on a mismatch.
#include <milrt/builder.h>
#include <milrt/error.h>
#include <milrt/plan.h>
#include <milrt/runtime.h>

#include <cmath>
#include <cstdio>

using namespace milrt;

int main() {
  constexpr int kRows = 3, kIn = 5, kOut = 5;
  try {
    Tensor x(DType::FP32, {kRows, kIn}), w(DType::FP32, {kOut, kIn}), b(DType::FP32, {kOut});
    for (int i = 0; i < kRows * kIn; ++i) x.set(i, 0.25 * ((i * 7) % 11) - 1.0);
    for (int i = 0; i < kOut * kIn; ++i) w.set(i, 0.125 * ((i * 5) % 9) - 0.5);
    for (int i = 0; i < kOut; ++i) b.set(i, 0.1 * i - 0.2);

    // y = relu(x W^T + b) + x;  s = sum of y over each row.
    FunctionBuilder f("main");
    Value xin = f.input("x", Type::tensor(DType::FP32, {kRows, kIn}));
    Value lin = f.op("linear", "lin", {{"x", xin}, {"weight", f.constant("w", w)}, {"bias", f.constant("b", b)}});
    Value act = f.op("relu", "act", {{"x", lin}});
    Value y = f.op("add", "y", {{"x", act}, {"y", xin}});
    Value s = f.op("reduce_sum", "s", {{"x", y}, {"axes", lit_i32s({1})}, {"keep_dims", lit_bool(false)}});
    f.output(y);
    f.output(s);
    Program program = make_program({f.build()});

    set_threads(1);  // settings through the API (milrt/runtime.h), as MILRT_THREADS=1
    Plan plan = compile(program);
    TensorMap out = plan.run({{"x", x}});

    int bad = 0;
    auto check = [&](const char* name, int i, double got, double want) {
      if (std::fabs(got - want) > 1e-5 * (1 + std::fabs(want))) {
        std::fprintf(stderr, "%s[%d]: milrt %.7g, plain C++ %.7g\n", name, i, got, want);
        ++bad;
      }
    };
    for (int r = 0; r < kRows; ++r) {
      double row = 0;
      for (int o = 0; o < kOut; ++o) {
        double acc = b.at(o);
        for (int k = 0; k < kIn; ++k) acc += x.at(r * kIn + k) * w.at(o * kIn + k);
        double yv = (acc > 0 ? acc : 0) + x.at(r * kIn + o);
        check("y", r * kOut + o, out.at("y").at(r * kOut + o), yv);
        row += yv;
      }
      check("s", r, out.at("s").at(r), row);
    }
    if (bad) {
      std::fprintf(stderr, "embed: %d mismatches\n", bad);
      return 1;
    }
    std::printf("embed: the compiled plan matches plain C++ (%d values; %d thread, %s kernels)\n", kRows * kOut + kRows,
                threads(), isa().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "embed: %s\n", e.what());
    return 1;
  }
  return 0;
}
