// Scalar conversions: fp16, bf16 and fp8 rounding against hand-computed bit patterns.
#include <cmath>
#include <limits>

#include "support/test_util.h"

namespace milrt {
namespace {
using test::values;

TEST(DType, HalfRoundTripAndKnownBitPatterns) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);               // largest half
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);               // rounds up to inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);               // rounds down to max
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp -> tie to even: 2
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    EXPECT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << h;
  }
}

TEST(DType, DoubleToHalfAvoidsDoubleRounding) {
  // 1 + 2^-11 + 2^-40 lies just above a half tie; via float it would become
  // the tie itself and round down to 1.0. Correct rounding goes up.
  double v = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Tensor t(DType::FP16, {1});
  t.set(0, v);
  EXPECT_EQ(*t.ptr<uint16_t>(), 0x3c01);
}

TEST(DType, BFloat16AndFp8) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);       // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);       // tie -> even (up)
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
  // e4m3fn: bias 7, no infinities, 0x7f is NaN, max 448.
  EXPECT_EQ(fp8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(0x7f)));
  EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f32_to_fp8e4m3(1.0f), 0x38);
  EXPECT_EQ(f32_to_fp8e4m3(1000.0f), 0x7e);  // saturates
  // e5m2: bias 15, has infinities.
  EXPECT_EQ(fp8e5m2_to_f32(0x3c), 1.0f);
  EXPECT_TRUE(std::isinf(fp8e5m2_to_f32(0x7c)));
  EXPECT_EQ(fp8e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(f32_to_fp8e5m2(-2.0f), 0xc0);
}

TEST(DType, IntegerStoresTruncateAndSaturate) {
  Tensor t(DType::Int8, {4});
  t.set(0, 300); t.set(1, -300); t.set(2, -1.9); t.set(3, NAN);
  EXPECT_EQ(values(t), (std::vector<double>{127, -128, -1, 0}));
  Tensor u(DType::UInt4, {2});
  u.set(0, 17); u.set(1, -3);
  EXPECT_EQ(values(u), (std::vector<double>{15, 0}));
  Tensor i4(DType::Int4, {2});
  i4.set(0, -9); i4.set(1, 7.9);
  EXPECT_EQ(values(i4), (std::vector<double>{-8, 7}));
}

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i <= int(DType::String); ++i) {
    DType t = DType(i);
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_FALSE(dtype_from_name("fp99"));
}

TEST(TensorTest, RefusesAbsurdShapesBeforeAllocating) {
  EXPECT_THROW(Tensor(DType::FP32, {1 << 20, 1 << 20, 1 << 20}), Error);
  EXPECT_THROW(Tensor(DType::FP32, {-1}), Error);
  Tensor t(DType::FP32, {2, 3});
  EXPECT_THROW(t.reshaped({4}), Error);
  EXPECT_EQ(t.reshaped({3, 2}).shape(), (Shape{3, 2}));
}

}  // namespace
}  // namespace milrt
