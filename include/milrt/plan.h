// Compiled plans: a MIL function turned once into a list of kernel steps over
// a planned arena, then run many times with no parsing, shape logic or
// allocation on the hot path.
//
//   milrt::Plan plan = milrt::compile(program);          // passes, lowering, memory plan
//   milrt::TensorMap out = plan.run({{"x", x}});          // convenience: allocates outputs
//
// Floating-point values are computed and stored in fp32 inside a plan, also
// for fp16 programs (more accurate than fp16 hardware, which rounds after
// every op); integers in int32, bools in one byte. Inputs are converted from
// their given dtype on the way in, outputs to their declared dtype on the way out.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "milrt/ir.h"
#include "milrt/reference.h"

namespace milrt {

struct CompileOptions {
  std::string function = "main";
  // Pass pipeline run before lowering (names as in `milrt opt --list`).
  std::vector<std::string> passes = {"legalize-layout-idioms", "fold-constexpr", "canonicalize", "decompose",
                                     "cse", "dce"};
  // Shapes for inputs with '?' dims (flexible-shape models): a plan is for static shapes.
  std::map<std::string, Shape> input_shapes;
};

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

  Plan();
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;
  ~Plan();

  const std::vector<Port>& inputs() const;
  const std::vector<Port>& outputs() const;
  std::vector<StepInfo> steps() const;
  size_t arena_bytes() const;          // planned intermediates
  size_t intermediate_bytes() const;   // what they would take without reuse

  // Runs the plan. Inputs are converted to the declared dtypes; a shape other
  // than the plan's is an error. Not thread-safe: one run at a time per plan.
  TensorMap run(const TensorMap& inputs);

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
