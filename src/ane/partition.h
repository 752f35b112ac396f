// Splitting a function into Neural Engine programs and host steps, as the
// first seed does: ops in schedule order, maximal runs of ops with an engine
// route become one engine program each (optionally capped in size), every
// other run a host step with the reason for each of its ops.
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

struct Step {
  enum class Kind { Engine, Host };
  Kind kind = Kind::Host;
  std::vector<size_t> ops;           // indices into Partition::program's function ops (never `const`)
  std::vector<std::string> inputs;   // values read from before the step (params or earlier steps)
  std::vector<std::string> outputs;  // values used by later steps or returned
  // Host: one line per op ("'name' reduce_argmax: produces int32 ..."); the
  // step runs `host` (a function `main` of the step's ops, its inputs as
  // parameters) on the reference executor. A stateful function is one host
  // step running the whole function (`whole_function`).
  std::vector<std::string> reasons;
  Program host;
  bool whole_function = false;
  // Engine: the lowered program.
  EngineProgram engine;
};

struct Partition {
  Program program;   // after ane_passes(); step op indices point into it
  std::string function;
  std::vector<Step> steps;
  size_t engine_programs() const;
  size_t host_steps() const;
};

// Runs ane_passes() on a copy of `p` and partitions function
// options.function. Throws Error for a missing function or one with unknown
// dims.
Partition partition(const Program& p, const PartitionOptions& options = {});

}  // namespace milrt::ane
