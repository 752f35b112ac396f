// Compiled plans: a MIL function turned once into a list of kernel steps over
// a planned arena, then run many times with no parsing, shape logic or
// allocation on the hot path.
//
//   milrt::Plan plan = milrt::compile(program);          // passes, lowering, memory plan
//   milrt::TensorMap out = plan.run({{"x", x}});          // convenience: allocates outputs
//
//   plan.bind("x", x_ptr); plan.bind("y", y_ptr);         // zero copy: caller memory
//   plan.run();                                           // no copies, no allocation
//
// Floating-point values are computed and stored in fp32 inside a plan, also
// for fp16 programs (more accurate than fp16 hardware, which rounds after
// every op); integers in int32, bools in one byte. Inputs are converted from
// their given dtype on the way in, outputs to their declared dtype on the way out.
// CompileOptions::numerics = fp16 rounds fp16 values as fp16 hardware does
// (see there): still computed and stored in fp32, but every value declared
// fp16 then holds an fp16 number.
//
// States. A plan owns one persistent buffer per state: each `state<tensor>`
// parameter of an iOS18 stateful function, and each input named by
// CompileOptions::state_aliases. States are zero after compile, survive runs,
// and are not inputs of run(): read them with state(), write them with
// set_state(), zero them with reset_state(). Like every plan value they are
// stored in fp32 for float dtypes, so an fp16 state keeps fp32 precision
// between runs (state() rounds to the declared dtype on the way out), unless
// numerics fp16 rounds it (set_state() and every update then store fp16 numbers).
//  - coreml_update_state copies its value into the buffer at its place in
//    the program, so later reads in the same run see it. The results of
//    read_state and coreml_update_state are the buffer itself, without a
//    copy, whenever they are consumed before the next update of that state
//    (else they are copies).
//  - A state alias {output -> input} writes the output's value into the
//    input's state buffer in every run: computed directly into the buffer when
//    the input is not read after the output's op starts (the op itself may
//    read it when it runs elementwise in place), else copied at the end of
//    the run. The output stays an output of run().
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "milrt/ir.h"
#include "milrt/reference.h"

namespace milrt {

struct CompileOptions {
  std::string function = "main";
  // Pass pipeline run before lowering (names as in `milrt opt --list`).
  std::vector<std::string> passes = {"legalize-layout-idioms", "fuse-quantized-weights", "fold-constexpr", "fuse-conv-chain",
                                     "canonicalize", "decompose", "sink-reshapes", "cse", "dce", "fold-scatter-add",
                                     "fuse-attention", "fuse-norms", "fuse-gemm-epilogue", "fuse-conv-epilogue", "fuse-elementwise",
                                     "dce", "schedule"};
  // Shapes for inputs with '?' dims (flexible-shape models): a plan is for static shapes.
  std::map<std::string, Shape> input_shapes;
  // In-place accumulation (training steps, KV caches): {output name -> input
  // name}; the input becomes a plan state that each run updates with the
  // output's value (see States above). Same shape and dtype required.
  std::map<std::string, std::string> state_aliases;
  // Matrix products (matmul, linear, fused GEMMs; not conv yet): fp32 computes them
  // exactly in fp32; bf16 rounds both operands to bf16 and accumulates in fp32
  // (vdpbf16ps where the CPU has avx512_bf16: about twice the fp32 rate), the
  // usual mixed precision of training. Everything else stays fp32.
  enum class MatmulPrecision { fp32, bf16 };
  MatmulPrecision matmul_precision = MatmulPrecision::fp32;
  // With matmul_precision bf16: a value that only matrix products read (a
  // normed activation, a SwiGLU output, a head transpose, their gradients)
  // is stored in bf16 by the op that computes it, so every product reads it
  // without converting it again, in half the bytes. Results are bit-identical
  // to fp32 storage (the products rounded those operands to bf16 anyway);
  // false keeps every float value in fp32 (for comparisons).
  bool bf16_operands = true;
  // Matrix products with an int8 block-quantized constant weight (milrt_gemm
  // from fuse-quantized-weights: constexpr_blockwise_shift_scale int8 data
  // with per-block scales) that stream the weight, i.e. with at most 4 rows of
  // activations (token-by-token decoding): exact multiplies the fp32
  // activations by the int8 weights exactly; int8 first quantizes each row of
  // activations per weight block to int8 (symmetric, scale max|a| / 127,
  // rounded to nearest) and sums integer products, times the two blocks'
  // scales (llama.cpp's Q8_0 x Q8_0: vpdpbusd on avx512_vnni). Faster, and
  // not exact: each activation moves by up to half its block's step (see
  // kernels/weight_gemm.h). Products with more rows, and every other
  // product, are computed as with exact.
  enum class ActivationPrecision { exact, int8 };
  ActivationPrecision activation_precision = ActivationPrecision::exact;
  // How each GEMM's backend (milrt's own kernels or oneDNN) is chosen
  // (src/runtime/gemm_tuning.h): on times the candidates for each product
  // shape once and caches the winner per CPU model under the user's cache
  // directory; readonly uses cached winners only; off uses the fixed rule
  // (own kernels). from_env: MILRT_TUNE (unset: on). Plans tuned differently
  // agree to fp32 rounding, not bit for bit; a oneDNN step allocates a little
  // per run.
  enum class Tune { from_env, off, readonly, on };
  Tune tune = Tune::from_env;
  // Results bit-identical for any thread count (MILRT_THREADS,
  // kernels::set_num_threads): only kernels that guarantee it, so no oneDNN
  // GEMM (an error with MILRT_GEMM=onednn); tuning does not apply.
  bool deterministic = false;
  // fp16: every value declared fp16 is rounded to fp16 (to nearest even,
  // overflowing to inf past 65504) after the step that computes it, as the
  // reference executor and fp16 hardware round after every op; inputs and
  // states declared fp16 are rounded on the way in. Ops are still computed in
  // fp32 and values still stored as fp32 holding fp16 numbers, so memory
  // traffic is that of fp32 (not halved). Results are bit-identical to the
  // reference executor for the exactly rounded ops (add, sub, mul, real_div,
  // sqrt: fp32 has more than twice fp16's precision, so rounding through fp32
  // equals rounding once; and ops that select values: relu, maximum, select,
  // concat, transpose, ...), and within an fp16 ulp or two elsewhere
  // (transcendentals, reductions, GEMM and conv accumulate in fp32, not fp64).
  // To keep fp16 intermediates visible, the fusions whose kernels compute
  // several ops with fp32 intermediates are left out of `passes`
  // (fuse-attention, fuse-norms, fuse-gemm-epilogue, fuse-conv-epilogue,
  // fuse-conv-chain);
  // fused elementwise chains stay fused and round after each op. Ops the
  // pipeline itself splits round once more than the reference's single op:
  // linear / 1x1 conv with a bias (canonicalize: matmul, then add) and what
  // decompose expands (batch_norm, instance_norm, l2_norm, ...). Values of
  // other dtypes (bf16 included) are as with fp32. Cannot be combined with
  // matmul_precision bf16. Also lets bind() take fp16 memory (see there).
  enum class Numerics { fp32, fp16 };
  Numerics numerics = Numerics::fp32;
  // A while_loop running its body more often than this ends the run with an
  // Error naming the op (milrt/ir.h: kDefaultMaxLoopIterations). Each loop
  // counts its own iterations per run.
  int64_t max_loop_iterations = kDefaultMaxLoopIterations;
  // Memory limit in bytes (0: default_max_memory(), 3/4 of physical memory).
  // compile() adds up what the plan would hold (constant weights as stored,
  // the planned arena, state, input and output buffers) once shapes are
  // known (flexible inputs take their CompileOptions::input_shapes first),
  // and refuses a plan over the limit with an Error giving both figures,
  // before allocating any of it. A single value larger than the limit is
  // refused before the passes run (constant folding could materialize it).
  size_t max_memory = 0;
  // Per-step timing from the first run (Plan::set_profiling(true)); `trace`
  // also records one event per step per run (Plan::Profile::events).
  bool profile = false;
  bool trace = false;
  // Values to read back after each run with Plan::tap(), by MIL name in the
  // compiled function: any op result, constant or input, but not a state
  // (read those with Plan::state()) nor a string. Each tapped result becomes
  // an extra output of the function before the passes, so that it stays
  // computed and the memory plan keeps it alive: tapping may stop a fusion
  // (a tapped matmul result no longer fuses with its bias add and relu) and
  // so changes steps() and arena_bytes(), not what is computed (values and
  // outputs may differ in their last fp32 bits, as fused and unfused kernels
  // round differently). A tapped input costs nothing; a tapped constant
  // holds an fp32 copy where kernels read it packed or compressed. Without
  // taps the plan is exactly the untapped one. compile() throws an Error
  // naming the value and the function for a name it cannot tap.
  std::vector<std::string> taps;
  // Inputs whose values stay the same from run to run until the caller says
  // they changed: the weights of a training step between optimizer updates.
  // A GEMM whose B operand is one of them keeps B converted and packed in
  // its kernel's layout (bf16 pairs, oneDNN's blocked layout) across runs,
  // and packs it again only in the first run after Plan::inputs_changed(),
  // after the input is bound again, or in run(inputs), which always repacks.
  // Writing into a stable input's bound memory without calling
  // inputs_changed() leaves the plan computing with the values it packed
  // last. A name that is not an input of the function is an error.
  std::vector<std::string> stable_inputs;
  // Outputs that accumulate: each run adds the output's value to what its
  // memory holds (out += value) instead of overwriting it, the gradient
  // accumulation of a training step's micro-batches. Where the value is a
  // matrix product the sum is the GEMM's residual, computed in place (no
  // separate pass over memory); an elementwise value adds it in its loop.
  // The memory is the output's bound memory, or for run(inputs) and unbound
  // outputs the plan's own output buffer (zero after compile), which the
  // returned tensors copy. The caller zeroes bound memory to start a new
  // sum. Each name must be a distinct fp32 tensor output computed by an op
  // (an Error otherwise); it cannot also be a state alias or a tap, nor be
  // combined with numerics fp16.
  std::vector<std::string> accumulate_outputs;
};

// Throws the Error compile() throws when CompileOptions::taps names a value
// of `f` that cannot be tapped (for tools that read values another way).
void check_taps(const Function& f, const CompileOptions& options);

// 3/4 of the machine's physical memory (sysconf), the default memory limit.
size_t default_max_memory();

class Plan {
 public:
  struct Port {
    std::string name;
    DType dtype;   // declared
    Shape shape;
  };
  // One kernel step as `milrt inspect` shows it.
  struct StepInfo {
    std::string kernel;                // e.g. "binary:add", "matmul"
    std::vector<std::string> ops;      // the MIL ops (by output name) it implements
    double flops = 0, bytes = 0;
  };

  // Profiling (CompileOptions::profile, set_profiling): each step timed with
  // steady_clock around its kernel on the calling thread. Off, a run pays one
  // predictable branch; on, nothing is allocated per run (samples for the
  // medians go into buffers reserved when profiling starts: a bounded
  // reservoir per step once it holds kMedianSamples) except, when tracing,
  // the event list's amortized growth past 256 runs.
  struct StepProfile {
    std::string kernel;                // as StepInfo
    std::vector<std::string> ops;
    int64_t calls = 0;                 // runs since profiling started (or reset_profile)
    double total_ms = 0, median_ms = 0;
    double flops = 0, bytes = 0;       // per call, as StepInfo
  };
  // A step's run, for traces: start on steady_clock (ns since its epoch, so
  // events of several plans share one time line), on thread `thread` (a
  // small number per calling thread, 1 for the first thread that ran a step).
  struct TraceEvent {
    int32_t step;
    uint32_t thread;
    int64_t start_ns, dur_ns;
  };
  struct Profile {
    std::vector<StepProfile> steps;    // in plan order (empty when never profiled)
    int64_t runs = 0;
    std::vector<TraceEvent> events;    // with tracing on, at most kMaxTraceEvents
    int64_t dropped_events = 0;        // past that bound
  };
  static constexpr size_t kMedianSamples = 1024;
  static constexpr size_t kMaxTraceEvents = size_t(1) << 21;
  void set_profiling(bool on, bool trace = false);  // keeps what was recorded
  bool profiling() const;
  Profile profile() const;
  void reset_profile();                // zero calls, times and events
  // The number of the calling thread as TraceEvent::thread gives it.
  static uint32_t trace_thread_id();

  Plan();
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;
  ~Plan();

  const std::vector<Port>& inputs() const;    // what run() takes: states excluded
  const std::vector<Port>& outputs() const;
  const std::vector<Port>& states() const;
  const std::vector<Port>& taps() const;      // CompileOptions::taps, in that order
  std::vector<StepInfo> steps() const;
  size_t arena_bytes() const;          // planned intermediates
  size_t intermediate_bytes() const;   // what they would take without reuse

  // Runs the plan. Inputs are converted to the declared dtypes; a shape other
  // than the plan's is an error. Not thread-safe: one run at a time per plan.
  // Plan-owned buffers are used for every input and output; bindings are
  // ignored (and kept for the next run()).
  TensorMap run(const TensorMap& inputs);

  // Zero-copy bindings. `data` is caller memory for input or output `name`
  // in the plan's storage dtype (fp32 for float values, int32 for integers,
  // bool as one byte; see storage_dtype()) and the port's shape, element-aligned,
  // valid until unbound or rebound. A dtype other than the storage dtype, or an
  // unknown name, is an error; unbind() (or a nullptr) undoes a binding.
  // With CompileOptions::numerics fp16, a port declared fp16 also binds fp16
  // memory (bind_dtypes()): run() converts it at the edge, into or out of a
  // plan-owned fp32 buffer allocated at bind time (the caller copies nothing,
  // run() allocates nothing; the conversion is one F16C pass). An fp16 input
  // bound as fp32 is rounded into that buffer too, never read in place. bf16
  // memory is refused: a plan does not round bf16 values to bf16.
  // run() then reads bound inputs and writes bound outputs in place: no copy,
  // no allocation once kernels' per-thread scratch has grown on a first run
  // (outputs left unbound are computed into plan memory and not delivered). An output that is not computed by an op of its own (one that
  // the function returns twice, an input, or a state alias computed in its
  // state buffer) is copied into its bound memory at the end of run().
  void bind(const std::string& name, void* data, DType dtype);
  void bind(const std::string& name, float* data) { bind(name, data, DType::FP32); }
  void bind(const std::string& name, int32_t* data) { bind(name, data, DType::Int32); }
  void bind(const std::string& name, bool* data) { bind(name, data, DType::Bool); }
  void unbind(const std::string& name);
  // Binds a tensor's own (mutable) memory; its dtype and shape must match.
  void bind(const std::string& name, Tensor& t);
  // Binds an input to read-only memory (a memory-mapped or shared weight): a
  // plan never writes its inputs. An output name is an error.
  void bind_input(const std::string& name, const Tensor& t);
  // Runs on the bound memory; every input must be bound.
  void run();
  // The values of CompileOptions::stable_inputs may have changed in bound
  // memory (an optimizer step wrote them): the next run packs them again.
  void inputs_changed();
  // How a value of declared dtype `d` is stored (what bind() expects).
  static DType storage_dtype(DType d);
  // The dtypes bind() takes for a port of declared dtype `d` in this plan:
  // storage_dtype(d), and with numerics fp16 also fp16 for an fp16 port.
  std::vector<DType> bind_dtypes(DType d) const;
  CompileOptions::Numerics numerics() const;

  // Work to overlap with a run, such as starting each gradient's all-reduce
  // as soon as the backward pass has computed it. run() (the bound form; not
  // run(inputs)) calls `hook(ready)` on its own thread after every kernel
  // step, and once more at the end, where `ready` lists the outputs (indices
  // into outputs()) that are final: each output exactly once per run, in
  // the first call after the last step that reads or writes its memory.
  // From then on the run neither reads nor writes that memory, so the hook
  // may read it and change it. An output computed straight into its bound
  // memory is ready after its last step (often well before the end); any
  // other (not bound, converted at the edge, copied at the end, tapped, or
  // written back into a state) in the final call. The hook must not touch
  // the plan or any other memory the run uses. An exception from it ends
  // the run. An empty hook (the default) removes it; without one a run pays
  // one predictable branch per step.
  using StepHook = std::function<void(std::span<const size_t> ready)>;
  void set_step_hook(StepHook hook);
  // Asks a run to stop: thread-safe and async-signal-safe (one atomic
  // store), callable from another thread or a signal handler. The run in
  // progress (or, if none is, the next one) checks the flag between kernel
  // steps and ends with Error "cancelled"; the flag is then cleared, so the
  // plan can run again (outputs and states of a cancelled run are
  // unspecified: reset_state() or set_state() before relying on them).
  void cancel();

  // Persistent states (see above): by parameter (or aliased input) name.
  Tensor state(const std::string& name) const;               // declared dtype
  void set_state(const std::string& name, const Tensor& value);  // converted; shape must match
  void reset_state();                                         // every state to zero

  // A tapped value (CompileOptions::taps) as the last completed run left it,
  // in its declared dtype. A tap that is also an input or output is copied at
  // the end of each run, so that later changes to bound caller memory do not
  // show. An Error for a name that was not tapped, or while no run has
  // completed (before the first, or after a failed or cancelled one).
  Tensor tap(const std::string& name) const;

  struct Impl;
 private:
  std::unique_ptr<Impl> impl_;
  friend Plan compile(const Program&, const CompileOptions&);
};

// Compiles a verified program (copies it; the program may go away). Throws
// Error naming the op for anything that cannot be compiled (an op with no
// compiled kernel yet: run it with the reference executor instead).
Plan compile(const Program& p, const CompileOptions& options = {});

}  // namespace milrt
