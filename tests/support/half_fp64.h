// IEEE half decoded to fp64 by its definition, independently of milrt's
// converters: what the kernel tests compare fp16 weights and scales against.
#pragma once
#include <cmath>
#include <cstdint>

namespace milrt::test {

inline double half64(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double s = (h & 0x8000) ? -1 : 1;
  if (e == 0) return s * std::ldexp(double(m), -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * std::ldexp(double(1024 + m), e - 25);
}

}  // namespace milrt::test
