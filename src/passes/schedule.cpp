// Pass: schedule — the order in which a plan runs the ops.
//
// Any topological order computes the same values, but not with the same
// memory: a value occupies the arena from its producer to its last consumer.
// Finding the order with the smallest peak is NP-hard, so the pass tries
// three cheap candidates and keeps the one whose memory plan (the arena the
// plan will allocate) is smallest, the input order winning ties:
//  - the input order;
//  - depth-first post-order from the outputs: an op just before the first op
//    that needs it, a consumer's inputs produced one after another (a layout
//    adapter lands right before its consumer);
//  - greedy list scheduling: of the ops whose inputs are ready, the one that
//    allocates least net of what it frees.
//
// Ops that touch state (read_state, coreml_update_state, anything taking a
// state<> value) keep their relative order: a read before an update must see
// the old value. Ops whose results reach no output (kept only for their
// effect, or left by a pipeline without dce) follow in their original order.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "milrt/error.h"
#include "passes/pass_registry.h"
#include "runtime/memory_plan.h"

namespace milrt {
namespace {

void collect_vars(const Arg& a, std::vector<std::string>& out) {
  if (a.kind == Arg::Kind::Var) out.push_back(a.var);
  for (const Arg& e : a.elems) collect_vars(e, out);
}

bool touches_state(const Op& op, const Function& f) {
  if (op.type == "read_state" || op.type == "coreml_update_state") return true;
  std::vector<std::string> vars;
  for (const Input& in : op.inputs) collect_vars(in.arg, vars);
  for (const std::string& v : vars)
    if (const Param* p = f.param(v); p && p->type.kind == Type::Kind::State) return true;
  return false;
}

struct Graph {
  std::vector<std::vector<size_t>> deps;   // deps[i]: ops op i must follow, in the order its inputs name them
  std::vector<size_t> roots;               // producers of the outputs, then every op in input order
};

Graph build_graph(const Function& f) {
  const size_t n = f.ops.size();
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (const Output& o : f.ops[i].outputs) producer[o.name] = i;
  Graph g;
  g.deps.resize(n);
  size_t last_stateful = n;
  for (size_t i = 0; i < n; ++i) {
    std::vector<std::string> vars;
    for (const Input& in : f.ops[i].inputs) collect_vars(in.arg, vars);
    for (const std::string& v : vars)
      if (auto it = producer.find(v); it != producer.end() && it->second != i) g.deps[i].push_back(it->second);
    if (touches_state(f.ops[i], f)) {
      if (last_stateful != n) g.deps[i].push_back(last_stateful);
      last_stateful = i;
    }
  }
  for (const std::string& o : f.outputs)
    if (auto it = producer.find(o); it != producer.end()) g.roots.push_back(it->second);
  for (size_t i = 0; i < n; ++i) g.roots.push_back(i);
  return g;
}

// Iterative post-order DFS (graphs can be deep: no recursion).
std::vector<size_t> depth_first(const Graph& g) {
  const size_t n = g.deps.size();
  enum : uint8_t { Unseen, Open, Done };
  std::vector<uint8_t> state(n, Unseen);
  std::vector<size_t> order;
  order.reserve(n);
  std::vector<std::pair<size_t, size_t>> stack;  // (op, next dep to visit)
  for (size_t root : g.roots) {
    if (state[root] != Unseen) continue;
    stack.push_back({root, 0});
    state[root] = Open;
    while (!stack.empty()) {
      size_t op = stack.back().first;
      size_t& next = stack.back().second;
      if (next < g.deps[op].size()) {
        size_t d = g.deps[op][next++];
        if (state[d] == Unseen) {  // Open would be a cycle, which verified SSA cannot have
          state[d] = Open;
          stack.push_back({d, 0});
        }
        continue;
      }
      state[op] = Done;
      order.push_back(op);
      stack.pop_back();
    }
  }
  return order;
}

size_t value_bytes(const Type& t) {
  if (!t.is_tensor() || t.dtype == DType::String || t.has_unknown_dims()) return 0;
  return size_t(shape_numel(t.shape)) * dtype_size(t.dtype);
}

// Greedy: among ready ops, the least net allocation (outputs it creates minus
// inputs whose last use it is); ties go to the earlier op of the input order.
std::vector<size_t> greedy(const Function& f, const Graph& g) {
  const size_t n = f.ops.size();
  std::vector<std::vector<size_t>> users(n);
  std::vector<size_t> waiting(n, 0), pending_uses(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::vector<size_t> d = g.deps[i];
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    waiting[i] = d.size();
    for (size_t p : d) { users[p].push_back(i); ++pending_uses[p]; }
  }
  std::vector<bool> is_output(n, false);
  for (size_t r = 0; r < g.roots.size() && r < f.outputs.size(); ++r) is_output[g.roots[r]] = true;
  auto bytes_of = [&](size_t i) {
    if (f.ops[i].type == "const") return size_t(0);
    size_t b = 0;
    for (const Output& o : f.ops[i].outputs) b += value_bytes(o.type);
    return b;
  };
  std::vector<size_t> ready, order;
  for (size_t i = 0; i < n; ++i)
    if (waiting[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    size_t best = 0;
    long long best_cost = 0;
    for (size_t r = 0; r < ready.size(); ++r) {
      size_t i = ready[r];
      long long cost = (long long)bytes_of(i);
      std::vector<size_t> d = g.deps[i];
      std::sort(d.begin(), d.end());
      d.erase(std::unique(d.begin(), d.end()), d.end());
      for (size_t p : d)
        if (pending_uses[p] == 1 && !is_output[p]) cost -= (long long)bytes_of(p);
      if (r == 0 || cost < best_cost || (cost == best_cost && i < ready[best])) { best = r; best_cost = cost; }
    }
    size_t i = ready[best];
    ready.erase(ready.begin() + long(best));
    order.push_back(i);
    std::vector<size_t> d = g.deps[i];
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    for (size_t p : d) --pending_uses[p];
    for (size_t u : users[i])
      if (--waiting[u] == 0) ready.push_back(u);
  }
  return order;
}

Function reordered(const Function& f, const std::vector<size_t>& order) {
  Function r = f;
  r.ops.clear();
  for (size_t i : order) r.ops.push_back(f.ops[i]);
  return r;
}

void schedule_function(Function& f) {
  const size_t n = f.ops.size();
  Graph g = build_graph(f);
  std::vector<size_t> input_order(n);
  for (size_t i = 0; i < n; ++i) input_order[i] = i;
  std::vector<std::vector<size_t>> candidates = {input_order, depth_first(g), greedy(f, g)};

  size_t best = 0, best_arena = 0;
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (candidates[c].size() != n) continue;  // cannot happen for SSA; keep the input order then
    size_t arena;
    try {
      arena = plan_memory(reordered(f, candidates[c])).arena_bytes;
    } catch (const Error&) {
      return;  // flexible shapes: nothing to measure, keep the input order
    }
    if (c == 0 || arena < best_arena) { best = c; best_arena = arena; }
  }
  if (best == 0) return;
  f = reordered(f, candidates[best]);
}

}  // namespace

namespace passes {
void schedule(Program& p) {
  for (Function& f : p.functions) schedule_function(f);
}
}  // namespace passes

}  // namespace milrt
