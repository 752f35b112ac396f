// NumPy arrays <-> milrt tensors and plan storage, converting as Core ML does:
// a value is rounded to the port's declared dtype (an fp32 array given for
// an fp16 input loses its low bits, as an MLMultiArray of Float16 would),
// then held in the plan's storage dtype (fp32, int32 or bool).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "milrt/tensor.h"

namespace milrt::py {

namespace pb = pybind11;

// The milrt dtype of a NumPy dtype (float16/32/64, [u]int8..64, bool), or
// nothing for any other (complex, object, strings, ...); the second form
// throws an Error naming `what` instead.
std::optional<DType> dtype_of(const pb::dtype& d);
DType dtype_of(const pb::dtype& d, const std::string& what);
// The NumPy dtype a value declared `d` is returned as: itself where NumPy
// has it, float32 for bf16 and fp8, int8/uint8 for the sub-byte integers.
pb::dtype numpy_dtype(DType d);

// Copies n elements of dtype `from` into `to`, rounding each through
// `declared` first (to == storage dtype of declared, or a NumPy dtype).
void convert(const void* src, DType from, int64_t n, DType declared, void* dst, DType to);

// "[1, 576]" of an array's shape, and whether it equals `shape`.
std::string shape_of(const pb::array& a);
bool same_shape(const pb::array& a, const Shape& shape);

// A tensor of an array's own dtype and shape: the array is copied, so the
// tensor may outlive it (reference executor inputs, states).
Tensor to_tensor(const pb::array& a, const std::string& what);
// A new array of numpy_dtype(t.dtype()) holding t's values.
pb::array to_array(const Tensor& t);

}  // namespace milrt::py
