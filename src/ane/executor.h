// Runs a Partition through any milrt_ane_device: host steps on the CPU with
// the reference executor, engine programs through the table (pack to fp16,
// write the one input, evaluate, read, unpack).
//
// Programs are compiled on first use and stay resident up to
// `max_resident`; beyond that the least recently used one is unloaded, and
// recompiled (spending budget) when next used. Before every compile the
// executor checks the device's compile_count against `max_compiles` (the
// chip allows about 119 per process) and stops with a one-line error when it
// is spent; on macOS the remedy is to restart the process from a checkpoint
// (exec(), as the second seed does).
//
// States live in StateBuffers for the executor's lifetime: every run reads
// and writes them where they lie (state_buffers.h), starting from zeros.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ane/device.h"
#include "ane/partition.h"
#include "ane/state_buffers.h"
#include "milrt/reference.h"

namespace milrt::ane {

struct ExecutorOptions {
  size_t max_resident = 16;   // engine programs loaded at once
  size_t max_compiles = 119;  // the device's compile_count may not pass this
};

struct ExecutorStats {
  size_t compiles = 0;   // compiles this executor asked for
  size_t evictions = 0;  // programs unloaded to make room
  size_t engine_runs = 0, host_runs = 0;
  // Bytes the executor copied: operands packed into engine inputs (not the
  // state blocks read in place), whole-state copies (a state read by a
  // host step or a program that is not its home, a whole-value write, a
  // save before a write, an input surface written whole because the device
  // cannot share memory), and in-place slice writes.
  size_t packed_bytes = 0, state_copy_bytes = 0, state_write_bytes = 0;
};

class Executor {
 public:
  // `partition` and `device` must outlive the executor.
  Executor(const Partition& partition, milrt_ane_device* device, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // The function's outputs by name. Inputs must match the declared dtypes
  // and shapes. The states carry over from the previous run.
  TensorMap run(const TensorMap& inputs);
  // As run_reference: the states in `states` are set first, and every state
  // is written back into it after the run.
  TensorMap run(const TensorMap& inputs, TensorMap& states);

  // A state's current value (in its declared dtype), or a new one.
  Tensor state(const std::string& name) const { return states_.read(name); }
  void set_state(const std::string& name, const Tensor& value);
  const StateBuffers& state_buffers() const { return states_; }

  const ExecutorStats& stats() const { return stats_; }
  size_t resident() const;

 private:
  milrt_ane_program* program_for(size_t step);
  void run_engine(size_t step, TensorMap& env);
  void run_writes(const Step& step, TensorMap& env);
  // A value from env, or read out of its state's buffer if it is a view.
  Tensor value(const std::string& name, const TensorMap& env);
  Tensor arg_value(const Arg& a, const TensorMap& env);  // a constant's literal, else value()

  const Partition& part_;
  milrt_ane_device* dev_;
  ExecutorOptions opt_;
  ExecutorStats stats_;
  StateBuffers states_;
  std::vector<milrt_ane_program*> loaded_;  // per step; null when not resident
  std::vector<uint64_t> last_used_;
  uint64_t clock_ = 0;
};

}  // namespace milrt::ane
