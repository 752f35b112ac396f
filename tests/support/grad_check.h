// Finite-difference checks of derived gradients, for every gradient-rule test.
//
//   expect_gradients_match(program_text("tensor<fp32, [2, 3]> x", body, "loss"),
//                          "loss", {"x"}, /*seed=*/1);
//
// One call: parses and verifies the program, differentiates it (function
// "main" -> "main_grad"), and checks
//  1. the derived program prints, parses back to the same IR and verifies;
//  2. its gradients, run on the reference executor, match central differences
//     of the forward loss (also run on the reference executor) for every wrt
//     input: each element when the input has at most `max_elements`, else a
//     random sample of that many, plus `directions` random directional
//     derivatives over the whole input;
//  3. the compiled plan of the derived function (milrt::compile, default
//     pipeline) gives the reference executor's outputs (unless compile=false).
// Failures are reported with ADD_FAILURE (input, element, both values).
//
// Tolerance. Programs are fp32 (the reference rounds every op to fp32). With
// step h = 1e-2 on a smooth function of O(1) inputs, the central difference
// is off by h^2/6 |f'''| (~2e-5 |f'''|) from truncation and by about
// n_ops * 6e-8 * |L| / h from the loss's fp32 rounding (~1e-4 for |L| ~ 10
// and a few ops). An element passes when |analytic - fd| <= tol * (1 + |fd|)
// with tol = 2e-3 by default: ten times those errors, while a wrong rule
// (sign, factor, transposition, missed broadcast sum) is off by O(|g|).
// Use a loss like reduce_sum(y * w) with random w so gradients are O(1), and
// keep inputs away from kinks (relu at 0, maximum's ties) by more than h.
// An input whose analytic gradient is zero everywhere fails the check unless
// allow_zero is set, so a rule that emits nothing cannot pass.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "milrt/ir.h"
#include "milrt/reference.h"

namespace milrt::test {

struct GradCheckOptions {
  double tol = 2e-3;            // see above
  double step = 1e-2;           // central-difference step h
  uint64_t seed = 1;            // for random inputs and sampled elements
  double lo = -1, hi = 1;       // range of random float inputs not given
  std::map<std::string, std::pair<double, double>> ranges;   // per-input range overrides
  int max_elements = 64;        // per input: elements checked one by one
  int directions = 2;           // random directional derivatives per input
  bool compile = true;          // also run the derived function as a compiled plan
  double compile_tol = 1e-4;    // plan vs reference: |d| <= compile_tol * max(1, max |ref|) per output
  bool allow_zero = false;      // accept an all-zero analytic gradient
  bool keep_outputs = false;
  std::string function = "main";
};

struct GradCheckResult {
  std::map<std::string, double> max_err;        // per wrt input: max |analytic - fd| / (1 + |fd|)
  std::map<std::string, double> max_abs_grad;   // per wrt input: max |analytic|
  double compile_err = 0;                       // max |plan - reference| / max(1, max |ref|) over outputs
  Program derived;                              // the program with main_grad
  TensorMap inputs;                             // the inputs used (given and random)
  TensorMap grads;                              // main_grad's outputs on the reference executor
};

// Inputs not in `inputs` get uniform random values (float inputs only; an
// integer or bool input must be given).
GradCheckResult expect_gradients_match(const std::string& mil_text, const std::string& loss,
                                       const std::vector<std::string>& wrt, const TensorMap& inputs = {},
                                       const GradCheckOptions& options = {});
GradCheckResult expect_gradients_match(const std::string& mil_text, const std::string& loss,
                                       const std::vector<std::string>& wrt, uint64_t seed, double tol = 2e-3);
GradCheckResult expect_gradients_match(const Program& program, const std::string& loss,
                                       const std::vector<std::string>& wrt, const TensorMap& inputs = {},
                                       const GradCheckOptions& options = {});

// Uniform random fp32 (or `dt`) tensor in [lo, hi).
Tensor random_tensor(DType dt, const Shape& shape, uint64_t seed, double lo = -1, double hi = 1);

// MIL text pieces for gradient tests: `tensor<fp32, [2, 3]>`, and int32 /
// bool vector literals `tensor<int32, [2]>([1, 0])`.
inline std::string mil_type(const Shape& s, const std::string& dt = "fp32") {
  std::string r = "tensor<" + dt + ", [";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]>";
}
inline std::string mil_ints(const std::vector<int64_t>& v) {
  std::string r = "tensor<int32, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return r + "])";
}
inline std::string mil_bools(const std::vector<int>& v) {
  std::string r = "tensor<bool, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) r += std::string(i ? ", " : "") + (v[i] ? "true" : "false");
  return r + "])";
}

// A program whose loss is reduce_sum(z * w): z = `expr` of shape `zs` over
// `params` (text), w a random weighting input, so every element of z gets its
// own gradient; `pre` holds statements before z (consts, other ops).
std::string weighted_sum_loss_program(const std::string& params, const std::string& expr, const Shape& zs,
                                      const std::string& pre = "");

}  // namespace milrt::test
