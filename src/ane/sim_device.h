// The simulated Neural Engine: a milrt_ane_device that enforces the engine's
// documented limits (docs: the Neural Engine notes in the shared material)
// and evaluates each program with the reference executor, so that lowering,
// partitioning, packing, budgets and eviction are tested on any machine.
//
// What it checks at compile: the MIL parses and verifies; function `main`
// with exactly one input (the engine fails multi-input requests, error
// 0x1d); every input and output a rank-4 [1, C, 1, S] fp16 tensor (fp32 is
// accepted too: the engine takes it with a cast, about 37% slower) whose
// byte size equals the declared surface size; no dim of any value above
// 16384; no state parameters; and the compile budget (about 119 compiles
// per process on the chip; every attempt counts, failed ones too, and
// compile refuses once the budget is spent).
//
// Weight files are written into a private temporary directory and read from
// there, as the framework copies model.mil and weights/ into
// NSTemporaryDirectory(): later changes to the caller's bytes do not change
// results ("weights are fixed at compile time").
//
// Surfaces (create_surface, bind_input) are plain memory the program reads
// at evaluate, where it lies; a bound surface must have the input's declared
// size, and write_input to a bound input is refused.
//
// Not simulated: what Apple's compiler actually accepts beyond these rules,
// the chip's numerics (the reference executor rounds every op's result to
// its declared dtype, as fp16 hardware rounds per op, but accumulates in
// higher precision), row alignment, speed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ane/device.h"

namespace milrt::ane {

struct SimLimits {
  size_t max_compiles = 119;  // compile attempts per device (the chip: per process)
  int64_t max_dim = 16384;    // largest size of any axis of any value
};

// A table whose context is a newly allocated simulator; free it with
// free_sim_device (or use SimDevice, which owns one).
milrt_ane_device make_sim_device(const SimLimits& limits = {});
void free_sim_device(milrt_ane_device& device);

// Owns a simulated device for its lifetime. Programs not unloaded by then are
// unloaded with it.
class SimDevice {
 public:
  explicit SimDevice(const SimLimits& limits = {}) : table_(make_sim_device(limits)) {}
  ~SimDevice() { free_sim_device(table_); }
  SimDevice(const SimDevice&) = delete;
  SimDevice& operator=(const SimDevice&) = delete;
  milrt_ane_device* table() { return &table_; }
  // Programs compiled and not yet unloaded (for tests of eviction).
  size_t loaded() const;
  // Bytes copied in through write_input so far (bound surfaces are read in
  // place and add nothing): what tests of zero-copy state count.
  size_t input_bytes_written() const;

 private:
  milrt_ane_device table_;
};

}  // namespace milrt::ane
