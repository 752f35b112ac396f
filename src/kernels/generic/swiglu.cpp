#include "kernels/generic/swiglu.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/bf16_bits.h"
#include "kernels/convert_rows.h"
#include "kernels/generic/multiversion.h"
#include "kernels/generic/vec_math.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

MILRT_CLONES(void, forward_run, (const float* a, const float* b, float* y, int64_t n), (a, b, y, n)) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i], s = 1.0f / (1.0f + exp_poly(-v));
    y[i] = v * s * b[i];
  }
}

MILRT_CLONES(void, backward_run,
             (const float* a, const float* b, const float* dy, float* da, float* db, int64_t n),
             (a, b, dy, da, db, n)) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i], g = dy[i], u = b[i], s = 1.0f / (1.0f + exp_poly(-v));
    db[i] = g * v * s;
    da[i] = g * u * s * (1.0f + v * (1.0f - s));
  }
}

// The same with bf16 results, rounded in the loop (one pass, vectorized).
MILRT_CLONES(void, forward_run_bf16, (const float* a, const float* b, uint16_t* y, int64_t n), (a, b, y, n)) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i], s = 1.0f / (1.0f + exp_poly(-v));
    y[i] = f32_to_bf16_bits(v * s * b[i]);
  }
}

MILRT_CLONES(void, backward_run_bf16,
             (const float* a, const float* b, const float* dy, uint16_t* da, uint16_t* db, int64_t n),
             (a, b, dy, da, db, n)) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i], g = dy[i], u = b[i], s = 1.0f / (1.0f + exp_poly(-v));
    db[i] = f32_to_bf16_bits(g * v * s);
    da[i] = f32_to_bf16_bits(g * u * s * (1.0f + v * (1.0f - s)));
  }
}

// One bf16 result and one fp32 go through an fp32 tile in L1 first.
constexpr int64_t kTileElems = 1024;

// Stores `n` fp32 values as fp32 or as bf16 bits.
void store(const float* v, void* dst, bool bf16, int64_t at, int64_t n) {
  if (bf16) f32_to_bf16_row(v, static_cast<uint16_t*>(dst) + at, n);
  else std::memcpy(static_cast<float*>(dst) + at, v, size_t(n) * sizeof(float));
}

}  // namespace

void silu_mul_f32(const float* a, const float* b, float* y, int64_t n) {
  for_each_chunk(n, [&](int64_t s, int64_t e) { forward_run(a + s, b + s, y + s, e - s); });
}

void silu_mul_backward_f32(const float* a, const float* b, const float* dy, float* da, float* db, int64_t n) {
  for_each_chunk(n, [&](int64_t s, int64_t e) { backward_run(a + s, b + s, dy + s, da + s, db + s, e - s); });
}

void silu_mul_f32_to_bf16(const float* a, const float* b, uint16_t* y, int64_t n) {
  for_each_chunk(n, [&](int64_t s, int64_t e) { forward_run_bf16(a + s, b + s, y + s, e - s); });
}

void silu_mul_backward(const float* a, const float* b, const float* dy, void* da, bool da_bf16, void* db,
                       bool db_bf16, int64_t n) {
  if (!da_bf16 && !db_bf16)
    return silu_mul_backward_f32(a, b, dy, static_cast<float*>(da), static_cast<float*>(db), n);
  auto* da16 = static_cast<uint16_t*>(da);
  auto* db16 = static_cast<uint16_t*>(db);
  if (da_bf16 && db_bf16)
    return for_each_chunk(n, [&](int64_t s, int64_t e) {
      backward_run_bf16(a + s, b + s, dy + s, da16 + s, db16 + s, e - s);
    });
  for_each_chunk(n, [&](int64_t s, int64_t e) {
    float tile_a[kTileElems], tile_b[kTileElems];
    for (int64_t i = s; i < e; i += kTileElems) {
      const int64_t len = std::min(kTileElems, e - i);
      backward_run(a + i, b + i, dy + i, tile_a, tile_b, len);
      store(tile_a, da, da_bf16, i, len);
      store(tile_b, db, db_bf16, i, len);
    }
  });
}

}  // namespace milrt::kernels
