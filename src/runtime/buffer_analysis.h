// compile()'s first stage after the passes: where each value of the
// optimized function lives, decided from the function alone (a pure
// function: no plan, no buffer). compile() then binds values to memory by
// these decisions (runtime/plan.cpp) and the memory plan places the rest
// (runtime/memory_plan.h).
#pragma once
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "milrt/ir.h"
#include "runtime/accumulate_outputs.h"

namespace milrt::rt {

struct BufferDecisions {
  // CompileOptions::state_aliases checked against the function: input -> output.
  std::map<std::string, std::string> alias_of_input;
  // accumulate_outputs: accumulator parameter -> true when it is a view of its
  // output's memory (a chain of in-place ops carries it to the sum), false
  // when it needs a buffer of its own filled from the output before the steps.
  std::map<std::string, bool> accumulator_in_place;
  // A value of such a chain -> the sum whose memory holds it.
  std::map<std::string, std::string> in_output;
  // A value computed in (or read from) a state's or aliased input's buffer -> that state.
  std::map<std::string, std::string> in_state;
  // Views (runtime/views.h) that take no step and no memory: view -> root.
  std::map<std::string, std::string> views;
  // Roots of output views, computed in plan-owned output storage.
  std::set<std::string> output_roots;
};

// Throws milrt::Error for a state alias that names no input or output of
// `f`, targets one input twice, or whose types differ.
BufferDecisions decide_buffers(const Function& f, const std::map<std::string, std::string>& state_aliases,
                               const std::vector<OutputAccumulator>& accumulators);

// Helpers compile() shares with the analysis.
bool is_state_param(const Param& p);
// Declared tensor types of every value (a state parameter: its wrapped tensor).
std::unordered_map<std::string, Type> value_types(const Function& f);
// Where each value is used: op indices in program order; a function output
// counts as a use at index ops.size() (after every op).
std::unordered_map<std::string, std::vector<int>> uses_of(const Function& f);
// The inputs of `op` that its output may overwrite while it is computed.
std::vector<std::string> in_place_inputs(const Op& op, const std::unordered_map<std::string, Type>& types);
bool contains(const std::vector<std::string>& v, const std::string& s);

}  // namespace milrt::rt
