// Vectorizable fp32 math shared by the generic kernels.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace milrt::kernels {

// e^x in plain arithmetic, so loops calling it vectorize (libm's expf is a
// call per element): Cody-Waite reduction x = n·ln2 + r, a degree-6
// polynomial for e^r (Cephes' expf, ~1 ulp), 2^n built in the exponent bits
// as two factors so that n in [-150, 128] (denormals, up to FLT_MAX) works;
// inf above 88.72, 0 below -103.97, NaN for NaN.
inline float exp_poly(float x) {
  float xc = x < -104.0f ? -104.0f : (x > 88.8f ? 88.8f : x);
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float e = p * r * r + r + 1.0f;
  int32_t ni = int32_t(n);
  int32_t h = ni >> 1;
  float s1 = std::bit_cast<float>((h + 127) << 23);
  float s2 = std::bit_cast<float>((ni - h + 127) << 23);
  float y = e * s1 * s2;
  y = x > 88.72283905f ? INFINITY : y;
  y = x < -103.97f ? 0.0f : y;
  return x != x ? x : y;
}

}  // namespace milrt::kernels
