// Lowering: each MIL op of a verified, optimized function becomes a Step that
// calls kernels with pointers and precomputed shapes. Lowering functions are
// registered per op type (src/runtime/lower/*.cpp); all shape logic happens
// here, at compile time, never in Step::run.
#pragma once
#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "milrt/error.h"
#include "milrt/ir.h"
#include "milrt/plan.h"

namespace milrt::rt {

class GemmTuner;

// How a value is stored inside a plan: fp32 for floats, int32 for integers,
// one byte for bools (see plan.h).
DType storage_dtype(DType declared);

// Per-run table of value addresses, indexed by value id.
struct Frame {
  std::vector<void*> ptr;
  template <class T> T* at(int id) const { return static_cast<T*>(ptr[size_t(id)]); }
};

class Step {
 public:
  virtual ~Step() = default;
  virtual void run(const Frame& f) const = 0;
  Plan::StepInfo info;
};

// A value as lowering sees it.
struct ValueRef {
  int id = -1;
  DType dtype = DType::FP32;   // storage dtype
  Shape shape;
  int64_t numel() const { return shape_numel(shape); }
};

class LowerCtx {
 public:
  virtual ~LowerCtx() = default;
  // An input of `op` by key (a variable or an inline literal).
  virtual ValueRef input(const Op& op, const std::string& key) = 0;
  virtual std::vector<ValueRef> tuple(const Op& op, const std::string& key) = 0;
  virtual ValueRef output(const Op& op, size_t k = 0) = 0;
  // The compile-time value of an input, if it is a constant (literal or const op).
  virtual const Tensor* const_value(const Op& op, const std::string& key) = 0;

  bool has(const Op& op, const std::string& key) { return op.has(key); }
  int64_t const_int(const Op& op, const std::string& key, std::optional<int64_t> def = std::nullopt);
  double const_float(const Op& op, const std::string& key, std::optional<double> def = std::nullopt);
  bool const_bool(const Op& op, const std::string& key, std::optional<bool> def = std::nullopt);
  std::string const_str(const Op& op, const std::string& key, std::optional<std::string> def = std::nullopt);
  std::vector<int64_t> const_ints(const Op& op, const std::string& key,
                                  std::optional<std::vector<int64_t>> def = std::nullopt);

  // CompileOptions::matmul_precision == bf16: GEMM operands rounded to bf16.
  bool bf16_matmuls = false;
  // CompileOptions::activation_precision == int8: products with an int8
  // weight quantize their activations (kernels::ActivationQuant::int8).
  bool int8_activations = false;
  // Chooses each GEMM's backend (runtime/gemm_tuning.h); null: the fixed rule.
  GemmTuner* gemm_tuner = nullptr;
  // CompileOptions::numerics == fp16 (runtime/numerics.h): compile() rounds
  // each step's fp16 outputs; a lowering that computes several fp16 ops in
  // one step rounds its intermediates itself.
  bool fp16_numerics = false;
  // CompileOptions::stable_inputs: whether value `id` is one of them (or a
  // view of one), and a counter the plan changes whenever their values may
  // have changed. A step that caches something derived from such a value
  // keeps the counter's value it was derived at and derives it again when
  // the counter (or the value's address) differs.
  virtual bool stable_input(int id) const { (void)id; return false; }
  const uint64_t* stable_generation = nullptr;
};

// The activation a string names (kernels/activation.h's names); an error
// naming the op for any other string.
kernels::Activation activation_named(const Op& op, const std::string& name);

using LowerFn = std::unique_ptr<Step> (*)(const Op& op, LowerCtx& ctx);

// What lowering a control-flow op (runtime/control_flow.cpp) needs beyond
// LowerCtx: its blocks compile as plans of their own.
struct ControlFlowEnv {
  const Program& program;                              // for the version and paths
  const Function& function;                            // the outer function (its constants)
  const std::unordered_map<std::string, Type>& types;  // declared types of its values
  const CompileOptions& options;                       // the blocks compile with these
  const std::atomic<bool>* cancelled = nullptr;        // Plan::cancel() ends a loop
};
// The step of a `while_loop` or `cond`: a sub-plan per block, run in a loop
// or as the predicate picks. The op's captures are its kCapturesKey input.
std::unique_ptr<Step> lower_control_flow(const Op& op, LowerCtx& ctx, const ControlFlowEnv& env);
void register_lowering(const std::string& type, LowerFn fn);
LowerFn find_lowering(const std::string& type);
std::vector<std::string> lowered_ops();   // sorted

// Op types whose kernels may write their (single) output over an input of the
// same shape and element size (out[i] depends only on element i of the inputs
// and is written after reading them). The memory plan then lets such an
// output reuse the slot of an input that dies at the op; state aliases may be
// computed in place. Mark a type when registering its lowering.
void allow_in_place(const std::string& op_type);
bool in_place_allowed(const std::string& op_type);

// One registration function per family (src/runtime/lower/*.cpp).
void register_elementwise_lowerings();
void register_linalg_lowerings();
void register_tensor_lowerings();
void register_slicing_lowerings();
void register_nn_lowerings();
void register_softmax_lowerings();            // lower/softmax.cpp
void register_reduce_lowerings();             // lower/reduce.cpp
void register_fused_elementwise_lowerings();  // lower/fused_elementwise.cpp: milrt_elementwise
void register_fused_gemm_lowerings();         // lower/fused_gemm.cpp: milrt_gemm
void register_fused_attention_lowerings();    // lower/fused_attention.cpp: milrt_softmax, milrt_attention, sdpa
void register_fused_norm_lowerings();         // lower/fused_norm.cpp: milrt_rms_norm(_grad), layer_norm
void register_rope_lowerings();               // lower/rope.cpp: milrt_rope
void register_swiglu_lowerings();             // lower/swiglu.cpp: milrt_silu_mul(_grad)
void register_fused_conv_lowerings();         // lower/fused_conv.cpp: milrt_conv
void register_conv_chain_lowerings();         // lower/conv_chain.cpp: milrt_conv_chain
void register_pool_lowerings();               // lower/pool.cpp: max/avg/l2_pool, upsample_*
void register_state_lowerings();              // lower/state.cpp: read_state, coreml_update_state
void register_gather_lowerings();             // lower/gather.cpp: gather (batch_dims 0)
void register_scatter_gather_lowerings();     // lower/scatter_gather.cpp: scatter*, gather_nd/_along_axis, one_hot, fill, tile, ...
void ensure_lowerings_registered();

// Shape helpers shared by lowerings.
// `axis` normalized into [0, rank); an error at `op` when out of range.
inline int64_t norm_axis(const Op& op, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) throw_op_error(op, "axis out of range");
  return a;
}
// The padding of spatial dim i of a conv or pooling window: `same` pads to
// ceil(in / stride) outputs with an odd unit after, `same_lower` before;
// `custom` takes pad[2i], pad[2i + 1]; `valid` none. `kernel` is the
// effective (dilated) window. An error at `op` for another pad_type.
struct SpatialPad {
  int64_t total = 0, before = 0;
};
inline SpatialPad spatial_pad(const Op& op, const std::string& pad_type, const std::vector<int64_t>& pad, size_t i,
                              int64_t in, int64_t stride, int64_t kernel) {
  SpatialPad p;
  if (pad_type == "same" || pad_type == "same_lower") {
    p.total = std::max<int64_t>(0, stride * ((in + stride - 1) / stride) - in + kernel - stride);
    p.before = pad_type == "same" ? p.total / 2 : p.total - p.total / 2;
  } else if (pad_type == "custom") {
    p.total = pad[2 * i] + pad[2 * i + 1];
    p.before = pad[2 * i];
  } else if (pad_type != "valid") {
    throw_op_error(op, "unknown pad_type '" + pad_type + "'");
  }
  return p;
}
// [outer, n, inner] around axes [first, last] of `s`.
inline void split_dims(const Shape& s, int64_t first, int64_t last, int64_t& outer, int64_t& n, int64_t& inner) {
  outer = n = inner = 1;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) (i < first ? outer : i <= last ? n : inner) *= s[size_t(i)];
}

// The MIL ops a step implements, as `milrt inspect` lists them: the op's
// outputs, or for a fused op (type milrt_*) the original ops named in its
// `fused_from` attribute (a string of space-separated output names).
std::vector<std::string> implemented_ops(const Op& op);

// A Step running a lambda: most lowerings need nothing more.
template <class F>
class FnStep final : public Step {
 public:
  FnStep(std::string kernel, const Op& op, F f) : f_(std::move(f)) {
    info.kernel = std::move(kernel);
    info.ops = implemented_ops(op);
  }
  void run(const Frame& fr) const override { f_(fr); }
 private:
  F f_;
};
template <class F>
std::unique_ptr<Step> make_step(std::string kernel, const Op& op, F f) {
  return std::make_unique<FnStep<F>>(std::move(kernel), op, std::move(f));
}

}  // namespace milrt::rt
