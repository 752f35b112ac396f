// Reverse-mode automatic differentiation over the IR.
//
//   GradOptions o; o.loss = "loss"; o.wrt = {"W1", "W2"};
//   Program g = differentiate(program, o);     // adds function "main_grad"
//   Plan plan = compile(g, {.function = "main_grad"});
//
// The derived function takes the same inputs as the original and returns the
// loss, then one gradient per `wrt` input, named `<input>_grad`, with the
// input's shape and dtype, then (optionally) the original's other outputs.
// It is ordinary MIL: it prints, parses back and goes through the same pass
// pipeline (fusion, memory planning) as any program. Forward values the
// backward half needs are kept (as a hand-written backward keeps forward
// "taps"), or recomputed where that is cheaper (GradOptions::recompute); the
// pass pipeline's memory plan decides where they live.
#pragma once
#include <string>
#include <vector>

#include "milrt/ir.h"

namespace milrt {

struct GradOptions {
  std::string function = "main";
  std::string loss;                  // an output of `function`; a non-scalar loss is summed
  std::vector<std::string> wrt;      // inputs (parameters) to differentiate with respect to
  std::string out_function;          // name of the derived function; default `<function>_grad`
  bool keep_outputs = false;         // also return the original's other outputs after the gradients
  // Recompute cheap elementwise forward values (activations, scalings, casts)
  // in the backward half instead of keeping them from the forward pass, when
  // everything they are computed from is kept anyway: the kept value's
  // lifetime ends with the forward pass, so the memory plan reuses its bytes,
  // for one more elementwise pass each.
  bool recompute = false;
};

// Returns `p` with the derived function added (the original stays). Throws
// Error naming the op for an op on the path from a `wrt` input to the loss that
// has no gradient rule, or a loss/wrt name that does not exist. An input the
// loss does not depend on gets a zero gradient.
Program differentiate(const Program& p, const GradOptions& options);

// The op types that have a gradient rule (for `milrt grad --list` and tests).
std::vector<std::string> differentiable_ops();

}  // namespace milrt
