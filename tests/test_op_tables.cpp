// The op tables kept in four folders (the op registry in ir/, the reference
// executor's functions in reference/, the lowerings in runtime/, the
// gradient rules in autodiff/) checked against the op registry's one list:
// no table names an op the registry does not know (a misspelt key would
// otherwise be dead code), and every op is either in each table or in this
// file's list of why not. A new op therefore fails here until it is given
// a reference function, a lowering or decomposition, and a gradient rule
// or a reason to have none.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "autodiff/grad_rule.h"
#include "ir/op_registry.h"
#include "reference/ref_ops.h"
#include "runtime/lowering.h"

namespace milrt {
namespace {

using Names = std::set<std::string>;

Names set_of(const std::vector<std::string>& v) { return Names(v.begin(), v.end()); }
Names registry() { return set_of(registered_ops()); }

std::string diff(const Names& a, const Names& b) {  // a \ b
  std::string s;
  for (const std::string& x : a)
    if (!b.count(x)) s += " " + x;
  return s.empty() ? " (none)" : s;
}

void expect_subset(const Names& table, const char* what) {
  EXPECT_EQ(diff(table, registry()), " (none)") << what << " names ops the op registry does not know";
}

TEST(OpTables, EveryTableNamesOnlyRegisteredOps) {
  expect_subset(set_of(ref::reference_ops()), "the reference executor");
  expect_subset(set_of(rt::lowered_ops()), "the lowering registry");
  expect_subset(set_of(autodiff::registered_grad_rules()), "the gradient rules");
}

// Control flow runs inside the reference executor's own loop (its blocks).
TEST(OpTables, EveryOpHasAReferenceFunction) {
  const Names without{"cond", "while_loop"};
  Names expected = registry();
  for (const std::string& x : without) expected.erase(x);
  EXPECT_EQ(diff(expected, set_of(ref::reference_ops())), " (none)") << "ops with no reference function";
  EXPECT_EQ(diff(set_of(ref::reference_ops()), expected), " (none)") << "listed here as without one, yet they have one";
}

// What reaches the lowering is what the pass pipeline leaves: these ops are
// gone by then, or are compiled by compile() itself.
TEST(OpTables, EveryOpIsLoweredOrRemovedBeforeLowering) {
  const Names removed{
      // folded into constants (fold-constexpr): weights decompressed once
      "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_cast", "constexpr_lut_to_dense",
      "constexpr_lut_to_sparse", "constexpr_sparse_blockwise_shift_scale", "constexpr_sparse_to_dense",
      // decomposed into ops with kernels (decompose)
      "batch_norm", "instance_norm", "l2_norm", "local_response_norm", "prelu", "reverse", "shape",
      "softplus_parametric", "stack",
      // compiled by compile() itself: constants, and control flow as sub-plans
      "const", "cond", "while_loop",
      // output shape depends on the values: reference executor only
      "non_zero"};
  const Names lowered = set_of(rt::lowered_ops());
  Names expected = registry();
  for (const std::string& x : removed) expected.erase(x);
  EXPECT_EQ(diff(expected, lowered), " (none)") << "ops with neither a lowering nor a place in the list above";
  EXPECT_EQ(diff(lowered, expected), " (none)") << "listed as removed before lowering, yet lowered";
}

// Ops without a gradient rule, each for a reason. differentiate() refuses a
// path through any of them with an error naming the op.
TEST(OpTables, EveryOpHasAGradientRuleOrAReasonForNone) {
  const Names without{
      // integer, bool or index results, or piecewise constant: zero or no gradient
      "argsort", "ceil", "equal", "floor", "floor_div", "greater", "greater_equal", "less", "less_equal",
      "logical_and", "logical_not", "logical_or", "logical_xor", "mod", "non_zero", "not_equal", "one_hot",
      "range_1d", "reduce_argmax", "reduce_argmin", "round", "shape", "sign", "topk", "fill", "fill_like",
      // constants and weight decompression: nothing to differentiate
      "const", "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_cast",
      "constexpr_lut_to_dense", "constexpr_lut_to_sparse", "constexpr_sparse_blockwise_shift_scale",
      "constexpr_sparse_to_dense",
      // states and control flow: training programs do not use them
      "coreml_update_state", "read_state", "slice_update", "cond", "while_loop",
      // fused ops that passes create after differentiate() has run (the
      // gradient is taken of the unfused program), and fused gradients
      "milrt_attention_grad", "milrt_conv", "milrt_conv_chain", "milrt_elementwise", "milrt_gemm", "milrt_rms_norm",
      "milrt_rms_norm_grad", "milrt_silu_mul_grad", "milrt_softmax",
      // decomposed before compiling; a rule would be the decomposition's
      "batch_norm", "instance_norm", "l2_norm", "local_response_norm", "prelu", "reverse", "softplus_parametric",
      // differentiable ops without a rule yet
      "acos", "asin", "atan", "atanh", "avg_pool", "clamped_relu", "conv_transpose", "cosh", "cumsum", "exp2",
      "gather_nd", "l2_pool", "linear_activation", "lstm", "max_pool", "reduce_prod", "relu6", "reverse_sequence", "scaled_tanh",
      "scatter", "scatter_along_axis", "scatter_nd", "sigmoid_hard", "sinh", "softsign", "tan", "threshold",
      "thresholded_relu", "upsample_bilinear", "upsample_nearest_neighbor"};
  const Names rules = set_of(autodiff::registered_grad_rules());
  Names expected = registry();
  for (const std::string& x : without) expected.erase(x);
  EXPECT_EQ(diff(expected, rules), " (none)") << "ops with neither a gradient rule nor a reason above";
  EXPECT_EQ(diff(rules, expected), " (none)") << "listed above as without a rule, yet they have one";
}

}  // namespace
}  // namespace milrt
