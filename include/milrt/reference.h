// The reference executor: a plain interpreter of the IR, the oracle that every
// faster path is tested against.
#pragma once
#include <map>
#include <string>

#include "milrt/ir.h"

namespace milrt {

using TensorMap = std::map<std::string, Tensor>;

// Limits of a reference run.
struct ReferenceOptions {
  // A while_loop running its body more often than this ends the run with an
  // Error naming the op (see kDefaultMaxLoopIterations).
  int64_t max_loop_iterations = kDefaultMaxLoopIterations;
};

// Runs function `fn` of a loaded program on named inputs. Inputs must match
// the declared dtypes and shapes ('?' dims take the given size); returns the
// function's outputs by name. Throws milrt::Error on any mismatch, naming the
// op and its source position.
TensorMap run_reference(const Program& p, const std::string& fn, const TensorMap& inputs,
                        const ReferenceOptions& options = {});

// Stateful functions (iOS18 `state<tensor<...>>` parameters): `states` holds
// each state's value by parameter name and persists across calls. It is read
// at the start (a state absent from it starts at zero) and left holding each
// state's final value, after every coreml_update_state of the call. States
// are not inputs: naming one in `inputs` is an error here. (The overload
// without `states` takes a state's initial value from `inputs`, zero when
// absent, and discards the updates.)
TensorMap run_reference(const Program& p, const std::string& fn, const TensorMap& inputs, TensorMap& states,
                        const ReferenceOptions& options = {});

// The same, also returning every intermediate value by name (for debugging
// and differential tests).
TensorMap run_reference_all(const Program& p, const std::string& fn, const TensorMap& inputs,
                            const ReferenceOptions& options = {});

}  // namespace milrt
