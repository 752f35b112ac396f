// The reference executor's per-op interface.
//
// Each op is one plain function over doubles: it reads its inputs through
// RefCtx, computes in fp64 and hands back results that the executor rounds to
// the declared dtype (so fp16 programs round after every op, as fp16 hardware
// does). This code is the oracle for everything faster; it shares no code
// with the compiler's kernels, and clarity wins over speed here.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "milrt/error.h"
#include "milrt/ir.h"

namespace milrt::ref {

// A dense row-major fp64 array: what every reference op computes on.
struct NdArray {
  Shape shape;
  std::vector<double> v;
  NdArray() = default;
  explicit NdArray(Shape s, double fill = 0.0) : shape(std::move(s)), v(size_t(shape_numel(shape)), fill) {}
  int64_t numel() const { return int64_t(v.size()); }
  int rank() const { return int(shape.size()); }
};

NdArray to_nd(const Tensor& t);                       // converts any numeric/bool dtype
Tensor from_nd(const NdArray& a, DType dtype);        // rounds to dtype (see store_from_double)
std::vector<int64_t> strides_of(const Shape& s);      // row-major element strides
// Index of the element of a broadcast operand `src_shape` (right-aligned) that
// corresponds to multi-index `idx` of the broadcast result.
int64_t broadcast_index(const std::vector<int64_t>& idx, const Shape& out_shape, const Shape& src_shape);
Shape broadcast(const Shape& a, const Shape& b);      // throws Error if incompatible
int64_t norm_axis(int64_t axis, int64_t rank);        // throws Error if out of range

class RefCtx {
 public:
  RefCtx(const Op& op, std::vector<std::pair<std::string, std::vector<Tensor>>> inputs)
      : op_(op), inputs_(std::move(inputs)) {}
  const Op& op() const { return op_; }

  bool has(const std::string& key) const;
  const Tensor& in(const std::string& key) const;              // a single tensor input
  NdArray nd(const std::string& key) const { return to_nd(in(key)); }
  const std::vector<Tensor>& tuple(const std::string& key) const;  // a tuple input (or one value)

  // Scalar / vector parameters, with defaults used when the input is absent.
  int64_t i64(const std::string& key, std::optional<int64_t> def = std::nullopt) const;
  double f64(const std::string& key, std::optional<double> def = std::nullopt) const;
  bool flag(const std::string& key, std::optional<bool> def = std::nullopt) const;
  std::string str(const std::string& key, std::optional<std::string> def = std::nullopt) const;
  std::vector<int64_t> ints(const std::string& key,
                            std::optional<std::vector<int64_t>> def = std::nullopt) const;

  size_t num_outputs() const { return op_.outputs.size(); }
  const Type& out_type(size_t k = 0) const { return op_.outputs.at(k).type; }
  DType out_dtype(size_t k = 0) const { return out_type(k).dtype; }

  // Results: set_out takes a finished tensor; set_nd rounds an fp64 array to
  // the declared dtype of output k.
  void set_out(size_t k, Tensor t);
  void set_nd(size_t k, const NdArray& a) { set_out(k, from_nd(a, out_dtype(k))); }
  std::vector<Tensor>& results() { return results_; }

  [[noreturn]] void fail(const std::string& msg) const;        // throws Error naming the op

 private:
  const std::vector<Tensor>* find(const std::string& key) const;
  const Op& op_;
  std::vector<std::pair<std::string, std::vector<Tensor>>> inputs_;
  std::vector<Tensor> results_;
};

using RefFn = void (*)(RefCtx&);
void register_ref(const std::string& type, RefFn fn);
RefFn find_ref(const std::string& type);
std::vector<std::string> reference_ops();  // every type with a RefFn, sorted

// Registration entry points, one per op family (src/reference/ops/*.cpp).
void register_ref_const_ops();
void register_ref_elementwise_ops();
void register_ref_linalg_ops();
void register_ref_tensor_ops();
void register_ref_state_ops();
void register_ref_fused_elementwise_ops();
void register_ref_fused_gemm_ops();
void register_ref_fused_attention_ops();
void register_ref_fused_norm_ops();
void register_ref_rope_ops();
void register_ref_swiglu_ops();
void register_ref_fused_conv_ops();
void register_ref_conv_chain_ops();
void register_ref_pool_ops();
void ensure_ref_ops_registered();

}  // namespace milrt::ref
