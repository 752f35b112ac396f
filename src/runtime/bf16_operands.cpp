#include "runtime/bf16_operands.h"

#include <map>
#include <unordered_map>

namespace milrt::rt {

bool writes_bf16_results(const std::string& op_type) {
  return op_type == "rms_norm" || op_type == "milrt_rms_norm" || op_type == "transpose" || op_type == "milrt_silu_mul" ||
         op_type == "milrt_silu_mul_grad";
}

namespace {

// `v` is read by `op` only as a GEMM operand whose partner is a variable.
bool read_only_as_gemm_operand(const Op& op, const std::string& v, const std::set<std::string>& constants) {
  const bool linear = op.type == "linear";
  if (op.type != "matmul" && !linear && op.type != "milrt_gemm") return false;
  if (op.has("y_scale")) return false;
  const char* partner_key = linear ? "weight" : "y";
  for (const auto& in : op.inputs) {
    const bool reads_v = in.arg.kind == Arg::Kind::Var && in.arg.var == v;
    if (reads_v && in.key != "x" && (linear || in.key != "y")) return false;
    if (in.key == "x" || in.key == partner_key)
      if (in.arg.kind != Arg::Kind::Var || constants.count(in.arg.var)) return false;
  }
  return true;
}

}  // namespace

std::set<std::string> bf16_operand_values(const Function& f, const BufferDecisions& d) {
  std::set<std::string> constants, excluded(d.output_roots.begin(), d.output_roots.end());
  for (const Op& op : f.ops)
    if (op.type == "const")
      for (const auto& o : op.outputs) constants.insert(o.name);
  for (const std::string& o : f.outputs) excluded.insert(o);
  for (const auto& [v, sum] : d.in_output) excluded.insert(v);
  for (const auto& [v, state] : d.in_state) excluded.insert(v);
  // A view (a reshape taking no step) reads its root's bytes as they are:
  // it is stored as its root is, and its uses count as the root's.
  std::map<std::string, std::set<std::string>> views_of;
  for (const auto& [view, root] : d.views) views_of[root].insert(view);

  const auto uses = uses_of(f);
  const auto only_gemm_operands = [&](const std::string& v, const std::set<std::string>& views) {
    auto it = uses.find(v);
    if (it == uses.end() || it->second.empty() || excluded.count(v)) return false;
    for (int u : it->second) {
      if (u >= int(f.ops.size())) return false;
      const Op& use = f.ops[size_t(u)];
      const bool makes_view = use.outputs.size() == 1 && views.count(use.outputs[0].name);
      if (!makes_view && !read_only_as_gemm_operand(use, v, constants)) return false;
    }
    return true;
  };
  std::set<std::string> chosen;
  for (const Op& op : f.ops) {
    if (!writes_bf16_results(op.type) || !op.blocks.empty()) continue;
    for (const auto& o : op.outputs) {
      if (!o.type.is_tensor() || o.type.dtype != DType::FP32 || d.views.count(o.name)) continue;
      const auto vi = views_of.find(o.name);
      const std::set<std::string> views = vi == views_of.end() ? std::set<std::string>{} : vi->second;
      bool ok = only_gemm_operands(o.name, views);
      for (const std::string& w : views) ok = ok && only_gemm_operands(w, views);
      if (!ok) continue;
      chosen.insert(o.name);
      chosen.insert(views.begin(), views.end());
    }
  }
  return chosen;
}

}  // namespace milrt::rt
