// The op registry: for each MIL op type, its inputs and its type inference.
//
// Inference sees the types of an op's inputs (and their values when they are
// compile-time constants: literals or outputs of `const`) and produces the
// types of its outputs. The verifier compares those with the declared output
// types. Dims that cannot be known at compile time are -1 and match anything.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "milrt/error.h"
#include "milrt/ir.h"

namespace milrt {

// One input of an op as inference sees it.
struct InferInput {
  Type type;                              // for tuple args: unused, see elems
  const Tensor* value = nullptr;          // compile-time constant value, if known
  bool is_tuple = false;
  std::vector<InferInput> elems;          // tuple elements
};

class InferCtx {
 public:
  InferCtx(const Op& op, std::vector<std::pair<std::string, InferInput>> inputs, std::string opset = "ios18")
      : op_(op), inputs_(std::move(inputs)), opset_(std::move(opset)) {}

  const Op& op() const { return op_; }
  // The function's opset ("ios15" ... "ios18"): some rules differ between versions.
  const std::string& opset() const { return opset_; }
  // Is the opset at least `v` (e.g. "ios17")? The names compare in version order.
  bool opset_at_least(const std::string& v) const { return opset_ >= v; }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  const InferInput& input(const std::string& key) const;      // fails if absent
  const Type& type(const std::string& key) const { return input(key).type; }
  const Shape& shape(const std::string& key) const { return input(key).type.shape; }
  DType dtype(const std::string& key) const { return input(key).type.dtype; }
  // The elements of a tuple input (a lone value counts as a one-element tuple).
  std::vector<const InferInput*> tuple(const std::string& key) const;

  // Compile-time constant values; nullopt when absent or not constant.
  std::optional<int64_t> const_int(const std::string& key) const;
  std::optional<double> const_float(const std::string& key) const;
  std::optional<bool> const_bool(const std::string& key) const;
  std::optional<std::string> const_str(const std::string& key) const;
  std::optional<std::vector<int64_t>> const_ints(const std::string& key) const;
  const Tensor* const_value(const std::string& key) const;

  // Requirements: each fails with a message naming the input when unmet.
  void require_float(const std::string& key) const;
  void require_rank(const std::string& key, int rank) const;
  void require_same_dtype(const std::string& a, const std::string& b) const;

  [[noreturn]] void fail(const std::string& msg) const;   // throws Error at the op

  // Result: one type per output. Set by the schema's infer function.
  std::vector<Type> out;
  void set_out(Type t) { out.assign(1, std::move(t)); }

 private:
  const InferInput* find(const std::string& key) const;
  const Op& op_;
  std::vector<std::pair<std::string, InferInput>> inputs_;
  std::string opset_;
};

struct InputSpec {
  std::string name;
  bool required = true;
};

struct OpSchema {
  std::string type;
  std::vector<InputSpec> inputs;          // every accepted input name
  int min_outputs = 1, max_outputs = 1;
  std::function<void(InferCtx&)> infer;
};

void register_op(OpSchema s);
const OpSchema* find_schema(const std::string& type);
std::vector<std::string> registered_ops();   // sorted

// Shape helpers for inference functions. Dims of -1 are unknown.
// NumPy broadcasting; fails (via ctx) when the shapes are incompatible.
Shape broadcast_shapes(const InferCtx& ctx, const Shape& a, const Shape& b);
// Normalizes a possibly negative axis into [0, rank); fails when out of range.
int64_t normalize_axis(const InferCtx& ctx, int64_t axis, int64_t rank);

// Registration entry points, one per op family (src/ir/ops/*.cpp).
void register_const_ops();        // const, constexpr_*
void register_elementwise_ops();  // binary, comparison, logical, unary, activations, softmax, clip, cast
void register_linalg_ops();       // matmul, linear, conv, norms, lstm, scaled_dot_product_attention
void register_tensor_ops();       // reshape ... topk, reductions
void register_state_ops();        // read_state, coreml_update_state (ios18 state<> values)
// milrt's own fused ops (type milrt_*), made only by the fusion passes. Each
// carries `fused_from`: the output names of the MIL ops it replaced.
void register_fused_elementwise_ops();  // milrt_elementwise
void register_fused_gemm_ops();         // milrt_gemm
void register_fused_attention_ops();    // milrt_softmax, milrt_attention
void register_fused_norm_ops();         // milrt_rms_norm, milrt_rms_norm_grad
void register_rope_ops();               // milrt_rope
void register_swiglu_ops();             // milrt_silu_mul, milrt_silu_mul_grad
void register_fused_conv_ops();         // milrt_conv
void register_conv_chain_ops();         // milrt_conv_chain
void register_pool_ops();               // max/avg/l2_pool, upsample_nearest_neighbor/_bilinear
void register_control_flow_ops();       // cond, while_loop (ir/control_flow.cpp)

// Calls every register_*_ops() once.
void ensure_ops_registered();

}  // namespace milrt
