// Memory planning: one arena for every intermediate value of a function,
// with buffers reused once their value is dead.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "milrt/ir.h"

namespace milrt {

struct BufferSlot {
  std::string value;      // the SSA value
  size_t offset = 0;      // in the arena, a multiple of the alignment
  size_t bytes = 0;       // the value's size (before rounding up)
  int first = 0, last = 0;  // live from op `first` (its definition) to op `last` (its last use), inclusive
};

struct MemoryPlan {
  std::vector<BufferSlot> slots;
  size_t arena_bytes = 0;   // peak: the arena size needed
  size_t total_bytes = 0;   // the sum of all planned values' sizes, without reuse
  const BufferSlot* find(const std::string& value) const;
};

// Plans the intermediates of `f`: outputs of ops other than `const`, that are
// not function outputs (those go to the caller's buffers). Shapes must be
// static (specialize flexible shapes first); throws Error otherwise. Buffers
// whose lifetimes overlap never share bytes; placement is greedy by size
// (largest first, each at the lowest offset that fits), which is within a
// few percent of optimal on typical networks.
MemoryPlan plan_memory(const Function& f, size_t alignment = 64);

}  // namespace milrt
