// Graphviz text of a compiled plan for `milrt inspect --dot`.
#pragma once
#include <string>

#include "milrt/ir.h"
#include "milrt/plan.h"

namespace milrt::cli {

// One node per kernel step (kernel, the MIL ops it implements, FLOPs), one per
// function input and output; edges follow the values between them, labelled
// with name, dtype and shape. `optimized` is the function as the plan's pass
// pipeline left it: it says which step produces and reads which value (a step
// is matched to the op that defines one of the values it lists).
std::string plan_dot(const Plan& plan, const Function& optimized);

}  // namespace milrt::cli
