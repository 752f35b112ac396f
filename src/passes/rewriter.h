// Helpers for passes that replace one op by several: fresh value names,
// literals in the program's dialect, and new ops typed by shape inference.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/verifier.h"
#include "milrt/ir.h"

namespace milrt::passes {

// The value names of a function, so new ones can be made unique.
class NameTable {
 public:
  explicit NameTable(const Function& f);
  // `base` if unused, else `base_2`, `base_3`, ...; the result is reserved.
  std::string fresh(const std::string& base);

 private:
  std::set<std::string> used_;
};

// What a rewrite of one function knows about the values defined so far.
struct Scope {
  Scope(const Function& f, bool bare_scalars);
  void define(const Op& op);   // after `op` is placed in the new op list

  ValueTable values;
  NameTable names;
  std::unordered_map<std::string, std::shared_ptr<const Literal>> literals;  // outputs of `const` ops
  std::string opset;
  bool bare;  // scalar literals spelled `fp16` (program 1.3) rather than `tensor<fp16, []>`
};

using Inputs = std::vector<std::pair<std::string, Arg>>;

// An int32 vector literal (reshape shapes, transpose perms, axes).
Arg int_vector(const std::vector<int64_t>& v);
// Scalar literals spelled in the program's dialect (`bare`: program 1.3's `fp16(1)`).
Arg scalar_literal(DType dtype, double v, bool bare);
Arg string_literal(const std::string& s, bool bare);
// Marks a fused op with the ops it replaced, by first output name in program
// order: the `fused_from` attribute that `milrt inspect` lists.
void set_fused_from(Op& fused, const std::vector<std::string>& replaced, bool bare);

// The ops that replace `orig`. Every new op keeps orig's source position;
// intermediate values are named `<orig's first output>__<tag>` and typed by
// shape inference. The last op, added by finish(), takes over orig's output:
// its name, declared type and `name` attribute, so uses and function outputs
// stay valid.
class Replacement {
 public:
  Replacement(const Op& orig, Scope& scope) : orig_(orig), scope_(scope) {}

  // Adds `type(inputs)` with a fresh output; returns that value. Throws
  // Error (at orig's position) when inference rejects the op.
  Arg emit(const std::string& type, const std::string& tag, const Inputs& inputs);
  // Adds the final op, producing orig's output.
  void finish(const std::string& type, const Inputs& inputs);
  // `a` as a tensor of `dtype` and `shape` (same element count): `a` itself
  // when it already is one, a new `const` when `a` is a compile-time constant
  // (referring to the same blob when only the shape changes), else `a`
  // through cast and reshape ops.
  Arg as_operand(const Arg& a, DType dtype, const Shape& shape, const std::string& tag);

  // A `const` op holding `value` (its dtype and shape); returns its output.
  Arg constant(Tensor value, const std::string& tag);

  // Literals: a scalar of `dtype`, an int32 vector, a bool, a string.
  Arg scalar(DType dtype, double v) const;
  Arg ints(const std::vector<int64_t>& v) const { return int_vector(v); }
  Arg boolean(bool v) const { return scalar(DType::Bool, v ? 1 : 0); }
  Arg str(const std::string& s) const;

  // What is known about an operand: its type and constant value (if any).
  ValueInfo info(const Arg& a) const;
  const Op& orig() const { return orig_; }
  bool bare() const { return scope_.bare; }
  std::vector<Op>& ops() { return ops_; }

 private:
  Op make(const std::string& type, const Inputs& inputs) const;
  Arg add_const(Literal l, const std::string& tag);
  std::string fresh(const std::string& tag);
  void add(Op op);
  const Op& orig_;
  Scope& scope_;
  std::vector<Op> ops_;
};

// Replaces every op of `f` for which `rewrite(op, r)` returns true by the ops
// it added to `r`; other ops stay as they are. `rewrite` must either add a
// complete replacement (ending with finish()) and return true, or add nothing
// and return false.
void rewrite_ops(Function& f, bool bare_scalars, const std::function<bool(const Op&, Replacement&)>& rewrite);

// Calls `fn` on every variable name an argument reads (tuple elements
// included); the first form may rename them.
void for_each_var(Arg& a, const std::function<void(std::string&)>& fn);
void for_each_var(const Arg& a, const std::function<void(const std::string&)>& fn);

// The names that f's ops and outputs read.
std::set<std::string> names_read(const Function& f);
// How many times each value is read: once per reading op argument (tuple
// elements included) and once more for each function output it is. Values
// never read are absent. Fusion passes absorb a value only when it is read once.
std::unordered_map<std::string, int> count_uses(const Function& f);
// Removes the `const` ops whose values were read before a rewrite
// (`read_before`) and are no longer read; constants that were unused to
// begin with are dce's business.
void drop_orphaned_consts(Function& f, const std::set<std::string>& read_before);

// The constant value of an op input, if it has one: its ints, its string.
std::optional<std::vector<int64_t>> const_ints(const Replacement& r, const Op& op, const std::string& key);
std::optional<std::string> const_str(const Replacement& r, const Op& op, const std::string& key);

}  // namespace milrt::passes
