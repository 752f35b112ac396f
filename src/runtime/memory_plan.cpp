#include "runtime/memory_plan.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "milrt/error.h"

namespace milrt {
namespace {

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

void note_uses(const Arg& a, int at, std::unordered_map<std::string, int>& last) {
  if (a.kind == Arg::Kind::Var) {
    auto it = last.find(a.var);
    if (it != last.end()) it->second = std::max(it->second, at);
  }
  for (auto& e : a.elems) note_uses(e, at, last);
}
}  // namespace

const BufferSlot* MemoryPlan::find(const std::string& value) const {
  for (auto& s : slots)
    if (s.value == value) return &s;
  return nullptr;
}

MemoryPlan plan_memory(const Function& f, size_t alignment) {
  std::set<std::string> outputs(f.outputs.begin(), f.outputs.end());
  std::unordered_map<std::string, int> def, last;
  std::vector<BufferSlot> slots;
  for (int i = 0; i < int(f.ops.size()); ++i) {
    const Op& op = f.ops[size_t(i)];
    for (auto& in : op.inputs) note_uses(in.arg, i, last);
    if (op.type == "const") continue;
    for (auto& o : op.outputs) {
      if (outputs.count(o.name) || !o.type.is_tensor()) continue;
      if (o.type.has_unknown_dims())
        throw_op_error(op, "output '" + o.name + "' has unknown dims " + shape_str(o.type.shape) +
                               ": memory planning needs static shapes");
      BufferSlot s;
      s.value = o.name;
      s.bytes = size_t(shape_numel(o.type.shape)) * std::max<size_t>(dtype_size(o.type.dtype), 1);
      s.first = i;
      def[o.name] = i;
      last[o.name] = i;
      slots.push_back(s);
    }
  }
  for (auto& s : slots) s.last = last[s.value];

  MemoryPlan plan;
  std::vector<size_t> order(slots.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slots[a].bytes > slots[b].bytes; });
  std::vector<size_t> placed;
  for (size_t idx : order) {
    BufferSlot& s = slots[idx];
    size_t need = round_up(std::max<size_t>(s.bytes, 1), alignment);
    // Occupied ranges of already placed buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      const BufferSlot& o = slots[j];
      if (o.last < s.first || s.last < o.first) continue;
      busy.emplace_back(o.offset, o.offset + round_up(std::max<size_t>(o.bytes, 1), alignment));
    }
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (auto& [b, e] : busy) {
      if (at + need <= b) break;
      at = std::max(at, e);
    }
    s.offset = at;
    plan.arena_bytes = std::max(plan.arena_bytes, at + need);
    plan.total_bytes += s.bytes;
    placed.push_back(idx);
  }
  plan.slots = std::move(slots);
  return plan;
}

}  // namespace milrt
