// Helpers shared by the tensor and nn gradient rules (rules_tensor.cpp,
// rules_nn.cpp): reading an op's constant parameters, whether written as
// literals or as outputs of `const` ops (coremltools writes them that way),
// and small emitters whose results always compile.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "autodiff/grad_rule.h"

namespace milrt::autodiff {

// The compile-time value of input `key`: a literal, or the `val` of the
// `const` op defining it; nullopt when absent or computed at run time.
std::optional<Tensor> const_input(const RuleContext& c, const std::string& key);
// Constant parameters; throw Error at the op when present but not constant.
std::optional<std::vector<int64_t>> ints_opt(const RuleContext& c, const std::string& key);
std::vector<int64_t> ints_or(const RuleContext& c, const std::string& key, const std::vector<int64_t>& def);
int64_t int_or(const RuleContext& c, const std::string& key, int64_t def);
double float_or(const RuleContext& c, const std::string& key, double def);
bool bool_or(const RuleContext& c, const std::string& key, bool def);
std::string str_or(const RuleContext& c, const std::string& key, const std::string& def);

// The type of input `key` (a variable or a literal).
Type input_type(const RuleContext& c, const std::string& key);
// Is input `key` a variable (so it can carry a gradient)?
bool is_var_input(const RuleContext& c, const std::string& key);
// `axis` in [0, rank), or Error at the op.
int64_t norm_axis(const RuleContext& c, int64_t axis, int64_t rank);

// Zeros of `t` (a `fill`, so no weight-sized constant lands in the program).
Value zeros(const RuleContext& c, const Type& t, const std::string& what);
// `v` reshaped to `shape` (v itself when it has it).
Value reshape_to(const RuleContext& c, const Value& v, const Shape& shape, const std::string& what);
// reduce_sum / reduce_mean of `v` over `axes` with keep_dims, one op per run
// of adjacent axes (the compiled reduction takes one run).
Value reduce_keep(const RuleContext& c, const std::string& type, const Value& v, std::vector<int64_t> axes,
                  const std::string& what);

}  // namespace milrt::autodiff
