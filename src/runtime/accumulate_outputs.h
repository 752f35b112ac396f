// CompileOptions::accumulate_outputs as a rewrite of the function before the
// passes: each named output `o` becomes `sum = add(acc, o)` with `acc` a new
// parameter, and the function returns `sum` in o's place. The plan then lays
// `acc` over the memory `sum` is computed into (the output's bound memory),
// so each run adds the output's value to what that memory holds. The add is
// an ordinary op: fuse-gemm-epilogue folds it into a GEMM as its residual
// (C += A·B, computed in place), fuse-elementwise into an elementwise chain.
#pragma once
#include <string>
#include <vector>

#include "milrt/ir.h"

namespace milrt::rt {

struct OutputAccumulator {
  std::string port;   // the output as the caller names it
  std::string sum;    // the value now returned in its place
  std::string acc;    // the parameter standing for the memory's old contents
};

// Throws milrt::Error for a name that is not a distinct fp32 tensor output
// of `f` computed by an op (not an input, not returned twice).
std::vector<OutputAccumulator> add_output_accumulators(Function& f, const std::vector<std::string>& outputs);

}  // namespace milrt::rt
