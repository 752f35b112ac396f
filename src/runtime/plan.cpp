// compile(): passes, lowering of every op to a Step, memory planning; and
// Plan::run(): bind addresses, convert inputs, run the steps, convert outputs.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "milrt/mil.h"
#include "milrt/passes.h"
#include "milrt/plan.h"
#include "runtime/lowering.h"
#include "runtime/memory_plan.h"

namespace milrt {
namespace rt {

DType storage_dtype(DType d) {
  if (dtype_is_float(d)) return DType::FP32;
  if (d == DType::Bool) return DType::Bool;
  if (d == DType::String) throw Error("error: string values cannot be compiled");
  return DType::Int32;
}

namespace {
std::map<std::string, LowerFn>& lowering_table() {
  static std::map<std::string, LowerFn> t;
  return t;
}
}  // namespace

void register_lowering(const std::string& type, LowerFn fn) { lowering_table()[type] = fn; }

LowerFn find_lowering(const std::string& type) {
  ensure_lowerings_registered();
  auto it = lowering_table().find(type);
  return it == lowering_table().end() ? nullptr : it->second;
}

std::vector<std::string> lowered_ops() {
  ensure_lowerings_registered();
  std::vector<std::string> r;
  for (auto& [k, v] : lowering_table()) r.push_back(k);
  return r;
}

void ensure_lowerings_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_lowerings();
    register_linalg_lowerings();
    register_tensor_lowerings();
    register_slicing_lowerings();
    register_nn_lowerings();
    register_softmax_lowerings();
    register_reduce_lowerings();
    register_fused_elementwise_lowerings();
    register_fused_gemm_lowerings();
    register_fused_attention_lowerings();
    register_fused_norm_lowerings();
    register_fused_conv_lowerings();
    register_state_lowerings();
  });
}

std::vector<std::string> implemented_ops(const Op& op) {
  std::vector<std::string> r;
  if (const Arg* a = op.arg("fused_from"); a && a->kind == Arg::Kind::Const && a->lit->value.dtype() == DType::String &&
                                            a->lit->value.numel() == 1) {
    std::string s = a->lit->value.strings()[0], cur;
    for (char c : s + " ") {
      if (c != ' ') { cur += c; continue; }
      if (!cur.empty()) r.push_back(cur);
      cur.clear();
    }
  }
  if (r.empty())
    for (auto& o : op.outputs) r.push_back(o.name);
  return r;
}

int64_t LowerCtx::const_int(const Op& op, const std::string& key, std::optional<int64_t> def) {
  if (!op.has(key)) { if (def) return *def; throw_op_error(op, "missing input '" + key + "'"); }
  const Tensor* t = const_value(op, key);
  if (!t || t->numel() != 1) throw_op_error(op, "input '" + key + "' must be a constant scalar to compile");
  return int64_t(t->at(0));
}
double LowerCtx::const_float(const Op& op, const std::string& key, std::optional<double> def) {
  if (!op.has(key)) { if (def) return *def; throw_op_error(op, "missing input '" + key + "'"); }
  const Tensor* t = const_value(op, key);
  if (!t || t->numel() != 1) throw_op_error(op, "input '" + key + "' must be a constant scalar to compile");
  return t->at(0);
}
bool LowerCtx::const_bool(const Op& op, const std::string& key, std::optional<bool> def) {
  return const_int(op, key, def ? std::optional<int64_t>(*def) : std::nullopt) != 0;
}
std::string LowerCtx::const_str(const Op& op, const std::string& key, std::optional<std::string> def) {
  if (!op.has(key)) { if (def) return *def; throw_op_error(op, "missing input '" + key + "'"); }
  const Tensor* t = const_value(op, key);
  if (!t || t->dtype() != DType::String || t->strings().size() != 1)
    throw_op_error(op, "input '" + key + "' must be a constant string to compile");
  return t->strings()[0];
}
std::vector<int64_t> LowerCtx::const_ints(const Op& op, const std::string& key,
                                          std::optional<std::vector<int64_t>> def) {
  if (!op.has(key)) { if (def) return *def; throw_op_error(op, "missing input '" + key + "'"); }
  const Tensor* t = const_value(op, key);
  if (!t) throw_op_error(op, "input '" + key + "' must be constant to compile");
  std::vector<int64_t> r;
  for (int64_t i = 0; i < t->numel(); ++i) r.push_back(int64_t(t->at(size_t(i))));
  return r;
}

}  // namespace rt

// ---------------------------------------------------------------- the plan

struct Plan::Impl {
  enum class Kind { Input, Const, Arena, Output };
  struct Val {
    std::string name;
    DType dtype;       // storage
    Shape shape;
    Kind kind = Kind::Arena;
    size_t offset = 0;  // Arena: in the arena
    int storage = -1;   // Const / Input / Output: index into `buffers`
  };
  Program program;                    // kept alive: literals back some constants
  std::vector<Val> vals;
  std::unordered_map<std::string, int> ids;
  std::vector<Tensor> buffers;        // constants, input and output storage
  std::vector<std::unique_ptr<rt::Step>> steps;
  std::vector<Port> inputs, outputs;
  std::vector<int> input_ids, output_ids;
  std::vector<uint8_t> arena;
  rt::Frame frame;
  size_t arena_bytes = 0, intermediate_bytes = 0;

  int add_val(const std::string& name, DType declared, Shape shape, Kind kind) {
    Val v{name, rt::storage_dtype(declared), std::move(shape), kind};
    vals.push_back(v);
    int id = int(vals.size()) - 1;
    if (!name.empty()) ids[name] = id;
    return id;
  }
  int add_const(const std::string& name, const Tensor& t) {
    int id = add_val(name, t.dtype(), t.shape(), Kind::Const);
    vals[size_t(id)].storage = int(buffers.size());
    buffers.push_back(t.cast(vals[size_t(id)].dtype));
    return id;
  }
};

namespace {

class Lowerer final : public rt::LowerCtx {
 public:
  explicit Lowerer(Plan::Impl& plan) : p_(plan) {}

  rt::ValueRef ref(int id) const {
    const auto& v = p_.vals[size_t(id)];
    return {id, v.dtype, v.shape};
  }
  rt::ValueRef of_arg(const Op& op, const Arg& a) {
    if (a.kind == Arg::Kind::Var) {
      auto it = p_.ids.find(a.var);
      if (it == p_.ids.end()) throw_op_error(op, "uses undefined value '" + a.var + "'");
      return ref(it->second);
    }
    if (a.kind == Arg::Kind::Const) {
      if (a.lit->value.dtype() == DType::String) throw_op_error(op, "a string cannot be a tensor operand");
      return ref(p_.add_const("", a.lit->value));
    }
    throw_op_error(op, "a tuple where one value is expected");
  }
  rt::ValueRef input(const Op& op, const std::string& key) override {
    const Arg* a = op.arg(key);
    if (!a) throw_op_error(op, "missing input '" + key + "'");
    return of_arg(op, *a);
  }
  std::vector<rt::ValueRef> tuple(const Op& op, const std::string& key) override {
    const Arg* a = op.arg(key);
    if (!a) throw_op_error(op, "missing input '" + key + "'");
    std::vector<rt::ValueRef> r;
    if (a->kind == Arg::Kind::Tuple) for (auto& e : a->elems) r.push_back(of_arg(op, e));
    else r.push_back(of_arg(op, *a));
    return r;
  }
  rt::ValueRef output(const Op& op, size_t k) override { return ref(p_.ids.at(op.outputs.at(k).name)); }
  const Tensor* const_value(const Op& op, const std::string& key) override {
    const Arg* a = op.arg(key);
    if (!a) return nullptr;
    if (a->kind == Arg::Kind::Const) return a->lit->value.empty() ? nullptr : &a->lit->value;
    if (a->kind == Arg::Kind::Var) {
      auto it = const_ops_.find(a->var);
      if (it != const_ops_.end()) return it->second;
    }
    return nullptr;
  }
  void note_const_op(const std::string& name, const Tensor* t) { const_ops_[name] = t; }

 private:
  Plan::Impl& p_;
  std::unordered_map<std::string, const Tensor*> const_ops_;
};

void check_static(const Op& op, const Output& o) {
  if (o.type.has_unknown_dims())
    throw_op_error(op, "output '" + o.name + "' has unknown dims " + shape_str(o.type.shape) +
                           " (give input shapes with CompileOptions::input_shapes)");
}
}  // namespace

Plan::Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;
Plan::~Plan() = default;

const std::vector<Plan::Port>& Plan::inputs() const { return impl_->inputs; }
const std::vector<Plan::Port>& Plan::outputs() const { return impl_->outputs; }
size_t Plan::arena_bytes() const { return impl_->arena_bytes; }
size_t Plan::intermediate_bytes() const { return impl_->intermediate_bytes; }
std::vector<Plan::StepInfo> Plan::steps() const {
  std::vector<StepInfo> r;
  for (auto& s : impl_->steps) r.push_back(s->info);
  return r;
}

Plan compile(const Program& program, const CompileOptions& options) {
  Plan plan;
  plan.impl_ = std::make_unique<Plan::Impl>();
  Plan::Impl& P = *plan.impl_;
  P.program = program;
  Function* fn = P.program.function(options.function);
  if (!fn) throw Error("error: no function '" + options.function + "' to compile");
  // Specialize flexible input shapes; inference then recomputes downstream shapes.
  for (auto& prm : fn->params) {
    auto it = options.input_shapes.find(prm.name);
    if (it == options.input_shapes.end()) continue;
    if (it->second.size() != prm.type.shape.size())
      throw Error("error: input '" + prm.name + "': shape " + shape_str(it->second) + " has the wrong rank for " +
                  prm.type.str());
    for (size_t i = 0; i < it->second.size(); ++i)
      if (prm.type.shape[i] >= 0 && prm.type.shape[i] != it->second[i])
        throw Error("error: input '" + prm.name + "': shape " + shape_str(it->second) + " contradicts " +
                    prm.type.str());
    prm.type.shape = it->second;
  }
  run_passes(P.program, options.passes);
  fn = P.program.function(options.function);

  for (auto& prm : fn->params) {
    if (prm.type.kind != Type::Kind::Tensor) throw Error("error: input '" + prm.name + "': only tensor inputs compile");
    if (prm.type.has_unknown_dims())
      throw Error("error: input '" + prm.name + "' has unknown dims " + shape_str(prm.type.shape) +
                  ": give its shape (CompileOptions::input_shapes, or `--input` for the CLI)");
    int id = P.add_val(prm.name, prm.type.dtype, prm.type.shape, Plan::Impl::Kind::Input);
    P.vals[size_t(id)].storage = int(P.buffers.size());
    P.buffers.emplace_back(P.vals[size_t(id)].dtype, prm.type.shape);
    P.inputs.push_back({prm.name, prm.type.dtype, prm.type.shape});
    P.input_ids.push_back(id);
  }
  std::map<std::string, bool> is_output;
  for (auto& o : fn->outputs) is_output[o] = true;

  Lowerer lower(P);
  for (auto& op : fn->ops) {
    if (op.type == "const") {
      const Arg* val = op.arg("val");
      if (!val || val->kind != Arg::Kind::Const) throw_op_error(op, "const without a literal 'val'");
      lower.note_const_op(op.outputs[0].name, &val->lit->value);
      if (val->lit->value.dtype() == DType::String) continue;  // parameters only, never data
      P.add_const(op.outputs[0].name, val->lit->value);
      continue;
    }
    for (auto& o : op.outputs) {
      check_static(op, o);
      P.add_val(o.name, o.type.dtype, o.type.shape,
                is_output.count(o.name) ? Plan::Impl::Kind::Output : Plan::Impl::Kind::Arena);
    }
    rt::LowerFn fn_lower = rt::find_lowering(op.type);
    if (!fn_lower)
      throw_op_error(op, "no compiled kernel for '" + op.type + "' yet (run it with --engine reference)");
    P.steps.push_back(fn_lower(op, lower));
  }

  // Outputs get their own storage; arena values their planned offsets.
  for (auto& name : fn->outputs) {
    auto it = P.ids.find(name);
    if (it == P.ids.end()) throw Error("error: output '" + name + "' is not computed by the plan");
    const Param* prm = fn->param(name);
    DType declared = prm ? prm->type.dtype : DType::FP32;
    for (auto& op : fn->ops)
      for (auto& o : op.outputs)
        if (o.name == name) declared = o.type.dtype;
    auto& v = P.vals[size_t(it->second)];
    if (v.kind == Plan::Impl::Kind::Output && v.storage < 0) {
      v.storage = int(P.buffers.size());
      P.buffers.emplace_back(v.dtype, v.shape);
    }
    P.outputs.push_back({name, declared, v.shape});
    P.output_ids.push_back(it->second);
  }
  // plan_memory sizes values by their dtype: give it the storage dtypes.
  Function sized = *fn;
  for (auto& op : sized.ops)
    for (auto& o : op.outputs)
      if (o.type.is_tensor() && o.type.dtype != DType::String) o.type.dtype = rt::storage_dtype(o.type.dtype);
  MemoryPlan mp = plan_memory(sized, 64);
  P.arena_bytes = mp.arena_bytes;
  P.intermediate_bytes = mp.total_bytes;
  P.arena.assign(mp.arena_bytes + 64, 0);
  uint8_t* base = P.arena.data() + (64 - reinterpret_cast<uintptr_t>(P.arena.data()) % 64) % 64;
  P.frame.ptr.assign(P.vals.size(), nullptr);
  for (size_t i = 0; i < P.vals.size(); ++i) {
    auto& v = P.vals[i];
    if (v.kind == Plan::Impl::Kind::Arena) {
      const BufferSlot* s = mp.find(v.name);
      if (!s) throw Error("internal: value '" + v.name + "' missing from the memory plan");
      P.frame.ptr[i] = base + s->offset;
    } else if (v.kind == Plan::Impl::Kind::Const) {
      // Steps never write constants, which may be read-only mapped weights.
      P.frame.ptr[i] = const_cast<void*>(P.buffers[size_t(v.storage)].data());
    } else {
      P.frame.ptr[i] = P.buffers[size_t(v.storage)].mutable_data();
    }
  }
  return plan;
}

TensorMap Plan::run(const TensorMap& in) {
  Impl& P = *impl_;
  for (auto& [name, t] : in) {
    bool known = false;
    for (auto& port : P.inputs) known |= port.name == name;
    if (!known) throw Error("error: the plan has no input '" + name + "'");
  }
  for (size_t i = 0; i < P.inputs.size(); ++i) {
    const Port& port = P.inputs[i];
    auto it = in.find(port.name);
    if (it == in.end()) throw Error("error: missing input '" + port.name + "'");
    if (it->second.shape() != port.shape)
      throw Error("error: input '" + port.name + "' has shape " + shape_str(it->second.shape()) +
                  " but the plan was compiled for " + shape_str(port.shape));
    Tensor& dst = P.buffers[size_t(P.vals[size_t(P.input_ids[i])].storage)];
    if (it->second.dtype() == dst.dtype()) {
      if (dst.nbytes()) std::memcpy(dst.mutable_data(), it->second.data(), dst.nbytes());
    } else {
      for (int64_t k = 0; k < dst.numel(); ++k) dst.set(size_t(k), it->second.at(size_t(k)));
    }
  }
  for (auto& s : P.steps) s->run(P.frame);
  TensorMap out;
  for (size_t i = 0; i < P.outputs.size(); ++i) {
    const auto& v = P.vals[size_t(P.output_ids[i])];
    Tensor view(v.dtype, v.shape);
    if (view.nbytes()) std::memcpy(view.mutable_data(), P.frame.ptr[size_t(P.output_ids[i])], view.nbytes());
    out[P.outputs[i].name] = view.cast(P.outputs[i].dtype);
  }
  return out;
}

}  // namespace milrt
