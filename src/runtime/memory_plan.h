// Memory planning: one arena for every intermediate value of a function,
// with buffers reused once their value is dead, and in place where an op may
// overwrite an input that dies at that op.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "milrt/ir.h"

namespace milrt {

struct BufferSlot {
  std::string value;      // the SSA value
  size_t offset = 0;      // in the arena, a multiple of the alignment
  size_t bytes = 0;       // the value's size (before rounding up)
  int first = 0, last = 0;  // live from op `first` (its definition) to op `last` (its last use), inclusive
  // Non-empty when this value took the bytes of that input in place: the
  // input's last use is op `first`, which may overwrite it while writing this.
  std::string in_place_of;
};

struct MemoryPlan {
  std::vector<BufferSlot> slots;
  size_t arena_bytes = 0;   // peak: the arena size needed
  size_t total_bytes = 0;   // the sum of all planned values' sizes, without reuse
  const BufferSlot* find(const std::string& value) const;
};

struct MemoryPlanOptions {
  size_t alignment = 64;
  // Values stored elsewhere (e.g. views of a plan's state buffers): not planned.
  std::function<bool(const std::string& value)> external;
  // The inputs (value names) that the single output of `op` may overwrite
  // while it is computed: elementwise ops whose output has that input's shape
  // and element size. An input dying at `op` then gives its slot to the output.
  std::function<std::vector<std::string>(const Op& op)> in_place;
};

// Plans the intermediates of `f`: outputs of ops other than `const`, that are
// not function outputs (those go to the caller's buffers) nor external.
// Shapes must be static (specialize flexible shapes first); throws Error
// otherwise. Buffers whose lifetimes overlap never share bytes, except an
// in-place pair at the one op that joins them; placement is greedy by size
// (largest first, each at the lowest offset that fits), which is within a
// few percent of optimal on typical networks.
MemoryPlan plan_memory(const Function& f, const MemoryPlanOptions& options);
MemoryPlan plan_memory(const Function& f, size_t alignment = 64);

}  // namespace milrt
