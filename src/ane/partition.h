// Splitting a function into Neural Engine programs and host steps, as the
// first seed does: ops in schedule order, maximal runs of ops with an engine
// route become one engine program each (optionally capped in size), every
// other run a host step with the reason for each of its ops.
//
// States (ios18 state<> parameters) each live in one persistent buffer
// (state_steps.h): read_state results are views of it, fed zero-copy to
// the first engine program that reads them, each coreml_update_state is a
// StateWrite step that writes the buffer (in place for a slice_update of the
// state, as a KV cache is written).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ane/lower.h"
#include "milrt/ir.h"

namespace milrt::ane {

struct PartitionOptions {
  std::string function = "main";
  size_t max_ops_per_program = 0;  // 0: no cap
  int64_t max_dim = 16384;
  // Shapes for inputs declared with '?' dims (flexible shapes): the engine
  // compiles static shapes only, so a partition is made per input shape.
  std::map<std::string, Shape> input_shapes;
};

// A write into a state's persistent buffer, where its coreml_update_state is.
struct StateWrite {
  std::string state;   // the state parameter
  std::string result;  // the update's result: a view of the state after the write
  // In place: the new value is a slice_update of the state's current
  // contents, folded into the write, so only `update` is written, at
  // [begin, end) (each a variable or a constant).
  bool in_place = false;
  Arg update, begin, end;
  std::string value;  // otherwise: the whole new value, copied in
};

// Where a state's one persistent buffer lives: a block of the input surface
// of the engine program that reads it zero-copy (`step`), or a surface of
// its own (step == npos), in the engine's fp16 [1, C, 1, S] layout.
struct StateHome {
  static constexpr size_t npos = size_t(-1);
  std::string name;
  Type type;  // the tensor the state holds
  size_t step = npos;
  Packing packing;  // that surface's layout
  size_t slot = 0;  // the state's block in it
};

struct Step {
  enum class Kind { Engine, Host, StateWrite };
  Kind kind = Kind::Host;
  std::vector<size_t> ops;           // indices into Partition::program's function ops (never `const`)
  std::vector<std::string> inputs;   // values read from before the step (params or earlier steps)
  std::vector<std::string> outputs;  // values used by later steps or returned
  // Host: one line per op ("'name' reduce_argmax: produces int32 ..."); the
  // step runs `host` (a function `main` of the step's ops, its inputs as
  // parameters) on the reference executor.
  std::vector<std::string> reasons;
  Program host;
  // Engine: the lowered program.
  EngineProgram engine;
  // Engine: inputs that are views of a state homed here: their blocks of
  // the input surface are the state's buffer, read where they lie.
  std::vector<std::string> state_inputs;
  // StateWrite (a host step that writes states' buffers, in order; `reasons`
  // says why the engine does not): what it writes, and the views of the
  // contents it overwrites that later steps still read, copied out first.
  std::vector<StateWrite> writes;
  std::vector<std::string> save_before;
};

struct Partition {
  Program program;   // after ane_passes(); step op indices point into it
  std::string function;
  std::vector<Step> steps;
  // Stateful functions: one home per state parameter, and every value that
  // is a view of a state's buffer (read_state and coreml_update_state
  // results) with its state.
  std::vector<StateHome> states;
  std::map<std::string, std::string> views;
  const StateHome& state(const std::string& name) const;
  size_t engine_programs() const;
  size_t host_steps() const;
};

// Runs ane_passes() on a copy of `p` and partitions function
// options.function. Throws Error for a missing function, one with unknown
// dims, or a state the engine cannot hold (not float, or a dim above
// max_dim).
Partition partition(const Program& p, const PartitionOptions& options = {});

}  // namespace milrt::ane
