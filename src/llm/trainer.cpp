#include "llm/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <fmt/format.h>

#include "kernels/generic/adamw.h"
#include "kernels/peak.h"
#include "kernels/threads.h"
#include "llm/checkpoint.h"
#include "llm/distributed.h"
#include "llm/gradient_allreduce.h"
#include "llm/train_report.h"
#include "util/atomic_file.h"
#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/plan.h"

namespace milrt::llm {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The data inputs of the loss program (every input that is not a weight), as
// tensors in the plan's storage dtype, so they can be bound without copies.
TensorMap make_data_inputs(const Function& f, const std::vector<WeightSpec>& weights) {
  TensorMap data;
  for (const Param& p : f.params) {
    bool is_weight = std::any_of(weights.begin(), weights.end(), [&](const WeightSpec& w) { return w.name == p.name; });
    if (!is_weight) data[p.name] = Tensor(Plan::storage_dtype(p.type.dtype), p.type.shape);
  }
  return data;
}

void check_weights(const TrainTask& task, const TensorMap& weights) {
  for (const WeightSpec& w : task.weights) {
    auto it = weights.find(w.name);
    if (it == weights.end()) throw Error("train: weight '" + w.name + "' is missing");
    if (it->second.dtype() != DType::FP32 || it->second.shape() != w.shape)
      throw Error("train: weight '" + w.name + "' must be fp32 " + shape_str(w.shape) + ", got " +
                  std::string(dtype_name(it->second.dtype())) + " " + shape_str(it->second.shape()));
  }
}

// Makes every weight tensor writable memory of its own (a loaded checkpoint
// may be a read-only mapping), so plans can bind it and AdamW update it.
void own_weights(TensorMap& weights) {
  for (auto& [name, t] : weights)
    if (!t.empty()) t = t.clone();
}

void zero_gradients(TensorMap& grads) {
  for (auto& [name, g] : grads) kernels::zero_f32(g.mutable_ptr<float>(), g.numel());
}

void scale_gradients(TensorMap& grads, double s) {
  for (auto& [name, g] : grads) kernels::scale_f32(g.mutable_ptr<float>(), float(s), g.numel());
}

// FNV-1a over the weights' bytes in the task's order: equal on every rank
// when the data-parallel steps kept the replicas identical.
uint64_t weights_checksum(const TensorMap& weights, const std::vector<WeightSpec>& order) {
  uint64_t h = 1469598103934665603ull;
  for (const WeightSpec& w : order) {
    const Tensor& t = weights.at(w.name);
    const auto* b = static_cast<const unsigned char*>(static_cast<const void*>(t.ptr<float>()));
    for (size_t i = 0, n = size_t(t.numel()) * sizeof(float); i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

// One flat fp32 array (ZeRO-1's weights and gradients), 64-byte aligned and
// zero-filled; the tensors are views into it.
class FlatBuffer final : public Buffer {
 public:
  explicit FlatBuffer(size_t floats) : bytes_((std::max<size_t>(1, floats) * sizeof(float) + 63) / 64 * 64) {
    p_ = static_cast<uint8_t*>(std::aligned_alloc(64, bytes_));
    if (!p_) throw Error(fmt::format("train: cannot allocate {} MB for the flat weights or gradients", bytes_ >> 20));
    std::memset(p_, 0, bytes_);
  }
  ~FlatBuffer() override { std::free(p_); }
  FlatBuffer(const FlatBuffer&) = delete;
  FlatBuffer& operator=(const FlatBuffer&) = delete;
  const uint8_t* data() const override { return p_; }
  uint8_t* mutable_data() override { return p_; }
  size_t size() const override { return bytes_; }
  float* floats() { return reinterpret_cast<float*>(p_); }

 private:
  size_t bytes_;
  uint8_t* p_ = nullptr;
};

bool all_finite(const TensorMap& grads) {
  for (const auto& [name, g] : grads) {
    const float* p = g.ptr<float>();
    for (int64_t i = 0, n = g.numel(); i < n; ++i)
      if (!std::isfinite(p[i])) return false;
  }
  return true;
}

// The dynamic loss scale, and what the training state keeps of it: a header
// the trainer puts before the task's data state in TrainState::extra (only in
// runs with loss scaling, so other runs' state files are as before). It also
// keeps AdamW's own step count, which falls behind the loop's step by the
// skipped steps (TrainState::step is the loop's).
struct LossScale {
  static constexpr char kMagic[8] = {'M', 'I', 'L', 'R', 'T', 'L', 'S', '1'};
  static constexpr size_t kHeader = 8 + 8 + 8 + 8;
  double scale = 1;
  int64_t good_steps = 0;   // finite steps in a row since the last change
  int64_t adamw_steps = 0;

  std::vector<uint8_t> wrap(const std::vector<uint8_t>& task_bytes) const {
    std::vector<uint8_t> b(kHeader);
    std::memcpy(b.data(), kMagic, 8);
    std::memcpy(b.data() + 8, &scale, 8);
    std::memcpy(b.data() + 16, &good_steps, 8);
    std::memcpy(b.data() + 24, &adamw_steps, 8);
    b.insert(b.end(), task_bytes.begin(), task_bytes.end());
    return b;
  }
  static bool has_header(const std::vector<uint8_t>& b) {
    return b.size() >= kHeader && std::memcmp(b.data(), kMagic, 8) == 0;
  }
  // Reads the header and returns the task's bytes after it.
  std::vector<uint8_t> unwrap(const std::vector<uint8_t>& b) {
    std::memcpy(&scale, b.data() + 8, 8);
    std::memcpy(&good_steps, b.data() + 16, 8);
    std::memcpy(&adamw_steps, b.data() + 24, 8);
    if (!(scale > 0) || !std::isfinite(scale) || good_steps < 0 || adamw_steps < 0)
      throw Error("train: the training state's loss scale is corrupt");
    return std::vector<uint8_t>(b.begin() + kHeader, b.end());
  }
};

}  // namespace

TrainLog train(TrainTask& task, const TrainOptions& opt, TensorMap& weights) {
  const auto run_start = Clock::now();
  if (opt.steps < 0 || opt.accum < 1) throw Error("train: --steps must be >= 0 and --accum >= 1");
  check_weights(task, weights);
  // Data parallelism (1 rank unless launched by mpirun): every replica starts
  // from rank 0's weights.
  const int world = dist::world_size(), rank = dist::rank();
  const bool writer = rank == 0 && !opt.out_dir.empty();
  if (opt.zero < 0 || opt.zero > 1) throw Error(fmt::format("train: --zero {} (0: off, 1: shard the optimizer state)", opt.zero));
  // ZeRO-1: the weights and gradients live in flat arrays (the tensors are
  // views), so that each rank's part is one contiguous range for the
  // reduce-scatter and the all-gather. One process: nothing to shard.
  const bool zero = opt.zero == 1 && world > 1;
  FlatLayout layout;
  std::shared_ptr<FlatBuffer> flat_w, flat_g;
  if (zero) {
    std::vector<std::pair<std::string, Shape>> order;
    for (const WeightSpec& w : task.weights) order.push_back({w.name, w.shape});
    layout = FlatLayout::make(order, world);
    flat_w = std::make_shared<FlatBuffer>(size_t(layout.size()));
    flat_g = std::make_shared<FlatBuffer>(size_t(layout.size()));
    for (const FlatLayout::Entry& e : layout.entries) {
      Tensor view(DType::FP32, e.shape, flat_w, size_t(e.offset) * sizeof(float));
      const Tensor& t = weights.at(e.name);
      std::copy(t.ptr<float>(), t.ptr<float>() + e.numel, view.mutable_ptr<float>());
      weights[e.name] = view;  // instead of own_weights' copy: no second copy of the weights
    }
  } else {
    own_weights(weights);
  }

  if (world > 1)
    for (const WeightSpec& w : task.weights) {
      Tensor& t = weights.at(w.name);
      dist::broadcast(t.mutable_ptr<float>(), size_t(t.numel()) * sizeof(float));
    }
  const Function* fwd = task.program.function("main");
  if (!fwd) throw Error("train: the task's program has no function main");
  // Derived once: loss and every weight's gradient in one function.
  GradOptions go;
  go.loss = "loss";
  go.recompute = opt.recompute;
  for (const WeightSpec& w : task.weights) go.wrt.push_back(w.name);
  const auto compile_start = Clock::now();
  Program derived = differentiate(task.program, go);
  CompileOptions step_options;
  step_options.function = go.function + "_grad";
  step_options.matmul_precision = opt.precision;
  // The weights change only in the optimizer step: GEMMs keep them packed
  // across the micro-steps in between (inputs_changed() after each update).
  if (opt.stable_weights)
    for (const WeightSpec& w : task.weights) step_options.stable_inputs.push_back(w.name);
  // Micro-steps add their gradients into the step's sums as they compute
  // them: a weight gradient's GEMM takes the sum as its residual (C += dYᵀ·X
  // in place) instead of writing a product that a second pass adds.
  if (opt.accum > 1)
    for (const WeightSpec& w : task.weights) step_options.accumulate_outputs.push_back(w.name + "_grad");
  Plan step_plan = compile(derived, step_options);
  CompileOptions eval_options;
  eval_options.matmul_precision = opt.precision;
  eval_options.stable_inputs = step_options.stable_inputs;
  Plan eval_plan = compile(task.program, eval_options);
  const double compile_ms = ms_since(compile_start);
  if (opt.on_compiled) opt.on_compiled(step_plan, eval_plan, compile_ms);
  const bool profiling = opt.profile || opt.trace;
  if (profiling) step_plan.set_profiling(true, opt.trace), eval_plan.set_profiling(true, opt.trace);

  TensorMap data = make_data_inputs(*fwd, task.weights);
  // The micro-batches of the other ranks, drawn and dropped so that every
  // rank's sampler stays at the same place in the one shared stream.
  TensorMap others = world > 1 ? make_data_inputs(*fwd, task.weights) : TensorMap{};
  TensorMap grads;
  for (size_t i = 0; i < task.weights.size(); ++i) {
    const WeightSpec& w = task.weights[i];
    grads[w.name] = zero ? Tensor(DType::FP32, w.shape, flat_g, size_t(layout.entries[i].offset) * sizeof(float))
                         : Tensor(DType::FP32, w.shape);
  }
  float loss = 0, eval_loss = 0;
  for (auto& [name, t] : data) step_plan.bind(name, t), eval_plan.bind(name, t);
  for (const WeightSpec& w : task.weights) {
    step_plan.bind(w.name, weights.at(w.name));
    eval_plan.bind(w.name, weights.at(w.name));
    step_plan.bind(w.name + "_grad", grads.at(w.name));
  }
  step_plan.bind("loss", &loss);
  eval_plan.bind("loss", &eval_loss);
  // Data parallel without ZeRO: the gradients' all-reduce, started from the
  // step plan's hook as the last micro-step finalises each gradient.
  std::optional<GradientAllreduce> reducer;
  bool last_micro_step = false, order_known = false;
  size_t started_before_end = 0;  // buckets started before the last micro-step's last kernel step
  size_t hook_calls = 0;
  const size_t n_steps = step_plan.steps().size();
  std::vector<size_t> ready_order;  // the first step's, to agree on buckets
  std::vector<int> grad_of_output;  // per step-plan output: its gradient's index, or -1 (all-reduce only)
  if (world > 1 && !zero) {
    std::vector<GradientAllreduce::Gradient> gs;
    for (const WeightSpec& w : task.weights) gs.push_back({grads.at(w.name).mutable_ptr<float>(), size_t(grads.at(w.name).numel())});
    if (!(opt.bucket_mb > 0) || opt.bucket_mb > 1024) throw Error("train: --bucket-mb must be in (0, 1024]");
    reducer.emplace(std::move(gs), std::max<size_t>(1, size_t(opt.bucket_mb * double(1 << 20) / sizeof(float))));
    for (const Plan::Port& port : step_plan.outputs()) {
      grad_of_output.push_back(-1);
      for (size_t k = 0; k < task.weights.size(); ++k)
        if (port.name == task.weights[k].name + "_grad") grad_of_output.back() = int(k);
    }
  }
  // The forward part of a micro-step, timed inside the step plan: from the
  // run's start to the hook call that reports the loss final. The eval
  // plan's time is no measure of it: run once per evaluation, it packs again
  // every weight the optimizer changed and runs cold (seed layer, bf16: 12.7
  // ms against about 8 inside the step). A loss reported only by the final
  // call (not computed in place) gives no figure, and the eval plan's stands.
  size_t loss_output = SIZE_MAX;
  for (size_t o = 0; o < step_plan.outputs().size(); ++o)
    if (step_plan.outputs()[o].name == "loss") loss_output = o;
  Clock::time_point run_t0;
  double run_fwd_ms = -1;
  step_plan.set_step_hook([&](std::span<const size_t> ready) {
    // Call k follows step k; call n_steps is the final one.
    const size_t call = hook_calls++;
    if (run_fwd_ms < 0 && call < n_steps)
      for (size_t o : ready)
        if (o == loss_output) run_fwd_ms = ms_since(run_t0);
    if (!reducer || !last_micro_step) return;
    // At the call after the last step, what the steps before it started
    // (overlapped with at least one step).
    if (call == n_steps - 1) started_before_end = reducer->started();
    for (size_t o : ready) {
      if (grad_of_output[o] < 0) continue;
      if (!order_known) ready_order.push_back(size_t(grad_of_output[o]));
      if (opt.comm_overlap) reducer->ready(size_t(grad_of_output[o]));
    }
    if (opt.comm_overlap) reducer->progress();
  });
  const bool scaling = data.count("loss_scale") > 0;
  LossScale ls;
  if (scaling) {
    if (!(opt.loss_scale > 0) || !std::isfinite(opt.loss_scale) || opt.loss_scale_window < 1)
      throw Error("train: the loss scale must be positive and finite and its window at least 1");
    ls.scale = double(float(opt.loss_scale));  // what the fp32 input holds
  }
  float* scale_input = scaling ? data.at("loss_scale").mutable_ptr<float>() : nullptr;

  // The optimizer: AdamW over all the weights, or (ZeRO-1) over this rank's part.
  std::optional<AdamW> adamw;
  std::optional<ShardedAdamW> sharded;
  if (zero) sharded.emplace(opt.adamw, layout, rank);
  else adamw.emplace(opt.adamw, weights);
  auto adamw_steps = [&] { return zero ? sharded->steps_taken() : adamw->steps_taken(); };
  TrainLog log;
  log.zero = zero ? 1 : 0;
  log.comm_overlap = reducer.has_value() && opt.comm_overlap;
  if (zero) {
    log.optimizer_state_bytes = 2 * layout.shard * int64_t(sizeof(float));
  } else {
    for (const WeightSpec& w : task.weights) log.optimizer_state_bytes += 2 * shape_numel(w.shape) * int64_t(sizeof(float));
  }
  // TrainOptions::trace: the trainer's phases beside the plans' steps.
  auto span = [&](const char* name, Clock::time_point t0) {
    if (!opt.trace) return;
    const auto ns = [](Clock::duration d) { return int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()); };
    TraceSpan s;
    s.name = name;
    s.cat = "trainer";
    s.thread = Plan::trace_thread_id();
    s.start_ns = ns(t0.time_since_epoch());
    s.dur_ns = ns(Clock::now() - t0);
    log.phase_spans.push_back(std::move(s));
  };
  log.threads = kernels::num_threads();
  log.world_size = world;
  log.compile_ms = compile_ms;
  namespace fs = std::filesystem;
  const std::string ckpt = opt.out_dir.empty() ? "" : (fs::path(opt.out_dir) / "checkpoint.bin").string();
  const std::string state_path = opt.out_dir.empty() ? "" : (fs::path(opt.out_dir) / "train_state.bin").string();
  const std::string csv_path = opt.out_dir.empty() ? "" : (fs::path(opt.out_dir) / "losses.csv").string();
  if (opt.resume) {
    if (opt.out_dir.empty()) throw Error("train: --resume needs the run directory (--out)");
    TrainState st = load_train_state(state_path);
    if (scaling != LossScale::has_header(st.extra))
      throw Error(scaling ? "train: the training state was saved by a run without fp16 loss scaling: resume it with its --precision"
                          : "train: the training state was saved by an fp16 run: resume it with --precision fp16");
    const int64_t loop_step = st.step;
    if (scaling) {
      st.extra = ls.unwrap(st.extra);
      st.step = ls.adamw_steps;
    }
    // The state file holds the whole moments whether or not the run that
    // saved it sharded them: a ZeRO-1 rank takes its part.
    if (zero) sharded->restore(st);
    else adamw->restore(st);
    if (task.restore_data_state) task.restore_data_state(st.extra);
    log.first_step = loop_step;
    log.rows = read_loss_csv(csv_path, loop_step);
  }
  if (writer) fs::create_directories(opt.out_dir);

  bool evaluated = false;  // on every rank alike (t_fwd stays empty on a rank with no validation batch of its own)
  auto evaluate = [&](std::vector<double>* fwd_ms) {
    evaluated = true;
    double sum = 0;
    if (scale_input) *scale_input = 1.0f;  // no backward pass: nothing to protect from underflow
    if (task.begin_validation) task.begin_validation();
    const auto eval_t0 = Clock::now();
    for (int64_t b = 0; b < std::max<int64_t>(1, opt.eval_batches); ++b) {
      // Data-parallel: rank r evaluates batches r, r + N, ...; the sum is global.
      const bool mine = b % world == rank;
      task.next_batch(mine ? data : others, /*validation=*/true);
      if (!mine) continue;
      auto t0 = Clock::now();
      eval_plan.run();
      if (fwd_ms) fwd_ms->push_back(ms_since(t0));
      sum += eval_loss;
    }
    dist::allreduce_sum(&sum, 1);
    span("eval", eval_t0);
    return sum / double(std::max<int64_t>(1, opt.eval_batches));
  };
  auto save = [&](int64_t step) {
    if (opt.out_dir.empty()) return;
    TrainState st;
    if (zero) {
      // Every rank sends its part of the moments; rank 0 saves the whole
      // state, the same file an unsharded run writes.
      std::vector<float> all(writer ? size_t(layout.size()) : 0);
      dist::gather(sharded->m().data(), size_t(layout.shard), all.data());
      if (writer) st.m = ShardedAdamW::unflatten(layout, all.data());
      dist::gather(sharded->v().data(), size_t(layout.shard), all.data());
      if (writer) st.v = ShardedAdamW::unflatten(layout, all.data());
    }
    // The other ranks wait for rank 0's files, so that a rank failing in
    // the next step cannot end the job between checkpoint.bin and
    // train_state.bin (which would leave them from different steps).
    struct AfterSave {
      int world;
      ~AfterSave() noexcept(false) {
        if (world > 1 && std::uncaught_exceptions() == 0) dist::barrier();
      }
    } after_save{world};
    if (!writer) return;  // rank 0 alone writes the run directory
    if (task.save_weights) task.save_weights(ckpt, weights);
    if (!zero) st = adamw->state();
    st.step = step;
    if (task.save_data_state) st.extra = task.save_data_state();
    if (scaling) {
      ls.adamw_steps = adamw_steps();
      st.extra = ls.wrap(st.extra);
    }
    save_train_state(state_path, st);
    write_loss_csv(csv_path, log);
    write_loss_svg((fs::path(opt.out_dir) / "loss.svg").string(), log, task.name);
    log.wall_ms = ms_since(run_start);
    if (opt.on_save) opt.on_save(step, log);
  };

  std::vector<double> t_comm, t_wait;
  std::vector<double> t_fb, t_fwd, t_fwd_in_step, t_opt, t_data, t_step, t_acc;
  int64_t step = log.first_step;
  int64_t profile_from = step;  // the first profiled step, and where its phase times start
  size_t profile_data = 0, profile_opt = 0, profile_acc = 0;
  // Tests of failure handling (tests/test_mpi_train.cpp): rank
  // MILRT_TEST_FAIL_RANK throws at the start of optimizer step
  // MILRT_TEST_FAIL_STEP (1-based, default 3), while the others wait in the
  // step's collectives.
  const char* fail_rank_env = std::getenv("MILRT_TEST_FAIL_RANK");
  const char* fail_step_env = std::getenv("MILRT_TEST_FAIL_STEP");
  const int fail_rank = fail_rank_env && *fail_rank_env ? std::atoi(fail_rank_env) : -1;
  const int64_t fail_step = fail_step_env && *fail_step_env ? std::atoll(fail_step_env) : 3;
  for (; step < opt.steps; ++step) {
    if (fail_rank == rank && step + 1 == fail_step)
      throw Error(fmt::format("train: failure injected at step {} (MILRT_TEST_FAIL_RANK={})", step + 1, fail_rank));
    auto step_t0 = Clock::now();
    double loss_sum = 0;
    const double scale = ls.scale;
    if (scale_input) *scale_input = float(scale);
    // The factor each gradient sum is multiplied by: the mean over micro-steps, unscaled.
    const bool rescale = opt.accum > 1 || scaling;
    const float grad_factor = rescale ? float(1.0 / (double(opt.accum) * scale)) : 1.0f;
    if (reducer) reducer->begin(grad_factor);
    for (int64_t a = 0; a < opt.accum; ++a) {
      last_micro_step = a + 1 == opt.accum;
      hook_calls = 0;
      auto t0 = Clock::now();
      // Rank r's a-th micro-batch of step s is micro-batch (s*A + a)*N + r of the stream.
      for (int r = 0; r < world; ++r) task.next_batch(r == rank ? data : others, /*validation=*/false);
      t_data.push_back(ms_since(t0));
      span("data", t0);
      if (opt.accum > 1 && a == 0) {
        // The step plan accumulates into grads (accumulate_outputs): start the sums at zero.
        t0 = Clock::now();
        zero_gradients(grads);
        t_acc.push_back(ms_since(t0));
        span("accumulate", t0);
      }
      t0 = run_t0 = Clock::now();
      run_fwd_ms = -1;
      step_plan.run();
      t_fb.push_back(ms_since(t0));
      if (run_fwd_ms >= 0) t_fwd_in_step.push_back(run_fwd_ms);
      loss_sum += loss;
    }
    last_micro_step = false;
    auto t0 = Clock::now();
    if (rescale && !reducer) scale_gradients(grads, 1.0 / (double(opt.accum) * scale));
    // Data-parallel: the global mean of the gradients and of the loss, and
    // whether any rank was asked to stop (so all stop after the same step).
    bool stop_all = false;
    double sq_global = 0;  // ZeRO-1: the squared global gradient norm
    double gather_ms = 0;  // ZeRO-1: the weights' all-gather after the update
    if (world > 1) {
      const auto w0 = Clock::now();
      dist::barrier();  // separates waiting for the slowest rank from moving the gradients
      t_wait.push_back(ms_since(w0));
      log.wait_ms += t_wait.back();
      span("wait", w0);
      const auto c0 = Clock::now();
      double red[3] = {loss_sum, opt.stop && opt.stop->load() ? 1.0 : 0.0, 0.0};
      if (zero) {
        // This rank's part of the summed gradients lands in g[0, shard).
        float* g = flat_g->floats();
        dist::reduce_scatter_sum(g, size_t(layout.shard));
        kernels::scale_f32(g, 1.0f / float(world), layout.shard);
        red[2] = sharded->sum_squares(g);
        log.allreduce_buckets = 1;
      } else {
        log.buckets_started_early = int64_t(started_before_end);
        log.allreduce_buckets = reducer->finish();
        if (!order_known) agree_on_order(*reducer, ready_order), order_known = true;
      }
      dist::allreduce_sum(red, 3);
      loss_sum = red[0] / double(world);
      stop_all = red[1] > 0;
      sq_global = red[2];
      t_comm.push_back(ms_since(c0));
      log.allreduce_ms += t_comm.back();
      span("allreduce", c0);
      t0 = Clock::now();
    }
    const double lr = learning_rate(opt.adamw, step);
    // ZeRO-1: a non-finite gradient anywhere makes the global sum of squares
    // non-finite on every rank, so all ranks skip together.
    const bool skipped = scaling && (zero ? !std::isfinite(sq_global) : !all_finite(grads));
    double grad_norm = NAN;
    if (skipped) {
      // fp16 overflow somewhere in the backward pass: this step's update is
      // lost, the next one runs at half the scale.
      ls.scale /= 2, ls.good_steps = 0;
      log.skipped_steps.push_back(step + 1);
      if (ls.scale < 0x1p-24)
        throw Error(fmt::format("train: the gradients are not finite even at loss scale {:g} (step {}): the model diverged; "
                                "lower the learning rate", scale, step + 1));
    } else {
      if (zero) {
        grad_norm = std::sqrt(sq_global);
        sharded->step(flat_w->floats() + int64_t(rank) * layout.shard, flat_g->floats(), grad_norm);
        const auto g0 = Clock::now();
        dist::allgather(flat_w->floats(), size_t(layout.shard));
        gather_ms = ms_since(g0);
        span("allgather", g0);
      } else {
        grad_norm = adamw->step(weights, grads);
      }
      step_plan.inputs_changed();
      eval_plan.inputs_changed();
      if (scaling && ++ls.good_steps >= opt.loss_scale_window) ls.scale *= 2, ls.good_steps = 0;
    }
    t_opt.push_back(ms_since(t0) - gather_ms);
    if (zero) t_comm.back() += gather_ms, log.allreduce_ms += gather_ms;
    span("optimizer", t0);
    const double ms = ms_since(step_t0);
    t_step.push_back(ms);
    log.train_ms += ms;
    log.micro_steps += opt.accum;

    TrainLog::Row row{step + 1, loss_sum / double(opt.accum) / scale, NAN, lr, grad_norm, ms};
    row.tok_s = double(task.tokens_per_microstep * opt.accum * world) / (ms / 1000);
    row.comm_ms = world > 1 ? t_wait.back() + t_comm.back() : 0.0;
    if (!std::isfinite(row.loss) && !skipped) throw Error(fmt::format("train: the loss is {} at step {}: lower the learning rate", row.loss, step + 1));
    const bool last = step + 1 == opt.steps;
    if ((opt.eval_every > 0 && (step + 1) % opt.eval_every == 0) || last) row.val_loss = evaluate(&t_fwd);
    log.rows.push_back(row);
    log.loss_scale = ls.scale;
    {
      // This step alone, per micro-step.
      const size_t n = size_t(opt.accum);
      auto mean_last = [&](const std::vector<double>& v) {
        double sum = 0;
        for (size_t i = v.size() - std::min(n, v.size()); i < v.size(); ++i) sum += v[i];
        return sum / double(n);
      };
      log.last_step = {mean_last(t_fb), opt.accum > 1 && !t_acc.empty() ? t_acc.back() / double(n) : 0.0,
                       t_opt.back() / double(n), mean_last(t_data), median(t_wait), median(t_comm)};
    }
    if (opt.on_step) opt.on_step(step + 1, log);

    if (profiling && step == log.first_step && !last) {  // the first step warmed up: profile from the next
      step_plan.reset_profile(), eval_plan.reset_profile(), log.phase_spans.clear();
      profile_from = step + 1, profile_data = t_data.size(), profile_opt = t_opt.size(), profile_acc = t_acc.size();
    }
    if (opt.save_every > 0 && (step + 1) % opt.save_every == 0 && !last) save(step + 1);
    if (world > 1 ? stop_all : opt.stop && opt.stop->load()) {
      log.interrupted = true;
      ++step;
      break;
    }
  }
  // Collective: the condition must be the same on every rank.
  if (!evaluated && !log.interrupted) evaluate(&t_fwd);
  log.ms_accumulate = median(t_acc);
  log.ms_allreduce = median(t_comm);
  log.ms_wait = median(t_wait);
  log.ms_step = median(t_step);
  if (world > 1) {
    for (const WeightSpec& w : task.weights) log.allreduce_bytes += int64_t(weights.at(w.name).numel() * sizeof(float));
    // The replicas must have stayed identical: compare rank 0's checksum.
    log.weights_checksum = weights_checksum(weights, task.weights);
    uint64_t root = log.weights_checksum;
    dist::broadcast(&root, sizeof root);
    double differs = root != log.weights_checksum ? 1 : 0;
    dist::allreduce_max(&differs, 1);
    if (differs > 0)
      throw Error(fmt::format("train: the ranks' weights differ after step {} (rank {} checksum {:016x}, rank 0 {:016x})",
                              step, rank, log.weights_checksum, root));
  }
  save(step);
  log.wall_ms = ms_since(run_start);
  log.loss_scale = ls.scale;
  log.ms_fwd_bwd = median(t_fb);
  log.ms_fwd_in_step = !t_fwd_in_step.empty();
  log.ms_fwd = log.ms_fwd_in_step ? median(t_fwd_in_step) : median(t_fwd);
  log.ms_optimizer = median(t_opt);
  log.ms_data = median(t_data);
  if (profiling) {
    log.step_profile = step_plan.profile();
    log.eval_profile = eval_plan.profile();
    log.profiled_steps = step - profile_from;
    const double n = double(std::max<int64_t>(1, log.profiled_steps));
    auto sum_from = [](const std::vector<double>& v, size_t from) {
      double r = 0;
      for (size_t i = from; i < v.size(); ++i) r += v[i];
      return r;
    };
    for (auto& [family, ms] : family_totals(log.step_profile)) log.family_ms.push_back({family, ms / n});
    log.family_ms.push_back({"optimizer", sum_from(t_opt, profile_opt) / n});
    if (opt.accum > 1) log.family_ms.push_back({"accumulate", sum_from(t_acc, profile_acc) / n});
    log.family_ms.push_back({"data", sum_from(t_data, profile_data) / n});
    std::stable_sort(log.family_ms.begin(), log.family_ms.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  }
  log.peak_kind = kernels::peak_kind_name(opt.precision == CompileOptions::MatmulPrecision::bf16
                                              ? kernels::bf16_peak_kind()
                                              : kernels::PeakKind::fp32_fma);
  log.peak_gflops = opt.peak_gflops;
  if (writer) {
    const std::string report = efficiency_report(task, opt, log) + distributed_report(task, opt, log);
    write_file_atomic((fs::path(opt.out_dir) / "report.txt").string(), report.data(), report.size());
  }
  return log;
}

std::string distributed_report(const TrainTask& task, const TrainOptions& opt, const TrainLog& log) {
  if (log.world_size <= 1) return "";
  const double step_ms = log.micro_steps > 0 ? log.train_ms / (double(log.micro_steps) / double(opt.accum)) : 0;
  std::string r = fmt::format("data parallel: {} ranks x accum {} = {} micro-batches per optimizer step", log.world_size,
                              opt.accum, int64_t(log.world_size) * opt.accum);
  if (task.tokens_per_microstep > 0 && step_ms > 0)
    r += fmt::format(", {:.0f} tok/s global", double(task.tokens_per_microstep * opt.accum * log.world_size) / (step_ms / 1000));
  r += "\n";
  if (log.zero) {
    r += fmt::format("ZeRO-1: AdamW moments sharded, {:.2f} MB per rank (unsharded: {:.2f} MB)\n",
                     double(log.optimizer_state_bytes) / 1e6, double(log.optimizer_state_bytes) * log.world_size / 1e6);
    r += fmt::format("gradient reduce-scatter + weight all-gather: {:.2f} ms/step median ({:.1f}% of {:.1f} ms/step mean), "
                     "{:.2f} MB of gradients, {:.0f} ms in all\n",
                     log.ms_allreduce, log.train_ms > 0 ? 100.0 * log.allreduce_ms / log.train_ms : 0.0, step_ms,
                     double(log.allreduce_bytes) / 1e6, log.allreduce_ms);
  } else {
    r += fmt::format("gradient all-reduce{}: {:.2f} ms/step median ({:.1f}% of {:.1f} ms/step mean), {:.2f} MB in {} bucket{}, "
                     "{:.0f} ms in all\n",
                     log.comm_overlap ? " (overlapped with the backward pass; the part left after it)" : "", log.ms_allreduce, step_ms > 0 ? 100.0 * log.allreduce_ms / log.train_ms : 0.0, step_ms,
                     double(log.allreduce_bytes) / 1e6, log.allreduce_buckets, log.allreduce_buckets == 1 ? "" : "s",
                     log.allreduce_ms);
    if (log.comm_overlap)
      r += fmt::format("{} of {} bucket{} started during the backward pass (last step)\n", log.buckets_started_early,
                       log.allreduce_buckets, log.allreduce_buckets == 1 ? "" : "s");
  }
  r += fmt::format("waiting for the slowest rank before it: {:.2f} ms/step median ({:.1f}%), {:.0f} ms in all\n", log.ms_wait,
                   log.train_ms > 0 ? 100.0 * log.wait_ms / log.train_ms : 0.0, log.wait_ms);
  r += fmt::format("final weights identical on all {} ranks (checksum {:016x})\n", log.world_size, log.weights_checksum);
  return r;
}

}  // namespace milrt::llm
