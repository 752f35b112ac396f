// quantize_int8_blockwise (src/llm/quantize.h) against values worked out by
// hand, and on random matrices against the properties that define it,
// checked in fp64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "llm/quantize.h"
#include "milrt/error.h"
#include "support/half_fp64.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

using llm::quantize_int8_blockwise;

std::vector<int> ints_of(const Tensor& t) {
  std::vector<int> r;
  for (int64_t i = 0; i < t.numel(); ++i) r.push_back(int(t.ptr<int8_t>()[i]));
  return r;
}

std::vector<float> floats_of(const Tensor& t) { return {t.ptr<float>(), t.ptr<float>() + t.numel()}; }

// Blocks of 4 whose maxima make exact scales (127 -> 1, 254 -> 2), so the
// quotients below are exact and ties really are ties.
TEST(QuantizeInt8, HandComputedBlocks) {
  const Tensor w = make(DType::FP32, {2, 8},
                        {127, 2.5, 3.5, -2.5,    0.5, 1.5, -127, -0.5,   // row 0: two blocks with scale 1
                         -254, 127, 1, 0,        0, 0, 0, 0});           // row 1: scale 2, then a zero block
  const llm::BlockQuantized q = quantize_int8_blockwise(w, 4);
  EXPECT_EQ(q.data.dtype(), DType::Int8);
  EXPECT_EQ(q.data.shape(), (Shape{2, 8}));
  EXPECT_EQ(q.scale.dtype(), DType::FP32);
  EXPECT_EQ(q.scale.shape(), (Shape{2, 2}));
  EXPECT_EQ(floats_of(q.scale), (std::vector<float>{1, 1, 2, 0}));
  // Ties to even: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 0.5 -> 0, 1.5 -> 2, -0.5 -> 0
  // (-0 is 0), 127/2 = 63.5 -> 64, 1/2 = 0.5 -> 0. The block's max maps to
  // ±127 whatever its sign; a zero block has scale 0 and codes 0.
  EXPECT_EQ(ints_of(q.data), (std::vector<int>{127, 2, 4, -2, 0, 2, -127, 0, -127, 64, 0, 0, 0, 0, 0, 0}));
}

TEST(QuantizeInt8, WholeRowBlockAndNegativeMaximum) {
  const Tensor w = make(DType::FP32, {1, 3}, {-0.5, 0.25, 0.125});
  const llm::BlockQuantized q = quantize_int8_blockwise(w, 3);
  ASSERT_EQ(q.scale.numel(), 1);
  EXPECT_EQ(q.scale.ptr<float>()[0], 0.5f / 127.0f);
  // 0.25 / (0.5/127) = 63.5 in exact arithmetic: the fp32 scale's rounding
  // decides between 63 and 64.
  EXPECT_EQ(ints_of(q.data)[0], -127);
  EXPECT_NEAR(ints_of(q.data)[1], 63.5, 0.5);
  EXPECT_NEAR(ints_of(q.data)[2], 31.75, 0.5);
}

// Random rows in blocks of 16 and 32: every scale is the block's max |w| /
// 127 (to fp32 rounding), every code the nearest integer to w / scale (to
// within the fp32 quotient's rounding), the max element of a block is ±127,
// and dequantized weights are within half a step.
TEST(QuantizeInt8, RandomMatricesMeetTheDefinition) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 0.02f);
  for (int64_t block : {16, 32}) {
    Tensor w(DType::FP32, {7, 96});
    float* p = w.mutable_ptr<float>();
    for (int64_t i = 0; i < w.numel(); ++i) p[i] = n(rng);
    for (int64_t i = 0; i < block; ++i) p[i] = 0;  // one zero block
    const llm::BlockQuantized q = quantize_int8_blockwise(w, block);
    ASSERT_EQ(q.scale.shape(), (Shape{7, 96 / block}));
    const int8_t* c = q.data.ptr<int8_t>();
    const float* s = q.scale.ptr<float>();
    for (int64_t b = 0; b < w.numel() / block; ++b) {
      double amax = 0;
      for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(double(p[b * block + i])));
      EXPECT_NEAR(s[b], amax / 127, 1e-7 * amax / 127) << "block " << b;
      int top = 0;
      for (int64_t i = 0; i < block; ++i) {
        const int64_t k = b * block + i;
        top = std::max(top, std::abs(int(c[k])));
        if (amax == 0) {
          EXPECT_EQ(c[k], 0);
          continue;
        }
        const double exact = double(p[k]) / double(s[b]);
        EXPECT_LE(std::fabs(double(c[k]) - exact), 0.5 + 1e-4) << "element " << k;
        EXPECT_LE(std::fabs(double(p[k]) - double(s[b]) * double(c[k])), 0.5 * double(s[b]) * (1 + 1e-4));
      }
      EXPECT_EQ(top, amax == 0 ? 0 : 127) << "block " << b;
    }
  }
}

TEST(QuantizeInt8, Errors) {
  auto expect_error = [](const Tensor& w, int64_t block, const std::string& fragment) {
    try {
      quantize_int8_blockwise(w, block);
      ADD_FAILURE() << "no error; expected '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  const Tensor m(DType::FP32, {2, 6});
  expect_error(m, 4, "block size 4 does not divide the row length 6");
  expect_error(m, 0, "block size 0 does not divide");
  expect_error(m, -2, "block size -2 does not divide");
  expect_error(m, 12, "block size 12 does not divide");
  expect_error(Tensor(DType::FP16, {2, 6}), 2, "expected an fp32 matrix, got fp16");
  expect_error(Tensor(DType::FP32, {12}), 2, "expected an fp32 matrix");
  expect_error(Tensor(DType::FP32, {2, 2, 3}), 3, "expected an fp32 matrix");
}

// fp16 scales (llama.cpp's Q8_0 form): the scale is max|w| / 127 rounded to
// the nearest half, and the codes are computed from that stored scale. By
// hand: 0.5 / 127 = 1.0078740·2^-8 rounds to 1032·2^-18 (1.0078125·2^-8,
// half bits 0x1C08); 0.39566 / that = 100.504 -> 101, where the fp32 scale
// would give 0.39566 · 254 = 100.498 -> 100; 0.125 / it = 31.75 -> 32;
// -0.5 / it = -127.008, clamped to -127.
TEST(QuantizeInt8, Fp16ScalesRoundTheScaleFirst) {
  const Tensor w = make(DType::FP32, {1, 3}, {-0.5, 0.39566, 0.125});
  const llm::BlockQuantized q = quantize_int8_blockwise(w, 3, DType::FP16);
  ASSERT_EQ(q.scale.dtype(), DType::FP16);
  ASSERT_EQ(q.scale.shape(), (Shape{1, 1}));
  EXPECT_EQ(q.scale.ptr<uint16_t>()[0], 0x1C08);
  EXPECT_EQ(half64(0x1C08), std::ldexp(1032.0, -18));
  EXPECT_EQ(ints_of(q.data), (std::vector<int>{-127, 101, 32}));
  EXPECT_EQ(ints_of(quantize_int8_blockwise(w, 3).data)[1], 100) << "fp32 scales: the other code";
}

// Random rows, fp16 scales: each scale within half an fp16 step of max|w| /
// 127 (relative 2^-11 in the normal range), each code the nearest integer to
// w / the stored scale clamped to ±127, int4 the same with 7 and -8..7.
TEST(QuantizeInt8, Fp16ScalesRandomMatricesMeetTheDefinition) {
  std::mt19937 rng(6);
  std::normal_distribution<float> n(0, 0.02f);
  for (bool int4 : {false, true}) {
    const double levels = int4 ? 7 : 127, lo = int4 ? -8 : -127;
    Tensor w(DType::FP32, {5, 64});
    float* p = w.mutable_ptr<float>();
    for (int64_t i = 0; i < w.numel(); ++i) p[i] = n(rng);
    const llm::BlockQuantized q = int4 ? llm::quantize_int4_blockwise(w, 32, DType::FP16)
                                       : quantize_int8_blockwise(w, 32, DType::FP16);
    ASSERT_EQ(q.scale.dtype(), DType::FP16);
    for (int64_t b = 0; b < w.numel() / 32; ++b) {
      double amax = 0;
      for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(double(p[b * 32 + i])));
      const double sc = half64(q.scale.ptr<uint16_t>()[b]);
      EXPECT_LE(std::fabs(sc - amax / levels), 0x1p-11 * amax / levels) << "block " << b;
      for (int64_t i = b * 32; i < (b + 1) * 32; ++i) {
        const double want = std::clamp(double(p[i]) / sc, lo, levels);
        EXPECT_LE(std::fabs(double(q.data.ptr<int8_t>()[i]) - want), 0.5 + 1e-4) << "element " << i;
      }
    }
  }
}

TEST(QuantizeInt8, Fp16ScaleOverflowIsAnError) {
  const Tensor w = make(DType::FP32, {1, 2}, {1e7, 1});  // 1e7 / 127 = 78740 > 65504
  expect_error_containing([&] { quantize_int8_blockwise(w, 2, DType::FP16); }, "exceeds fp16's range");
  EXPECT_NO_THROW(quantize_int8_blockwise(w, 2, DType::FP32));
  expect_error_containing([&] { quantize_int8_blockwise(w, 2, DType::BF16); }, "scales must be fp32 or fp16, not bf16");
}

}  // namespace
}  // namespace milrt::test
