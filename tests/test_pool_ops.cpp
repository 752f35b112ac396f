// The MIL pooling and upsampling ops end to end: shapes from coremltools'
// rules (ceil_mode, same / same_lower padding), hand-computed values through
// both the reference executor and a compiled plan, and the verifier's
// refusals. Random sweeps are in test_op_coverage.cpp, the kernels alone in
// test_pool_kernels.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "tensor<int32, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "])";
}

// Runs `z = EXPR` (declared `type`) on x through the reference and a compiled
// plan; both must give `want`.
void check(const Tensor& x, const std::string& type, const std::string& expr, const std::vector<double>& want) {
  std::string params = "tensor<fp32, " + shape_str(x.shape()) + "> x";
  Program p = parse_mil(program_text(params, stmt(type, "z", expr), "z"), "t.mil", ".");
  verify(p);
  for (int compiled = 0; compiled < 2; ++compiled) {
    TensorMap out = compiled ? compile(p).run({{"x", x}}) : run_reference(p, "main", {{"x", x}});
    const Tensor& z = out.at("z");
    ASSERT_EQ(z.numel(), int64_t(want.size())) << expr;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(z.at(i), want[i], 1e-6) << (compiled ? "compiled " : "reference ") << expr << " at " << i;
  }
}

Tensor iota(Shape s) {
  Tensor t(DType::FP32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), double(i + 1));
  return t;
}

TEST(PoolOps, CeilModeKeepsThePartialWindow) {
  // 1..5 in windows of 2, stride 2: floor gives 2 outputs, ceil 3; the last
  // window holds one input and (no padding) divides by 1.
  Tensor x = iota({1, 1, 5});
  const std::string base = "kernel_sizes = " + ints({2}) + ", strides = " + ints({2}) + ", pad_type = string(\"valid\")";
  check(x, "tensor<fp32, [1, 1, 2]>", "avg_pool(x = x, " + base + ")", {1.5, 3.5});
  check(x, "tensor<fp32, [1, 1, 3]>", "avg_pool(x = x, " + base + ", ceil_mode = bool(true))", {1.5, 3.5, 5});
  check(x, "tensor<fp32, [1, 1, 3]>", "max_pool(x = x, " + base + ", ceil_mode = bool(true))", {2, 4, 5});
  // 1..4 padded 1 each side, windows of 2, stride 2, ceil: windows [-1, 1),
  // [1, 3), [3, 5); a fourth would start at 5 >= 4 + 1 and is dropped.
  const std::string pad = "kernel_sizes = " + ints({2}) + ", strides = " + ints({2}) +
                          ", pad_type = string(\"custom\"), pad = " + ints({1, 1}) + ", ceil_mode = bool(true)";
  check(iota({1, 1, 4}), "tensor<fp32, [1, 1, 3]>", "avg_pool(x = x, " + pad + ")", {0.5, 2.5, 2});
  check(iota({1, 1, 4}), "tensor<fp32, [1, 1, 3]>",
        "avg_pool(x = x, " + pad + ", exclude_padding_from_average = bool(true))", {1, 2.5, 4});
}

TEST(PoolOps, SamePaddingAndL2) {
  // same: 5 inputs, kernel 2, stride 1 -> 5 outputs, the padding unit after
  // (same) or before (same_lower).
  Tensor x = iota({1, 1, 1, 5});
  const std::string k = "kernel_sizes = " + ints({1, 2}) + ", strides = " + ints({1, 1});
  check(x, "tensor<fp32, [1, 1, 1, 5]>", "max_pool(x = x, " + k + ", pad_type = string(\"same\"))", {2, 3, 4, 5, 5});
  check(x, "tensor<fp32, [1, 1, 1, 5]>", "max_pool(x = x, " + k + ", pad_type = string(\"same_lower\"))",
        {1, 2, 3, 4, 5});
  check(x, "tensor<fp32, [1, 1, 1, 5]>", "avg_pool(x = x, " + k + ", pad_type = string(\"same\"))",
        {1.5, 2.5, 3.5, 4.5, 2.5});
  check(iota({1, 1, 1, 2}), "tensor<fp32, [1, 1, 1, 1]>",
        "l2_pool(x = x, kernel_sizes = " + ints({1, 2}) + ", pad_type = string(\"valid\"))", {std::sqrt(5.0)});
}

TEST(PoolOps, Upsampling) {
  Tensor x = iota({1, 1, 2, 2});  // [[1, 2], [3, 4]]
  check(x, "tensor<fp32, [1, 1, 2, 4]>",
        "upsample_nearest_neighbor(x = x, scale_factor_height = fp32(1.0), scale_factor_width = int32(2))",
        {1, 1, 2, 2, 3, 3, 4, 4});
  // align_corners = false (half-pixel centers): 2 -> 4 samples at 0, .25,
  // .75, 1 across; 2 -> 1 samples 0.5 down (the mean row [2, 3]).
  check(x, "tensor<fp32, [1, 1, 1, 4]>",
        "upsample_bilinear(x = x, scale_factor_height = fp32(0.5), scale_factor_width = fp32(2.0), "
        "align_corners = bool(false))",
        {2, 2.25, 2.75, 3});
  // Default align_corners = true: samples at 0, 1/3, 2/3, 1.
  check(iota({1, 1, 1, 2}), "tensor<fp32, [1, 1, 1, 4]>",
        "upsample_bilinear(x = x, scale_factor_width = fp32(2.0))", {1, 4.0 / 3, 5.0 / 3, 2});
  // Neither (iOS16 half_pixel_centers = false): samples at 0, .5, 1, 1.
  check(iota({1, 1, 1, 2}), "tensor<fp32, [1, 1, 1, 4]>",
        "upsample_bilinear(x = x, scale_factor_width = fp32(2.0), align_corners = bool(false), "
        "half_pixel_centers = bool(false))",
        {1, 1.5, 2, 2});
}

TEST(PoolOps, VerifierRefusals) {
  const TensorMap in = {{"x", iota({1, 1, 4, 4})}};
  const std::string x = "tensor<fp32, [1, 1, 4, 4]> x";
  const std::string k = "kernel_sizes = " + ints({2, 2}) + ", strides = " + ints({2, 2});
  expect_error(x, "tensor<fp32, [1, 1, 2, 2]>", "max_pool(x = x, " + k + ", pad_type = string(\"same\"), ceil_mode = bool(true))",
               in, "max_pool", "ceil_mode must be false");
  expect_error(x, "tensor<fp32, [1, 1, 3, 3]>",
               "max_pool(x = x, " + k + ", pad_type = string(\"custom\"), pad = " + ints({1, 0, 0, 0}) +
                   ", ceil_mode = bool(true))",
               in, "max_pool", "symmetric");
  expect_error(x, "tensor<fp32, [1, 1, 2, 2]>", "avg_pool(x = x, kernel_sizes = " + ints({2}) + ", pad_type = string(\"valid\"))",
               in, "avg_pool", "kernel_sizes must have 2 values");
  expect_error(x, "tensor<fp32, [1, 1, 2, 2]>", "max_pool(x = x, " + k + ", pad_type = string(\"full\"))", in,
               "max_pool", "pad_type");
  expect_error("tensor<fp32, [1, 1, 2, 2, 2]> x", "tensor<fp32, [1, 1, 1, 1, 1]>",
               "l2_pool(x = x, kernel_sizes = " + ints({2, 2, 2}) + ", pad_type = string(\"valid\"))",
               {{"x", iota({1, 1, 2, 2, 2})}}, "l2_pool", "rank 3 to 4");
  expect_error(x, "tensor<fp32, [1, 1, 8, 8]>",
               "upsample_bilinear(x = x, scale_factor_height = fp32(2.0), scale_factor_width = fp32(2.0), "
               "align_corners = bool(true), half_pixel_centers = bool(true))",
               in, "upsample_bilinear", "cannot both be true");
  expect_error(x, "tensor<fp32, [1, 1, 8, 8]>", "upsample_nearest_neighbor(x = x, scale_factor_height = fp32(2.0))",
               in, "upsample_nearest_neighbor", "");
}

}  // namespace
}  // namespace milrt::test
