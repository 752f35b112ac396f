#include "kernels/generic/swiglu.h"

#include <omp.h>

#include "kernels/bf16_bits.h"
#include "kernels/generic/multiversion.h"
#include "kernels/generic/vec_math.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

// A result as fp32 or as its bf16 bits (nearest-even, as milrt::f32_to_bf16).
inline void put(float* y, int64_t i, float v) { y[i] = v; }
inline void put(uint16_t* y, int64_t i, float v) { y[i] = f32_to_bf16_bits(v); }

// The loops once; each clone below inlines them for its output types.
template <class Y>
[[gnu::always_inline]] inline void forward_loop(const float* a, const float* b, Y* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i], s = 1.0f / (1.0f + exp_poly(-v));
    put(y, i, v * s * b[i]);
  }
}

template <class A, class B>
[[gnu::always_inline]] inline void backward_loop(const float* a, const float* b, const float* dy, A* da, B* db,
                                                 int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i], g = dy[i], u = b[i], s = 1.0f / (1.0f + exp_poly(-v));
    put(db, i, g * v * s);
    put(da, i, g * u * s * (1.0f + v * (1.0f - s)));
  }
}

MILRT_CLONES(void, forward_run, (const float* a, const float* b, float* y, int64_t n), (a, b, y, n)) {
  forward_loop(a, b, y, n);
}
MILRT_CLONES(void, forward_run_bf16, (const float* a, const float* b, uint16_t* y, int64_t n), (a, b, y, n)) {
  forward_loop(a, b, y, n);
}

// da and db each fp32 (f) or bf16 (h).
MILRT_CLONES(void, backward_ff, (const float* a, const float* b, const float* dy, float* da, float* db, int64_t n),
             (a, b, dy, da, db, n)) {
  backward_loop(a, b, dy, da, db, n);
}
MILRT_CLONES(void, backward_hh,
             (const float* a, const float* b, const float* dy, uint16_t* da, uint16_t* db, int64_t n),
             (a, b, dy, da, db, n)) {
  backward_loop(a, b, dy, da, db, n);
}
MILRT_CLONES(void, backward_hf, (const float* a, const float* b, const float* dy, uint16_t* da, float* db, int64_t n),
             (a, b, dy, da, db, n)) {
  backward_loop(a, b, dy, da, db, n);
}
MILRT_CLONES(void, backward_fh, (const float* a, const float* b, const float* dy, float* da, uint16_t* db, int64_t n),
             (a, b, dy, da, db, n)) {
  backward_loop(a, b, dy, da, db, n);
}

}  // namespace

void silu_mul_f32(const float* a, const float* b, float* y, int64_t n) {
  for_each_chunk(n, [&](int64_t s, int64_t e) { forward_run(a + s, b + s, y + s, e - s); });
}

void silu_mul_backward_f32(const float* a, const float* b, const float* dy, float* da, float* db, int64_t n) {
  for_each_chunk(n, [&](int64_t s, int64_t e) { backward_ff(a + s, b + s, dy + s, da + s, db + s, e - s); });
}

void silu_mul_f32_to_bf16(const float* a, const float* b, uint16_t* y, int64_t n) {
  for_each_chunk(n, [&](int64_t s, int64_t e) { forward_run_bf16(a + s, b + s, y + s, e - s); });
}

void silu_mul_backward(const float* a, const float* b, const float* dy, void* da, bool da_bf16, void* db,
                       bool db_bf16, int64_t n) {
  auto* fa = static_cast<float*>(da);
  auto* fb = static_cast<float*>(db);
  auto* ha = static_cast<uint16_t*>(da);
  auto* hb = static_cast<uint16_t*>(db);
  for_each_chunk(n, [&](int64_t s, int64_t e) {
    if (da_bf16 && db_bf16) backward_hh(a + s, b + s, dy + s, ha + s, hb + s, e - s);
    else if (da_bf16) backward_hf(a + s, b + s, dy + s, ha + s, fb + s, e - s);
    else if (db_bf16) backward_fh(a + s, b + s, dy + s, fa + s, hb + s, e - s);
    else backward_ff(a + s, b + s, dy + s, fa + s, fb + s, e - s);
  });
}

}  // namespace milrt::kernels
