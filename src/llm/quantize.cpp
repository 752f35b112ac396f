#include "llm/quantize.h"

#include <algorithm>
#include <cmath>

#include "milrt/dtype.h"
#include "milrt/error.h"

namespace milrt::llm {

namespace {

// Symmetric blocks of `levels` steps each side: s = max|w| / levels (rounded
// to `sdt`), q = round(w / s) clamped to [lo, levels], in a `dtype` tensor held
// one byte a value.
BlockQuantized quantize_blockwise(const Tensor& w, int64_t block, DType dtype, float levels, float lo, DType sdt,
                                  const char* what) {
  if (w.dtype() != DType::FP32 || w.rank() != 2)
    throw Error(std::string(what) + " quantization: expected an fp32 matrix, got " +
                std::string(dtype_name(w.dtype())) + " " + shape_str(w.shape()));
  const int64_t n = w.shape()[0], k = w.shape()[1];
  if (block <= 0 || k % block != 0)
    throw Error(std::string(what) + " quantization: the block size " + std::to_string(block) +
                " does not divide the row length " + std::to_string(k));
  if (sdt != DType::FP32 && sdt != DType::FP16)
    throw Error(std::string(what) + " quantization: scales must be fp32 or fp16, not " + std::string(dtype_name(sdt)));
  const int64_t nb = k / block;
  BlockQuantized r{Tensor(dtype, {n, k}), Tensor(sdt, {n, nb})};
  const float* src = w.ptr<float>();
  int8_t* q = r.data.mutable_ptr<int8_t>();
  for (int64_t b = 0; b < n * nb; ++b) {
    const float* x = src + b * block;
    float amax = 0;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[i]));
    float scale = amax / levels;
    if (sdt == DType::FP16) {
      const uint16_t h = f32_to_f16(scale);
      scale = f16_to_f32(h);
      if (std::isinf(scale))
        throw Error(std::string(what) + " quantization: block scale " + std::to_string(amax / levels) + " of row " +
                    std::to_string(b / nb) + " exceeds fp16's range (use fp32 scales)");
      r.scale.mutable_ptr<uint16_t>()[b] = h;
    } else {
      r.scale.mutable_ptr<float>()[b] = scale;
    }
    for (int64_t i = 0; i < block; ++i)
      q[b * block + i] = scale == 0 ? 0 : int8_t(std::clamp(std::nearbyint(x[i] / scale), lo, levels));
  }
  return r;
}

}  // namespace

BlockQuantized quantize_int8_blockwise(const Tensor& w, int64_t block, DType scale_dtype) {
  return quantize_blockwise(w, block, DType::Int8, 127.0f, -127.0f, scale_dtype, "int8");
}

BlockQuantized quantize_int4_blockwise(const Tensor& w, int64_t block, DType scale_dtype) {
  if (block % 2 != 0) throw Error("int4 quantization: the block size " + std::to_string(block) + " must be even");
  return quantize_blockwise(w, block, DType::Int4, 7.0f, -8.0f, scale_dtype, "int4");
}

}  // namespace milrt::llm
