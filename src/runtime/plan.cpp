// compile(): passes, lowering of every op to a Step, memory planning; and
// Plan::run(): bind addresses, convert inputs, run the steps, convert outputs.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>

#include "ir/control_flow.h"
#include "ir/verifier.h"
#include "milrt/mil.h"
#include "milrt/passes.h"
#include "milrt/plan.h"
#include "passes/rewriter.h"
#include "runtime/accumulate_outputs.h"
#include "runtime/bf16_operands.h"
#include "runtime/buffer_analysis.h"
#include "runtime/lowering.h"
#include "runtime/memory_plan.h"
#include "runtime/numerics.h"
#include "runtime/views.h"
#include "kernels/convert_rows.h"
#include "kernels/generic/copy.h"
#include "kernels/generic/round_f16.h"
#include "runtime/gemm_tuning.h"

namespace milrt {

using rt::contains;
using rt::in_place_inputs;
using rt::is_state_param;
using rt::value_types;

// ---------------------------------------------------------------- the plan

struct Plan::Impl {
  // Input / Output: run()'s ports; State: persistent plan-owned buffers;
  // Alias: a value computed in (or read from) a State's buffer, see `alias`.
  // View: another name for its root's bytes (a reshape, a no-op cast), see
  // runtime/views.h; `alias` is the root.
  enum class Kind { Input, Const, Arena, Output, State, Alias, View };
  struct Val {
    std::string name;
    DType dtype;       // storage
    Shape shape;
    Kind kind = Kind::Arena;
    size_t offset = 0;  // Arena: in the arena
    int storage = -1;   // Const / Input / Output / State: index into `buffers`
    int alias = -1;     // Alias: the State value whose buffer this value uses
    size_t bytes() const { return size_t(shape_numel(shape)) * dtype_size(dtype); }
  };
  // An aliased output computed outside its state buffer, copied in after the steps.
  struct WriteBack {
    int src, state;
  };
  Program program;                    // kept alive: literals back some constants
  std::vector<Val> vals;
  std::unordered_map<std::string, int> ids;
  std::vector<Tensor> buffers;        // constants, input, output and state storage
  std::vector<std::unique_ptr<rt::Step>> steps;
  // Per output: the last step that reads or writes its memory (-1: none).
  std::vector<int> output_last_step;
  std::vector<Port> inputs, outputs, states;
  std::vector<int> input_ids, output_ids, state_ids;
  // CompileOptions::stable_inputs: per input, and the counter steps compare
  // their packed copies against (changed by bind, run(inputs), inputs_changed).
  std::vector<bool> input_stable;
  uint64_t stable_generation = 1;
  std::vector<void*> input_bound, output_bound;   // zero-copy bindings (nullptr: none)
  // CompileOptions::numerics fp16: fp16 values rounded, fp16 binds converted
  // at the edge. The dtype of each binding's memory.
  bool fp16 = false;
  std::vector<DType> input_bound_dtype, output_bound_dtype;
  // An fp16 input under numerics fp16 is read through its plan buffer
  // (widened from fp16 memory, or rounded from fp32 memory) by run().
  bool input_via_buffer(size_t i) const { return fp16 && inputs[i].dtype == DType::FP16; }
  bool output_via_buffer(size_t i) const { return output_bound_dtype[i] != vals[size_t(output_ids[i])].dtype; }
  std::vector<WriteBack> write_backs;
  // CompileOptions::accumulate_outputs whose add could not run in place: the
  // output memory's old contents, copied into the accumulator's own buffer
  // before the steps. {output value, accumulator value}.
  std::vector<std::pair<int, int>> accumulator_copies;
  std::vector<int> view_ids;
  std::vector<uint8_t> arena;
  rt::Frame frame;
  size_t arena_bytes = 0, intermediate_bytes = 0;
  std::atomic<bool> cancelled{false};  // Plan::cancel()
  // Taps (Plan::tap): a tap that is also an input or output may live in caller
  // memory, so it is copied into its `tap_copies` buffer after each run; the
  // others stay in plan memory that only the next run writes.
  std::vector<Port> taps;
  std::vector<int> tap_ids;
  std::vector<Tensor> tap_copies;     // empty for taps read in place
  bool taps_valid = false;            // a run has completed since compile
  void capture_taps() {
    for (size_t i = 0; i < taps.size(); ++i)
      if (!tap_copies[i].empty() && tap_copies[i].nbytes())
        std::memcpy(tap_copies[i].mutable_data(), frame.ptr[size_t(tap_ids[i])], tap_copies[i].nbytes());
    taps_valid = true;
  }

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
  // A `const` op's value gets its storage-dtype buffer only once a step reads
  // it through the frame (need()): a weight that lowerings read at compile
  // time from its literal (packed, or kept int8/bf16) has no fp32 copy here.
  std::unordered_map<int, const Tensor*> deferred;
  int add_deferred_const(const std::string& name, const Tensor* t) {
    int id = add_val(name, t->dtype(), t->shape(), Kind::Const);
    vals[size_t(id)].storage = int(buffers.size());
    buffers.emplace_back();
    deferred[id] = t;
    return id;
  }
  void need(int id) {
    for (; id >= 0; id = vals[size_t(id)].kind == Kind::View ? vals[size_t(id)].alias : -1) {
      auto it = deferred.find(id);
      if (it == deferred.end()) continue;
      buffers[size_t(vals[size_t(id)].storage)] = it->second->cast(vals[size_t(id)].dtype);
      deferred.erase(it);
    }
  }
  // Input buffers are allocated on first use by run(inputs): a plan whose
  // inputs are all bound (weights bound zero-copy) never holds a copy.
  int add_owned(const std::string& name, DType declared, const Shape& shape, Kind kind) {
    int id = add_val(name, declared, shape, kind);
    vals[size_t(id)].storage = int(buffers.size());
    if (kind == Kind::Input) buffers.emplace_back();
    else buffers.emplace_back(vals[size_t(id)].dtype, shape);
    return id;
  }
  void* owned(int id) {
    Tensor& b = buffers[size_t(vals[size_t(id)].storage)];
    if (vals[size_t(id)].kind == Kind::Input && !b.data()) b = Tensor(vals[size_t(id)].dtype, vals[size_t(id)].shape);
    return b.mutable_data();
  }
  // An unbound input's plan buffer if allocated, else null (run() refuses unbound inputs).
  void* owned_if_allocated(int id) {
    Tensor& b = buffers[size_t(vals[size_t(id)].storage)];
    return b.data() ? b.mutable_data() : nullptr;
  }

  // Frame pointers of inputs and outputs: bound caller memory, or plan memory.
  void set_io_pointers(bool use_bindings) {
    for (size_t i = 0; i < input_ids.size(); ++i)
      frame.ptr[size_t(input_ids[i])] = !use_bindings || (input_bound[i] && input_via_buffer(i)) ? owned(input_ids[i])
                                        : input_bound[i]                                    ? input_bound[i]
                                                                                            : owned_if_allocated(input_ids[i]);
    for (size_t i = 0; i < output_ids.size(); ++i)
      if (vals[size_t(output_ids[i])].kind == Kind::Output) frame.ptr[size_t(output_ids[i])] = owned(output_ids[i]);
    for (size_t i = 0; i < output_ids.size(); ++i) {
      const int root = memory_root(output_ids[i]);
      if (root != output_ids[i] && vals[size_t(root)].kind == Kind::Output) frame.ptr[size_t(root)] = owned(root);
    }
    // An output computed by its op straight into caller memory; when two
    // ports name one value, the first bound one gets it and the other a copy.
    if (use_bindings)
      for (size_t i = 0; i < output_ids.size(); ++i) {
        int id = output_ids[i];
        if (!output_bound[i] || vals[size_t(id)].kind != Kind::Output || output_via_buffer(i)) continue;
        bool taken = false;
        for (size_t j = 0; j < i; ++j) taken |= output_ids[j] == id && output_bound[j];
        if (!taken) frame.ptr[size_t(id)] = output_bound[i];
      }
    // An output that is a view (a reshape) of a value computed in plan
    // memory, as a weight's gradient often is: that value is computed
    // straight into the caller's memory instead, so nothing is copied at the
    // end (and Plan::set_step_hook can report it as soon as it is final).
    if (use_bindings)
      for (size_t i = 0; i < output_ids.size(); ++i) {
        const int root = memory_root(output_ids[i]);
        if (root == output_ids[i] || !output_bound[i] || output_via_buffer(i) || vals[size_t(root)].kind != Kind::Output) continue;
        if (frame.ptr[size_t(root)] == owned(root)) frame.ptr[size_t(root)] = output_bound[i];  // not bound by another port
      }
    for (int id : view_ids) frame.ptr[size_t(id)] = frame.ptr[size_t(vals[size_t(id)].alias)];
  }
  // The value whose memory a view or state alias (of a view ...) uses; the
  // value itself otherwise.
  int memory_root(int id) const {
    while ((vals[size_t(id)].kind == Kind::View || vals[size_t(id)].kind == Kind::Alias) && vals[size_t(id)].alias >= 0)
      id = vals[size_t(id)].alias;
    return id;
  }

  // Plan::set_step_hook: after each step, the outputs whose bound memory
  // holds its final value from then on. An output computed straight into its
  // bound memory is due after the last step that reads or writes that memory
  // (output_last_step); any other (unbound, converted or copied at the end)
  // when run() ends. `due` is rebuilt per run (bindings change) into reused
  // memory, and sorted without allocating (std::sort, not stable_sort: the
  // pairs are distinct, ties broken by output index).
  StepHook step_hook;
  std::vector<std::pair<int, size_t>> due;  // {step, output index}, by step
  size_t due_next = 0;
  void plan_due() {
    due.clear(), due_next = 0;
    for (size_t i = 0; i < output_ids.size(); ++i) {
      const int id = output_ids[i];
      const bool in_place = output_bound[i] && frame.ptr[size_t(id)] == output_bound[i];
      due.push_back({in_place ? output_last_step[i] : -1, i});
      if (due.back().first < 0) due.back().first = int(steps.size());
    }
    std::ranges::sort(due);
  }
  // Calls the hook with the outputs due by step `i` (steps.size(): the end).
  void fire_hook(size_t i) {
    size_t first = due_next;
    while (due_next < due.size() && size_t(due[due_next].first) <= i) ++due_next;
    due_ready.clear();
    for (size_t k = first; k < due_next; ++k) due_ready.push_back(due[k].second);
    step_hook(std::span<const size_t>(due_ready));
  }
  std::vector<size_t> due_ready;

  // Ends the run if cancel() was called (since the last cancelled run).
  void check_cancelled() {
    if (cancelled.load(std::memory_order_relaxed) && cancelled.exchange(false)) throw Error("error: cancelled");
  }
  // Profiling (Plan::set_profiling): per step, calls, total ns and a
  // reservoir of samples for the median; trace events while `tracing`.
  struct StepTimes {
    int64_t calls = 0, total_ns = 0;
    std::vector<int64_t> samples;  // the first kMedianSamples, then a uniform reservoir
  };
  bool profiling = false, tracing = false;
  std::vector<StepTimes> times;
  int64_t profiled_runs = 0;
  std::vector<TraceEvent> events;
  int64_t dropped_events = 0;
  uint64_t reservoir_rng = 0x9E3779B97F4A7C15ull;

  void start_profiling(bool trace) {
    profiling = true;
    tracing = trace;
    if (times.size() != steps.size()) times.assign(steps.size(), {});
    for (auto& t : times) t.samples.reserve(kMedianSamples);
    if (tracing) events.reserve(std::min(kMaxTraceEvents, std::max<size_t>(events.capacity(), steps.size() * 256)));
  }
  void record(size_t i, int64_t start, int64_t dur, uint32_t thread) {
    StepTimes& t = times[i];
    ++t.calls;
    t.total_ns += dur;
    if (t.samples.size() < kMedianSamples) {
      t.samples.push_back(dur);
    } else {  // reservoir sampling (xorshift64): each call kept with probability kMedianSamples / calls
      reservoir_rng ^= reservoir_rng << 13, reservoir_rng ^= reservoir_rng >> 7, reservoir_rng ^= reservoir_rng << 17;
      const uint64_t j = reservoir_rng % uint64_t(t.calls);
      if (j < kMedianSamples) t.samples[size_t(j)] = dur;
    }
    if (tracing) {
      if (events.size() < kMaxTraceEvents) events.push_back({int32_t(i), thread, start, dur});
      else ++dropped_events;
    }
  }
  // `hooked`: this run calls step_hook (Plan::run() with a hook set).
  void run_steps_profiled(bool hooked) {
    using Clock = std::chrono::steady_clock;
    const uint32_t thread = Plan::trace_thread_id();
    ++profiled_runs;
    for (size_t i = 0; i < steps.size(); ++i) {
      check_cancelled();
      const auto t0 = Clock::now();
      steps[i]->run(frame);
      const auto t1 = Clock::now();
      record(i, std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count(),
             std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(), thread);
      if (hooked) fire_hook(i);
    }
  }
  void run_steps(bool hooked = false) {
    taps_valid = false;
    for (auto [sum, acc] : accumulator_copies) std::memcpy(frame.ptr[size_t(acc)], frame.ptr[size_t(sum)], vals[size_t(acc)].bytes());
    if (profiling) [[unlikely]] {
      run_steps_profiled(hooked);
    } else {
      for (size_t i = 0; i < steps.size(); ++i) {
        check_cancelled();
        steps[i]->run(frame);
        if (hooked) [[unlikely]] fire_hook(i);
      }
    }
    check_cancelled();
    for (auto& w : write_backs) {
      void* src = frame.ptr[size_t(w.src)];
      void* dst = frame.ptr[size_t(w.state)];
      if (src != dst) std::memcpy(dst, src, vals[size_t(w.state)].bytes());
    }
    if (!taps.empty()) capture_taps();
  }
};

namespace {

// ---- conversions at the plan's edges

// n elements from dtype `from` to `to`, rounding as a cast does.
void convert(const void* src, DType from, int64_t n, void* dst, DType to) {
  if (n <= 0) return;
  if (from == DType::FP16 && to == DType::FP32)
    return kernels::f16_to_f32_row(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  if (from == DType::FP32 && to == DType::FP16)
    return kernels::f32_to_f16_row(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  kernels::convert(src, from, n, dst, to);  // memcpy when equal, else per element
}

// A plan value (storage dtype) as a tensor of its declared dtype.
Tensor export_value(const void* data, DType storage, const Shape& shape, DType declared) {
  Tensor t(declared, shape);
  convert(data, storage, t.numel(), t.mutable_data(), declared);
  return t;
}

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
      p_.need(it->second);
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
  bool stable_input(int id) const override {
    while (p_.vals[size_t(id)].kind == Plan::Impl::Kind::View) id = p_.vals[size_t(id)].alias;
    for (size_t i = 0; i < p_.input_ids.size(); ++i)
      if (p_.input_ids[i] == id) return p_.input_stable[i];
    return false;
  }

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

namespace {
// ---- the memory limit (CompileOptions::max_memory)

// Bytes of `n` elements of a value of declared dtype `d` as a plan stores it;
// in double, so that absurd shapes cannot overflow.
double stored_bytes(const Type& t) {
  if (!t.is_tensor() || t.dtype == DType::String || t.has_unknown_dims()) return 0;
  double n = 1;
  for (int64_t d : t.shape) n *= double(d);
  return n * double(dtype_size(rt::storage_dtype(t.dtype)));
}

std::string human_bytes(double b) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) { b /= 1024; ++u; }
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string limit_str(size_t limit) {
  return std::to_string(limit) + " bytes (" + human_bytes(double(limit)) +
         "; CompileOptions::max_memory, milrt --max-memory)";
}

// Before the passes: no single value may exceed the limit (constant folding
// would materialize it; a flexible input's given shape could ask for it).
void check_value_sizes(const Function& f, size_t limit) {
  auto check = [&](const std::string& name, const Type& t, const Op* op) {
    double b = stored_bytes(t);
    if (b <= double(limit)) return;
    std::string msg = "value '" + name + "' " + t.str() + " needs " + human_bytes(b) +
                      ", more than the memory limit of " + limit_str(limit);
    if (op) throw_op_error(*op, msg);
    throw Error("error: " + msg);
  };
  for (auto& prm : f.params) check(prm.name, is_state_param(prm) ? prm.type.elems[0] : prm.type, nullptr);
  for (auto& op : f.ops)
    for (auto& o : op.outputs) check(o.name, o.type, &op);
}

// CompileOptions::taps checked against the function as written: the names,
// without repeats, of values that can be read back after a run.
std::vector<std::string> tap_names(const Function& f, const CompileOptions& options) {
  std::vector<std::string> r;
  for (const std::string& name : options.taps) {
    const Type* type = nullptr;
    bool state = false;
    if (const Param* prm = f.param(name)) {
      type = &prm->type;
      state = is_state_param(*prm);
      for (auto& [out, in] : options.state_aliases) state |= in == name;
    }
    for (auto& op : f.ops)
      for (auto& o : op.outputs)
        if (o.name == name) type = &o.type;
    const std::string what = "cannot tap '" + name + "' in function '" + f.name + "': ";
    if (!type) throw Error("error: " + what + "no value of that name");
    if (state) throw Error("error: " + what + "it is a state of the plan (read it with Plan::state)");
    if (!type->is_tensor() || type->dtype == DType::String)
      throw Error("error: " + what + "only tensors can be tapped, not " + type->str());
    if (!contains(r, name)) r.push_back(name);
  }
  return r;
}

double literal_bytes(const Arg& a) {
  double b = a.kind == Arg::Kind::Const && a.lit->value.dtype() != DType::String ? double(a.lit->value.nbytes()) : 0;
  for (auto& e : a.elems) b += literal_bytes(e);
  return b;
}
}  // namespace

void check_taps(const Function& f, const CompileOptions& options) { tap_names(f, options); }

size_t default_max_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return size_t(1) << 34;  // unknown: 16 GiB
  return size_t(pages) / 4 * 3 * size_t(page);
}

void Plan::cancel() {
  if (impl_) impl_->cancelled.store(true);
}

Plan::Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;
Plan::~Plan() = default;

const std::vector<Plan::Port>& Plan::inputs() const { return impl_->inputs; }
const std::vector<Plan::Port>& Plan::outputs() const { return impl_->outputs; }
const std::vector<Plan::Port>& Plan::states() const { return impl_->states; }
const std::vector<Plan::Port>& Plan::taps() const { return impl_->taps; }
size_t Plan::arena_bytes() const { return impl_->arena_bytes; }
size_t Plan::intermediate_bytes() const { return impl_->intermediate_bytes; }
std::vector<Plan::StepInfo> Plan::steps() const {
  std::vector<StepInfo> r;
  for (auto& s : impl_->steps) r.push_back(s->info);
  return r;
}
DType Plan::storage_dtype(DType d) { return rt::storage_dtype(d); }
std::vector<DType> Plan::bind_dtypes(DType d) const {
  std::vector<DType> r{rt::storage_dtype(d)};
  if (impl_->fp16 && d == DType::FP16) r.push_back(DType::FP16);
  return r;
}
CompileOptions::Numerics Plan::numerics() const {
  return impl_->fp16 ? CompileOptions::Numerics::fp16 : CompileOptions::Numerics::fp32;
}

void Plan::set_profiling(bool on, bool trace) {
  if (on) impl_->start_profiling(trace);
  else impl_->profiling = impl_->tracing = false;
}
bool Plan::profiling() const { return impl_->profiling; }

Plan::Profile Plan::profile() const {
  const Impl& P = *impl_;
  Profile r;
  r.runs = P.profiled_runs;
  r.events = P.events;
  r.dropped_events = P.dropped_events;
  if (P.times.size() != P.steps.size()) return r;
  for (size_t i = 0; i < P.steps.size(); ++i) {
    const auto& t = P.times[i];
    const StepInfo& info = P.steps[i]->info;
    StepProfile s{info.kernel, info.ops, t.calls, double(t.total_ns) * 1e-6, 0, info.flops, info.bytes};
    if (!t.samples.empty()) {
      std::vector<int64_t> v = t.samples;
      std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
      s.median_ms = double(v[v.size() / 2]) * 1e-6;
    }
    r.steps.push_back(std::move(s));
  }
  return r;
}

void Plan::reset_profile() {
  Impl& P = *impl_;
  for (auto& t : P.times) t.calls = t.total_ns = 0, t.samples.clear();
  P.profiled_runs = 0;
  P.events.clear();
  P.dropped_events = 0;
}

uint32_t Plan::trace_thread_id() {
  static std::atomic<uint32_t> next{1};
  thread_local const uint32_t id = next.fetch_add(1);
  return id;
}

static rt::TuneMode gemm_tune_mode(CompileOptions::Tune t) {
  switch (t) {
    case CompileOptions::Tune::off: return rt::TuneMode::off;
    case CompileOptions::Tune::readonly: return rt::TuneMode::readonly;
    case CompileOptions::Tune::on: return rt::TuneMode::on;
    case CompileOptions::Tune::from_env: break;
  }
  return rt::tune_mode_from_env();
}

Plan compile(const Program& program, const CompileOptions& options) {
  using Kind = Plan::Impl::Kind;
  Plan plan;
  plan.impl_ = std::make_unique<Plan::Impl>();
  Plan::Impl& P = *plan.impl_;
  P.program = program;
  Function* fn = P.program.function(options.function);
  if (!fn) throw Error("error: no function '" + options.function + "' to compile");
  // Specialize flexible input shapes; inference then recomputes downstream shapes.
  if (!options.input_shapes.empty()) specialize_input_shapes(*fn, options.input_shapes);
  const size_t limit = options.max_memory ? options.max_memory : default_max_memory();
  check_value_sizes(*fn, limit);
  // Tapped results join the outputs, so that no pass fuses or removes them
  // (inputs always stay); the plan's declared outputs are the first n_outputs.
  const std::vector<std::string> taps = tap_names(*fn, options);
  const size_t n_outputs = fn->outputs.size();
  for (auto& name : taps)
    if (!fn->param(name) && !contains(fn->outputs, name)) fn->outputs.push_back(name);
  P.fp16 = options.numerics == CompileOptions::Numerics::fp16;
  if (P.fp16 && options.matmul_precision == CompileOptions::MatmulPrecision::bf16)
    throw Error("error: numerics fp16 and matmul precision bf16 cannot be combined (bf16 operands are not fp16 numerics)");
  for (const std::string& name : options.accumulate_outputs) {
    const std::string what = "error: accumulated output '" + name + "' ";
    if (P.fp16) throw Error(what + "cannot be combined with numerics fp16");
    if (options.state_aliases.count(name)) throw Error(what + "cannot also be a state alias");
    if (contains(taps, name)) throw Error(what + "cannot also be tapped");
  }
  const std::vector<rt::OutputAccumulator> accumulators = rt::add_output_accumulators(*fn, options.accumulate_outputs);
  run_passes(P.program, P.fp16 ? rt::passes_for_fp16(options.passes) : options.passes);
  fn = P.program.function(options.function);
  // An op with blocks reads the values its blocks capture: liveness, the
  // memory plan and its lowering see them as the op's input kCapturesKey.
  expose_captures(*fn);
  const auto types = value_types(*fn);
  auto is_output = [&](const std::string& v) { return contains(fn->outputs, v); };

  const rt::BufferDecisions decided = rt::decide_buffers(*fn, options.state_aliases, accumulators);
  const auto& [alias_of_input, accumulator_in_place, in_output, in_state, views, output_roots] = decided;
  // Values only bf16 products read, stored in bf16 by their producers.
  const std::set<std::string> bf16_values =
      options.matmul_precision == CompileOptions::MatmulPrecision::bf16 && options.bf16_operands
          ? rt::bf16_operand_values(*fn, decided)
          : std::set<std::string>{};


  // Parameters: run()'s inputs, or persistent states.
  for (auto& prm : fn->params) {
    if (auto acc = accumulator_in_place.find(prm.name); acc != accumulator_in_place.end()) {
      const int id = P.add_val(prm.name, prm.type.dtype, prm.type.shape, acc->second ? Kind::View : Kind::Output);
      if (acc->second) P.view_ids.push_back(id);  // its root, the output, is set once lowered
      else P.vals[size_t(id)].storage = int(P.buffers.size()), P.buffers.emplace_back(P.vals[size_t(id)].dtype, prm.type.shape);
      continue;
    }
    const bool state = is_state_param(prm) || alias_of_input.count(prm.name);
    const Type& ty = is_state_param(prm) ? prm.type.elems[0] : prm.type;
    const char* what = state ? "state" : "input";
    if (!ty.is_tensor()) throw Error(std::string("error: ") + what + " '" + prm.name + "': only tensors compile");
    if (ty.has_unknown_dims())
      throw Error(std::string("error: ") + what + " '" + prm.name + "' has unknown dims " + shape_str(ty.shape) +
                  ": give its shape (CompileOptions::input_shapes, or `--input` for the CLI)");
    int id = P.add_owned(prm.name, ty.dtype, ty.shape, state ? Kind::State : Kind::Input);
    (state ? P.states : P.inputs).push_back({prm.name, ty.dtype, ty.shape});
    (state ? P.state_ids : P.input_ids).push_back(id);
  }


  // The memory plan comes before lowering, so that the limit is checked
  // before any buffer is allocated.
  for (auto& op : fn->ops)
    if (op.type != "const")
      for (auto& o : op.outputs) check_static(op, o);
  // plan_memory sizes values by their dtype: give it the storage dtypes.
  // Views are gone from the function the memory plan sees: their uses read
  // the root, which keeps the root alive as long as they are.
  Function sized = rt::without_views(*fn, views);
  for (auto& op : sized.ops)
    for (auto& o : op.outputs)
      if (o.type.is_tensor() && o.type.dtype != DType::String)
        o.type.dtype = bf16_values.count(o.name) ? DType::BF16 : rt::storage_dtype(o.type.dtype);
  MemoryPlanOptions mo;
  mo.alignment = 64;
  mo.external = [&](const std::string& v) { return in_state.count(v) > 0 || in_output.count(v) > 0; };
  // A bf16 result never shares its input's (wider) buffer.
  mo.in_place = [&](const Op& op) {
    for (const auto& o : op.outputs)
      if (bf16_values.count(o.name)) return std::vector<std::string>{};
    return in_place_inputs(op, types);
  };
  MemoryPlan mp = plan_memory(sized, mo);
  {
    // What the plan would hold: constant weights as stored, the arena, and
    // the state, input and output buffers.
    double weights = 0, ports = 0, states = 0;
    for (auto& op : fn->ops)
      for (auto& in : op.inputs) weights += literal_bytes(in.arg);
    for (auto& prm : fn->params)
      (is_state_param(prm) || alias_of_input.count(prm.name) ? states : ports) +=
          stored_bytes(is_state_param(prm) ? prm.type.elems[0] : prm.type);
    for (auto& name : fn->outputs)
      if (auto t = types.find(name); t != types.end()) ports += stored_bytes(t->second);
    const double need = weights + double(mp.arena_bytes) + states + ports;
    if (need > double(limit))
      throw Error("error: the plan needs " + std::to_string(uint64_t(need)) + " bytes (" + human_bytes(need) +
                  ": weights " + human_bytes(weights) + ", arena " + human_bytes(double(mp.arena_bytes)) +
                  ", states " + human_bytes(states) + ", inputs and outputs " + human_bytes(ports) +
                  "), more than the memory limit of " + limit_str(limit));
  }

  // A value of the function in the plan, stored as bf16 where chosen above.
  auto add_val_stored = [&](const Output& o, Kind kind) {
    const int id = P.add_val(o.name, o.type.dtype, o.type.shape, kind);
    if (bf16_values.count(o.name)) P.vals[size_t(id)].dtype = DType::BF16;
    return id;
  };
  Lowerer lower(P);
  lower.bf16_matmuls = options.matmul_precision == CompileOptions::MatmulPrecision::bf16;
  lower.int8_activations = options.activation_precision == CompileOptions::ActivationPrecision::int8;
  lower.fp16_numerics = P.fp16;
  P.input_stable.assign(P.inputs.size(), false);
  for (const std::string& name : options.stable_inputs) {
    const auto it = std::find_if(P.inputs.begin(), P.inputs.end(), [&](const Plan::Port& port) { return port.name == name; });
    if (it == P.inputs.end())
      throw Error("error: stable input '" + name + "' is not an input of function '" + fn->name + "'");
    P.input_stable[size_t(it - P.inputs.begin())] = true;
  }
  lower.stable_generation = &P.stable_generation;
  rt::GemmTuner gemm_tuner(gemm_tune_mode(options.tune), options.deterministic);
  lower.gemm_tuner = &gemm_tuner;
  std::vector<std::pair<int, int>> touches;  // {value id, step} for every value a step reads or writes
  for (auto& op : fn->ops) {
    if (op.type == "const") {
      const Arg* val = op.arg("val");
      if (!val || val->kind != Arg::Kind::Const) throw_op_error(op, "const without a literal 'val'");
      lower.note_const_op(op.outputs[0].name, &val->lit->value);
      if (val->lit->value.dtype() == DType::String) continue;  // parameters only, never data
      P.add_deferred_const(op.outputs[0].name, &val->lit->value);
      continue;
    }
    for (auto& o : op.outputs) {
      check_static(op, o);
      if (!o.type.is_tensor()) throw_op_error(op, "output '" + o.name + "' is not a tensor: it cannot be compiled");
      if (in_output.count(o.name)) {
        P.view_ids.push_back(P.add_val(o.name, o.type.dtype, o.type.shape, Kind::View));  // of the sum, set below
      } else if (auto it = in_state.find(o.name); it != in_state.end()) {
        int id = P.add_val(o.name, o.type.dtype, o.type.shape, Kind::Alias);
        P.vals[size_t(id)].alias = P.ids.at(it->second);
      } else if (auto v = views.find(o.name); v != views.end()) {
        int id = add_val_stored(o, Kind::View);
        P.vals[size_t(id)].alias = P.ids.at(v->second);
        P.view_ids.push_back(id);
      } else if (is_output(o.name) || output_roots.count(o.name)) {
        P.add_owned(o.name, o.type.dtype, o.type.shape, Kind::Output);
      } else {
        add_val_stored(o, Kind::Arena);
      }
    }
    if (op.outputs.size() == 1 && views.count(op.outputs[0].name)) continue;
    if (!op.blocks.empty()) {
      P.steps.push_back(rt::lower_control_flow(op, lower, {P.program, *fn, types, options, &P.cancelled}));
    } else {
      rt::LowerFn fn_lower = rt::find_lowering(op.type);
      if (!fn_lower)
        throw_op_error(op, "no compiled kernel for '" + op.type + "' yet (run it with --engine reference)");
      P.steps.push_back(fn_lower(op, lower));
    }
    const int last = int(P.steps.size()) - 1;
    for (auto& o : op.outputs) touches.push_back({P.ids.at(o.name), last});
    for (auto& in : op.inputs)
      passes::for_each_var(in.arg, [&](const std::string& v) {
        if (auto it = P.ids.find(v); it != P.ids.end()) touches.push_back({it->second, last});
      });
    if (P.fp16) {
      std::vector<rt::ValueRef> outs;
      for (size_t k = 0; k < op.outputs.size(); ++k) outs.push_back(lower.output(op, k));
      P.steps.back() = rt::round_fp16_outputs(std::move(P.steps.back()), op, outs, types);
    }
    if (op.type == "read_state" && in_state.count(op.outputs[0].name)) {
      P.steps.back()->info.kernel = "read_state (in place)";  // `milrt inspect` shows the copy is gone
      P.steps.back()->info.bytes = 0;
    }
    if (op.type == "slice_update" && in_state.count(op.outputs[0].name)) {
      P.steps.back()->info.kernel = "slice_update (in place)";
      P.steps.back()->info.bytes /= 2;  // the slice only, as far as `milrt inspect` can tell
    }
    if (op.type == "coreml_update_state" && in_state.count(op.outputs[0].name)) {
      P.steps.back()->info.kernel = "coreml_update_state (result in place)";
      P.steps.back()->info.bytes /= 2;
    }
  }

  gemm_tuner.flush();  // once per compile: one write of the cache file
  for (const rt::OutputAccumulator& a : accumulators) {
    const int acc = P.ids.at(a.acc), sum = P.ids.at(a.sum);
    if (P.vals[size_t(sum)].kind != Kind::Output) throw Error("internal: accumulated output '" + a.port + "' is not computed in output memory");
    if (P.vals[size_t(acc)].kind == Kind::View) P.vals[size_t(acc)].alias = sum;
    else P.accumulator_copies.push_back({sum, acc});
  }
  for (const auto& [value, sum] : in_output) P.vals[size_t(P.ids.at(value))].alias = P.ids.at(sum);

  for (const std::string& name : std::span(fn->outputs).first(n_outputs)) {
    auto it = P.ids.find(name);
    if (it == P.ids.end()) throw Error("error: output '" + name + "' is not computed by the plan");
    const Type& ty = types.at(name);
    if (const Param* prm = fn->param(name); prm && is_state_param(*prm))
      throw Error("error: output '" + name + "' is a state: return read_state of it instead");
    std::string port = name;
    for (const rt::OutputAccumulator& a : accumulators)
      if (a.sum == name) port = a.port;
    P.outputs.push_back({port, ty.dtype, P.vals[size_t(it->second)].shape});
    P.output_ids.push_back(it->second);
  }
  for (const std::string& name : taps) {
    auto it = P.ids.find(name);
    if (it == P.ids.end()) throw Error("internal: tapped value '" + name + "' is not computed by the plan");
    const int id = it->second;
    const bool io = std::ranges::count(P.input_ids, id) || std::ranges::count(P.output_ids, id);
    P.taps.push_back({name, types.at(name).dtype, P.vals[size_t(id)].shape});
    P.tap_ids.push_back(id);
    P.tap_copies.push_back(io ? Tensor(P.vals[size_t(id)].dtype, P.vals[size_t(id)].shape) : Tensor());
    P.need(id);
  }
  for (auto& [in, out] : alias_of_input)
    if (!in_state.count(out)) P.write_backs.push_back({P.ids.at(out), P.ids.at(in)});
  for (int id : P.output_ids) P.need(id);
  for (auto& wb : P.write_backs) P.need(wb.src);
  P.input_bound.assign(P.inputs.size(), nullptr);
  P.output_bound.assign(P.outputs.size(), nullptr);
  P.input_bound_dtype.assign(P.inputs.size(), DType::FP32);
  P.output_bound_dtype.clear();
  for (int id : P.output_ids) P.output_bound_dtype.push_back(P.vals[size_t(id)].dtype);

  P.arena_bytes = mp.arena_bytes;
  P.intermediate_bytes = mp.total_bytes;
  P.arena.assign(mp.arena_bytes + 64, 0);
  uint8_t* base = P.arena.data() + (64 - reinterpret_cast<uintptr_t>(P.arena.data()) % 64) % 64;
  P.frame.ptr.assign(P.vals.size(), nullptr);
  for (size_t i = 0; i < P.vals.size(); ++i) {
    auto& v = P.vals[i];
    if (v.kind == Kind::Arena) {
      const BufferSlot* s = mp.find(v.name);
      if (!s) throw Error("internal: value '" + v.name + "' missing from the memory plan");
      P.frame.ptr[i] = base + s->offset;
    } else if (v.kind == Kind::Const) {
      // Steps never write constants, which may be read-only mapped weights.
      P.frame.ptr[i] = const_cast<void*>(P.buffers[size_t(v.storage)].data());
    } else if (v.kind != Kind::Alias && v.kind != Kind::View && v.kind != Kind::Input) {
      P.frame.ptr[i] = P.owned(int(i));  // inputs: set_io_pointers
    }
  }
  for (size_t i = 0; i < P.vals.size(); ++i)
    if (P.vals[i].kind == Kind::Alias) P.frame.ptr[i] = P.frame.ptr[size_t(P.vals[i].alias)];
  // After aliases: a view's root may itself live in a state's buffer.
  for (int id : P.view_ids) P.frame.ptr[size_t(id)] = P.frame.ptr[size_t(P.vals[size_t(id)].alias)];
  // For Plan::set_step_hook: the last step touching each output's memory,
  // through any value that aliases it.
  std::vector<int> last_touch(P.vals.size(), -1);
  for (auto [id, step] : touches) {
    int& t = last_touch[size_t(P.memory_root(id))];
    t = std::max(t, step);
  }
  // Copied after the steps (state write-backs, taps): read at the end.
  for (auto& wb : P.write_backs) last_touch[size_t(P.memory_root(wb.src))] = -1;
  for (int id : P.tap_ids) last_touch[size_t(P.memory_root(id))] = -1;
  for (int id : P.output_ids) P.output_last_step.push_back(last_touch[size_t(P.memory_root(id))]);
  if (options.profile || options.trace) plan.set_profiling(true, options.trace);
  return plan;
}

TensorMap Plan::run(const TensorMap& in) {
  Impl& P = *impl_;
  for (auto& [name, t] : in) {
    bool known = false;
    for (auto& port : P.inputs) known |= port.name == name;
    if (known) continue;
    for (auto& port : P.states)
      if (port.name == name) throw Error("error: '" + name + "' is a state of the plan, not an input (use set_state)");
    throw Error("error: the plan has no input '" + name + "'");
  }
  for (size_t i = 0; i < P.inputs.size(); ++i) {
    const Port& port = P.inputs[i];
    auto it = in.find(port.name);
    if (it == in.end()) throw Error("error: missing input '" + port.name + "'");
    if (it->second.shape() != port.shape)
      throw Error("error: input '" + port.name + "' has shape " + shape_str(it->second.shape()) +
                  " but the plan was compiled for " + shape_str(port.shape));
    if (it->second.dtype() == DType::String) throw Error("error: input '" + port.name + "' is a string tensor");
  }
  ++P.stable_generation;  // the inputs are copied into plan buffers: new values
  P.set_io_pointers(false);
  struct Restore {
    Impl& p;
    ~Restore() { p.set_io_pointers(true); }
  } restore{P};
  for (size_t i = 0; i < P.inputs.size(); ++i) {
    const Tensor& t = in.at(P.inputs[i].name);
    const auto& v = P.vals[size_t(P.input_ids[i])];
    void* dst = P.frame.ptr[size_t(P.input_ids[i])];
    convert(t.data(), t.dtype(), t.numel(), dst, v.dtype);
    if (P.input_via_buffer(i) && t.dtype() != DType::FP16) kernels::round_to_f16(static_cast<float*>(dst), t.numel());
  }
  P.run_steps();
  TensorMap out;
  for (size_t i = 0; i < P.outputs.size(); ++i) {
    const auto& v = P.vals[size_t(P.output_ids[i])];
    out[P.outputs[i].name] = export_value(P.frame.ptr[size_t(P.output_ids[i])], v.dtype, v.shape, P.outputs[i].dtype);
  }
  return out;
}

void Plan::bind(const std::string& name, void* data, DType dtype) {
  Impl& P = *impl_;
  auto check = [&](const char* what, const Port& port, int id) {
    DType want = P.vals[size_t(id)].dtype;
    const bool converted = P.fp16 && dtype == DType::FP16 && port.dtype == DType::FP16;
    if (data && dtype != want && !converted)
      throw Error(std::string("error: cannot bind ") + what + " '" + name + "' to " + std::string(dtype_name(dtype)) +
                  " memory: the plan stores it as " + std::string(dtype_name(want)) + " (declared " +
                  std::string(dtype_name(port.dtype)) + ")" +
                  (dtype == DType::FP16 && port.dtype == DType::FP16
                       ? "; fp16 memory binds to plans compiled with numerics fp16 (CompileOptions::numerics, "
                         "--numerics fp16)"
                       : ""));
    if (data && reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) != 0)
      throw Error(std::string("error: cannot bind ") + what + " '" + name + "': memory not aligned to " +
                  std::to_string(dtype_size(dtype)) + " bytes");
    return data ? dtype : want;
  };
  bool found = false;
  for (size_t i = 0; i < P.inputs.size(); ++i)
    if (P.inputs[i].name == name) {
      P.input_bound_dtype[i] = check("input", P.inputs[i], P.input_ids[i]);
      P.input_bound[i] = data;
      if (P.input_stable[i]) ++P.stable_generation;
      found = true;
    }
  for (size_t i = 0; i < P.outputs.size(); ++i)
    if (P.outputs[i].name == name && !found) {
      P.output_bound_dtype[i] = check("output", P.outputs[i], P.output_ids[i]);
      P.output_bound[i] = data;
      found = true;
    }
  if (!found) {
    for (auto& port : P.states)
      if (port.name == name) throw Error("error: cannot bind '" + name + "': it is a state of the plan (use set_state)");
    throw Error("error: cannot bind '" + name + "': the plan has no input or output of that name");
  }
  P.set_io_pointers(true);
}

void Plan::bind(const std::string& name, Tensor& t) {
  const Port* port = nullptr;
  for (auto& p : impl_->inputs) if (p.name == name) port = &p;
  for (auto& p : impl_->outputs) if (!port && p.name == name) port = &p;
  if (port && t.shape() != port->shape)
    throw Error("error: cannot bind '" + name + "': tensor of shape " + shape_str(t.shape()) + " for a port of shape " +
                shape_str(port->shape));
  // An empty port is never read or written, but a null pointer would unbind it.
  alignas(64) static uint8_t nothing[64];
  void* data = t.nbytes() ? t.mutable_data() : nothing;
  if (!data) throw Error("error: cannot bind '" + name + "': the tensor's memory is read-only");
  bind(name, data, t.dtype());
}

void Plan::bind_input(const std::string& name, const Tensor& t) {
  const Port* port = nullptr;
  for (auto& p : impl_->inputs) if (p.name == name) port = &p;
  if (!port) throw Error("error: cannot bind '" + name + "' read-only: the plan has no input of that name");
  if (t.shape() != port->shape)
    throw Error("error: cannot bind '" + name + "': tensor of shape " + shape_str(t.shape()) + " for a port of shape " +
                shape_str(port->shape));
  alignas(64) static const uint8_t nothing[64] = {};
  bind(name, const_cast<void*>(t.nbytes() ? t.data() : nothing), t.dtype());
}

void Plan::unbind(const std::string& name) { bind(name, nullptr, DType::FP32); }

void Plan::inputs_changed() { ++impl_->stable_generation; }

void Plan::run() {
  Impl& P = *impl_;
  for (size_t i = 0; i < P.inputs.size(); ++i)
    if (!P.input_bound[i]) throw Error("error: run() without inputs needs every input bound; '" + P.inputs[i].name +
                                       "' is not (bind it, or use run(inputs))");
  for (size_t i = 0; i < P.inputs.size(); ++i) {
    if (!P.input_via_buffer(i)) continue;
    const auto& v = P.vals[size_t(P.input_ids[i])];
    auto* dst = static_cast<float*>(P.frame.ptr[size_t(P.input_ids[i])]);
    const int64_t n = shape_numel(v.shape);
    if (P.input_bound_dtype[i] == DType::FP16) convert(P.input_bound[i], DType::FP16, n, dst, DType::FP32);
    else kernels::round_to_f16(static_cast<const float*>(P.input_bound[i]), dst, n);
  }
  const bool hooked = bool(P.step_hook);
  if (hooked) P.plan_due();
  P.run_steps(hooked);
  for (size_t i = 0; i < P.outputs.size(); ++i) {
    void* src = P.frame.ptr[size_t(P.output_ids[i])];
    const auto& v = P.vals[size_t(P.output_ids[i])];
    if (!P.output_bound[i] || src == P.output_bound[i]) continue;
    if (P.output_bound_dtype[i] == v.dtype) std::memcpy(P.output_bound[i], src, v.bytes());
    else convert(src, v.dtype, shape_numel(v.shape), P.output_bound[i], P.output_bound_dtype[i]);
  }
  if (hooked) P.fire_hook(P.steps.size());
}

void Plan::set_step_hook(StepHook hook) { impl_->step_hook = std::move(hook); }

namespace {
const Plan::Impl::Val& state_val(const Plan::Impl& P, const std::string& name) {
  for (size_t i = 0; i < P.states.size(); ++i)
    if (P.states[i].name == name) return P.vals[size_t(P.state_ids[i])];
  throw Error("error: the plan has no state '" + name + "'");
}
}  // namespace

Tensor Plan::state(const std::string& name) const {
  const Impl& P = *impl_;
  const auto& v = state_val(P, name);
  for (auto& port : P.states)
    if (port.name == name) return export_value(P.buffers[size_t(v.storage)].data(), v.dtype, v.shape, port.dtype);
  throw Error("internal: state '" + name + "' lost");
}

void Plan::set_state(const std::string& name, const Tensor& value) {
  Impl& P = *impl_;
  const auto& v = state_val(P, name);
  if (value.shape() != v.shape)
    throw Error("error: state '" + name + "' has shape " + shape_str(v.shape) + "; got a tensor of shape " +
                shape_str(value.shape()));
  if (value.dtype() == DType::String) throw Error("error: state '" + name + "' cannot be set from strings");
  void* dst = P.buffers[size_t(v.storage)].mutable_data();
  convert(value.data(), value.dtype(), value.numel(), dst, v.dtype);
  for (auto& port : P.states)
    if (P.fp16 && port.name == name && port.dtype == DType::FP16)
      kernels::round_to_f16(static_cast<float*>(dst), value.numel());
}

Tensor Plan::tap(const std::string& name) const {
  const Impl& P = *impl_;
  for (size_t i = 0; i < P.taps.size(); ++i) {
    if (P.taps[i].name != name) continue;
    if (!P.taps_valid) throw Error("error: tap '" + name + "' has no value: no run of the plan has completed");
    const auto& v = P.vals[size_t(P.tap_ids[i])];
    const void* data = P.tap_copies[i].empty() ? P.frame.ptr[size_t(P.tap_ids[i])] : P.tap_copies[i].data();
    return export_value(data, v.dtype, v.shape, P.taps[i].dtype);
  }
  throw Error("error: '" + name + "' is not tapped (CompileOptions::taps, milrt run --tap)");
}

void Plan::reset_state() {
  Impl& P = *impl_;
  for (int id : P.state_ids) {
    Tensor& b = P.buffers[size_t(P.vals[size_t(id)].storage)];
    if (b.nbytes()) std::memset(b.mutable_data(), 0, b.nbytes());
  }
}

}  // namespace milrt
