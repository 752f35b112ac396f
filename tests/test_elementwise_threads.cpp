// The memory-bound elementwise kernels split their rows over threads once an
// output has 2^16 elements or more. Checked here on shapes whose rows do not
// divide evenly among 2 or 3 threads, with broadcast operands whose offsets
// must restart correctly in the middle of the iteration space: every element
// against a plain loop written in the test, and the same bits on 1 and 3
// threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/generic/elementwise.h"
#include "kernels/generic/elementwise_program.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

constexpr int64_t B = 3, R = 257, C = 129;  // 99,459 elements: above the threading threshold

std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

class ThreadCount {
 public:
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(0); }
};

// out[b, r, c] = x[b, r, c] * y[b, 0, c] - as binary_f32 with y broadcast along r.
TEST(ElementwiseThreads, BroadcastBinaryMatchesAPlainLoopOnAnyThreadCount) {
  const std::vector<float> x = random_values(size_t(B * R * C), 1), y = random_values(size_t(B * C), 2);
  Broadcast bc;
  bc.rank = 3;
  bc.dims[0] = B, bc.dims[1] = R, bc.dims[2] = C;
  bc.stride[0][0] = R * C, bc.stride[0][1] = C, bc.stride[0][2] = 1;
  bc.stride[1][0] = C, bc.stride[1][1] = 0, bc.stride[1][2] = 1;
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 3, 2}) {
    ThreadCount tc(threads);
    std::vector<float> out(size_t(B * R * C) + 1, 99.0f);
    binary_f32(Binary::Mul, x.data(), y.data(), out.data(), bc);
    EXPECT_EQ(out.back(), 99.0f) << "written past the end";
    out.pop_back();
    outs.push_back(out);
  }
  int64_t wrong = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = size_t((b * R + r) * C + c);
        wrong += outs[0][i] != x[i] * y[size_t(b * C + c)];
      }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

// A fused program: out = (x - m) * s + 1 with m [B, R, 1] and s [1, 1, C]
// broadcast, and an exp to use a unary instruction.
TEST(ElementwiseThreads, FusedProgramMatchesAPlainLoopOnAnyThreadCount) {
  const std::vector<float> x = random_values(size_t(B * R * C), 3), m = random_values(size_t(B * R), 4),
                           s = random_values(size_t(C), 5);
  std::vector<EwInstr> code = {EwInstr::of_input(0),
                               EwInstr::of_input(1),
                               EwInstr::of_binary(Binary::Sub, 0, 1),
                               EwInstr::of_input(2),
                               EwInstr::of_binary(Binary::Mul, 2, 3),
                               EwInstr::of_unary(Unary::Exp, 4),
                               EwInstr::of_const(1.0f),
                               EwInstr::of_binary(Binary::Add, 5, 6)};
  const EwProgram p = make_program(code, {{B, R, C}, {B, R, 1}, {1, 1, C}}, {B, R, C});
  const float* inputs[] = {x.data(), m.data(), s.data()};
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 3, 2}) {
    ThreadCount tc(threads);
    std::vector<float> scratch(size_t(p.scratch_floats())), out(size_t(B * R * C) + 1, 99.0f);
    run_program(p, inputs, out.data(), scratch.data());
    EXPECT_EQ(out.back(), 99.0f) << "written past the end";
    out.pop_back();
    outs.push_back(out);
  }
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = size_t((b * R + r) * C + c);
        const double want = std::exp((double(x[i]) - m[size_t(b * R + r)]) * s[size_t(c)]) + 1;
        worst = std::max(worst, std::fabs(outs[0][i] - want) / std::max(1.0, std::fabs(want)));
      }
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

}  // namespace
}  // namespace milrt::kernels
