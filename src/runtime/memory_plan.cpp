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

// Values chained in place share one buffer: the group lives from its first
// member's definition to its last member's last use.
struct Group {
  size_t bytes = 0;
  int first = 0, last = 0;
  size_t offset = 0;
};
}  // namespace

const BufferSlot* MemoryPlan::find(const std::string& value) const {
  for (auto& s : slots)
    if (s.value == value) return &s;
  return nullptr;
}

MemoryPlan plan_memory(const Function& f, size_t alignment) {
  MemoryPlanOptions o;
  o.alignment = alignment;
  return plan_memory(f, o);
}

MemoryPlan plan_memory(const Function& f, const MemoryPlanOptions& options) {
  const size_t alignment = options.alignment;
  std::set<std::string> outputs(f.outputs.begin(), f.outputs.end());
  std::unordered_map<std::string, int> last, slot_of;
  std::vector<BufferSlot> slots;
  for (int i = 0; i < int(f.ops.size()); ++i) {
    const Op& op = f.ops[size_t(i)];
    for (auto& in : op.inputs) note_uses(in.arg, i, last);
    if (op.type == "const") continue;
    for (auto& o : op.outputs) {
      if (outputs.count(o.name) || !o.type.is_tensor()) continue;
      if (options.external && options.external(o.name)) continue;
      if (o.type.has_unknown_dims())
        throw_op_error(op, "output '" + o.name + "' has unknown dims " + shape_str(o.type.shape) +
                               ": memory planning needs static shapes");
      BufferSlot s;
      s.value = o.name;
      s.bytes = size_t(shape_numel(o.type.shape)) * std::max<size_t>(dtype_size(o.type.dtype), 1);
      s.first = i;
      last[o.name] = i;
      slot_of[o.name] = int(slots.size());
      slots.push_back(s);
    }
  }
  for (auto& s : slots) s.last = last[s.value];

  // In-place chains: an output takes the slot of an input whose last use is
  // this op, when the op allows it and the sizes agree.
  std::vector<int> group_of(slots.size());
  std::vector<Group> groups;
  std::vector<bool> donated(slots.size(), false);
  for (size_t k = 0; k < slots.size(); ++k) {
    BufferSlot& s = slots[k];
    const Op& op = f.ops[size_t(s.first)];
    int joined = -1;
    if (options.in_place && op.outputs.size() == 1)
      for (auto& name : options.in_place(op)) {
        auto it = slot_of.find(name);
        if (it == slot_of.end()) continue;  // not planned: an input, constant, output or external value
        size_t d = size_t(it->second);
        if (donated[d] || slots[d].last != s.first || slots[d].bytes != s.bytes) continue;
        donated[d] = true;
        s.in_place_of = slots[d].value;
        joined = group_of[d];
        break;
      }
    if (joined < 0) {
      group_of[k] = int(groups.size());
      groups.push_back({s.bytes, s.first, s.last, 0});
    } else {
      group_of[k] = joined;
      Group& g = groups[size_t(joined)];
      g.last = std::max(g.last, s.last);
    }
  }

  MemoryPlan plan;
  std::vector<size_t> order(groups.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return groups[a].bytes > groups[b].bytes; });
  std::vector<size_t> placed;
  for (size_t idx : order) {
    Group& s = groups[idx];
    size_t need = round_up(std::max<size_t>(s.bytes, 1), alignment);
    // Occupied ranges of already placed buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      const Group& o = groups[j];
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
    placed.push_back(idx);
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    slots[k].offset = groups[size_t(group_of[k])].offset;
    plan.total_bytes += slots[k].bytes;
  }
  plan.slots = std::move(slots);
  return plan;
}

}  // namespace milrt
