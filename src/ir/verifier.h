// Type inference over whole functions, shared by the verifier and by passes.
#pragma once
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "milrt/ir.h"

namespace milrt {

// What is known about a value at compile time: its type and, for constants,
// its value (nullptr otherwise).
struct ValueInfo {
  Type type;
  const Tensor* value = nullptr;
};
using ValueTable = std::unordered_map<std::string, ValueInfo>;

// Runs the op's schema on the given value table: checks input names and
// presence, then returns the inferred output types. Throws Error at the op.
std::vector<Type> infer_op(const Op& op, const ValueTable& values, const std::string& opset);

// Does an inferred type admit a declared one? (-1 dims on either side match.)
bool type_admits(const Type& inferred, const Type& declared);

// Adds the op's outputs to the table with their declared types (constants
// keep their values).
void define_outputs(const Op& op, ValueTable& values);

// The table of a function's parameters.
ValueTable param_table(const Function& f);

// The compile-time value of an argument (an inline literal, or a variable the
// table holds a value for); nullptr when it is not a constant or has no data.
const Tensor* constant_of(const Arg& a, const ValueTable& values);

// Gives inputs declared with '?' dims (flexible shapes) the static shapes in
// `shapes` (by parameter name; others are left alone), then replaces every
// '?' dim an op declares by what inference now knows (declared dims that are
// known stay: verify checks them). Throws Error, naming the input, for a
// shape of the wrong rank or one that contradicts a declared dim.
void specialize_input_shapes(Function& f, const std::map<std::string, Shape>& shapes);

}  // namespace milrt
