// How a stateful function's state ops map onto the partition. Each state
// has one persistent buffer; the ops around it become:
//   read_state(S)                  no step: its result is a view of S's buffer
//   coreml_update_state(S, v)      a StateWrite step that writes S's buffer;
//                                  its result is a view of the buffer after
//   slice_update(x = a view of S's current contents, ...) whose only use is
//   that update                    folded into the write: only the update's
//                                  elements are written, in place
// The engine has no op that writes part of a tensor in place at a run-time
// position (slice_update is not in its set, and its begin/end are int32,
// which engine surfaces do not carry), so writes are host steps; reads are
// engine inputs like any other value.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "ane/partition.h"
#include "milrt/ir.h"

namespace milrt::ane {

struct StateOps {
  std::map<std::string, std::string> views;                     // value -> state
  std::map<std::string, size_t> version;                        // value -> the write count of its state it shows
  std::map<size_t, StateWrite> writes;                          // coreml_update_state op index -> its write
  std::map<size_t, size_t> folded;                              // slice_update op index -> the write's op index
};

// The state ops of f. Throws Error (one line) for a state the engine cannot
// hold: not a float tensor, unknown dims, or a dim above max_dim.
StateOps find_state_ops(const Function& f, int64_t max_dim);

// After steps are grouped, their boundaries found and engine programs
// lowered: marks views that a later step reads after their contents are
// overwritten (save_before), homes each state in the first engine program
// that reads a current view of it (state_inputs) or else in a surface of
// its own, and fills part.states and part.views.
void place_states(Partition& part, const Function& f, const StateOps& ops, int64_t max_dim);

}  // namespace milrt::ane
