// fp32 <-> bf16 and fp16 row conversions (kernels/convert_rows.h) on every
// vector path this CPU can run, against milrt::f32_to_bf16 / bf16_to_f32 /
// f32_to_f16 / f16_to_f32 (dtype.h, the
// out-of-line scalar definitions) element by element: ties, subnormals,
// infinities, NaNs (signalling ones come back quiet), every length up to a
// few vector widths, and nothing written past the end. Paths the CPU lacks
// are reported as not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/convert_rows.h"
#include "kernels/cpu_features.h"
#include "milrt/dtype.h"

namespace milrt {
namespace {

float from_bits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::vector<float> awkward_values() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 3.14159265f, 65504.0f, 1e-40f, -1e-42f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), from_bits(0x7f800001u) /* signalling NaN */,
                          from_bits(0xffc12345u), std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                          from_bits(0x3f808000u) /* tie, even below: rounds down */,
                          from_bits(0x3f818000u) /* tie, odd below: rounds up */,
                          from_bits(0x7f7f8000u) /* tie rounding to infinity */, from_bits(0x00008000u)};
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  while (v.size() < 200) v.push_back(from_bits(bits(rng)));
  return v;
}

// Runs `check` once per usable ISA path, with MILRT_ISA set to it.
template <class Check>
void on_every_path(Check check) {
  const char* old = std::getenv("MILRT_ISA");
  const std::string saved = old ? old : "";
  std::vector<kernels::Isa> paths = kernels::usable_isas();
  for (kernels::Isa isa : paths) {
    setenv("MILRT_ISA", std::string(kernels::isa_name(isa)).c_str(), 1);
    kernels::reload_isa();
    SCOPED_TRACE(std::string(kernels::isa_name(isa)));
    check();
  }
  if (old) setenv("MILRT_ISA", saved.c_str(), 1);
  else unsetenv("MILRT_ISA");
  kernels::reload_isa();
  for (kernels::Isa isa : {kernels::Isa::avx2, kernels::Isa::avx512})
    if (std::find(paths.begin(), paths.end(), isa) == paths.end())
      std::printf("[ NOT RUN  ] the %s path: this CPU lacks it\n", std::string(kernels::isa_name(isa)).c_str());
}

TEST(ConvertRows, F32ToBf16MatchesTheScalarDefinitionOnEveryPath) {
  const std::vector<float> values = awkward_values();
  on_every_path([&] {
    for (int64_t n = 0; n <= 70; ++n)
      for (int64_t offset : {0, 1, 130 - 70}) {
        std::vector<uint16_t> out(size_t(n) + 1, 0xabcd);
        kernels::f32_to_bf16_row(values.data() + offset, out.data(), n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(out[size_t(i)], f32_to_bf16(values[size_t(offset + i)]))
              << "n " << n << " element " << i << " bits " << std::hex << [&] {
                   uint32_t x;
                   std::memcpy(&x, &values[size_t(offset + i)], 4);
                   return x;
                 }();
        ASSERT_EQ(out[size_t(n)], 0xabcd) << "written past n = " << n;
      }
  });
}

TEST(ConvertRows, Bf16ToF32IsExactOnEveryPath) {
  std::vector<uint16_t> values(300);
  for (size_t i = 0; i < values.size(); ++i) values[i] = uint16_t(i * 2654435761u >> 7);
  values[0] = 0x7fc1, values[1] = 0xff80, values[2] = 0x0001;
  on_every_path([&] {
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<float> out(size_t(n) + 1, 7.0f);
      kernels::bf16_to_f32_row(values.data() + 3, out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = bf16_to_f32(values[size_t(3 + i)]);
        ASSERT_EQ(std::memcmp(&out[size_t(i)], &want, 4), 0) << "n " << n << " element " << i;
      }
      ASSERT_EQ(out[size_t(n)], 7.0f) << "written past n = " << n;
    }
  });
}

// fp16 rows: every awkward fp32 value and the same values scaled into
// fp16's range (its subnormals, ties at its precision, overflow to
// infinity) against milrt::f32_to_f16; every one of the 65536 fp16 bit
// patterns back to fp32 against milrt::f16_to_f32, bit for bit.
TEST(ConvertRows, F32ToF16MatchesTheScalarDefinitionOnEveryPath) {
  std::vector<float> values = awkward_values();
  const size_t base = values.size();
  for (size_t i = 0; i < base; ++i)
    for (float scale : {1e-30f, 1e-36f, 1e-40f})
      if (std::isfinite(values[i])) values.push_back(values[i] * scale);
  for (float v : {65504.0f, 65520.0f, 65519.996f, 5.9604645e-8f, 2.9802322e-8f, 8.940697e-8f, 1.0009766f, 1.0004883f})
    values.push_back(v), values.push_back(-v);
  on_every_path([&] {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(values.size())}) {
      std::vector<uint16_t> out(size_t(n) + 1, 0xabcd);
      kernels::f32_to_f16_row(values.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out[size_t(i)], f32_to_f16(values[size_t(i)])) << "n " << n << " element " << i << " value "
                                                                  << values[size_t(i)];
      ASSERT_EQ(out[size_t(n)], 0xabcd) << "written past n = " << n;
    }
  });
}

TEST(ConvertRows, F16ToF32IsExactForEveryBitPatternOnEveryPath) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  on_every_path([&] {
    std::vector<float> out(all.size() + 1, 7.0f);
    kernels::f16_to_f32_row(all.data(), out.data(), int64_t(all.size()) - 3);
    for (size_t i = 0; i + 3 < all.size(); ++i) {
      const float want = f16_to_f32(all[i]);
      ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << "fp16 bits " << std::hex << all[i];
    }
    ASSERT_EQ(out[all.size() - 3], 7.0f) << "written past n";
  });
}

// The words of a bf16 pair panel: the low half from r0, the high half from
// r1 (zero when r1 is null), each rounded as f32_to_bf16 rounds.
TEST(ConvertRows, RowPairToBf16WordsMatchesTheScalarDefinitionOnEveryPath) {
  const std::vector<float> values = awkward_values();
  on_every_path([&] {
    for (int64_t n = 0; n <= 70; ++n)
      for (bool second : {true, false}) {
        std::vector<uint32_t> out(size_t(n) + 1, 0xdeadbeefu);
        const float* r0 = values.data() + 1;
        const float* r1 = values.data() + 129 - n % 7;
        kernels::f32_row_pair_to_bf16_words(r0, second ? r1 : nullptr, out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t want = uint32_t(f32_to_bf16(r0[i])) | (second ? uint32_t(f32_to_bf16(r1[i])) << 16 : 0u);
          ASSERT_EQ(out[size_t(i)], want) << "n " << n << " element " << i << " second row " << second;
        }
        ASSERT_EQ(out[size_t(n)], 0xdeadbeefu) << "written past n = " << n;
      }
  });
}

// bf16 rows to a pair panel: word (q, j) holds elements 2q and 2q + 1 of row
// j (low, high), an odd K's last high half and the columns past `width` are
// zero, and nothing outside the panel's ceil(K/2)·nr words is written; rows
// are read only up to K (the elements after them are NaN bits).
TEST(ConvertRows, Bf16RowsToPairPanelIsTheTransposeOfWords) {
  on_every_path([&] {
    for (int nr : {16, 32})
      for (int64_t K : {1, 2, 3, 31, 32, 33, 64, 95})
        for (int64_t width : {int64_t(1), int64_t(nr / 2 + 1), int64_t(nr)}) {
          const int64_t ld = K + 3, pairs = (K + 1) / 2;
          std::vector<uint16_t> src(size_t(width * ld), 0x7fc1);
          for (int64_t j = 0; j < width; ++j)
            for (int64_t k = 0; k < K; ++k) src[size_t(j * ld + k)] = uint16_t(1000 * j + k + 1);
          std::vector<uint32_t> out(size_t(pairs * nr) + 1, 0xdeadbeefu);
          kernels::bf16_rows_to_pair_panel(src.data(), ld, width, K, nr, out.data());
          for (int64_t q = 0; q < pairs; ++q)
            for (int64_t j = 0; j < nr; ++j) {
              const uint32_t lo = j < width ? uint32_t(1000 * j + 2 * q + 1) : 0u;
              const uint32_t hi = j < width && 2 * q + 1 < K ? uint32_t(1000 * j + 2 * q + 2) : 0u;
              ASSERT_EQ(out[size_t(q * nr + j)], lo | hi << 16)
                  << "nr " << nr << " K " << K << " width " << width << " pair " << q << " column " << j;
            }
          ASSERT_EQ(out.back(), 0xdeadbeefu) << "written past the panel: nr " << nr << " K " << K;
        }
  });
}

}  // namespace
}  // namespace milrt
