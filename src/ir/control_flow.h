// Control flow: ops with nested blocks (`cond`, `while_loop`, coremltools'
// iOS15 control_flow.py). Typing of their blocks, and the values a block reads
// from enclosing scopes (its captures), which passes and plans need to see as
// ordinary reads of the op.
#pragma once
#include <string>
#include <vector>

#include "ir/verifier.h"
#include "milrt/ir.h"

namespace milrt {

// The values op's blocks (nested ones included) read from the scopes around
// the op, in order of first use.
std::vector<std::string> captured_values(const Op& op);

// Passes and plans treat an op with blocks as an opaque op that reads every
// outer value its blocks reference: expose_captures() gives each such op of
// f's top level an input `kCapturesKey`, the tuple of its captured_values(),
// so that use counts, liveness, scheduling and renaming see them;
// hide_captures() removes it again, renaming the captured names inside the
// blocks where a pass renamed a tuple element. Nothing else may read or write
// that input; it never reaches text or protobuf.
inline constexpr const char* kCapturesKey = "_captures";
void expose_captures(Function& f);
void hide_captures(Function& f);
// Runs `pass` on p with every function's captures exposed.
template <class F>
void with_captures_exposed(Program& p, F&& pass) {
  for (Function& f : p.functions) expose_captures(f);
  try {
    pass(p);
  } catch (...) {
    for (Function& f : p.functions) hide_captures(f);
    throw;
  }
  for (Function& f : p.functions) hide_captures(f);
}

// The output types of a control-flow op whose enclosing scopes hold `values`,
// after checking its blocks (recursively, every op in them) by coremltools'
// rules: while_loop's cond block takes the loop variables and returns one bool
// with one element, its body takes and returns the loop variables' types;
// cond's pred is a one-element bool and both branches (no parameters) return
// the same number of values with the same dtypes and ranks. Throws Error at
// the offending op.
std::vector<Type> infer_control_flow(const Op& op, const ValueTable& values, const std::string& opset);

// Verifies the ops of one block in a scope holding `values` plus the block's
// parameters; returns the types of the block's outputs.
std::vector<Type> verify_block(const Op& owner, const Block& b, const ValueTable& values, const std::string& opset);

// Is the type a bool tensor with exactly one element (a predicate)?
bool is_predicate_type(const Type& t);

}  // namespace milrt
